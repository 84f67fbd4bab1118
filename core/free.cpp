// core/free.cpp: free's slow path: blocks of other spans, large blocks, bad pointers.
#include "core/free.h"

#include "core/arena.h"
#include "core/foreign.h"
#include "core/large.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/stats.h"

namespace fw {

void free_slow_sized(Lab* lab, void* p, Span* d, size_t n, bool aligned) {
  if (p != nullptr && d != nullptr) {
    uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
    const bool small = state == kHot || state == kFull || state == kPartial;
    const bool large = state == kLarge || state == kLargeTail || state == kHuge;
    // Not a block in use, or inside a large block (holds 0): free_slow reports it.
    size_t holds = small ? d->block_size.load(std::memory_order_relaxed) : large ? large_usable_size(p, d) : 0;
    if (holds != 0 && (small ? !sized_free_fits(n, holds, aligned) : n > holds)) report_sized_free(p, n, holds);
  }
  free_slow(lab, p, d);
}

namespace {

// p is not in freeway's memory: a block of the heap freeway replaced (foreign.h).
void free_foreign(Lab* lab, void* p) {
  const ForeignHeap* other = foreign_owner(p);
  if (other == nullptr) report_misuse("free of a pointer freeway did not allocate:", p);
  other->free(p);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  lab_set_current(lab);
}

}  // namespace

void free_slow(Lab* lab, void* p, Span* d) {
  if (p == nullptr) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    lab_set_current(lab);
    return;
  }
  if (d == nullptr) return free_foreign(lab, p);
  Lab* mine = lab;
  if (lab == &g_lab_empty) {
    Lab* bound = lab_bind_thread();
    if (bound != nullptr) mine = bound;
  }
  uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state == kHot || state == kFull || state == kPartial) {
    unsigned c = d->cls.load(std::memory_order_relaxed);
    if (is_placeholder(mine)) {
      span_free_remote(d, p);
      stats_count_unbound_free(c);
    } else {
      // Reports the bad free when the fast path's block check is what sent us here.
      span_check_free(d, p);
      set_canary(p);
      if (d->owner.load(std::memory_order_relaxed) == mine) {
        // The thread's first call found a LAB that already owns this span.
        block_link(p, mine->free[c]);
        mine->free[c] = p;
      } else {
        lab_defer_free(mine, d, p);  // batched: one CAS per run of frees into one span
      }
      lab_count(mine->frees[c]);
    }
  } else if (state == kLarge || state == kLargeTail || state == kHuge) {
    large_free(p, d);
  } else if (!arena_owns(p)) {
    return free_foreign(mine, p);  // in a region's slot, past its reservation
  } else {
    report_misuse("double free (or free of memory not in use):", p);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  lab_set_current(mine);
}

}  // namespace fw
