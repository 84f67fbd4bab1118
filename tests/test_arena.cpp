// Arena: regions, the region map and descriptor lookup.
#include <doctest/doctest.h>

#include "core/arena.h"
#include "core/span_pool.h"
#include "freeway.h"

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

TEST_CASE("a huge region is published in the map and cleared when released") {
  REQUIRE(arena_init());
  uint32_t r = arena_huge_reserve(3 * kRegionSize + 1, kRegionSize);
  REQUIRE(r != kNoIndex);
  uintptr_t base = g_regions[r].base.load();
  CHECK(g_regions[r].size.load() == 4 * kRegionSize);
  CHECK(base % kRegionSize == 0);
  CHECK(span_of(reinterpret_cast<void*>(base)) != nullptr);
  CHECK(span_of(reinterpret_cast<void*>(base + 4 * kRegionSize - 1)) != nullptr);
  CHECK(arena_is_valid());
  arena_huge_release(r);
  CHECK(span_of(reinterpret_cast<void*>(base)) == nullptr);
  CHECK(span_of(reinterpret_cast<void*>(base + 3 * kRegionSize)) == nullptr);
  CHECK(arena_is_valid());
}

TEST_CASE("impossible huge sizes are refused without touching the map") {
  REQUIRE(arena_init());
  CHECK(arena_huge_reserve(size_t(1) << 62, kRegionSize) == kNoIndex);
  CHECK(arena_huge_reserve(~size_t(0), kRegionSize) == kNoIndex);
  CHECK(arena_huge_reserve(kRegionSize, size_t(1) << 63) == kNoIndex);
  CHECK(arena_is_valid());
}
