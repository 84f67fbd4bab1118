// Arena: regions, the region map and descriptor lookup.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/span_pool.h"
#include "freeway.h"
#include "platform/os.h"
#include "test_util.h"

using namespace fw;

static int g_static_var;

TEST_CASE("pointers outside freeway's regions have no descriptor") {
  REQUIRE(arena_init());
  int local = 0;
  CHECK(span_of(&local) == nullptr);
  CHECK(span_of(&g_static_var) == nullptr);
  CHECK(span_of(nullptr) == nullptr);
  CHECK(span_of(reinterpret_cast<void*>(uintptr_t(1) << 60)) == nullptr);
  CHECK(span_of(reinterpret_cast<void*>(~uintptr_t(0))) == nullptr);
}

TEST_CASE("fresh virtual spans are contiguous and every byte maps to its own descriptor") {
  REQUIRE(arena_init());
  uint32_t left = 0, left_len = 0;
  uint32_t first = arena_fresh_vspans(4, &left, &left_len);
  REQUIRE(first != kNoIndex);
  for (uint32_t k = 0; k < 4; k++) {
    Span* s = span_at(first + k);
    uintptr_t base = span_base(s);
    CHECK(base % kVspanSize == 0);
    if (k > 0) CHECK(base == span_base(span_at(first + k - 1)) + kVspanSize);
    CHECK(span_of(reinterpret_cast<void*>(base)) == s);
    CHECK(span_of(reinterpret_cast<void*>(base + kVspanSize - 1)) == s);
    CHECK(span_of(reinterpret_cast<void*>(base + 12345)) == s);
  }
  CHECK(arena_is_valid());
}

TEST_CASE("a new region is reserved when the current one is used up") {
  REQUIRE(arena_init());
  uint32_t left = 0, left_len = 0;
  uint32_t regions_before = arena_region_count();
  uint64_t reserved_before = arena_reserved_bytes();
  // Take two regions' worth in big pieces.
  for (int i = 0; i < 9; i++) {
    uint32_t idx = arena_fresh_vspans(256, &left, &left_len);
    REQUIRE(idx != kNoIndex);
  }
  CHECK(arena_region_count() > regions_before);
  CHECK(arena_reserved_bytes() > reserved_before);
  CHECK(arena_is_valid());
}

TEST_CASE("a huge region reserves its size rounded to a vspan, owns its slots, and is cleared when released") {
  REQUIRE(arena_init());
  uint32_t r = arena_huge_reserve(3 * kRegionSize + 1, kRegionSize);
  REQUIRE(r != kNoIndex);
  uintptr_t base = g_regions[r].base.load();
  const uint64_t size = 3 * kRegionSize + kVspanSize;
  CHECK(g_regions[r].size.load() == size);
  CHECK(base % kRegionSize == 0);
  CHECK(span_of(reinterpret_cast<void*>(base)) != nullptr);
  CHECK(arena_owns(reinterpret_cast<void*>(base + size - 1)));
  // The rest of the last slot is mapped to the region but is not freeway's memory.
  CHECK(span_of(reinterpret_cast<void*>(base + size)) != nullptr);
  CHECK_FALSE(arena_owns(reinterpret_cast<void*>(base + size)));
  CHECK_FALSE(arena_owns(reinterpret_cast<void*>(base + 4 * kRegionSize - 1)));
  CHECK(arena_is_valid());
  arena_huge_release(r);
  CHECK(span_of(reinterpret_cast<void*>(base)) == nullptr);
  CHECK(span_of(reinterpret_cast<void*>(base + 3 * kRegionSize)) == nullptr);
  CHECK_FALSE(arena_owns(reinterpret_cast<void*>(base)));
  CHECK(arena_is_valid());
}

// A fresh slice's descriptors are only stored to: a load first would map the
// zero page, and each page would fault twice (and, with threads on other
// CPUs, flush their TLBs).
TEST_CASE("a fresh descriptor slice faults each of its pages once") {
  REQUIRE(arena_init());
  // No id waits for reuse, so the region gets an id whose slice no region has touched.
  for (uint32_t r = 0; r < arena_region_count(); r++)
    REQUIRE((g_regions[r].kind.load() != kRegionUnused || g_regions[r].inited.load() == 0));
  const long before = fwtest::minor_faults();
  uint32_t r = arena_huge_reserve(kRegionSize, kRegionSize);  // every descriptor of its slice
  const long faults = fwtest::minor_faults() - before;
  REQUIRE(r != kNoIndex);
  const long pages = long(kVspansPerRegion * sizeof(Span) / os::page_size());
  CHECK(g_regions[r].inited.load() == kVspansPerRegion);
  CHECK(faults >= pages / 2);  // the slice was fresh: its pages did fault
  CHECK(faults < pages + pages / 4);
  MESSAGE(faults << " minor faults for " << pages << " pages of descriptors");
  arena_huge_release(r);
  CHECK(arena_is_valid());
}

TEST_CASE("a huge region released and reserved again reuses its slot") {
  REQUIRE(arena_init());
  uint32_t r = arena_huge_reserve(kRegionSize / 2, kRegionSize);
  REQUIRE(r != kNoIndex);
  uintptr_t base = g_regions[r].base.load();
  arena_huge_release(r);
  uint32_t again = arena_huge_reserve(kRegionSize / 4, kRegionSize);
  REQUIRE(again != kNoIndex);
  CHECK(again == r);
  CHECK(g_regions[again].base.load() == base);
  arena_huge_release(again);
  CHECK(arena_is_valid());
}

// This process's first arena region: a few MiB, grown in place on demand.
TEST_CASE("the first arena region reserves a few MiB and grows in place as vspans are handed out") {
  REQUIRE(arena_init());
  uint32_t left = 0, left_len = 0;
  uint32_t first = arena_fresh_vspans(1, &left, &left_len);
  REQUIRE(first != kNoIndex);
  const uint32_t r = first / kVspansPerRegion;
  const Region& reg = g_regions[r];
  uintptr_t base = reg.base.load();
  uint64_t size = reg.size.load();
  if (!os::features().reserve_extends) {
    CHECK(size == kRegionSize);  // this OS reserves the whole slot at once
    return;
  }
  // Address space right after the first vspan: the table's first slice (or,
  // with no zone, the whole table) and a few MiB of region, not the GiB
  // of a whole region.
#if !defined(FW_TSAN)
  CHECK(arena_zoned());  // ThreadSanitizer's shadow memory is where the zone would go
#endif
  CHECK(size <= 8 * kVspanSize);
  const uint64_t slice = size_t(kVspansPerRegion) * sizeof(Span);
  const uint64_t table = arena_zoned() ? slice : size_t(kMaxRegions) * slice + kVspanSize;
  CHECK(arena_reserved_bytes() <= size + table);
  CHECK(arena_owns(reinterpret_cast<void*>(base + size - 1)));
  CHECK_FALSE(arena_owns(reinterpret_cast<void*>(base + size)));
  // Take single vspans past the first reservation: the same region grows.
  uint32_t last = first;
  for (uint32_t k = 0; k < 3 * size / kVspanSize; k++) {
    last = arena_fresh_vspans(1, &left, &left_len);
    REQUIRE(last != kNoIndex);
    CHECK(left_len == 0);
  }
  // In a zone the region grows in place; without one (ThreadSanitizer) the
  // OS may have mapped something right after it, and a new region is fine.
  if (!arena_zoned() && last / kVspansPerRegion != r) {
    CHECK(arena_is_valid());
    return;
  }
  CHECK(last / kVspansPerRegion == r);
  CHECK(reg.size.load() > size);
  // Grown to what was asked, with at most an eighth more, or kGrowVspans more
  // where no cap is set (arena.h), and then by at least kGrowVspans.
  const uint64_t asked = uint64_t(last % kVspansPerRegion) + 1;
  const bool capped = arena_capped();
  const uint64_t slack = capped || asked / 8 > kGrowVspans ? asked / 8 : kGrowVspans;
  CHECK(reg.size.load() <= (asked + slack + 1) * kVspanSize);
  if (!capped) CHECK(reg.size.load() >= size + uint64_t(kGrowVspans) * kVspanSize);
  CHECK(span_base(span_at(last)) + kVspanSize <= base + reg.size.load());
  // The memory of a vspan handed out after growth is usable.
  char* mem = reinterpret_cast<char*>(span_base(span_at(last)));
  REQUIRE(os::commit(mem, os::page_size()));
  mem[0] = 1;
  mem[os::page_size() - 1] = 2;
  CHECK(mem[0] + mem[os::page_size() - 1] == 3);
  CHECK(arena_is_valid());
}

// Past 16 MiB a region doubles at each step where reserved address space is
// charged to nothing (arena.h, kGrowVspans), else grows by an eighth.
TEST_CASE("a region past 16 MiB grows by what it has where reserving is free, else by an eighth") {
  REQUIRE(arena_init());
  if (!os::features().reserve_extends) return;  // the whole slot at once (the case above)
  // reserve_is_charged reads vm.overcommit_memory once: the same answer as the file's.
  char mode = '?';
  if (FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r")) {
    mode = char(std::fgetc(f));
    std::fclose(f);
  }
  CHECK(os::reserve_is_charged() == (mode != '0' && mode != '1'));
  // Runs of kGrowVspans from the spans' frontier until its current region has
  // passed kDoublingVspans and then needs its next step; a new region on the
  // way (another mapping in the slot: no zone) starts the count again.
  uint32_t left = 0, left_len = 0, r = kNoIndex;
  uint64_t before = 0, after = 0;
  for (int k = 0; k < 64; k++) {
    const uint32_t i = arena_fresh_vspans(kGrowVspans, &left, &left_len);
    REQUIRE(i != kNoIndex);
    const Region& reg = g_regions[i / kVspansPerRegion];
    const uint64_t size = reg.size.load() >> kVspanShift;
    if (i / kVspansPerRegion != r) {
      r = i / kVspansPerRegion;
      before = 0;
    } else if (before >= kDoublingVspans && size > before) {
      after = size;  // grew at this take
      break;
    }
    before = size;
  }
  REQUIRE(after != 0);
  // The step was taken for a run of kGrowVspans past `before` (at most).
  const uint64_t need = before + kGrowVspans;
  if (arena_capped() || os::reserve_is_charged()) {
    CHECK(after <= std::max(before + std::max<uint64_t>(before / 8, kGrowVspans), need));
  } else if (arena_zoned()) {
    CHECK(after == std::min<uint64_t>(2 * before, kVspansPerRegion));
  } else {
    // With no zone a mapping of the OS's may lie in the step: the region then
    // grows by the run alone (region_grow).
    CHECK((after == std::min<uint64_t>(2 * before, kVspansPerRegion) || after == need));
  }
  CHECK(arena_is_valid());
}

// calloc skips zeroing pages its books say were decommitted
// (decommit_zeroes); locked pages (mlock, mlockall) refuse MADV_DONTNEED, and
// must read as zero after decommit all the same.
TEST_CASE("decommitted pages read as zero even when they were locked") {
  REQUIRE(os::features().decommit_zeroes);
  const size_t n = 16 * os::page_size();
  char* p = static_cast<char*>(os::reserve_aligned(n, os::page_size()));
  REQUIRE(p != nullptr);
  REQUIRE(os::commit(p, n));
  std::memset(p, 0x5a, n);
  if (mlock(p, n) != 0) {
    MESSAGE("mlock refused (RLIMIT_MEMLOCK): not run");
  } else {
    CHECK(os::decommit(p, n));
    REQUIRE(os::commit(p, n));
    size_t dirty = 0;
    for (size_t i = 0; i < n; i++) dirty += p[i] != 0;
    CHECK(dirty == 0);
    munlock(p, n);
  }
  os::release(p, n);
}

// The span pool's clock (decay ages): coarse, but monotonic and in step with
// the fine clock to within its tick (4 ms at HZ=250; up to 10 ms at HZ=100).
TEST_CASE("the coarse millisecond clock never goes back and keeps time with now_ns within a tick or two") {
  uint64_t last = os::now_ms_coarse();
  const uint64_t t0 = os::now_ns(), m0 = last;
  while (os::now_ns() - t0 < 30'000'000) {  // 30 ms of reads
    const uint64_t m = os::now_ms_coarse();
    REQUIRE(m >= last);
    last = m;
  }
  CHECK(last > m0);  // it moved
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const uint64_t dt = (os::now_ns() - t0) / 1'000'000, dm = os::now_ms_coarse() - m0;
  CHECK(dm + 20 >= dt);
  CHECK(dm <= dt + 20);
}

TEST_CASE("a region id whose table slice another mapping took is retired, and the next ids serve") {
  REQUIRE(arena_init());
  if (!arena_zoned()) {
    MESSAGE("no zone (the table is reserved whole): not run");
    return;
  }
  fw_free(fw_malloc(16));  // region 0, whose slice came with the table
  // Another mapping where the next region id's descriptor slice goes (a JIT
  // that picks its own addresses could land there).
  const uint32_t next = arena_region_count();
  REQUIRE(next >= 1);
  void* at = &g_spans.load()[size_t(next) * kVspansPerRegion];
  const size_t slice = size_t(kVspansPerRegion) * sizeof(Span);
  // (Or another mapping is there already, which is the same case.)
  const os::Reserve placed = os::reserve_at(at, slice);
  REQUIRE(placed != os::Reserve::kRefused);
  std::vector<uint32_t> got;
  for (int i = 0; i < 3; i++) {
    uint32_t r = arena_huge_reserve(kRegionSize, kRegionSize);
    CHECK(r != kNoIndex);
    if (r != kNoIndex) got.push_back(r);
  }
  for (uint32_t r : got) CHECK(r != next);
  for (uint32_t r : got) arena_huge_release(r);
  if (placed == os::Reserve::kDone) os::release(at, slice);
}

TEST_CASE("impossible huge sizes are refused without touching the map") {
  REQUIRE(arena_init());
  CHECK(arena_huge_reserve(size_t(1) << 62, kRegionSize) == kNoIndex);
  CHECK(arena_huge_reserve(~size_t(0), kRegionSize) == kNoIndex);
  CHECK(arena_huge_reserve(kRegionSize, size_t(1) << 63) == kNoIndex);
  CHECK(arena_is_valid());
}

TEST_CASE("threads taking vspans at once while regions grow and close get each vspan once, all of it reserved") {
  REQUIRE(arena_init());
  constexpr int kThreads = 4, kEach = 300;  // 1,200 vspans: growth, then a second region
  static uint32_t got[kThreads][kEach];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([t] {
      for (int k = 0; k < kEach; k++) {
        uint32_t left = 0, left_len = 0;
        uint32_t i = arena_fresh_vspans(1 + k % 3, &left, &left_len);
        got[t][k] = i;
        if (i == kNoIndex) continue;
        char* mem = reinterpret_cast<char*>(span_base(span_at(i)));
        if (os::commit(mem, os::page_size())) mem[0] = char(t);  // reserved memory: no fault
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint32_t> seen;
  for (int t = 0; t < kThreads; t++) {
    for (int k = 0; k < kEach; k++) {
      uint32_t i = got[t][k];
      REQUIRE(i != kNoIndex);
      for (uint32_t j = 0; j < uint32_t(1 + k % 3); j++) {
        CHECK(seen.insert(i + j).second);  // no vspan handed out twice
        CHECK(arena_owns(reinterpret_cast<void*>(span_base(span_at(i + j)) + kVspanSize - 1)));
      }
      CHECK((i % kVspansPerRegion) + (1 + k % 3) <= kVspansPerRegion);  // a run stays in its region
    }
  }
  CHECK(arena_is_valid());
}
