// core/span_pool.h: where free virtual spans wait (scalloc §3.3).
//
// Single free spans sit in per-CPU lock-free stacks (TaggedStack over the
// descriptors' pool_next link), one set per commit tier (nothing committed,
// up to 64 KiB, more): a thread pushes to and pops from the
// stack of the CPU it runs on, and takes from the others only when its own is
// empty. A span is taken from the tier that matches what the caller will
// commit, so reuse neither faults pages in nor keeps stale ones; the caller
// gives back the excess of a span taken from a higher tier (pool_take_span).
// Free runs of 2 or more contiguous spans (what large objects are made of) sit
// in run stacks keyed by length: exact lengths up to 64, then one stack per
// power of two. A run popped for n spans is split and the rest pushed back.
// Runs sit apart by the frontier their region belongs to (arena.h). Before
// fresh address space, single spans and runs of up to kBigRunVspans are split
// off the spans' frontier's runs, and off a big blocks' run only when the
// vspan above it is in use: a big run with free vspans above can still merge
// or grow in place (below) for the next bigger block, so the small blocks a
// program allocates between its buffers do not cut it up; one below a block
// in use can do neither, and its pages serve small blocks.
//
// Commit policy (decay): a span or run keeps what it had committed when it
// enters the pool, so reuse costs no page faults, stamped with the time it came
// in; a purge pass gives back the pages of what has waited longer than
// FREEWAY_DECAY_MS, one stack at a time, so that takes meanwhile find the
// rest of the pool (span_pool.cpp, purge). The retained bytes stay within max(FREEWAY_RETAIN_MB, the
// most bytes committed in use within that delay): a give that would pass that
// gives back the oldest first (span_pool.cpp), unless the program faulted back
// what the last such pass gave back: then a cycle touches more than it holds,
// and the bound is the heap's committed bytes (its footprint) while gives need
// it, for that delay after the last (span_pool.cpp, give_bound). Runs with
// pages (warm) and without (clean) sit apart, and a take for a block tries the
// warm ones first. A big block that faults in fresh pages gives back as many
// of the pages that big blocks' runs below a block in use hold (stranded:
// too short for it, and unable to grow), and of its thread's emptied spans;
// small spans and short runs that fault in fresh pages, with no big block
// taken meanwhile, give back as many of big blocks' runs' pages (idle): all
// before the decay would (pool_pay_fresh, pool_pay_idle).
//
// Merging and growing in place. A take for a run with pages that finds none
// long enough merges the pool (coalesce: every free piece joined to its free
// neighbours, pages kept as a prefix) when something was given back since the
// last merge and either that much address space was, or the pool's pages
// could serve the block and outnumber the spans a merge reads. A merged run
// that is still too short and ends at a current region's fresh vspans grows
// over them. So a program that frees one big buffer and allocates the next,
// bigger or smaller, reuses one area of pages, as a heap's top is reused,
// instead of faulting in a fresh run and keeping the old one's pages until
// the retain bound gives them back: 2,000 zeroed 5-25 MiB buffers, one at a
// time, took 870,000-940,000 page faults and now take 8,400-11,400 (glibc:
// 33,700; docs/benchmarks.md, Stop 47).
//
// Last-run slots. A program that allocates and frees a large block again and
// again (a buffer per request, per frame, per file) took the block's run from
// the stacks and gave it back each time: a 1 MiB pair cost 854 instructions
// under cachegrind, with the stacks' pops, pushes and split, the pool's
// counters and a clock read on each side (tcmalloc: 399). Each CPU (of
// stack_count()) now has a slot that holds the run of the last large block
// given back on it with its pages, at most kLastRunMax (4 MiB)
// (pool_give_large), and pool_take_run on that CPU takes it with one exchange
// when it has the length wanted (run classes give similar sizes one length).
// A slot's run is in the pool (FREE, held by nobody), but counted in neither
// the retained bytes nor the pooled spans, and not stamped, so that a give and
// a take through a slot touch no shared counter, and only one give in
// kSlotGivesPerLook reads the clock (below); the run a
// give displaces, or one of another length that a take found while another
// thread filled the slot, goes back through pool_give (stamped, within the
// retain bound). Every purge pass, merge and fw_collect sweeps the slots and
// sees their runs, stamped when swept. Threads on one CPU share its
// slot, so a thread that frees a block and then waits keeps nothing for itself
// (a cache per thread kept one run per waiting thread: docs/benchmarks.md,
// Stop 46). The slots hold at most stack_count() x kLastRunMax outside the
// retain bound, until the next purge pass.
//
// Every span in the pool is in state FREE and is held by nobody; the span (or
// run head) descriptor's `committed` says how many bytes of its window are
// committed (span_set_use). A run of two or more has class kNoClass (or
// nothing committed), so its window is its base and its pages a prefix.
// Invariants (pool_is_valid, checked while quiet):
//   retained bytes = sum of `committed` over the spans and runs in the stacks;
//   a last-run slot's run is FREE with 1 to kLastRunMax bytes committed;
//   a run in the stacks sits in the set of its region's frontier;
//   a run is in the warm set if and only if its `committed` is not 0;
//   each frontier's count of pooled runs is the number of runs in its stacks
//   (never fewer, while takes run: a take that reads 0 looks at none of them).
#pragma once
#include <cstdint>

#include "core/span.h"

namespace fw {

// Takes one free virtual span (pooled or fresh) for a use that commits `want`
// bytes, preferring one with that much committed (its tier); with no single
// span pooled it splits one off the shortest pooled run, and with no address
// space left for fresh ones it merges the pool first. Pages beyond that
// stay: the caller trims them (span_make_hot to the span size; large_alloc
// when reuse_trims, below, says). The caller holds it
// exclusively, in state FREE. nullptr when the OS has no more memory.
Span* pool_take_span(uint64_t want);
// Whether a run with `committed` bytes of pages, reused for a block of
// `bytes`, gives back the excess (large_alloc): when it is more than the block
// (and 64 KiB), so that blocks of varying sizes reusing a run do not trim and
// fault each time, while a run a much bigger block left does not keep its
// pages for a small one.
FW_INLINE bool reuse_trims(uint64_t committed, uint64_t bytes) { return committed > 2 * bytes + (64u << 10); }
// Takes a run of n contiguous free virtual spans (n >= 1) for a block that
// will commit `want` bytes of it; returns the head. A pooled run up to 1.5 n
// long may come whole (span_pool.cpp, take_whole_or_split): its run_len says.
Span* pool_take_run(uint32_t n, uint64_t want);
// Takes the free spans that follow a run ending at vspan `end` out of the
// pool, for a large block that grows over them in place (large.cpp): `most`
// of them, or as many as lie free from `end` on if fewer, but at least
// `least`; 0 (taking nothing) when fewer than `least` lie free there or
// `end` starts a region. A piece that goes on past what is taken is split and
// its rest given back. *pages: the bytes from end's base on that are
// committed without a gap; pages after a gap are given back to the OS. The
// caller holds the spans exclusively, in state FREE, with nothing committed
// in their descriptors (the pages now count toward the run's head). It
// gathers the whole pool to find them, as a merge does: worth it when the
// block's growth would copy or fault in more pages than the pool has spans.
uint32_t pool_take_after(uint32_t end, uint32_t least, uint32_t most, uint64_t* pages);
// A run of n vspans (a large block's, or a small span's: n = 1) has just
// faulted in `bytes` of fresh pages (large_alloc, span_make_hot): the pool
// gives back as many bytes of pages that wait for a use they may not get.
// - A big block (n > kBigRunVspans): of big blocks' runs (longer than
//   kBigRunVspans) that could not serve it and cannot grow, lying below a
//   block in use (free_above). Such a run waits for a block no longer than
//   it, while the program's bigger blocks take fresh pages beside it:
//   allocate 40 MiB, then 50, free the 40 and allocate 50 again, and the heap
//   held 140 MiB (glibc and mimalloc 100). Such pays wait for
//   FREEWAY_DECAY_MS after a big block faults back in the pages a pay gave
//   back from its run (head: the run that has just committed its pages;
//   span_pool.cpp, stranded_pays_wait).
// - A small span or a block of kBigRunVspans or fewer: of big blocks' runs
//   (the oldest age buckets first), once such fresh pages come to a quantum
//   with no big block taken meanwhile (a big block's take shows those runs
//   in use). A program that frees its big blocks and then builds a heap of
//   small ones faulted that heap in beside the freed runs' pages, which small
//   spans do not take from a run with free vspans above it, until the decay
//   gave them back: R peaked at 394-406 MiB in 4 runs of 26, 347-361 in the
//   others, and now at 344-350 (mimalloc 341-347; docs/benchmarks.md, Stop 97).
// Returns the bytes given back.
uint64_t pool_pay_fresh(const Span* head, uint32_t n, uint64_t bytes);
// What a big block's fresh pages left unpaid (pool_pay_fresh), up to the bytes
// of the emptied spans its thread gave to the pool after it (alloc.cpp,
// large_block): the pool gives back `need` bytes of the pages of single spans
// and of the spans' frontier's short runs, which no big block can take.
// Without, those emptied spans' pages joined the block's at the footprint's
// peak and waited for the decay (tesseract, docs/benchmarks.md, Stop 96).
// Returns the bytes given back.
uint64_t pool_pay_idle(uint64_t need);
// Gives a free span (run_len 1) or run head (run_len n) back. Its state must
// already be FREE; the caller must not touch it afterwards.
void pool_give(Span* head, uint32_t run_len);
// pool_give for a freed large block's run: kept with its pages, it goes to
// the calling CPU's last-run slot (above).
void pool_give_large(Span* head, uint32_t run_len);
constexpr uint64_t kLastRunMax = 4u << 20;
// One give in this many into a CPU's slot looks at the decay's clock (a purge
// pass if one is due), so that a program churning such blocks after freeing
// bigger ones does not keep those pages past the delay. A clock read on each
// cost a 1 MiB malloc-free pair 14-18% (5 to 10 ns) while the pool kept pages.
constexpr uint32_t kSlotGivesPerLook = 16;

// A span's committed bytes are the first `committed` bytes from its base.
// Makes the span's first `bytes` usable (and counts them).
bool span_commit(Span* s, uint64_t bytes);
// Gives back what the span (or run head) committed beyond its first `bytes`.
void span_trim(Span* s, uint64_t bytes);
// Before a span held exclusively is used for class cls (kNoClass: a large or
// huge block): sets its class. Its committed pages stay: every use starts at
// the vspan's base.
void span_set_use(Span* s, unsigned cls);

// Forgets the span's committed bytes without decommitting (its region is about
// to be unmapped as a whole).
void span_forget_committed(Span* s);

// The decay's clock for a thread that takes nothing from the pool (lab_tick,
// lab.h): a purge pass if one is due, as at a give or a take.
void pool_tick();
// Decommits every retained span and run now (fw_collect, malloc_trim); returns
// the bytes it gave back.
uint64_t pool_collect();
// In a fork's child (one thread, pthread_atfork, registered at load by the
// shim): gives back what a purge pass of the parent held when it forked
// (span_pool.cpp, g_purge_rest). A merge (coalesce) or fw_collect running in
// another thread at the fork still strands what it held, in the child only.
void pool_after_fork_child();

uint64_t pool_retained_bytes();
uint64_t committed_bytes();
uint64_t peak_committed_bytes();
uint64_t pool_span_count();  // spans (counting each span of a run) in the pool, approximate

bool pool_is_valid();

}  // namespace fw
