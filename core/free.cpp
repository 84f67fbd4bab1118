// core/free.cpp: free's slow path: blocks of other spans, large blocks, bad pointers.
#include "core/free.h"

#include "core/arena.h"
#include "core/foreign.h"
#include "core/large.h"
#include "core/percpu.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/secure_heap.h"
#include "core/stats.h"
#include "platform/rseq.h"

namespace fw {

namespace {

// The size check of a sized free that the fast path did not make (p's block is
// not the caller's own or is large): reports a mismatch and stops.
void check_sized(void* p, Span* d, size_t n, bool aligned) {
  if (p == nullptr || d == nullptr) return;
  uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  const bool small = state == kHot || state == kFull || state == kPartial;
  const bool large = state == kLarge || state == kLargeTail || state == kHuge;
  // Not a block in use, or inside a large block (holds 0): the free reports it.
  size_t holds = small ? d->block_size.load(std::memory_order_relaxed) : large ? large_usable_size(p, d) : 0;
  if (small && secure_mode()) {
    // Secure mode knows the size asked for: the size must be that one.
    holds = secure_requested(p, d);
    if (n != holds) report_sized_free(p, n, holds);
  } else if (holds != 0 && (small ? !sized_free_fits(n, holds, aligned) : n > holds)) {
    report_sized_free(p, n, holds);
  }
}

}  // namespace

// Per-CPU mode (percpu.h), in restartable sections on the current CPU's LAB
// (platform/rseq.h), each checking inside the section what it relies on:
//  - a block of a span that LAB owns, its hot span of the class or a kept one,
//    goes onto the list the span's own_at names, free[c] or the span's own
//    list, counted in the same store (rseq_push_owned: d->owner is the LAB; a
//    LAB in a slot has no holder, so what it owns changes only while it is out
//    of every slot, but for a kept span that another CPU's free empties, which
//    cannot be while this block is in use);
//  - a block of a span with a pending chain in that LAB that has room goes onto
//    the chain (rseq_push_counted: the chain's span and room, then one store),
//    counted when the chain goes to its span (chain_flush, lab.h). The checks
// (hardening; a sized free's size was checked by free_slow_sized) come first,
// once the span is known to hold small blocks: owned (HOT), or FULL or PARTIAL
// by its anchor. Every other block goes to percpu_free_slow.
void free_percpu(void* p, Span* d) {
  if (FW_UNLIKELY(d == nullptr)) return percpu_free_slow(p, nullptr, false);
  const bool owned = d->owner.load(std::memory_order_relaxed) != nullptr;
  if (!owned) {
    uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_relaxed)).state;
    if (FW_UNLIKELY(state != kFull && state != kPartial))  // large, free, or a bad pointer
      return percpu_free_slow(p, d, false);
  }
  if (FW_UNLIKELY(!free_fast_checks(p, d))) return percpu_free_slow(p, d, false);
  void* const* slots = reinterpret_cast<void* const*>(g_percpu.slots);
  if (owned && os::rseq_push_owned(g_percpu.rseq_off, slots, g_percpu.ncpu, &d->owner, &d->own_at, p)) return;
  if (os::rseq_push_counted(g_percpu.rseq_off, slots, g_percpu.ncpu, offsetof(Lab, pending_mask),
                            offsetof(Lab, pending), pending_key(d), d, p))
    return;
  percpu_free_slow(p, d, true);
}

void free_slow_sized(void* p, Lab* lab, Span* d, size_t n, bool aligned) {
  check_sized(p, d, n, aligned);
  free_slow(p, lab, d);
}

namespace {

// p is not in freeway's memory: a block of the heap freeway replaced (foreign.h).
void free_foreign(void* p) {
  const ForeignHeap* other = foreign_owner(p);
  if (other == nullptr) report_misuse("free of a pointer freeway did not allocate:", p);
  other->free(p);
}

// Secure mode (secure_heap.h): checks block p of span d and fills it, then
// puts it in the quarantine of `mine` (the thread's LAB, or a placeholder:
// then none). Returns the block to free now (checked and canaried already),
// or nullptr; the caller then frees what quarantine_over returns.
void* secure_quarantine(Lab* mine, void* p, const Span* d) {
  secure_requested(p, d);  // checks the block and its tail canary
  set_canary(p);
  const uint32_t bs = d->block_size.load(std::memory_order_relaxed);
  secure_fill(p, bs);
  if (is_placeholder(mine)) return p;
  secure_fill_link(p);
  return quarantine_swap(mine, p, bs);
}

// Frees block p of small span d for the thread whose LAB is `mine` (or a
// placeholder). checked: p was checked and canaried already.
void free_small(Lab* mine, void* p, Span* d, bool checked) {
  if (is_placeholder(mine)) {
    // The class before the free: the free of the last block in use may give
    // d to the pool, and another thread reuse it for another class or a large
    // block (kNoClass) before the count.
    const unsigned c = d->cls.load(std::memory_order_relaxed);
    if (checked)
      span_free_list(d, p, p, 1);
    else
      span_free_remote(d, p);
    stats_count_unbound_free(c);
    return;
  }
  // Reports the bad free when the fast path's block check is what sent us here.
  if (!checked) span_check_free(d, p);
  set_canary(p);
  lab_free_block(mine, p, d);
}

}  // namespace

void free_with(Lab* mine, void* p, Span* d, bool checked) {
  if (d == nullptr) {
    if (zero_owns(p))  // secure mode's malloc(0)
      zero_free(p);
    else
      free_foreign(p);
    return;
  }
  uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state == kHot || state == kFull || state == kPartial) {
    if (!secure_mode()) {
      free_small(mine, p, d, checked);
    } else {
      if (void* out = secure_quarantine(mine, p, d)) free_small(mine, out, quarantined_span(out), true);
      // A placeholder's quarantine is always empty: secure_quarantine puts nothing there.
      if (FW_UNLIKELY(mine->quarantine_bytes > kLabQuarantineBytes)) {
        while (void* over = quarantine_over(mine)) free_small(mine, over, quarantined_span(over), true);
      }
    }
  } else if (state == kLarge || state == kLargeTail || state == kHuge) {
    large_free(p, d);
  } else if (zero_owns(p)) {  // secure mode's malloc(0), in a region's slot past its reservation
    zero_free(p);
  } else if (!arena_owns(p)) {
    free_foreign(p);  // in a region's slot, past its reservation
  } else if (large_block_start(p, d) != nullptr) {
    large_free(p, d);  // inside a huge block, past its first vspan: large_free names it
  } else {
    report_misuse("double free (or free of memory not in use):", p);
  }
}

void free_slow(void* p, Lab* lab, Span* d) {
  if (FW_HAS_RSEQ && FW_LIKELY(lab == &g_lab_cpu)) {  // a thread in per-CPU mode (percpu.h)
    lab_leave(lab);
    return free_percpu(p, d);
  }
  return free_slow_thread(p, lab, d);
}

void free_slow_thread(void* p, Lab* lab, Span* d) {
  if (p == nullptr || d == nullptr) {  // no LAB needed
    if (p != nullptr) free_with(lab, p, nullptr, false);
    return lab_leave(lab);
  }
  // Nor for a large or huge block's head (its start, or the misuse large_free
  // reports): the binding, the switch to per-CPU mode and the adoption below
  // wait for the thread's next small call. (Per-CPU frees, which come through
  // free_slow, take no LAB for it either: percpu_free_slow.)
  const uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
  if (state == kLarge || state == kHuge) {
    large_free(p, d);
    return lab_leave(lab);
  }
  if (FW_HAS_RSEQ && percpu_serves(lab)) {
    // Per-CPU mode is on (chosen at the process's first call, or switched on
    // since, percpu.h): this thread's calls go to it from now on.
    lab_leave(lab);
    percpu_join();
    return free_percpu(p, d);
  }
  // A thread's first call, a free, binds the LAB of p's span if it is parked (lab.h).
  Lab* mine = lab_own(lab, d->owner.load(std::memory_order_relaxed));
  free_with(mine, p, d, false);
  if (lab_has_handed(mine)) mine = lab_adopt_handed(mine);
  lab_leave(lab_slot_after(mine));
}

void free_chain_full(void* p, Lab* lab, Span* d) {
  lab->pending[pending_slot_in(lab, d)].room = 1;  // the fast path's decrement found it 1 (free.h)
  lab_defer_free(lab, d, p);  // counted as its chain goes to d (chain_flush)
  if (lab_has_handed(lab)) lab = lab_adopt_handed(lab);
  lab_leave(lab);
}

void quarantine_flush() {
  if (!secure_mode()) return;
  Lab* lab = lab_enter();
  Lab* mine = lab_own(lab);
  if (!is_placeholder(mine)) lab_flush_quarantine(mine);
  lab_leave(lab_slot_after(mine));
}

}  // namespace fw
