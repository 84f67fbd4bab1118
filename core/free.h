// core/free.h: free's fast path.
//
// The fast path (free_block) handles a block of the calling thread's own hot
// span, which is what a thread freeing its own recent allocations hits, and a
// block of the span the thread is already freeing a run of blocks into (the
// LAB's pending chain, lab.h), so a batch of frees into a span the thread let
// float costs one CAS in all. For its own hot span:
//   load tls_lab; store BUSY; region map load; descriptor owner load; compare;
//   class load; block check (multiply, rotate, compare with carved); canary
//   check and set; link the block into free[c]; bump frees[c]; restore tls_lab.
// Budget: 40 instructions on x86-64, call and return included. Every other case (a
// block of another thread's span, a large block, NULL, a bad pointer) goes to
// free_slow, which is never inlined.
#pragma once
#include <atomic>

#include "core/arena.h"
#include "core/config.h"
#include "core/lab.h"
#include "core/secure.h"

namespace fw {

FW_NOINLINE void free_slow(Lab* lab, void* p, Span* d);  // entered with BUSY set; restores

FW_INLINE void free_block(void* p) {
  Lab* lab = tls_lab;
  tls_lab = &g_lab_busy;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Span* slice = region_slice_of(p);
  if (FW_UNLIKELY(slice == nullptr)) return free_slow(lab, p, nullptr);
  Span* d = span_in_slice(slice, p);
  // Our own hot span: onto its owner-side list. The span we are already
  // freeing a run of blocks into: onto the LAB's pending chain for it.
  bool own = d->owner.load(std::memory_order_relaxed) == lab;
  if (FW_UNLIKELY(!own && d != lab->pending_span)) return free_slow(lab, p, d);
  unsigned c = d->cls.load(std::memory_order_relaxed);
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
  tls_lab = lab;
}

}  // namespace fw
