// core/relaxed.h: each one-instruction relaxed access gives what the plain
// relaxed operations give, at the edges where a swapped operand or a wrong
// operand width would show (unsigned order, wrap-around, the neighbouring word).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>

#include "core/relaxed.h"

using namespace fw;

TEST_CASE("below_relaxed is an unsigned x < m, m read from memory") {
  std::atomic<uint32_t> m{1};
  CHECK(below_relaxed(0, m));
  CHECK_FALSE(below_relaxed(1, m));
  CHECK_FALSE(below_relaxed(2, m));
  m.store(0);
  CHECK_FALSE(below_relaxed(0xFFFFFFFFu, m));  // a wrapped block number is never below carved
  m.store(0xFFFFFFFFu);
  CHECK(below_relaxed(0, m));
  CHECK_FALSE(below_relaxed(0xFFFFFFFFu, m));
  m.store(7);
  CHECK(below_relaxed(6, m));  // a store since is what the next call reads
}

TEST_CASE("pair_relaxed reads two 32-bit fields side by side, the first in the low half") {
  struct alignas(8) {
    std::atomic<uint32_t> lo{3};
    std::atomic<uint32_t> hi{0x80000001u};
  } w;
  CHECK(pair_relaxed(w.lo, w.hi) == 0x8000000100000003ull);
  w.hi.store(7);  // a store to either half since is what the next call reads
  CHECK(pair_relaxed(w.lo, w.hi) == 0x0000000700000003ull);
  w.lo.store(0xFFFFFFFFu);
  CHECK(pair_relaxed(w.lo, w.hi) == 0x00000007FFFFFFFFull);
  // The block check's arithmetic on it: x - low half wraps mod 2^32, as it relies on.
  const uint64_t om = pair_relaxed(w.lo, w.hi);
  CHECK(uint32_t(1u - uint32_t(om)) == 2u);
  CHECK(uint32_t(om >> 32) == 7u);
}

TEST_CASE("equal_relaxed compares the pointer stored with the one given") {
  int a = 0, b = 0;
  std::atomic<int*> m{&a};
  CHECK(equal_relaxed(m, &a));
  CHECK_FALSE(equal_relaxed(m, &b));
  CHECK_FALSE(equal_relaxed(m, static_cast<const int*>(nullptr)));
  m.store(nullptr);
  CHECK(equal_relaxed(m, static_cast<const int*>(nullptr)));
  // Pointers that differ only above bit 31 (a 32-bit compare would call them equal).
  std::atomic<int*> hi{reinterpret_cast<int*>(uintptr_t(0x100000040))};
  CHECK_FALSE(equal_relaxed(hi, reinterpret_cast<const int*>(uintptr_t(0x40))));
}

TEST_CASE("single_writer_add_one adds one at the counter's width and touches nothing else") {
  struct {
    std::atomic<uint32_t> count{0xFFFFFFFFu};
    std::atomic<uint32_t> next{5};
  } pair;
  single_writer_add_one(pair.count);
  CHECK(pair.count.load() == 0u);  // wraps within its 32 bits
  CHECK(pair.next.load() == 5u);   // no carry into the word after it
  single_writer_add_one(pair.count);
  CHECK(pair.count.load() == 1u);

  std::atomic<uint64_t> wide{0xFFFFFFFFu};
  single_writer_add_one(wide);
  CHECK(wide.load() == 0x100000000ull);  // carries into the high half
}

TEST_CASE("single_writer_add_one_is_zero adds one and says whether the counter came to 0") {
  std::atomic<uint64_t> c{~uint64_t(0) - 1};  // -2
  CHECK_FALSE(single_writer_add_one_is_zero(c));
  CHECK(c.load() == ~uint64_t(0));
  CHECK(single_writer_add_one_is_zero(c));  // -1 + 1 wraps to 0
  CHECK(c.load() == 0u);
  CHECK_FALSE(single_writer_add_one_is_zero(c));
  CHECK(c.load() == 1u);
  std::atomic<uint64_t> wide{0xFFFFFFFFu};
  CHECK_FALSE(single_writer_add_one_is_zero(wide));  // the low half wraps, the counter does not
  CHECK(wide.load() == 0x100000000ull);
}
