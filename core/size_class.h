// core/size_class.h: size classes.
//
// Sizes up to 128 B step by 16 (the 16-byte alignment every block keeps); above
// that, four classes per doubling: 2^k * {1.25, 1.5, 1.75, 2}. A request that
// lands in class c wastes at most 25% of its size for requests of 64 B and more
// (below 64 B the 16-byte granule decides). Each class has a real span size
// (what one span commits, its pages touched as blocks are carved): a whole
// virtual span (256 KiB) for every class. A span holds at least 8 blocks up to
// 32 KiB; the classes above hold 2 to 6 (mimalloc's medium pages hold 4 blocks
// of 128 KiB): a bigger span would cost address space for every class in use,
// and small spans are what a program under RLIMIT_AS runs out of
// (docs/design.md). Blocks up to 1 KiB had 64 KiB spans until Stop 52: with a
// quarter of the blocks a span, a thread went to another span far more often
// (larson-bigheap: a kept span's switch every 21 pairs instead of every 140),
// and larson-bigheap ran at 0.65-0.67 of mimalloc's speed (docs/benchmarks.md,
// Stop 52). The address space a span costs is the same either way: the vspan.
//
// Invariants (checked by size_class_is_valid):
//   block_size(c) is a multiple of 16 and strictly increasing in c;
//   class_of(n) is the smallest c with block_size(c) >= n;
//   capacity(c) = span_bytes(c) / block_size(c) >= 8 if block_size(c) <= kVspanSize / 8,
//   else >= 2; and span_bytes(c) <= kVspanSize.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/config.h"

namespace fw {

constexpr unsigned kClassCount = 48;
constexpr unsigned kSmallTableMax = 1024;  // class_of by table lookup up to here

struct ClassInfo {
  uint32_t block_size;
  uint32_t span_bytes;  // real span size
  uint32_t capacity;    // blocks per span
};

namespace detail {
constexpr uint32_t block_size_of(unsigned c) {
  if (c < 8) return 16u * (c + 1);
  unsigned b = 7 + (c - 8) / 4;   // the doubling 2^b .. 2^(b+1)
  unsigned q = (c - 8) % 4;       // quarter within it
  return (1u << b) + (q + 1) * (1u << (b - 2));
}
struct Tables {
  ClassInfo info[kClassCount];
  uint8_t small[kSmallTableMax / 16 + 1];
};
constexpr Tables make_tables() {
  Tables t{};
  for (unsigned c = 0; c < kClassCount; c++) {
    uint32_t bs = block_size_of(c);
    uint32_t sb = uint32_t(kVspanSize);  // every class's span is a whole vspan (above)
    t.info[c] = ClassInfo{bs, sb, sb / bs};
  }
  for (unsigned i = 0; i <= kSmallTableMax / 16; i++) {
    uint32_t n = i * 16;
    unsigned c = 0;
    while (t.info[c].block_size < n) c++;
    t.small[i] = uint8_t(c);
  }
  return t;
}
}  // namespace detail

inline constexpr detail::Tables kClassTables = detail::make_tables();
static_assert(kClassTables.info[kClassCount - 1].block_size == kSmallMax, "last class is kSmallMax");

FW_INLINE const ClassInfo& class_info(unsigned c) { return kClassTables.info[c]; }
FW_INLINE uint32_t class_block_size(unsigned c) { return kClassTables.info[c].block_size; }
// What every block of class c is aligned to: the lowest set bit of its size
// (block i sits at span_blocks + i*block_size, and span_blocks, a vspan base,
// is a multiple of the power-of-two span size).
FW_INLINE uint32_t class_align(unsigned c) { return class_block_size(c) & (0u - class_block_size(c)); }

// Class for n <= kSmallTableMax: one table load.
FW_INLINE unsigned class_of_small(size_t n) { return kClassTables.small[(n + 15) >> 4]; }

// Class for 128 < n <= kSmallMax: from the position of the highest bit.
FW_INLINE unsigned class_of_medium(size_t n) {
  size_t m = n - 1;
  unsigned b = 63u - unsigned(__builtin_clzll(m));
  unsigned q = unsigned(m >> (b - 2)) & 3u;
  return 8u + (b - 7u) * 4u + q;
}

FW_INLINE unsigned class_of(size_t n) {
  return n <= kSmallTableMax ? class_of_small(n) : class_of_medium(n);
}

// Smallest class whose blocks hold n bytes and start at multiples of align (a
// power of two): block i of a span sits at span_blocks + i*block_size, a
// multiple of the span size plus that, so block_size must be a multiple of align.
// Returns kClassCount when no class fits.
unsigned class_of_aligned(size_t n, size_t align);

bool size_class_is_valid();

}  // namespace fw
