// core/arena.cpp: regions, the region map and the descriptor table (see arena.h).
#include "core/arena.h"

#include "core/report.h"
#include "core/secure.h"
#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {

FW_COLD_BSS std::atomic<Span*> g_region_map[kRegionMapEntries];
std::atomic<Span*> g_spans{nullptr};
FW_COLD_BSS Region g_regions[kMaxRegions];

namespace {

constexpr size_t kSliceBytes = size_t(kVspansPerRegion) * sizeof(Span);
constexpr size_t kTableBytes = size_t(kMaxRegions) * kSliceBytes;
// An arena region's first reservation where reservations extend: enough for a
// small program; the region then grows in place to the whole slot as needed.
constexpr uint32_t kFirstVspans = 4;

std::atomic<uint32_t> g_region_next{0};       // ids below this have been handed out
FW_COLD_BSS std::atomic<uint32_t> g_region_links[kMaxRegions];
struct RegionLink {
  std::atomic<uint32_t>& operator()(uint32_t i) const { return g_region_links[i]; }
};
TaggedStack<RegionLink> g_free_region_ids;    // ids of released huge regions
// The arena regions bumped from, id + 1 (0: none yet), one per frontier
// (arena.h, Frontier): runs longer than kBigRunVspans at one, everything else at the other.
std::atomic<uint32_t> g_current_region[kFrontiers] = {};
std::atomic<uint64_t> g_reserved{0};

// The table's base | kZoneBit when it starts a zone (reserved a slice at a
// time, regions placed above it), or its base alone when reserved whole. Set
// once by CAS; g_spans is stored from it.
constexpr uint64_t kZoneBit = 1;
std::atomic<uint64_t> g_table{0};
std::atomic<uintptr_t> g_zone_next{0};  // the zone's next free slot address; 0 before first use
constexpr uintptr_t kZoneLimit = uintptr_t(1) << 47;  // regions stay below the usual user address space end

bool zone_mode() { return (g_table.load(std::memory_order_acquire) & kZoneBit) != 0; }

// Whether an address-space cap (RLIMIT_AS) was in force when the arena last
// reserved room for runs: kCapUnread before the first look in this process.
enum : uint32_t { kCapUnread = 0, kCapNone = 1, kCapSet = 2 };
std::atomic<uint32_t> g_cap{kCapUnread};
uint32_t read_cap() {
  const uint32_t c = os::address_space_limited() ? kCapSet : kCapNone;
  g_cap.store(c, std::memory_order_relaxed);
  return c;
}

// Picks the zone: a random slot in the unused middle of the address space (far
// below where Linux maps top-down, far above where Windows maps bottom-up), at
// 32 TiB, else 4 TiB, else 256 GiB for smaller address spaces. Reserves the
// table's first slice there; 0 if none of them is free.
uintptr_t zone_pick() {
#if defined(FW_TSAN)
  return 0;  // ThreadSanitizer keeps its shadow memory there: let the OS place everything
#endif
  uint64_t r = os::random_u64();
  for (unsigned shift : {45u, 42u, 38u}) {
    uintptr_t slots = (uintptr_t(1) << (shift - 2)) >> kRegionShift;  // spread over a quarter above 2^shift
    uintptr_t z = (uintptr_t(1) << shift) + uintptr_t((r % slots) << kRegionShift);
    os::Reserve got = os::reserve_at(reinterpret_cast<void*>(z), kSliceBytes);
    if (got == os::Reserve::kDone) return z;
    // Refused: past the address space of a smaller machine (a 39-bit arm64
    // kernel gives ENOMEM at 2^45), or a limit (RLIMIT_AS); the lower
    // candidates are for the first case, and cost one call each in the second.
  }
  return 0;
}

constexpr uint32_t kSliceLost = 2;  // Region::slice_ready: another mapping holds the slice's place

// Makes the descriptor slice of id r usable: reserved (zone: once per id) and
// committed. Region 0's slice is the one zone_pick reserved with the table:
// it is ready whatever its flag says, since a thread that found the table
// published may get id 0 before the thread that published it sets the flag.
bool slice_ready(uint32_t r, Span* slice) {
  Region& reg = g_regions[r];
  if (zone_mode() && r != 0 && reg.slice_ready.load(std::memory_order_relaxed) != 1) {
    // The id is ours alone until published, so no other thread reserves it.
    const os::Reserve got = os::reserve_at(slice, kSliceBytes);
    if (got != os::Reserve::kDone) {
      // Taken by another mapping: the id is retired (region_new).
      if (got == os::Reserve::kTaken) reg.slice_ready.store(kSliceLost, std::memory_order_relaxed);
      return false;
    }
    reg.slice_ready.store(1, std::memory_order_relaxed);
    g_reserved.fetch_add(kSliceBytes, std::memory_order_relaxed);
  }
  return os::commit(slice, kSliceBytes);
}

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

// Resets descriptors [from, to) of region r's slice to FREE and unowned, and
// counts them as initialised. A recycled slice keeps its tags so that stale
// anchors never repeat. A descriptor from `inited` on was never written (tag
// 0) and is only stored to: a load first would map the shared zero page, and
// the store then fault again and flush the TLB of every CPU the process runs
// on (two faults and an interrupt to each other CPU per page of descriptors).
void slice_init(uint32_t r, uint32_t from, uint32_t to) {
  Span* slice = g_spans.load(std::memory_order_relaxed) + size_t(r) * kVspansPerRegion;
  const uint32_t written = g_regions[r].inited.load(std::memory_order_relaxed);
  for (uint32_t i = from; i < to; i++) {
    uint64_t tag = (i < written ? Anchor::unpack(slice[i].anchor.load(std::memory_order_relaxed)).tag : 0) + 1;
    slice[i].anchor.store(Anchor{0, 0, kFree, false, uint32_t(tag)}.pack(), std::memory_order_relaxed);
    slice[i].owner.store(nullptr, std::memory_order_relaxed);
    slice[i].committed.store(0, std::memory_order_relaxed);
    slice[i].cls.store(uint16_t(kNoClass), std::memory_order_release);  // its window is its base
    slice[i].run_len.store(0, std::memory_order_relaxed);
  }
  if (to > written) g_regions[r].inited.store(to, std::memory_order_relaxed);
}

// Makes region r describe [base, base+size) and publishes it in the map. The
// descriptors it covers, and every one an earlier use of the id touched, are
// reset before any lookup can reach them; the rest of the slice stays
// untouched (region_grow initialises what it adds), so a small region does not
// make its whole slice resident.
bool region_publish(uint32_t r, uintptr_t base, uint64_t size, RegionKind kind) {
  Span* slice = g_spans.load(std::memory_order_relaxed) + size_t(r) * kVspansPerRegion;
  if (!slice_ready(r, slice)) return false;
  uint64_t covers = (size + kVspanSize - 1) >> kVspanShift;
  uint32_t upto = covers < kVspansPerRegion ? uint32_t(covers) : kVspansPerRegion;
  uint32_t touched = g_regions[r].inited.load(std::memory_order_relaxed);
  slice_init(r, 0, upto > touched ? upto : touched);
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

// Reserves size bytes at an address aligned to align (>= kRegionSize): first
// at `prefer` (a recycled id's old base, often free again), then at the zone's
// next slots, else where the OS puts it. nullptr when the OS refuses.
void* region_place(size_t size, size_t align, uintptr_t prefer) {
  if (prefer != 0 && (prefer & (align - 1)) == 0) {
    os::Reserve got = os::reserve_at(reinterpret_cast<void*>(prefer), size);
    if (got == os::Reserve::kDone) return reinterpret_cast<void*>(prefer);
    if (got == os::Reserve::kRefused) return nullptr;
  }
  if (zone_mode()) {
    uintptr_t first = round_up(uintptr_t(g_table.load(std::memory_order_acquire) & ~kZoneBit) + kTableBytes,
                                  kRegionSize);
    uintptr_t zero = 0;
    g_zone_next.compare_exchange_strong(zero, first, std::memory_order_relaxed);
    for (int attempt = 0; attempt < 8; attempt++) {
      uintptr_t cur = g_zone_next.load(std::memory_order_relaxed), at, end;
      do {
        at = round_up(cur, align);
        end = round_up(at + size, kRegionSize);
        if (at < cur || end <= at || end > kZoneLimit) return os::reserve_aligned(size, align);
      } while (!g_zone_next.compare_exchange_weak(cur, end, std::memory_order_relaxed));
      os::Reserve got = os::reserve_at(reinterpret_cast<void*>(at), size);
      if (got == os::Reserve::kDone) return reinterpret_cast<void*>(at);
      if (got == os::Reserve::kRefused) {
        // Hand the slots back if no one moved past them meanwhile, so that
        // repeated refusals (a program at its RLIMIT_AS) do not use up the zone.
        g_zone_next.compare_exchange_strong(end, cur, std::memory_order_relaxed);
        return nullptr;
      }
      // Taken: something else mapped there; the next slots may be free.
    }
  }
  return os::reserve_aligned(size, align);
}

// Reserves size bytes aligned to align, inside the address range the region
// map covers, and publishes them as a region of the given kind. Returns its id,
// or kNoIndex with everything given back.
uint32_t region_new(size_t size, size_t align, RegionKind kind) {
  // An id whose table slice cannot be reserved (zone mode: another mapping
  // took its place) is retired, not recycled, or every later region would
  // take it first and fail the same way: the next id is tried instead.
  for (unsigned attempt = 0; attempt < 8; attempt++) {
    uint32_t r = region_id_alloc();
    if (r == kNoIndex) return kNoIndex;
    // A recycled id remembers where its last region was.
    uintptr_t prefer = r < g_region_next.load(std::memory_order_relaxed) ? g_regions[r].base.load(std::memory_order_relaxed) : 0;
    void* base = region_place(size, align, prefer);
    uintptr_t b = reinterpret_cast<uintptr_t>(base);
    if (base != nullptr && ((b + size - 1) >> kAddressBits) == 0 && region_publish(r, b, size, kind)) return r;
    if (base != nullptr) os::release(base, size);
    if (g_regions[r].slice_ready.load(std::memory_order_relaxed) != kSliceLost) {
      g_free_region_ids.push(r);
      return kNoIndex;
    }
  }
  return kNoIndex;
}

// Grows arena region r in place from `limit` reserved vspans to at least
// `need`: by the step arena.h's kGrowVspans describes (what it has, where a
// reservation costs nothing; else an eighth; with no address-space cap at
// least kGrowVspans), or to exactly `need` when the larger step
// fails: the OS refused it (an RLIMIT_AS leaves no room for slack), or another
// mapping lies in the slack past `need` (the region then grows up to it). The new
// mapping merges with the region's, so a step costs no kernel memory. True if
// the region has more room now (grown by us or by another thread), false if
// it cannot grow.
bool region_grow(uint32_t r, uint32_t limit, uint32_t need) {
  Region& reg = g_regions[r];
  // need > kVspansPerRegion: the run does not fit, or the region is closed
  // (its bump index was set to the end).
  if (!os::features().reserve_extends || need > kVspansPerRegion || limit >= need) return false;
  uint32_t step = limit / 8;
  if (read_cap() == kCapNone) {
    // Doubling from kDoublingVspans on: a small program's steps (ls: two)
    // read no file.
    if (limit >= kDoublingVspans && !os::reserve_is_charged()) step = limit;
    if (step < kGrowVspans) step = kGrowVspans;
  }
  uint32_t to = limit + step > need ? limit + step : need;
  if (to > kVspansPerRegion) to = kVspansPerRegion;
  uintptr_t base = reg.base.load(std::memory_order_relaxed);
  uintptr_t at = base + (uintptr_t(limit) << kVspanShift);
  os::Reserve got = os::reserve_at(reinterpret_cast<void*>(at), uint64_t(to - limit) << kVspanShift);
  if (got != os::Reserve::kDone && to > need) {
    to = need;
    got = os::reserve_at(reinterpret_cast<void*>(at), uint64_t(to - limit) << kVspanShift);
  }
  uint64_t bytes = uint64_t(to - limit) << kVspanShift;
  if (got == os::Reserve::kDone) {
    // Only the thread that reserved right after the current end can extend it,
    // so this store never goes back, and that thread alone initialises the
    // descriptors it adds. release: a bump that reads the new size works in
    // reserved memory and on initialised descriptors.
    uint32_t touched = reg.inited.load(std::memory_order_relaxed);
    if (to > touched) slice_init(r, touched > limit ? touched : limit, to);
    reg.size.store(uint64_t(to) << kVspanShift, std::memory_order_release);
    g_reserved.fetch_add(bytes, std::memory_order_relaxed);
    telemetry_event(FWT_EV_REGION_RESERVE, r, at, bytes);
    return true;
  }
  // Taken by another thread growing it (fine) or by a foreign mapping (the
  // region is done), or refused.
  return (reg.size.load(std::memory_order_acquire) >> kVspanShift) > limit;
}

}  // namespace

bool arena_init() {
  if (g_spans.load(std::memory_order_acquire) != nullptr) return true;
  secure_init();  // keys first: no block exists before the table does
  uint64_t table = g_table.load(std::memory_order_acquire);
  if (table == 0) {
    uint64_t mine;
    if (uintptr_t z = zone_pick(); z != 0) {
      mine = uint64_t(z) | kZoneBit;
    } else {
      void* t = os::reserve_aligned(kTableBytes, os::page_size());
      if (t == nullptr) return false;
      mine = reinterpret_cast<uintptr_t>(t);
    }
    const uint64_t reserved = (mine & kZoneBit) ? kSliceBytes : kTableBytes;
    // Racing initialisers: one table wins, the others give theirs back.
    if (g_table.compare_exchange_strong(table, mine, std::memory_order_acq_rel, std::memory_order_acquire)) {
      table = mine;
      // For the record: slice_ready() does not wait for this flag of region 0.
      if (mine & kZoneBit) g_regions[0].slice_ready.store(1, std::memory_order_relaxed);
      g_reserved.fetch_add(reserved, std::memory_order_relaxed);
    } else {
      os::release(reinterpret_cast<void*>(mine & ~kZoneBit), reserved);
    }
  }
  g_spans.store(reinterpret_cast<Span*>(table & ~kZoneBit), std::memory_order_release);
  return true;
}

Span* span_of_owned(const void* p) {
  Span* slice = region_slice_of(p);
  if (slice == nullptr) return nullptr;
  const Region& reg = g_regions[span_index(slice) / kVspansPerRegion];
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a - reg.base.load(std::memory_order_relaxed) >= reg.size.load(std::memory_order_acquire)) return nullptr;
  return span_in_slice(slice, p);
}

bool arena_owns(const void* p) { return span_of_owned(p) != nullptr; }

uint32_t arena_fresh_vspans(uint32_t n, uint32_t* leftover, uint32_t* leftover_len) {
  *leftover_len = 0;
  if (n == 0 || n > kVspansPerRegion) return kNoIndex;
  std::atomic<uint32_t>& current = g_current_region[frontier_of(n)];
  for (;;) {
    uint32_t cur = current.load(std::memory_order_acquire);
    if (cur != 0) {
      Region& reg = g_regions[cur - 1];
      uint32_t v = reg.next_vspan.load(std::memory_order_relaxed);
      for (;;) {
        // acquire: pairs with region_grow's release of the new size.
        uint32_t limit = uint32_t(reg.size.load(std::memory_order_acquire) >> kVspanShift);
        if (v + n <= limit) {
          if (reg.next_vspan.compare_exchange_weak(v, v + n, std::memory_order_relaxed))
            return (cur - 1) * kVspansPerRegion + v;
          continue;
        }
        if (!region_grow(cur - 1, limit, v + n)) break;  // full, or closed (next_vspan at the end)
        v = reg.next_vspan.load(std::memory_order_relaxed);
      }
    }
    // A new region: the whole slot where reservations cannot be extended later;
    // else twice what the region before it reached (so that where in-place
    // growth keeps failing, as without a zone, regions still double towards a
    // whole slot and 1024 of them cover the heap), or what is needed when the
    // OS refuses that.
    read_cap();
    uint32_t least = n > kFirstVspans ? n : kFirstVspans;
    uint32_t first = kVspansPerRegion;
    if (os::features().reserve_extends) {
      uint32_t before = cur != 0 ? uint32_t(g_regions[cur - 1].size.load(std::memory_order_relaxed) >> kVspanShift) : 0;
      first = 2 * before > least ? 2 * before : least;
      if (first > kVspansPerRegion) first = kVspansPerRegion;
    }
    uint32_t fresh = region_new(size_t(first) << kVspanShift, kRegionSize, kRegionArena);
    if (fresh == kNoIndex && first > least) fresh = region_new(size_t(least) << kVspanShift, kRegionSize, kRegionArena);
    if (fresh == kNoIndex) return kNoIndex;
    // Before the CAS (release) publishes the region to takers of fresh vspans.
    g_regions[fresh].frontier.store(frontier_of(n), std::memory_order_relaxed);
    if (current.compare_exchange_strong(cur, fresh + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (cur != 0) {
        // Close the old region: whatever was reserved and not handed out goes
        // to the caller. A grower racing with this only adds unused room.
        Region& old = g_regions[cur - 1];
        uint32_t limit = uint32_t(old.size.load(std::memory_order_acquire) >> kVspanShift);
        uint32_t v = old.next_vspan.exchange(kVspansPerRegion, std::memory_order_relaxed);
        if (v < limit) {
          *leftover = (cur - 1) * kVspansPerRegion + v;
          *leftover_len = limit - v;
        }
      }
    } else {
      // Another thread installed a region first: give ours back and use theirs.
      uint64_t size = g_regions[fresh].size.load(std::memory_order_relaxed);
      region_unpublish(fresh);
      os::release(reinterpret_cast<void*>(g_regions[fresh].base.load(std::memory_order_relaxed)), size);
      g_free_region_ids.push(fresh);
    }
  }
}

// The region holding index `at` if it is a current region (either frontier's:
// a run of short pieces merged at the spans' frontier may grow there too) and
// `at` is not its index 0 (a run ending there is the region before it's);
// else nullptr.
static Region* current_region_at(uint32_t at) {
  if (at % kVspansPerRegion == 0) return nullptr;
  for (const auto& c : g_current_region)
    if (uint32_t r = c.load(std::memory_order_acquire); r != 0 && at / kVspansPerRegion == r - 1) return &g_regions[r - 1];
  return nullptr;
}

bool arena_extend(uint32_t at, uint32_t k) {
  Region* found = current_region_at(at);
  if (found == nullptr || k == 0) return false;
  Region& reg = *found;
  const uint32_t r = uint32_t(found - g_regions);
  uint32_t v = at % kVspansPerRegion;
  for (;;) {
    // acquire: pairs with region_grow's release of the new size.
    const uint32_t limit = uint32_t(reg.size.load(std::memory_order_acquire) >> kVspanShift);
    if (v + k <= limit) {
      uint32_t expected = v;
      return reg.next_vspan.compare_exchange_strong(expected, v + k, std::memory_order_relaxed);
    }
    if (reg.next_vspan.load(std::memory_order_relaxed) != v || !region_grow(r, limit, v + k)) return false;
  }
}

bool arena_capped() {
  uint32_t c = g_cap.load(std::memory_order_relaxed);
  if (c == kCapUnread) c = read_cap();
  return c == kCapSet;
}

uint32_t arena_huge_reserve(size_t size, size_t align) {
  size_t rounded = round_up(size, kVspanSize);
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

bool arena_zoned() { return zone_mode(); }

uint64_t arena_reserved_bytes() { return g_reserved.load(std::memory_order_relaxed); }

uint32_t arena_region_count() {
  uint32_t n = g_region_next.load(std::memory_order_relaxed);
  return n > kMaxRegions ? kMaxRegions : n;
}

uint32_t arena_vspans_used(uint32_t r) {
  const Region& reg = g_regions[r];
  // acquire: a region's record and slice are complete once its kind is seen.
  if (reg.kind.load(std::memory_order_acquire) != kRegionArena) return 0;
  uint32_t used = reg.next_vspan.load(std::memory_order_relaxed);
  uint32_t reserved = uint32_t(reg.size.load(std::memory_order_acquire) >> kVspanShift);
  return used < reserved ? used : reserved;  // a closed region's bump index is at the end
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
    const Region& reg = g_regions[r];
    uint32_t kind = reg.kind.load(std::memory_order_acquire);
    if (kind == kRegionUnused) continue;
    if ((reg.base.load(std::memory_order_relaxed) & (kRegionSize - 1)) != 0)
      ok = report_invariant("arena: region not at a slot boundary", r);
    if (kind == kRegionArena && (reg.next_vspan.load(std::memory_order_relaxed) > kVspansPerRegion ||
                                 reg.size.load(std::memory_order_relaxed) > kRegionSize))
      ok = report_invariant("arena: bump index or reservation past the region", r);
    uint32_t inited = reg.inited.load(std::memory_order_relaxed);
    if (kind == kRegionArena && (reg.size.load(std::memory_order_relaxed) >> kVspanShift) > inited)
      ok = report_invariant("arena: reserved vspans whose descriptors were never initialised", r);
    const Span* slice = span_at(r * kVspansPerRegion);
    for (uint32_t v = inited; v < kVspansPerRegion && v < inited + 64; v++)  // a sample: the first 64 past
      if (slice[v].anchor.load(std::memory_order_relaxed) != 0 || slice[v].owner.load(std::memory_order_relaxed))
        ok = report_invariant("arena: a descriptor past the initialised part was written", r * kVspansPerRegion + v);
  }
  return ok;
}

}  // namespace fw
