// core/arena.cpp: regions, the region map and the descriptor table (see arena.h).
#include "core/arena.h"

#include "core/report.h"
#include "core/secure.h"
#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {

std::atomic<Span*> g_region_map[kRegionMapEntries];
std::atomic<Span*> g_spans{nullptr};
Region g_regions[kMaxRegions];

namespace {

constexpr size_t kSliceBytes = size_t(kVspansPerRegion) * sizeof(Span);
constexpr size_t kTableBytes = size_t(kMaxRegions) * kSliceBytes;

std::atomic<uint32_t> g_region_next{0};       // ids below this have been handed out
std::atomic<uint32_t> g_region_links[kMaxRegions];
struct RegionLink {
  std::atomic<uint32_t>& operator()(uint32_t i) const { return g_region_links[i]; }
};
TaggedStack<RegionLink> g_free_region_ids;    // ids of released huge regions
std::atomic<uint32_t> g_current_region{0};    // arena region bumped from, id + 1
std::atomic<uint64_t> g_reserved{0};

uint32_t region_id_alloc() {
  uint32_t r = g_free_region_ids.pop();
  if (r != kNoIndex) return r;
  r = g_region_next.fetch_add(1, std::memory_order_relaxed);
  if (r >= kMaxRegions) {
    g_region_next.fetch_sub(1, std::memory_order_relaxed);
    return kNoIndex;
  }
  return r;
}

// Makes region r describe [base, base+size) and publishes it in the map. The
// descriptor slice of a recycled id is reset before any lookup can reach it.
bool region_publish(uint32_t r, uintptr_t base, uint64_t size, RegionKind kind) {
  Span* slice = g_spans.load(std::memory_order_relaxed) + size_t(r) * kVspansPerRegion;
  if (!os::commit(slice, kSliceBytes)) return false;
  for (uint32_t i = 0; i < kVspansPerRegion; i++) {
    // A recycled slice keeps its tags so that stale anchors never repeat.
    uint64_t tag = Anchor::unpack(slice[i].anchor.load(std::memory_order_relaxed)).tag + 1;
    slice[i].anchor.store(Anchor{0, 0, kFree, false, uint32_t(tag)}.pack(), std::memory_order_relaxed);
    slice[i].owner.store(nullptr, std::memory_order_relaxed);
    slice[i].committed.store(0, std::memory_order_relaxed);
    slice[i].run_len.store(0, std::memory_order_relaxed);
  }
  Region& reg = g_regions[r];
  reg.base.store(base, std::memory_order_relaxed);
  reg.size.store(size, std::memory_order_relaxed);
  reg.next_vspan.store(0, std::memory_order_relaxed);
  reg.kind.store(kind, std::memory_order_relaxed);
  // release: whoever finds r in the map sees the slice and the region record.
  for (uint64_t off = 0; off < size; off += kRegionSize)
    g_region_map[(base + off) >> kRegionShift].store(slice, std::memory_order_release);
  g_reserved.fetch_add(size, std::memory_order_relaxed);
  telemetry_event(FWT_EV_REGION_RESERVE, r, base, size);
  return true;
}

void region_unpublish(uint32_t r) {
  Region& reg = g_regions[r];
  uintptr_t base = reg.base.load(std::memory_order_relaxed);
  uint64_t size = reg.size.load(std::memory_order_relaxed);
  for (uint64_t off = 0; off < size; off += kRegionSize)
    g_region_map[(base + off) >> kRegionShift].store(nullptr, std::memory_order_release);
  reg.kind.store(kRegionUnused, std::memory_order_relaxed);
  g_reserved.fetch_sub(size, std::memory_order_relaxed);
  telemetry_event(FWT_EV_REGION_RELEASE, r, base, size);
}

// Reserves size bytes aligned to align, inside the address range the region
// map covers, and publishes them as a region of the given kind. Returns its id,
// or kNoIndex with everything given back.
uint32_t region_new(size_t size, size_t align, RegionKind kind) {
  uint32_t r = region_id_alloc();
  if (r == kNoIndex) return kNoIndex;
  void* base = os::reserve_aligned(size, align);
  uintptr_t b = reinterpret_cast<uintptr_t>(base);
  if (base != nullptr && ((b + size - 1) >> kAddressBits) == 0 && region_publish(r, b, size, kind)) return r;
  if (base != nullptr) os::release(base, size);
  g_free_region_ids.push(r);
  return kNoIndex;
}

}  // namespace

bool arena_init() {
  if (g_spans.load(std::memory_order_acquire) != nullptr) return true;
  secure_init();  // keys first: no block exists before the table does
  void* t = os::reserve_aligned(kTableBytes, os::page_size());
  if (t == nullptr) return false;
  Span* expected = nullptr;
  // Racing initialisers: one table wins, the others give theirs back.
  if (!g_spans.compare_exchange_strong(expected, static_cast<Span*>(t), std::memory_order_acq_rel,
                                       std::memory_order_acquire))
    os::release(t, kTableBytes);
  else
    g_reserved.fetch_add(kTableBytes, std::memory_order_relaxed);
  return true;
}

uint32_t arena_fresh_vspans(uint32_t n, uint32_t* leftover, uint32_t* leftover_len) {
  *leftover_len = 0;
  if (n == 0 || n > kVspansPerRegion) return kNoIndex;
  for (;;) {
    uint32_t cur = g_current_region.load(std::memory_order_acquire);
    if (cur != 0) {
      Region& reg = g_regions[cur - 1];
      uint32_t v = reg.next_vspan.load(std::memory_order_relaxed);
      while (v + n <= kVspansPerRegion) {
        if (reg.next_vspan.compare_exchange_weak(v, v + n, std::memory_order_relaxed))
          return (cur - 1) * kVspansPerRegion + v;
      }
    }
    uint32_t fresh = region_new(kRegionSize, kRegionSize, kRegionArena);
    if (fresh == kNoIndex) return kNoIndex;
    if (g_current_region.compare_exchange_strong(cur, fresh + 1, std::memory_order_acq_rel,
                                                 std::memory_order_acquire)) {
      if (cur != 0) {
        // Close the old region: whatever was not handed out goes to the caller.
        uint32_t v = g_regions[cur - 1].next_vspan.exchange(kVspansPerRegion, std::memory_order_relaxed);
        if (v < kVspansPerRegion) {
          *leftover = (cur - 1) * kVspansPerRegion + v;
          *leftover_len = kVspansPerRegion - v;
        }
      }
    } else {
      // Another thread installed a region first: give ours back and use theirs.
      region_unpublish(fresh);
      os::release(reinterpret_cast<void*>(g_regions[fresh].base.load(std::memory_order_relaxed)), kRegionSize);
      g_free_region_ids.push(fresh);
    }
  }
}

uint32_t arena_huge_reserve(size_t size, size_t align) {
  size_t rounded = (size + kRegionSize - 1) & ~(kRegionSize - 1);
  if (rounded < size || rounded == 0 || rounded > (size_t(1) << kAddressBits)) return kNoIndex;
  if (align < kRegionSize) align = kRegionSize;
  if (align > (size_t(1) << (kAddressBits - 1))) return kNoIndex;
  return region_new(rounded, align, kRegionHuge);
}

void arena_huge_release(uint32_t r) {
  uintptr_t base = g_regions[r].base.load(std::memory_order_relaxed);
  uint64_t size = g_regions[r].size.load(std::memory_order_relaxed);
  region_unpublish(r);
  os::release(reinterpret_cast<void*>(base), size);
  g_free_region_ids.push(r);
}

uint64_t arena_reserved_bytes() { return g_reserved.load(std::memory_order_relaxed); }

uint32_t arena_region_count() {
  uint32_t n = g_region_next.load(std::memory_order_relaxed);
  return n > kMaxRegions ? kMaxRegions : n;
}

bool arena_is_valid() {
  bool ok = true;
  for (size_t slot = 0; slot < kRegionMapEntries; slot++) {
    Span* e = g_region_map[slot].load(std::memory_order_acquire);
    if (e == nullptr) continue;
    uint32_t r = span_index(e) / kVspansPerRegion;
    const Region& reg = g_regions[r];
    uintptr_t base = reg.base.load(std::memory_order_relaxed);
    uint64_t size = reg.size.load(std::memory_order_relaxed);
    uintptr_t addr = uintptr_t(slot) << kRegionShift;
    if (reg.kind.load(std::memory_order_relaxed) == kRegionUnused)
      ok = report_invariant("arena: map names an unused region", r);
    else if (addr < base || addr >= base + size)
      ok = report_invariant("arena: map entry outside its region", slot);
  }
  for (uint32_t r = 0; r < arena_region_count(); r++) {
    if (g_regions[r].kind.load(std::memory_order_relaxed) == kRegionArena &&
        g_regions[r].next_vspan.load(std::memory_order_relaxed) > kVspansPerRegion)
      ok = report_invariant("arena: bump index past the region", r);
  }
  return ok;
}

}  // namespace fw
