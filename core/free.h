// core/free.h: free's fast path.
//
// The fast path (free_block) handles a block of the calling thread's own hot
// span, which is what a thread freeing its own recent allocations hits, and a
// block of the span the thread is already freeing a run of blocks into (the
// LAB's pending chain, lab.h), so a batch of frees into a span the thread let
// float costs one CAS in all. For its own hot span:
//   load the thread slot; store BUSY; region map load; descriptor owner load; compare;
//   class load; block check (multiply, rotate, compare with carved); canary
//   check and set; link the block into free[c]; bump frees[c]; restore the slot.
// Budget: 40 instructions on x86-64, call and return included. Every other case (a
// block of another thread's span, a large block, NULL, a bad pointer) goes to
// free_slow, which is never inlined.
#pragma once
#include <atomic>

#include "core/arena.h"
#include "core/config.h"
#include "core/lab.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/size_class.h"

namespace fw {

FW_NOINLINE void free_slow(Lab* lab, void* p, Span* d);  // entered with BUSY set; restores

// Sized frees (free_sized, free_aligned_sized, sized operator delete) check
// the size against the block: it must be a size the block could have been
// allocated or reallocated with. At most the block's size; and for a small
// block of more than 64 bytes from an unaligned allocation, at least half of
// it: every request a class serves is above the class below (more than half,
// size_class.h), and realloc keeps a block only down to half its size
// (alloc.cpp). Aligned allocations may take a bigger class, and large blocks
// are rounded up, so for those only the upper bound is checked.
FW_INLINE bool sized_free_fits(size_t n, size_t holds, bool aligned) {
  return n <= holds && (aligned || holds <= 64 || n >= holds / 2);
}
// free_slow for a sized free: checks the size first (d != nullptr), reporting
// "sized free of 0x... with size N, block holds M" and stopping on a mismatch.
// Entered with BUSY set, like free_slow, and as a tail call, so the fast path
// keeps no state across it.
// Secure mode: frees every block in the calling thread's quarantine now
// (fw_collect). A no-op in default mode.
void quarantine_flush();

FW_NOINLINE void free_slow_sized(Lab* lab, void* p, Span* d, size_t n, bool aligned);

// free_block_impl<false> is free(); free_block_impl<true> also checks the size.
template <bool kSized>
FW_INLINE void free_block_impl(void* p, size_t n, bool aligned);

FW_INLINE void free_block(void* p) { free_block_impl<false>(p, 0, false); }
FW_INLINE void free_block_sized(void* p, size_t n, bool aligned) { free_block_impl<true>(p, n, aligned); }

template <bool kSized>
FW_INLINE void free_block_impl(void* p, size_t n, bool aligned) {
  Lab* lab = lab_current();
  lab_set_current(&g_lab_busy);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Span* slice = region_slice_of(p);
  if (FW_UNLIKELY(slice == nullptr)) return free_slow(lab, p, nullptr);
  Span* d = span_in_slice(slice, p);
  // Our own hot span: onto its owner-side list. The span we are already
  // freeing a run of blocks into: onto the LAB's pending chain for it.
  bool own = d->owner.load(std::memory_order_relaxed) == lab;
  if (FW_UNLIKELY(!own && d != lab->pending_span)) {
    if constexpr (kSized) return free_slow_sized(lab, p, d, n, aligned);
    return free_slow(lab, p, d);
  }
  unsigned c = d->cls.load(std::memory_order_relaxed);
  if constexpr (kSized) {
    // A mismatch stops the process: nothing to keep across the call.
    if (FW_UNLIKELY(!sized_free_fits(n, class_block_size(c), aligned))) report_sized_free(p, n, class_block_size(c));
  }
  // Hardening (secure.h): p must start a carved block and must not be free already.
#if FREEWAY_HARDENING
  uint64_t canary = canary_of(p);
  if (FW_UNLIKELY(block_number(p, c) >= d->carved.load(std::memory_order_relaxed) ||
                  static_cast<uint64_t*>(p)[1] == canary))
    return free_slow(lab, p, d);
  static_cast<uint64_t*>(p)[1] = canary;
#endif
  if (FW_LIKELY(own)) {
    block_link(p, lab->free[c]);
    lab->free[c] = p;
  } else {
    block_link(p, lab->pending_head);
    lab->pending_head = p;
    lab->pending_count++;
  }
  lab_count(lab->frees[c]);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  lab_set_current(lab);
}

}  // namespace fw
