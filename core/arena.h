// core/arena.h: the arena of virtual spans (scalloc §3.2).
//
// Address space comes from the OS in regions. Every region starts at a
// kRegionSize boundary and owns that 1 GiB slot of the address space alone:
//   an arena region reserves the start of its slot, a few MiB at first, and
//   grows in place as vspans are handed out (kGrowVspans: the steps), up to
//   the whole slot; it is cut into virtual spans (on an OS whose reservations
//   cannot be extended, os::Features, it reserves the whole slot at once);
//   a huge object gets a region of its own: as many slots as it needs, of which
//   it reserves its size rounded to a virtual span.
// The part of a slot past its region's reservation is not freeway's memory;
// arena_owns tells the two apart exactly.
//
// Where regions go (arena.cpp): a zone picked at random at start in the unused
// middle of the address space, with the descriptor table at its start and
// regions in the slots above it, so that regions can grow in place and the
// table can be reserved one slice at a time. With no room for a zone (a small
// address space), the table is reserved whole and regions go where the OS puts
// them. Either way an idle program holds a few MiB of address space, not GiB,
// so it runs under a tight RLIMIT_AS (docs/design.md).
//
// Every region has an id r < kMaxRegions. Two tables make lookups O(1):
//   descriptors  g_spans[r * kVspansPerRegion + v] describes virtual span v of r
//   region map   g_region_map[address >> kRegionShift] = &g_spans[r * kVspansPerRegion]
//                (the region's slice of descriptors; nullptr: not freeway's)
// so the descriptor of any block is one load and an add away, and whether a
// pointer may be freeway's is that one load. The descriptor table is one range
// of address space, reserved (zone) and committed a region's slice at a time.
//
// Invariants (arena_is_valid):
//   map entry e != nullptr  =>  e is the slice of a region in use that covers
//   that address slot, and the region starts at a slot boundary;
//   an arena region's next_vspan <= its reserved vspans <= inited <= kVspansPerRegion;
//   descriptors of a slice from `inited` on were never written (zero: FREE,
//   no owner), so only the part of a slice a region has reached is touched;
//   vspans below next_vspan have been handed out (they are in use, pooled or
//   cached), those above never were.
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
  std::atomic<uint64_t> size;        // bytes reserved from base; an arena region's only grows
  std::atomic<uint32_t> slice_ready;  // 1: its descriptor slice is reserved (kept when the id is recycled); 2: it cannot be (id retired)
  std::atomic<uint32_t> kind;
  std::atomic<uint32_t> next_vspan;  // arena: bump index of the first vspan never handed out
  std::atomic<uint32_t> inited;      // descriptors of its slice initialised so far (kept when the id is recycled)
  std::atomic<uint32_t> frontier;    // arena: the Frontier (below) it was created for
};

extern FW_HIDDEN std::atomic<Span*> g_region_map[kRegionMapEntries];
extern FW_HIDDEN std::atomic<Span*> g_spans;
extern FW_HIDDEN Region g_regions[kMaxRegions];

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
// Whether p is in address space freeway reserved: region_slice_of(p) and also
// below the end of its region's reservation. For the slow paths that must tell
// freeway's memory from foreign memory in the unreserved tail of a slot.
bool arena_owns(const void* p);
// span_of for those slow paths: nullptr also past the reservation (one lookup).
Span* span_of_owned(const void* p);
// Descriptor of the virtual span holding p within its region's slice.
FW_INLINE Span* span_in_slice(Span* slice, const void* p) {
  return reinterpret_cast<Span*>(reinterpret_cast<uintptr_t>(slice) +
                                 ((reinterpret_cast<uintptr_t>(p) >> (kVspanShift - kSpanShift)) &
                                  (uintptr_t(kVspansPerRegion - 1) << kSpanShift)));
}
// Descriptor of the virtual span holding p, or nullptr if p's slot is not
// freeway's (a non-null result may still be past the reservation: arena_owns).
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
// The colour of span s for a class with `colours` colours (size_class.h): a
// multiple of kColourStep below colours * kColourStep, from the top bits of
// its descriptor's index times the golden ratio (the product scaled to
// 0..colours-1), so that spans near each other take different colours.
FW_INLINE uint32_t span_colour(const Span* s, uint32_t colours) {
  const uint32_t h = span_index(s) * 0x9E3779B1u;
  return uint32_t((uint64_t(h) * colours) >> 32) * kColourStep;
}
// The colour small span s took (span.h): block 0's offset from its base, from
// the low 32 bits of block 0's address that `offset` carries.
FW_INLINE uint32_t span_colour_of(const Span* s) {
  return s->offset.load(std::memory_order_relaxed) - uint32_t(span_base(s));
}
// Address of block 0 of small span s: its base plus its colour.
FW_INLINE uintptr_t span_blocks(const Span* s) { return span_base(s) + span_colour_of(s); }
FW_INLINE const Region* region_of_span(const Span* s) { return &g_regions[span_index(s) / kVspansPerRegion]; }

// Frontiers. Fresh vspans come from the current region of one of two
// frontiers: runs of more than kBigRunVspans (a large block of more than
// 4 MiB, the longest a last-run slot keeps) from one, single spans and shorter
// runs from the other, each with its own current region. A big block's run
// then ends where its frontier's fresh vspans start, unless another big block
// was allocated after it, so when it is freed and a bigger one wanted, its
// pages grow in place (arena_extend) instead of the next block faulting in a
// run of its own beside them; with one frontier the spans of the small blocks
// allocated in between lay past it (the span-pool keeps them off such runs
// too: span_pool.h; docs/design.md, "Two frontiers").
enum Frontier : unsigned { kFrontierSpans = 0, kFrontierBigRuns = 1, kFrontiers = 2 };
constexpr uint32_t kBigRunVspans = 16;
FW_INLINE Frontier frontier_of(uint32_t n) { return n > kBigRunVspans ? kFrontierBigRuns : kFrontierSpans; }
// The frontier whose region holds the vspan at `index` (an arena region's).
FW_INLINE Frontier arena_frontier(uint32_t index) {
  return Frontier(g_regions[index / kVspansPerRegion].frontier.load(std::memory_order_relaxed));
}

// Hands out n contiguous never-used virtual spans (n <= kVspansPerRegion) and
// returns the index of the first, or kNoIndex when the OS has no more memory.
// They come from frontier_of(n)'s current region.
// Grows the current region in place when it can, else reserves a new region;
// the unused reserved tail of the old region is then handed to the caller too, as *leftover (index) and
// *leftover_len (vspans, 0 if none), for it to keep as free runs.
uint32_t arena_fresh_vspans(uint32_t n, uint32_t* leftover, uint32_t* leftover_len);

// Hands out the k never-used virtual spans that start at index `at`, if `at`
// is where a current region's (either frontier's) next fresh vspan is (a free run that ends
// there can grow in place, as a heap's top does). False, handing out nothing,
// if `at` is not there (another thread took fresh vspans first, or a region
// was closed) or the region cannot grow to hold them.
bool arena_extend(uint32_t at, uint32_t k);

// Whether the process's address space is capped (RLIMIT_AS), as read the last
// time the arena reserved room for runs (a region grown or a new one), or on
// the first call if it never has: a load, where reading the cap is a system
// call. A cap set later, or lifted, is seen from the arena's next reservation;
// until then runs come from address space already reserved.
bool arena_capped();
// An arena region grows in place in steps (region_grow, arena.cpp), each
// three system calls (the cap's read, the mapping and the advice against huge
// pages: os::reserve_at) that change the region's mapping: the process's page
// faults in the region wait for each (Linux takes the mapping lock for writing
// for the mapping and the advice). The step:
//   - with no address-space cap (RLIMIT_AS), where the OS charges reserved
//     address space to nothing (os::reserve_is_charged: Linux's overcommit
//     modes 0 and 1), what the region has from 16 MiB on, so it doubles
//     (kGrowVspans steps up to there, where a small program's steps do not
//     read the OS's setting, 4 system calls): a heap growing to 350 MiB in
//     two threads grew 26-30 times in eighths, with 47-56 voluntary context
//     switches a run against mimalloc's 23-25, and grows 11-12 times by
//     doubling, with 23-24 (sizesweep 1-4 MiB; docs/benchmarks.md, Stops 87
//     and 88);
//   - under strict overcommit (mode 2 charges a mapping whole, MAP_NORESERVE
//     or not), an eighth of what it has, so that room reserved ahead charges
//     the commit limit an eighth more at most;
//   - under a cap, an eighth, so that room reserved ahead does not take what
//     the program may need for mappings of its own (sort sizes its buffer from
//     the cap);
//   - with no cap, at least this many vspans (4 MiB): with steps of an eighth
//     alone, a small program grew its first region a vspan at a time (`ls`
//     made 16 steps, 48 of its 224 system calls: Stop 73).
// Address space reserved ahead costs nothing until its vspans are handed out
// and touched.
constexpr uint32_t kGrowVspans = 16;
// The region size (16 MiB) from which a step doubles where reserving is free.
constexpr uint32_t kDoublingVspans = 4 * kGrowVspans;

// A huge object: a region of its own of size bytes rounded up to a virtual span
// whose base is aligned to align (a power of two; at least kRegionSize is used). Returns the
// region id or kNoIndex. arena_huge_release unmaps it and recycles the id.
uint32_t arena_huge_reserve(size_t size, size_t align);
void arena_huge_release(uint32_t region);

// Whether the table and regions are in a zone (see above); false when the
// table was reserved whole and the OS places the regions.
bool arena_zoned();

// Address-space figures for statistics.
uint64_t arena_reserved_bytes();
uint32_t arena_region_count();  // ids handed out so far (an upper bound for walks)
// Vspans of region r handed out so far (0 unless an arena region): a bound for
// walks over its descriptors.
uint32_t arena_vspans_used(uint32_t r);

// Calls f(descriptor) for each vspan the arena regions have handed out so far
// (statistics and checks: one load a vspan, racing with the spans' owners).
template <typename F>
void arena_each_vspan(F f) {
  const Span* table = g_spans.load(std::memory_order_acquire);
  if (table == nullptr) return;
  for (uint32_t r = 0; r < arena_region_count(); r++) {
    const uint32_t used = arena_vspans_used(r);
    for (uint32_t v = 0; v < used; v++) f(table[size_t(r) * kVspansPerRegion + v]);
  }
}

bool arena_is_valid();

}  // namespace fw
