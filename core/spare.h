// core/spare.h: a LAB's spare run, the last large block its thread freed.
//
// A program that allocates and frees a large block again and again (a buffer
// per request, per frame, per file) took the block's run from the span-pool
// and gave it back each time: a pair of 1 MiB cost 854 instructions under
// cachegrind, most of them the pool's stacks, counters and decay stamp, with
// about 16 locked instructions (tcmalloc's pair: 399). A per-thread LAB that
// keeps spans (keeps_spans, lab.h) now keeps the run of the last large block
// its thread freed, its pages committed, and its thread's next large malloc
// of the same run length (run classes, span_pool.h: blocks of similar sizes
// share one) takes it back without touching the pool.
//
// The run is FREE while kept, as in the pool: a second free of the block
// finds its head FREE and is reported as a double free, and a pointer into it
// is not a block. Only the LAB's holder touches the spare (under the thread
// slot's BUSY mark, lab.h), so no atomic is needed.
//
// Bound. The spare's committed bytes count in the LAB's kept budget
// (kept_bytes <= kKeptBytes): kept spans and spare together add at most
// kKeptBytes to the blowup bound's per-cache term, as before. A run is kept
// only if it has at most kSpareMaxBytes committed, so one spare never takes
// more than a quarter of the budget from small spans; a bigger block's run
// goes to the pool as before. A newer freed run takes the spare's place (the
// older goes to the pool). The spare goes to the pool when its LAB is flushed
// (thread exit without parking, an expired parked LAB, fw_collect), and when
// its thread takes a span from the shared stacks after it waited
// FREEWAY_DECAY_MS (the pool's decay delay; with 0, no run is kept). A thread
// that stops calling malloc keeps it, as it keeps its kept spans. A thread
// whose malloc finds no memory gives its spare back and tries again before it
// fails (at an address-space limit: test_oom). The spare's spans count in no
// span figure of fw_stats (neither pooled nor large).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/lab.h"

namespace fw {

constexpr uint32_t kSpareMaxBytes = kKeptBytes / 4;

// malloc of a large block (size > kSmallMax): from the calling thread's spare
// run when it has the length the block takes, else as large_alloc does. The
// thread slot may hold anything (the LAB is entered here).
void* spare_alloc(size_t size, size_t align, bool zero);
// free of large or huge block p of descriptor d (as large_free) by a call
// that holds `mine` (a placeholder, or any kind of LAB): the run becomes
// mine's spare if mine keeps spans and it fits (above), else goes to the pool.
void spare_free(Lab* mine, void* p, Span* d);
// Gives lab's spare run (if any) to the pool. Its holder calls this.
void spare_release(Lab* lab);
// Gives lab's spare run to the pool if it has waited FREEWAY_DECAY_MS or more
// (a span acquisition calls this).
void spare_expire(Lab* lab);

}  // namespace fw
