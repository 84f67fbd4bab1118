// core/free.h: free's fast path.
//
// The fast path (free_block) handles a block of a span the calling thread's
// LAB owns, its hot span of the class or one it keeps (lab.h: its older
// blocks), in one path with no search and no branch on which (the span's
// own_at names the list), and a block of a span that already has
// a pending chain in the LAB with room for more than that block (lab.h), so
// frees into spans the thread let float cost one CAS per chain (the LAB's
// pending_budget / slots bytes of blocks, more for a span whose chains fill:
// lab.h), not one each. For an owned span:
//   load the thread slot; store BUSY; region map load;
//   descriptor load; compare its owner with the LAB; block check (subtract the
//   low bits of block 0's address, multiply by the descriptor's multiplier,
//   rotate by a constant, compare with carved: secure.h); canary check and
//   set; push onto the list the descriptor's own_at names, free[c] for the
//   hot span, the span's own list for a kept one (a per-thread LAB's kept
//   spans of a class listed across its spans: its kept list or free[c],
//   lab.h; a plain link,
//   block_link_fast), and add one to the list's count, the word after its
//   head (own_count_after: the LAB's frees[c], or the descriptor's own
//   count); restore the slot. The descriptor's fields are read by the
//   instructions that use them, and the count is added to in place
//   (relaxed.h), so this case loads no class. Nor does a free onto a pending
//   chain: the chain's blocks are counted when it goes to its span
//   (chain_flush, lab.h).
// 36 instructions on x86-64 up to the return (GCC 12, objdump), 41 for the
// pending case (43 while it loaded the class and counted each free), with no
// register saved: the slow paths take p first, where
// free has it, and no value is kept across the checks that a re-read of the
// descriptor can give. In a loop whose loads miss (bench/teardown), each
// instruction costs about 2% of the time: the loop's misses overlap only as
// far as its instructions fit the core's window (docs/design.md, "Fast
// paths"). A free that finds
// its chain full goes to free_chain_full, which gives the chain to its span
// and starts the next. Every other case (a block of another thread's span
// with no chain here, a large block, NULL, a bad pointer, and every free of a
// thread in per-CPU mode, whose slot holds the CPU placeholder: percpu.h)
// goes to free_slow. Neither is ever inlined.
#pragma once
#include <atomic>
#include <cstddef>

#include "core/arena.h"
#include "core/config.h"
#include "core/lab.h"
#include "core/relaxed.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/size_class.h"

namespace fw {

FW_NOINLINE void free_slow(void* p, Lab* lab, Span* d);  // entered with BUSY set; restores
// free_slow past its first test (the CPU placeholder goes to per-CPU mode's
// path), apart so that per-CPU frees save no registers on their way through.
FW_NOINLINE void free_slow_thread(void* p, Lab* lab, Span* d);
// Frees p (not null) of span d (nullptr: p is in no region's slice) with
// `mine` as the freeing LAB, held by the caller, or a placeholder (then a
// small block goes straight to its span). checked: p was checked and its free
// canary set already. Leaves the thread slot alone.
void free_with(Lab* mine, void* p, Span* d, bool checked);

// Sized frees check the size against the block: the rule and its table by
// class are in size_class.h (sized_free_fits, kSizedRanges), and a small
// span's range for unaligned allocations is in its descriptor (span.h,
// sized_lo), where the fast path reads it.

// Secure mode: frees every block in the calling thread's quarantine now
// (fw_collect). A no-op in default mode.
void quarantine_flush();

// free_slow for a sized free: checks the size first (d != nullptr), reporting
// "sized free of 0x... with size N, block holds M" and stopping on a mismatch.
// Entered with BUSY set, like free_slow, and as a tail call, so the fast path
// keeps no state across it.
FW_NOINLINE void free_slow_sized(void* p, Lab* lab, Span* d, size_t n, bool aligned);

// free's path for block p (checked and canaried) of span d whose pending
// chain in lab (d's slot) had room 1, which the fast path's decrement left at
// 0: puts the 1 back, then gives the chain to d and starts the next one with
// p, or (a chain with no spare room) adds p and gives it (lab_defer_free).
// Entered with BUSY set; restores the slot. The tests free_slow makes first
// are settled by the chain itself: lab is the thread's own LAB (placeholders
// hold no chains, so secure mode never gets here), and d holds small blocks
// in use (those of the chain), so it is not free, large or foreign.
FW_NOINLINE void free_chain_full(void* p, Lab* lab, Span* d);

// The per-CPU fast path for p of span d (nullptr: p is in no region's slice),
// reached from free_slow with the slot restored. Defined once, in free.cpp: an
// inline or template function would be emitted in each file that uses it, and
// the linker's discarded copies would leave their rseq descriptors (section
// __rseq_cs) pointing into discarded code, which lld refuses.
FW_NOINLINE void free_percpu(void* p, Span* d);

// free_block_impl<false> is free(); free_block_impl<true> also checks the size.
template <bool kSized>
FW_INLINE void free_block_impl(void* p, size_t n, bool aligned);

FW_INLINE void free_block(void* p) { free_block_impl<false>(p, 0, false); }
FW_INLINE void free_block_sized(void* p, size_t n, bool aligned) { free_block_impl<true>(p, n, aligned); }

// Whether p starts one of the carved blocks of small span d (the block check,
// secure.h): its offset from block 0 times the descriptor's multiplier
// (span.h), rotated, is below carved. Offset and multiplier come in one load
// (pair_relaxed), and d's fields are read by the instructions that use them
// (relaxed.h). free's fast path and realloc's (alloc.cpp) make it.
FW_INLINE bool starts_carved_block(const void* p, const Span* d) {
  const uint64_t om = pair_relaxed(d->offset, d->block_mul);
  const uint32_t off = uint32_t(reinterpret_cast<uintptr_t>(p)) - uint32_t(om);
  return below_relaxed(block_number_at(off, uint32_t(om >> 32)), d->carved);
}

// Whether n is a size a sized free of a block of small span d may pass
// (sized_free_fits). Unaligned, from d's own range (span.h, sized_lo): one
// load, from the line the fast path read the owner from, then the subtraction
// and the compare of class_sized_free_fits. Aligned, from the table by d's
// class.
FW_INLINE bool span_sized_free_fits(const Span* d, size_t n, bool aligned) {
  if (FW_UNLIKELY(aligned)) return class_sized_free_fits(n, d->cls.load(std::memory_order_relaxed), true);
  const uint64_t range = pair_relaxed(d->sized_lo, d->sized_width);
  return n - uint32_t(range) <= (range >> 32);
}

// The checks both fast-path cases make on block p of small span d
// (hardening, secure.h): that p starts one of d's carved blocks and is not
// free already; then p's free canary is set. false: take the slow path. d's
// offset and carved are read by the instructions that use them (relaxed.h).
// A sized free's size is checked before (span_sized_free_fits), and a
// mismatch goes to free_slow_sized, which reports it, with a jump: a call of
// the report from here made the fast path keep the stack aligned for it.
FW_INLINE bool free_fast_checks(void* p, const Span* d) {
#if FREEWAY_HARDENING
  // The descriptor's multiplier (span.h), not the class's: the owned case
  // then loads no class, and neither case a table entry.
  if (FW_UNLIKELY(!starts_carved_block(p, d))) return false;
  const uint64_t canary = canary_of(p);  // after the block test: one register fewer across it
  if (FW_UNLIKELY(static_cast<uint64_t*>(p)[1] == canary)) return false;
  static_cast<uint64_t*>(p)[1] = canary;
#endif
  return true;
}

template <bool kSized>
FW_INLINE void free_block_impl(void* p, size_t n_size, bool aligned) {
  Lab* lab = lab_enter();
  Span* slice = region_slice_of(p);
  if (FW_UNLIKELY(slice == nullptr)) return free_slow(p, lab, nullptr);
  Span* d = span_in_slice(slice, p);
  // No class is loaded: the block check's multiplier and a sized free's range
  // are the descriptor's.
  if (FW_LIKELY(equal_relaxed(d->owner, lab))) {
    // A span the LAB owns, hot or kept (lab.h): onto the list its own_at
    // names, even its last block in use (a kept span its owner empties stays
    // kept), counted in the word after that list's head (own_count_after).
    if constexpr (kSized) {
      if (FW_UNLIKELY(!span_sized_free_fits(d, n_size, aligned))) return free_slow_sized(p, lab, d, n_size, aligned);
    }
    if (FW_UNLIKELY(!free_fast_checks(p, d))) return free_slow(p, lab, d);
    own_push_fast(d, p);
    return lab_leave(lab);
  } else {
    // A span with a pending chain in this LAB with room for more than this
    // block: onto the chain. The free that finds room 1 goes to
    // free_chain_full: the chain is full (its spare room, lab.h), and goes to
    // its span with the next chain started by this block; or this block is the
    // last its span has in use, and fills the chain, which goes to the span at
    // once. A span with no chain here goes to free_slow, which starts one.
    PendingChain* ch = pending_chain_of(lab, d);
    if (FW_UNLIKELY(!equal_relaxed(ch->span.v, d))) {
      if constexpr (kSized) return free_slow_sized(p, lab, d, n_size, aligned);
      return free_slow(p, lab, d);
    }
    // d has a chain here, so it is a small span with blocks in use: the
    // checks apply, and a full chain needs none of free_slow's tests. The
    // free is counted when the chain goes to its span (chain_flush, lab.h),
    // so an unsized free loads no class here either.
    if constexpr (kSized) {
      if (FW_UNLIKELY(!span_sized_free_fits(d, n_size, aligned))) return free_slow_sized(p, lab, d, n_size, aligned);
    }
    if (FW_UNLIKELY(!free_fast_checks(p, d))) return free_slow(p, lab, d);
    // room >= 1 in a thread's LAB (lab.h), so one decrement in place tests
    // it: 0 now is room 1 before, which free_chain_full puts back.
    if (FW_UNLIKELY(single_writer_sub_one_is_zero(ch->room.v))) return free_chain_full(p, lab, d);
    block_link_fast(p, ch->head);
    ch->head = p;
    lab_leave(lab);
  }
}

}  // namespace fw
