// platform/read_once.h: a figure of the machine that the OS layer reads once
// (the page size, the CPUs online), for both implementations of os.h.
#pragma once
#include <atomic>
#include <cstddef>

namespace fw::os {

// The figure `read` returns (never 0), read at the first call and a relaxed
// load after it. Racing first calls each read it and store the same value.
// Lock-free and allocation-free, as every function of os.h must be.
template <typename Read>
inline size_t read_once(std::atomic<size_t>& cache, Read read) {
  size_t v = cache.load(std::memory_order_relaxed);
  if (v == 0) {
    v = read();
    cache.store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace fw::os
