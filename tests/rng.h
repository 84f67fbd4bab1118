// tests/rng.h: the tests' random numbers, header-only and portable (the
// Windows suite uses it too): xorshift64, the same stream for the same seed,
// so a failing run repeats and each thread can have a generator of its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace fwtest {

struct Rng {
  uint64_t s;  // any non-zero seed
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
};

// Fisher-Yates: v[0..n) in an order unrelated to the one it had, the same
// order for the same seed.
template <class T>
void shuffle(T* v, size_t n, Rng& rng) {
  for (size_t i = n; i-- > 1;) std::swap(v[i], v[rng.below(i + 1)]);
}

}  // namespace fwtest
