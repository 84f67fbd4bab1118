// core/alloc.cpp: allocation slow paths and the rest of the malloc family.
#include "core/alloc.h"

#include <cstring>

#include "core/foreign.h"
#include "core/free.h"
#include "core/large.h"
#include "core/percpu.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/secure_heap.h"
#include "core/span_pool.h"
#include "core/stats.h"
#include "core/telemetry.h"
#include "platform/os.h"
#include "platform/rseq.h"

namespace fw {

void alloc_out_of_memory(size_t n) {
  os::set_errno_nomem();
  telemetry_event(FWT_EV_OUT_OF_MEMORY, 0, 0, n);
}

namespace {

// One allocation from a transient LAB, for a call that cannot use its thread's
// LAB (inside a signal handler that interrupted malloc/free, or after the
// thread's LAB was released at exit).
void* alloc_transient(unsigned c) {
  Lab* t = lab_take_transient();
  if (t == nullptr) return nullptr;
  void* p = lab_refill(t, c);
  lab_put_transient(t);
  return p;
}

// A large or huge block (large.h), the peak live bytes sampled every
// kLargeSampleEvery-th block that leaves the large live bytes above what the
// last sample saw: the span-pool acquisitions of small spans that sample it
// (lab.cpp) never see large blocks, and a program that builds its peak from
// large blocks alone would otherwise report a peak of its small ones. A sample
// sums every LAB's counters, so a block that does not raise the large live
// bytes (one of a program that frees and allocates them at a steady total)
// asks for none: counting every block, a thread making 1 MiB malloc/free pairs
// while 256 others idled spent 83% of its instructions in the samples' walks
// (5,400 per pair, against 900 for the pair itself: callgrind, Stop 42).
constexpr uint64_t kLargeSampleEvery = 64;
std::atomic<uint64_t> g_large_calls{0};
// held: a LAB the caller holds (secure mode's slow path, whose thread's slot
// holds BUSY, so that lab_collect_current cannot reach it).
//
// A big block whose fresh pages the stranded runs did not pay for (large_alloc,
// pool_pay_fresh): the kept spans the calling thread has emptied go to the
// span-pool (lab_release_emptied_current), which then pays with up to as
// many bytes of single spans and short runs (pool_pay_idle). In its LAB they
// would wait for its next span from the shared stacks (release_empty_kept),
// and a thread that frees a batch of its blocks and then allocates big
// buffers takes none meanwhile: tesseract kept 16 MiB of emptied spans of
// 4,104-byte blocks through two 31 MiB buffers and an 8 MiB one, its peak
// (docs/benchmarks.md, Stop 96). Only then: a look at every kept span before
// each big block cost a 5 MiB malloc-free pair 1.6 times its time with 40
// kept spans, 8 times with 400. Not for a held LAB (secure mode's slow path),
// whose kept spans stay as they are.
void* large_block(size_t n, size_t align, bool zero, size_t room = 0, Lab* held = nullptr) {
  uint64_t unpaid = 0;
  void* p = large_alloc(n, align, zero, room, &unpaid);
  if (p == nullptr && large_in_run(n, align)) {
    // The caller's spans may be what the block's run needs (lab.h,
    // lab_reclaim): those of the LAB it holds, else its thread's or its CPU's.
    // A huge block takes a region of its own, which spans given back to the
    // pool cannot make room for.
    if (held != nullptr) {
      lab_reclaim(held);
    } else {
      lab_collect_current(Collect::kAll);
      percpu_reclaim();
    }
    p = large_alloc(n, align, zero, room, &unpaid);
  }
  if (p != nullptr && unpaid != 0 && held == nullptr) {
    const uint64_t idle = lab_release_emptied_current();
    pool_pay_idle(unpaid < idle ? unpaid : idle);
  }
  if (p != nullptr && stats_large_rose() &&
      g_large_calls.fetch_add(1, std::memory_order_relaxed) % kLargeSampleEvery == 0)
    stats_sample_peak();
  return p;
}

// One secure-mode block (secure_heap.h) of class c or bigger for n bytes
// aligned to `align`, from LAB `from` (a thread's or a transient one), formatted.
void* secure_block(Lab* from, unsigned c, size_t n, size_t align) {
  unsigned sc = secure_class(c, n, align);
  if (sc == kClassCount) return large_block(n, align, false, 0, from);
  void* p = lab_refill(from, sc);
  if (p != nullptr) secure_format(p, class_block_size(sc), n);
  return p;
}

// malloc_slow in secure mode: the thread's LAB is found through its binding
// (the slot holds SECURE), and the slot gets SECURE back, not the LAB.
FW_NOINLINE void* malloc_secure(Lab* lab, unsigned c, size_t n, size_t align) {
  if (n == 0 && align <= kMinAlign) {  // malloc(0) with no alignment beyond 16
    if (void* z = zero_alloc()) {
      lab_leave(lab);
      return z;
    }
  }
  Lab* mine = lab_own(lab);
  void* p;
  if (is_placeholder(mine)) {  // BUSY (a signal handler), DEAD, or no LAB could be had
    Lab* t = lab_take_transient();
    p = t != nullptr ? secure_block(t, c, n, align) : nullptr;
    if (t != nullptr) lab_put_transient(t);
  } else {
    p = secure_block(mine, c, n, align);
  }
  lab_leave(lab_slot_after(mine));
  if (p == nullptr) alloc_out_of_memory(n);
  return p;
}

}  // namespace

void* alloc_class_percpu(unsigned c, size_t n) {
  void* p = os::rseq_pop_counted(g_percpu.rseq_off, reinterpret_cast<void* const*>(g_percpu.slots), g_percpu.ncpu,
                                 lab_list_offset(c));
  if (FW_UNLIKELY(p == nullptr)) return percpu_malloc_slow(c, n);
#if FREEWAY_HARDENING
  clear_canary(p);
#endif
  return p;
}

void* malloc_slow(size_t n, Lab* lab, size_t w) {
  const unsigned c = list_class(w);
  if (FW_HAS_RSEQ && FW_LIKELY(lab == &g_lab_cpu)) {  // a thread in per-CPU mode (percpu.h)
    lab_leave(lab);
    return alloc_class_percpu(c, n);
  }
  return malloc_slow_thread(n, lab, c);
}

void* malloc_slow_thread(size_t n, Lab* lab, unsigned c) {
  if (FW_UNLIKELY(secure_mode())) return malloc_secure(lab, c, n, kMinAlign);
  void* p;
  if (FW_HAS_RSEQ && percpu_serves(lab)) {
    // Per-CPU mode is on (chosen at the process's first call, or switched on
    // since, percpu.h): this thread's calls go to it from now on.
    lab_leave(lab);
    percpu_join();
    return alloc_class_percpu(c, n);
  }
  if (lab == &g_lab_empty) {
    // The thread's first call: bind a LAB (no flag is tested on the fast path).
    Lab* bound = lab_bind_thread();
    if (bound != nullptr) {
      p = lab_refill(bound, c);
      lab_leave(bound);
      if (p == nullptr) alloc_out_of_memory(class_block_size(c));
      return p;
    }
  }
  if (is_placeholder(lab)) {
    p = alloc_transient(c);
  } else {
    if (lab_has_handed(lab)) lab = lab_adopt_handed(lab);
    p = lab_refill(lab, c);
  }
  lab_leave(lab);
  if (p == nullptr) alloc_out_of_memory(class_block_size(c));
  return p;
}

void* malloc_medium_or_large(size_t n) {
  if (n <= kSmallMax) return alloc_class(class_of_medium(n), n);
  void* p = large_block(n, kMinAlign, false);
  if (p == nullptr) alloc_out_of_memory(n);
  return p;
}

void* fw_alloc_zeroed(size_t count, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(count, n, &total)) {
    os::set_errno_nomem();
    return nullptr;
  }
  if (total <= kSmallMax) {
    void* p = alloc_small(total);
    if (p != nullptr) std::memset(p, 0, kCallocZeroesUsable ? fw_usable(p) : total);
    return p;
  }
  void* p = large_block(total, kMinAlign, true);
  if (p == nullptr) alloc_out_of_memory(total);
  return p;
}

void* fw_alloc_aligned(size_t align, size_t n) {
  if (align <= kMinAlign) return alloc_small(n);
  const unsigned c = class_of_aligned(n, align);
  if (FW_LIKELY(c < kClassCount)) {
    // malloc_secure must know the alignment: c's block size may carry more.
    if (FW_UNLIKELY(secure_mode())) return malloc_secure(lab_enter(), c, n, align);
    return alloc_class(c, n);
  }
  void* p = large_block(n, align, false);
  if (p == nullptr) alloc_out_of_memory(n);
  return p;
}

size_t fw_usable(const void* p) {
  // A small block in use (what programs that count their memory with
  // malloc_usable_size ask about on every malloc and free, redis for one):
  // one map load and the descriptor. A descriptor in HOT, FULL or PARTIAL
  // state is of a vspan handed out, so within its region's reservation.
  if (const Span* s = span_of(p); s != nullptr && !secure_mode()) {
    uint32_t state = Anchor::unpack(s->anchor.load(std::memory_order_acquire)).state;
    if (state == kHot || state == kFull || state == kPartial) return s->block_size.load(std::memory_order_relaxed);
  }
  Span* d = span_of_owned(p);
  if (d == nullptr) {
    if (zero_owns(p)) return 0;  // secure mode's malloc(0)
    const ForeignHeap* other = foreign_owner(p);
    return other != nullptr ? other->usable_size(p) : 0;
  }
  uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state == kHot || state == kFull || state == kPartial) {
    if (secure_mode()) return secure_requested(p, d);  // the size asked for: bytes past it are the tail canary
    return d->block_size.load(std::memory_order_relaxed);
  }
  return large_usable_size(p, d);
}

void* fw_block_start(const void* p) {
  Span* d = span_of_owned(p);
  if (d == nullptr) return nullptr;
  uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state == kHot || state == kFull || state == kPartial) {
    uintptr_t base = span_blocks(d), q = reinterpret_cast<uintptr_t>(p);
    uint32_t bsize = d->block_size.load(std::memory_order_relaxed);
    uintptr_t n = (q - base) / bsize;
    if (n >= d->carved.load(std::memory_order_relaxed)) return nullptr;
    return reinterpret_cast<void*>(base + n * bsize);
  }
  return large_block_start(p, d);
}

namespace {

// Whether realloc keeps a small block of `old` bytes for n: n fits, and is
// not under half of it (or the block is of 64 bytes or less), so that a
// block shrunk a long way moves to a class of its size.
constexpr bool realloc_keeps(size_t n, size_t old) { return n != 0 && n <= old && (n >= old / 2 || old <= 64); }

// realloc's common case, tested before anything else: the block size of p
// when p is a small block in use, else 0 (and in secure mode, whose blocks
// keep the size asked for: secure_heap.h). It makes the checks the full path
// makes of such a block (span_check_free): p starts one of its span's carved
// blocks (free's block check: the descriptor's offset and multiplier) and is
// not free (its canary); a block that fails them gets 0 and goes on to the
// full path, which reports it. The descriptor is found as free's fast path
// finds it, with no test of the region's reservation: a vspan in state HOT,
// FULL or PARTIAL was handed out, so it is within the reservation
// (fw_usable), and any other state, or foreign memory past the reservation,
// goes on to the full path. A string grown a byte at a time, with a realloc
// for each, spent 39% of its time in the calls this replaces (span_of_owned,
// span_check_free; docs/benchmarks.md, Stop 89).
FW_INLINE uint32_t small_in_use(const void* p) {
  const Span* d = span_of(p);
  if (FW_UNLIKELY(d == nullptr) || FW_UNLIKELY(secure_mode())) return 0;
  const uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state != kHot && state != kFull && state != kPartial) return 0;
  if (!starts_carved_block(p, d) || has_canary(p)) return 0;
  return d->block_size.load(std::memory_order_relaxed);
}

// A small block of `old` bytes (small_in_use) that moves to another small one
// (n of 1 to kSmallMax): what a string or a vector outgrowing its class, or
// one shrunk by more than half, does at each move. A function of its own, so
// that the block kept in place saves no registers for the copy's call.
FW_NOINLINE void* realloc_small_move(void* p, size_t n, size_t old) {
  void* q = alloc_small(n);
  if (q == nullptr) return nullptr;  // errno set; the old block is intact
  std::memcpy(q, p, old < n ? old : n);
  free_block(p);
  return q;
}

// realloc past its common cases (fw_realloc_impl): null, large and huge
// blocks, foreign ones, secure mode, a block that fails a check (reported
// here), and a small block that grows past kSmallMax or is resized to 0.
FW_NOINLINE void* realloc_full(void* p, size_t n) {
  if (p == nullptr) return alloc_small(n);
  if (n == 0) {  // as glibc: free the block and return NULL
    free_block(p);
    return nullptr;
  }
  Span* d = span_of_owned(p);
  size_t old;
  // A block of the heap freeway replaced (foreign.h) moves into freeway.
  const ForeignHeap* other = nullptr;
  if (d == nullptr && zero_owns(p)) {
    old = 0;  // secure mode's malloc(0): nothing to copy
  } else if (d == nullptr) {
    other = foreign_owner(p);
    if (other == nullptr) report_misuse("realloc of a pointer freeway did not allocate:", p);
    old = other->usable_size(p);
  } else {
    uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
    if (state == kHot || state == kFull || state == kPartial) {
      // A freed block (its canary) or a bad pointer stops here.
      if (secure_mode()) {
        old = secure_requested(p, d);  // checks the block and its tail; the block always moves
      } else {
        // A small block in use that passes the check came by small_in_use, so
        // it is here to grow past kSmallMax: fw_realloc_impl kept or moved
        // every other.
        span_check_free(d, p);
        old = d->block_size.load(std::memory_order_relaxed);
      }
    } else if (state == kLarge || state == kLargeTail || state == kHuge) {
      old = large_usable_size(p, d);
      if (old == 0) report_misuse("realloc of a pointer inside a large block (not its start):", p);
      if (n <= old && n > old / 2) return p;
      if (large_resize_in_place(p, d, n)) return p;
    } else if (large_block_start(p, d) != nullptr) {  // inside a huge block, past its first vspan
      report_misuse("realloc of a pointer inside a large block (not its start):", p);
    } else {
      report_misuse("realloc of a freed block (or one freeway did not allocate):", p);
    }
  }
  void* q;
  if (n > kLargeMax && n > old && !secure_mode()) {
    // A huge block that grows past its region moves to one with room to
    // double in place (address space only: its pages are committed as it
    // grows). Without it, each step of a buffer grown past kLargeMax a step
    // at a time took a new region, faulted it in and copied the whole buffer:
    // one grown to 320 MiB in 1 MiB steps took 20.5 s and 4.9 M page faults,
    // and takes 1.1 s and 245,000 (glibc, which moves pages with mremap:
    // 0.3 s). Large blocks move less often: their run classes step by a
    // half or a third (large.cpp, run_class).
    q = large_block(n, kMinAlign, false, n < (size_t(1) << 46) ? 2 * n : n);
    if (q == nullptr) alloc_out_of_memory(n);
  } else {
    q = alloc_small(n);
  }
  if (q == nullptr) return nullptr;  // errno set; the old block is intact
  const size_t keep = old < n ? old : n;
  // From a large or huge block to a huge one, the pages move instead
  // (large.h): growing a 300 MiB block by 10 bytes copied and faulted it all
  // in 2.4 s here.
  const size_t moved = other == nullptr && n > kLargeMax && old > kSmallMax ? large_move_pages(q, p, d, keep) : 0;
  std::memcpy(static_cast<char*>(q) + moved, static_cast<const char*>(p) + moved, keep - moved);
  if (other != nullptr)
    other->free(p);
  else
    free_block(p);
  return q;
}

}  // namespace

void* fw_realloc_impl(void* p, size_t n) {
  if (const size_t old = small_in_use(p); FW_LIKELY(old != 0)) {
    if (realloc_keeps(n, old)) return p;
    if (n - 1 < kSmallMax) return realloc_small_move(p, n, old);
  }
  return realloc_full(p, n);
}

}  // namespace fw
