// core/arena.h: the arena of virtual spans (scalloc §3.2).
//
// Address space comes from the OS in regions: an arena region is kRegionSize of
// reserved (uncommitted) memory aligned to kRegionSize and cut into
// kVspansPerRegion virtual spans. A huge object gets a region of its own,
// a multiple of kRegionSize.
//
// Every region has an id r < kMaxRegions. Two tables make lookups O(1):
//   descriptors  g_spans[r * kVspansPerRegion + v] describes virtual span v of r
//   region map   g_region_map[address >> kRegionShift] = &g_spans[r * kVspansPerRegion]
//                (the region's slice of descriptors; nullptr: not freeway's)
// so the descriptor of any block is one load and an add away, and whether a
// pointer is freeway's is that one load. The descriptor table is one reservation, committed a
// region's slice at a time, so it can later be placed in a shared mapping.
//
// Invariants (arena_is_valid):
//   map entry e != nullptr  =>  e is the slice of a region in use that covers
//   that address slot;
//   an arena region's next_vspan <= kVspansPerRegion; vspans below it have been
//   handed out (they are in use, pooled or cached), those above never were.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "core/span.h"
#include "core/tagged_stack.h"

namespace fw {

enum RegionKind : uint32_t { kRegionUnused = 0, kRegionArena = 1, kRegionHuge = 2 };

struct Region {
  std::atomic<uintptr_t> base;
  std::atomic<uint64_t> size;
  std::atomic<uint32_t> kind;
  std::atomic<uint32_t> next_vspan;  // arena: bump index of the first vspan never handed out
};

extern std::atomic<Span*> g_region_map[kRegionMapEntries];
extern std::atomic<Span*> g_spans;
extern Region g_regions[kMaxRegions];

// Prepares the descriptor table. Lock-free and idempotent; false if the OS
// refused the reservation.
bool arena_init();

// The descriptor slice of the region holding p, or nullptr if p is not in
// freeway's memory: a bounds check and one load.
FW_INLINE Span* region_slice_of(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  size_t slot = a >> kRegionShift;
  if (FW_UNLIKELY(slot >= kRegionMapEntries)) return nullptr;
  return g_region_map[slot].load(std::memory_order_relaxed);
}
// Descriptor of the virtual span holding p within its region's slice.
FW_INLINE Span* span_in_slice(Span* slice, const void* p) {
  return reinterpret_cast<Span*>(reinterpret_cast<uintptr_t>(slice) +
                                 ((reinterpret_cast<uintptr_t>(p) >> (kVspanShift - 6)) &
                                  (uintptr_t(kVspansPerRegion - 1) << 6)));
}
static_assert(sizeof(Span) == 64, "span_in_slice scales by 64");
// Descriptor of the virtual span holding p, or nullptr if p is not freeway's.
FW_INLINE Span* span_of(const void* p) {
  Span* slice = region_slice_of(p);
  return FW_LIKELY(slice != nullptr) ? span_in_slice(slice, p) : nullptr;
}

FW_INLINE uint32_t span_index(const Span* s) {
  return uint32_t(s - g_spans.load(std::memory_order_relaxed));
}
FW_INLINE Span* span_at(uint32_t index) { return g_spans.load(std::memory_order_relaxed) + index; }
FW_INLINE uintptr_t span_base(const Span* s) {
  uint32_t i = span_index(s);
  return g_regions[i / kVspansPerRegion].base.load(std::memory_order_relaxed) +
         (uintptr_t(i % kVspansPerRegion) << kVspanShift);
}
FW_INLINE const Region* region_of_span(const Span* s) { return &g_regions[span_index(s) / kVspansPerRegion]; }

// Hands out n contiguous never-used virtual spans (n <= kVspansPerRegion) and
// returns the index of the first, or kNoIndex when the OS has no more memory.
// Reserves a new region when the current one is exhausted; the unused tail of
// the old region is then handed to the caller too, as *leftover (index) and
// *leftover_len (vspans, 0 if none), for it to keep as free runs.
uint32_t arena_fresh_vspans(uint32_t n, uint32_t* leftover, uint32_t* leftover_len);

// A huge object: a region of its own of at least size bytes whose base is
// aligned to align (a power of two; at least kRegionSize is used). Returns the
// region id or kNoIndex. arena_huge_release unmaps it and recycles the id.
uint32_t arena_huge_reserve(size_t size, size_t align);
void arena_huge_release(uint32_t region);

// Address-space figures for statistics.
uint64_t arena_reserved_bytes();
uint32_t arena_region_count();  // ids handed out so far (an upper bound for walks)

bool arena_is_valid();

}  // namespace fw
