// core/large.h: large and huge objects.
//
// A large object (kSmallMax < size <= kLargeMax, alignment included) is a run
// of n contiguous virtual spans taken from the span-pool. Its head descriptor
// is in state LARGE with the object's offset from the run's base (non-zero only
// for alignments above kVspanSize) and its usable size; each other descriptor
// of the run is LARGE_TAIL with run_len = index of the head. So any pointer is
// validated in O(1): its descriptor (or its head) must be LARGE and the pointer
// must equal base + offset. Only the pages the object uses are committed; the
// rest of the run is address space. Freeing is one CAS LARGE -> FREE on the
// head (a second free of the same object fails that CAS: a double free).
//
// A huge object (larger than kLargeMax) gets a region of its own from the
// arena; its first descriptor is the head, in state HUGE. Freeing it unmaps the
// region.
#pragma once
#include <cstddef>

#include "core/span.h"

namespace fw {

// The largest size, alignment or room large_alloc takes: the 48-bit address
// space has no room for more (a bigger request fails at once).
constexpr size_t kLargeRequestMax = size_t(1) << 47;
// What an alignment adds to a large block's run or region: their bases are
// vspan-aligned, so a bigger alignment adds its excess.
constexpr size_t large_align_extra(size_t align) { return align > kVspanSize ? align - kVspanSize : 0; }
// Whether large_alloc serves a block of size bytes aligned to align from a
// run of the span-pool (else a huge region of its own, or nothing).
constexpr bool large_in_run(size_t size, size_t align) {
  return size <= kLargeMax && large_align_extra(align) <= kLargeMax - size;
}

// Returns a block of at least size bytes aligned to align (a power of two), or
// nullptr (the caller sets errno). zero: the block must read as zeros. room:
// for a huge block, the bytes its region should reserve if more than size
// (realloc's, so that the block grows in place; address space only, as only
// the block's pages are committed), unless address space is capped or that
// much cannot be had. *unpaid (if given): the bytes of fresh pages a big
// block faulted in that the span-pool's stranded runs did not pay for
// (pool_pay_fresh), else 0, for the caller to pay (alloc.cpp, large_block).
void* large_alloc(size_t size, size_t align, bool zero, size_t room = 0, uint64_t* unpaid = nullptr);
// Frees p, whose descriptor d is LARGE, LARGE_TAIL or HUGE; reports misuse
// (bad or double free) and stops the process otherwise.
void large_free(void* p, Span* d);
// Usable bytes of the large or huge object that starts at p (0 if p is not
// one's start, a pointer inside one included).
size_t large_usable_size(const void* p, const Span* d);
// The start of the large or huge object that p points into (nullptr if none).
void* large_block_start(const void* p, const Span* d);
// Grows or shrinks p in place when its run has room, or when it is a large
// block whose run is followed by free vspans it can grow over: pooled ones
// (pool_take_after), or its region's never-used ones when the run ends at
// them (the heap's top); true if it did.
bool large_resize_in_place(void* p, Span* d, size_t size);
// realloc's move of large or huge block p (descriptor d) to huge block q:
// moves the whole pages of their first `bytes` (at most both blocks' sizes)
// from p's run or region to q's region without copying them
// (os::move_pages), copies the rest of those bytes, and returns how many that
// was; 0, having done nothing, if p or q is not such a block's start, p is a
// large block in secure mode, or where the OS cannot. The caller then frees
// p, whose pages read as zeros where they were (a large block's run is
// given back to the pool with none). Only into a huge block: the mapping a
// move splits is the destination's (the source's stays whole: checked on
// Linux 6.18 with /proc/self/maps), and a huge block's region is released
// whole, so the split does not outlive the block.
size_t large_move_pages(void* q, void* p, const Span* d, size_t bytes);

// The run length, in vspans, that a large block of `need` vspans takes when
// address space is not capped: need itself up to 4, above that the next of
// 2^k and 1.5 * 2^k (large.cpp).
uint32_t run_class(uint32_t need);

// The counters. The vspans of live runs are counted where statistics walk
// the descriptors (stats_fill: fw_stats_t::spans_large).
struct LargeStats {
  uint64_t live_bytes, allocs, frees;
};
LargeStats large_stats();
// large_stats().live_bytes alone: one load.
uint64_t large_live_bytes();

}  // namespace fw
