// Helpers of the kept-span tests (test_kept, test_kept_pool): spans filled by
// the calling thread, and what its LAB says of them.
#pragma once
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/alloc.h"
#include "core/arena.h"
#include "core/lab.h"
#include "core/options.h"
#include "freeway.h"

namespace fwtest {

constexpr size_t kKeptTestSize = 64;  // the block size the kept-span cases fill spans of

inline uint32_t state_of(const fw::Span* s) { return fw::Anchor::unpack(s->anchor.load()).state; }

// Blocks of n spans of `size`, allocated in order by the calling thread; the
// spans in the order they were filled.
inline std::vector<void*> fill_spans(uint32_t n, std::vector<fw::Span*>* spans, size_t size = kKeptTestSize) {
  std::vector<void*> v;
  for (uint32_t i = 0; i < n * fw::class_info(fw::class_of(size)).capacity; i++) {
    void* p = fw_malloc(size);
    REQUIRE(p != nullptr);
    v.push_back(p);
    if (spans->empty() || spans->back() != fw::span_of(p)) spans->push_back(fw::span_of(p));
  }
  return v;
}

// Sets option o to v for the rest of this process (ctest runs each case in
// its own), as its environment variable would have.
inline void set_option(fw::Option o, int64_t v) {
  (void)fw::option(o);  // the table is read once: read it before the store below
  fw::detail::g_option_values[unsigned(o)].store(v, std::memory_order_relaxed);
}

// Turns the kept pool off for the rest of this process (ctest runs each case
// in its own), as FREEWAY_KEPT_POOL=0 does: for cases that fill a LAB's own
// allowance so that the spans past it float, in a test program whose other
// cases run with the pool.
inline void kept_pool_off() {
  set_option(fw::Option::kept_pool, 0);
  REQUIRE(fw::kept_pool_limit() == 0);
}

}  // namespace fwtest
