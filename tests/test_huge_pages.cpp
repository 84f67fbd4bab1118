// Huge pages for the whole extents of large blocks (core/huge_pages.h): which
// extents are advised, that the kernel's view (the VmFlags of
// /proc/self/smaps) matches the flags, and that huge pages never back bytes
// the books call uncommitted. Needs a Linux kernel whose transparent huge
// pages are not "never"; elsewhere each case says so and checks that nothing
// is advised.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/huge_pages.h"
#include "core/large.h"
#include "core/span_pool.h"
#include "test_util.h"

using namespace fw;

namespace {

// One mapping of /proc/self/smaps: its range, whether it is advised for huge
// pages (VmFlags "hg"), and its resident and huge-page bytes.
struct Mapping {
  uintptr_t lo, hi;
  bool hg;
  uint64_t rss, anon_huge;
};

std::vector<Mapping> smaps() {
  std::vector<Mapping> out;
  FILE* f = fopen("/proc/self/smaps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      out.push_back(Mapping{lo, hi, false, 0, 0});
      continue;
    }
    if (out.empty()) continue;
    unsigned long kb;
    if (sscanf(line, "Rss: %lu kB", &kb) == 1) out.back().rss = uint64_t(kb) << 10;
    if (sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) out.back().anon_huge = uint64_t(kb) << 10;
    if (strncmp(line, "VmFlags:", 8) == 0) out.back().hg = strstr(line, " hg") != nullptr;
  }
  fclose(f);
  return out;
}

// Whether the kernel has [lo, hi) advised for huge pages (every byte in a "hg" mapping).
bool kernel_advised(const std::vector<Mapping>& maps, uintptr_t lo, uintptr_t hi) {
  for (const Mapping& m : maps)
    if (m.hg && m.lo <= lo && lo < m.hi) {
      if (hi <= m.hi) return true;
      lo = m.hi;
    }
  return false;
}

// Whether any byte of [lo, hi) lies in a mapping the kernel has advised.
bool kernel_advised_any(const std::vector<Mapping>& maps, uintptr_t lo, uintptr_t hi) {
  for (const Mapping& m : maps)
    if (m.hg && m.lo < hi && lo < m.hi) return true;
  return false;
}

// Every arena region's extents: the flags agree with the kernel's view, and
// their count with huge_extents(); advised mappings hold only flagged extents.
// Returns the number of flagged extents.
uint64_t check_flags_match_kernel() {
  const uint64_t h = huge_extent_bytes();
  const std::vector<Mapping> maps = smaps();
  uint64_t flagged = 0;
  for (uint32_t r = 0; r < arena_region_count(); r++) {
    if (g_regions[r].kind.load() != kRegionArena) continue;
    const uintptr_t base = g_regions[r].base.load();
    const uint64_t size = uint64_t(arena_vspans_used(r)) << kVspanShift;
    for (uint64_t off = 0; h != 0 && off + h <= size; off += h) {
      const bool flag = span_at(r * kVspansPerRegion + uint32_t(off >> kVspanShift))->huge.load() != 0;
      flagged += flag;
      CHECK(kernel_advised(maps, base + off, base + off + h) == flag);
    }
  }
  CHECK(flagged == huge_extents());
  return flagged;
}

// Resident bytes of the mappings inside arena regions.
uint64_t arena_rss() {
  uint64_t rss = 0;
  const std::vector<Mapping> maps = smaps();
  for (uint32_t r = 0; r < arena_region_count(); r++) {
    if (g_regions[r].kind.load() != kRegionArena) continue;
    const uintptr_t base = g_regions[r].base.load(), end = base + g_regions[r].size.load();
    for (const Mapping& m : maps)
      if (m.lo >= base && m.hi <= end) rss += m.rss;
  }
  return rss;
}

void touch(uintptr_t p, uint64_t bytes) {
  for (uint64_t o = 0; o < bytes; o += 4096) reinterpret_cast<volatile char*>(p)[o] = 1;
}

// The extents wholly inside [lo, hi).
uint64_t extents_in(uintptr_t lo, uintptr_t hi, uint64_t h) {
  const uintptr_t a = (lo + h - 1) & ~uintptr_t(h - 1), b = hi & ~uintptr_t(h - 1);
  return b > a ? (b - a) / h : 0;
}

}  // namespace

TEST_CASE("the extents wholly inside a run's committed bytes are advised for huge pages, and advised against "
          "them again before any of their bytes are decommitted") {
  REQUIRE(arena_init());
  const uint64_t h = huge_extent_bytes();
  if (h == 0) {
    MESSAGE("no transparent huge pages here (THP \"never\", or not Linux): nothing may be advised");
    Span* r = pool_take_run(24, 0);
    REQUIRE(r != nullptr);
    REQUIRE(span_commit(r, 24 * kVspanSize));
    CHECK(huge_extents() == 0);
    pool_give(r, 24);
    return;
  }
  const uint64_t before = huge_extents();
  Span* r = pool_take_run(24, 0);  // 6 MiB of address space: at least two whole 2 MiB extents
  REQUIRE(r != nullptr);
  const uintptr_t base = span_base(r);
  // Committed bytes grow in two steps: the extents wholly inside each time.
  REQUIRE(span_commit(r, 3 * kVspanSize));
  CHECK(huge_extents() == before + extents_in(base, base + 3 * kVspanSize, h));
  REQUIRE(span_commit(r, 24 * kVspanSize));
  const uint64_t inside = extents_in(base, base + 24 * kVspanSize, h);
  REQUIRE(inside >= 2);
  CHECK(huge_extents() == before + inside);
  const uintptr_t first = (base + h - 1) & ~uintptr_t(h - 1);
  CHECK(kernel_advised(smaps(), first, first + inside * h));
  check_flags_match_kernel();
  // Touched, an advised extent is one huge page.
  touch(base, 24 * kVspanSize);
  uint64_t huge = 0;
  for (const Mapping& m : smaps())
    if (m.lo < base + 24 * kVspanSize && base < m.hi) huge += m.anon_huge;
  CHECK(huge >= h);
  // Trimmed to the first byte of the second extent: the extents from the
  // second on are advised against again; the first stays.
  span_trim(r, first + h + 4096 - base);
  CHECK(huge_extents() == before + 1);
  CHECK(kernel_advised(smaps(), first, first + h));
  CHECK_FALSE(kernel_advised_any(smaps(), first + h, first + inside * h));
  check_flags_match_kernel();
  span_trim(r, 0);
  CHECK(huge_extents() == before);
  CHECK_FALSE(kernel_advised_any(smaps(), base, base + 24 * kVspanSize));
  pool_give(r, 24);
  CHECK(pool_is_valid());
}

TEST_CASE("a large block of a few MiB is backed by huge pages where whole extents lie inside it, and freed and "
          "collected, nothing stays advised") {
  REQUIRE(arena_init());
  const uint64_t h = huge_extent_bytes();
  if (h == 0) {
    MESSAGE("no transparent huge pages here: nothing may be advised");
    void* p = large_alloc(8u << 20, 16, false);
    REQUIRE(p != nullptr);
    CHECK(huge_extents() == 0);
    large_free(p, span_of(p));
    return;
  }
  pool_collect();
  const uint64_t before = huge_extents();
  const size_t size = 9u << 20;
  char* p = static_cast<char*>(large_alloc(size, 16, false));
  REQUIRE(p != nullptr);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint64_t inside = extents_in(a, a + size, h);
  CHECK(inside >= 3);
  CHECK(huge_extents() == before + inside);
  touch(a, size);
  uint64_t huge = 0;
  for (const Mapping& m : smaps())
    if (m.lo < a + size && a < m.hi) huge += m.anon_huge;
  CHECK(huge >= inside * h / 2);  // the kernel may fall back to small pages for some
  check_flags_match_kernel();
  large_free(p, span_of(p));
  pool_collect();  // the run's pages go back: its extents are advised against first
  CHECK(huge_extents() == before);
  CHECK_FALSE(kernel_advised_any(smaps(), a, a + size));
  check_flags_match_kernel();
}

TEST_CASE("advised extents stay within their budget") {
  REQUIRE(arena_init());
  const uint64_t h = huge_extent_bytes();
  if (h == 0) {
    MESSAGE("no transparent huge pages here: no extents to budget");
    CHECK(huge_extents() == 0);
    return;
  }
  CHECK(huge_extent_budget() > 0);  // Linux has a mapping limit
  pool_collect();
  const uint64_t saved = huge_extent_budget(), now = huge_extents();
  huge_set_extent_budget(now + 3);
  std::vector<void*> blocks;
  for (int i = 0; i < 6; i++) {
    void* p = large_alloc(5u << 20, 16, false);  // at least one whole extent each
    REQUIRE(p != nullptr);
    blocks.push_back(p);
    CHECK(huge_extents() <= now + 3);
  }
  CHECK(huge_extents() == now + 3);
  check_flags_match_kernel();
  for (void* p : blocks) large_free(p, span_of(p));
  pool_collect();
  CHECK(huge_extents() == now);
  huge_set_extent_budget(saved);
}

TEST_CASE("under random large blocks, splits, merges and small spans, huge pages never back uncommitted bytes and "
          "the flags match the kernel's advice") {
  REQUIRE(arena_init());
  const uint64_t h = huge_extent_bytes();
  fwtest::Rng rng{0x5eed5eedu};
  struct Held {
    void* block;  // a large block, or nullptr for a single span
    Span* span;
    uint64_t bytes;
  };
  std::vector<Held> held;
  for (int step = 0; step < 1500; step++) {
    const uint64_t op = rng.below(10);
    if (op < 4 || held.empty()) {
      // A large block of 1-7 MiB, touched whole (its pages used, as a program would).
      const size_t size = (1u << 20) + size_t(rng.below(6u << 20));
      void* p = large_alloc(size, 16, rng.below(2) == 0);
      REQUIRE(p != nullptr);
      touch(reinterpret_cast<uintptr_t>(p), size);
      held.push_back(Held{p, nullptr, size});
    } else if (op < 6) {
      // A single span of small blocks' size: split off the pool's runs.
      Span* s = pool_take_span(kVspanSize);
      REQUIRE(s != nullptr);
      span_trim(s, kVspanSize);
      REQUIRE(span_commit(s, kVspanSize));
      touch(span_base(s), kVspanSize);
      held.push_back(Held{nullptr, s, kVspanSize});
    } else {
      const size_t i = size_t(rng.below(held.size()));
      if (held[i].block != nullptr)
        large_free(held[i].block, span_of(held[i].block));
      else
        pool_give(held[i].span, 1);
      held[i] = held.back();
      held.pop_back();
    }
    if (step % 300 == 299) pool_collect();
    if (step % 100 == 99) {
      CHECK(arena_rss() <= committed_bytes());
      check_flags_match_kernel();
    }
  }
  for (const Held& x : held) {
    if (x.block != nullptr)
      large_free(x.block, span_of(x.block));
    else
      pool_give(x.span, 1);
  }
  pool_collect();
  CHECK(arena_rss() <= committed_bytes());
  check_flags_match_kernel();
  CHECK(pool_is_valid());
}
