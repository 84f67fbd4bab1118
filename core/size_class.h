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
// Colour. Block i of a span sits at its base plus i * block_size, and every
// span's base is a multiple of 256 KiB, so with a block size of 2^k * m (m
// odd, 2^k of 128 bytes or more) the blocks' first lines, where a program's
// header fields and the allocator's link and canary lie, use only one set in
// every 2^k / 64 of each cache level, in every span of the class: blocks of
// 1 KiB a sixteenth of the sets. A heap of such blocks then misses like a
// cache that much smaller (docs/design.md, Block colour). So a span of a
// coloured class starts its blocks at a colour, an offset from its base: a
// multiple of 64 below 2^k, chosen from its descriptor's index, which spreads
// those lines over every set; the span holds the blocks that fit after it (at
// most one block less).
// The coloured classes are those of 128 B to 1 KiB whose size is a multiple
// of 128 (past 1 KiB a span holds 256 blocks or fewer, and a block less costs
// more). Their blocks are aligned to 64 bytes, no more; each has a plain twin
// (class index kSizeClasses and up): the same block size, spans with no
// colour, whose blocks keep the alignment of the size's power of two. Only
// aligned allocations of more than 64 bytes' alignment take a twin
// (class_of_aligned); class_of never does.
// Past 1 KiB a class is coloured within its slack: a span holds
// span_bytes / block_size blocks and leaves the rest of its vspan unused, and
// when that rest is 64 bytes or more its colour is a multiple of 64 up to it,
// so the colour costs no block (10 KiB blocks: 25 a span and 6 KiB left, 97
// colours). Without it the first lines of 8-128 KiB blocks fell in one or two
// of a 48 KiB L1's 64 sets (every block start a multiple of 2 KiB), and a
// thread replacing such buffers missed on each one it was handed
// (larson-medium, docs/benchmarks.md Stop 83). These classes have no twin
// (the classes fit a 64-bit mask, lab.h), so aligned allocation past 64 bytes
// goes on to the next class whose blocks keep their alignment. The classes of
// a power of two leave no slack and take no colour.
//
// Invariants (checked by size_class_is_valid):
//   block_size(c) is a multiple of 16 and strictly increasing in c < kSizeClasses;
//   class_of(n) is the smallest c with block_size(c) >= n;
//   capacity(c) = span_bytes(c) / block_size(c) >= 8 if block_size(c) <= kVspanSize / 8,
//   else >= 2; and span_bytes(c) <= kVspanSize;
//   up to 1 KiB, colours(c) > 1 exactly for the coloured classes, and is then
//   a power of two, 2^k / 64 (at most 16); the twin of coloured class c has its
//   block size and one colour; past 1 KiB, colours(c) is 1 + the slack
//   (span_bytes - capacity * block_size) in whole 64-byte steps, and no class
//   has a twin.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/config.h"

namespace fw {

constexpr unsigned kSizeClasses = 48;  // the classes class_of hands out, by size
constexpr unsigned kPlainTwins = 8;    // coloured classes, each with a plain twin (above)
constexpr unsigned kClassCount = kSizeClasses + kPlainTwins;
constexpr unsigned kSmallTableMax = 1024;  // class_of by table lookup up to here
constexpr uint32_t kColourStep = 64;       // a colour is a multiple of this, and a coloured block aligned to it

struct ClassInfo {
  uint32_t block_size;
  uint32_t span_bytes;  // real span size
  uint32_t capacity;    // blocks per span with no colour
  uint32_t colours;     // colours its spans take (1: none), span_colour
};

// The largest block size whose coloured classes have a plain twin (above).
constexpr uint32_t kTwinColourMax = 1024;

// Alignments that a class may serve past every block's 16 bytes: 2^5 (32) to
// kSmallMax, the largest block size (a power of two). Larger ones no class serves.
constexpr unsigned kAlignLogMin = 5;
constexpr unsigned kAlignLogMax = unsigned(__builtin_ctzll(kSmallMax));
static_assert((size_t(1) << kAlignLogMax) == kSmallMax, "the largest block size is a power of two");

namespace detail {
constexpr uint32_t size_of_sized(unsigned c) {
  if (c < 8) return 16u * (c + 1);
  unsigned b = 7 + (c - 8) / 4;   // the doubling 2^b .. 2^(b+1)
  unsigned q = (c - 8) % 4;       // quarter within it
  return (1u << b) + (q + 1) * (1u << (b - 2));
}
// Whether sized class c (< kSizeClasses) is coloured with a plain twin (above).
constexpr bool sized_coloured(unsigned c) {
  const uint32_t bs = size_of_sized(c);
  return bs % 128 == 0 && bs <= kTwinColourMax;
}
struct Tables {
  ClassInfo info[kClassCount];
  uint8_t small[kSmallTableMax / 16 + 1];
  uint8_t twin[kSizeClasses];  // plain twin of a coloured class; the class itself otherwise
  // aligned[k - kAlignLogMin][c]: class_of_aligned for alignment 2^k and a
  // size whose class is c (aligned_rule below); kClassCount when none serves.
  uint8_t aligned[kAlignLogMax - kAlignLogMin + 1][kSizeClasses];
};
// The smallest class from sized class c up whose blocks all start at multiples
// of align (a power of two): block i of a span sits at span_blocks +
// i*block_size, so block_size must be a multiple of align, and so must the
// colour: past kColourStep, a coloured class's plain twin; a class coloured in
// its slack has no twin, so the next class. kClassCount when none fits.
constexpr unsigned aligned_rule(const Tables& t, unsigned c, size_t align) {
  for (; c < kSizeClasses; c++) {
    if (t.info[c].block_size % align != 0) continue;
    if (align <= kColourStep) return c;
    if (t.info[t.twin[c]].colours == 1) return t.twin[c];
  }
  return kClassCount;
}
constexpr Tables make_tables() {
  Tables t{};
  const uint32_t sb = uint32_t(kVspanSize);  // every class's span is a whole vspan (above)
  unsigned next_twin = kSizeClasses;
  for (unsigned c = 0; c < kSizeClasses; c++) {
    const uint32_t bs = size_of_sized(c);
    // 2^k / 64 colours with a twin up to 1 KiB; past it, the slack's 64-byte steps.
    const uint32_t colours = sized_coloured(c)     ? (bs & (0u - bs)) / kColourStep
                             : bs > kTwinColourMax ? (sb % bs) / kColourStep + 1
                                                   : 1;
    t.info[c] = ClassInfo{bs, sb, sb / bs, colours};
    t.twin[c] = uint8_t(c);
    if (sized_coloured(c)) {  // its plain twin: the same blocks, spans with no colour
      t.twin[c] = uint8_t(next_twin);
      t.info[next_twin++] = ClassInfo{bs, sb, sb / bs, 1};
    }
  }
  for (unsigned i = 0; i <= kSmallTableMax / 16; i++) {
    uint32_t n = i * 16;
    unsigned c = 0;
    while (t.info[c].block_size < n) c++;
    t.small[i] = uint8_t(c);
  }
  for (unsigned k = kAlignLogMin; k <= kAlignLogMax; k++)
    for (unsigned c = 0; c < kSizeClasses; c++)
      t.aligned[k - kAlignLogMin][c] = uint8_t(aligned_rule(t, c, size_t(1) << k));
  return t;
}
constexpr unsigned coloured_count() {
  unsigned n = 0;
  for (unsigned c = 0; c < kSizeClasses; c++) n += sized_coloured(c);
  return n;
}
}  // namespace detail

inline constexpr detail::Tables kClassTables = detail::make_tables();
static_assert(kClassTables.info[kSizeClasses - 1].block_size == kSmallMax, "last class is kSmallMax");
static_assert(detail::coloured_count() == kPlainTwins, "a plain twin for each coloured class");

FW_INLINE const ClassInfo& class_info(unsigned c) { return kClassTables.info[c]; }
// The plain twin of class c (< kSizeClasses) if it is coloured, else c (above).
FW_INLINE unsigned plain_class(unsigned c) { return kClassTables.twin[c]; }
FW_INLINE uint32_t class_block_size(unsigned c) { return kClassTables.info[c].block_size; }
// What every block of class c is aligned to: the lowest set bit of its size,
// or kColourStep for a coloured class (block i sits at span_blocks +
// i*block_size, and span_blocks is a vspan base, a multiple of the
// power-of-two span size, plus the span's colour).
FW_INLINE uint32_t class_align(unsigned c) {
  const uint32_t low = class_block_size(c) & (0u - class_block_size(c));
  return class_info(c).colours > 1 && low > kColourStep ? kColourStep : low;
}

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
// The class class_of gives for class c's block size: c itself, or for a plain
// twin the coloured class it is the twin of.
FW_INLINE unsigned sized_class(unsigned c) { return c < kSizeClasses ? c : class_of(class_block_size(c)); }

// Smallest class whose blocks hold n bytes and start at multiples of align (a
// power of two; detail::aligned_rule), kClassCount when no class fits: the
// size's class, then one table load (posix_memalign, aligned_alloc and aligned
// new run malloc's path after it). Until Stop 89 this was the rule's loop,
// called: a division per class it passed, 33-46% of a loop of aligned_alloc
// and free pairs (perf; docs/benchmarks.md).
FW_INLINE unsigned class_of_aligned(size_t n, size_t align) {
  if (n > kSmallMax || align > kSmallMax) return kClassCount;
  if (align <= kMinAlign) return class_of(n);
  return kClassTables.aligned[unsigned(__builtin_ctzll(align)) - kAlignLogMin][class_of(n)];
}

// Sized frees (free_sized, free_aligned_sized, sized operator delete) check
// the size against the block: it must be a size the block could have been
// allocated or reallocated with. At most the block's size; and for a small
// block of more than 64 bytes from an unaligned allocation, at least half of
// it: every request a class serves is above the class below (more than half,
// above), and realloc keeps a block only down to half its size
// (alloc.cpp). Aligned allocations may take a bigger class, and large blocks
// are rounded up, so for those only the upper bound is checked.
constexpr FW_INLINE bool sized_free_fits(size_t n, size_t holds, bool aligned) {
  return n <= holds && (aligned || holds <= 64 || n >= holds / 2);
}
// The same test by class: the sizes a block of class c allows are one range,
// lo..lo + width, so one subtraction and one unsigned compare test both ends
// (a size below lo wraps to a number above any width). The table is derived
// from sized_free_fits, so the rule is written once: lo is the smallest size
// it allows, and the range ends at the block size. Checked against it for
// every class and size (tests/test_sized_free.cpp). A small span carries its
// class's unaligned range in its descriptor (span.h, sized_lo), where free's
// fast path reads it; aligned sized frees use the table.
struct SizedRanges {
  uint64_t lo[2][kClassCount];  // [aligned][class]
  uint64_t width[2][kClassCount];
};
constexpr SizedRanges make_sized_ranges() {
  SizedRanges t{};
  for (unsigned c = 0; c < kClassCount; c++) {
    const uint64_t holds = kClassTables.info[c].block_size;
    for (unsigned aligned = 0; aligned < 2; aligned++) {
      // The smallest size it allows: sizes up to the block are allowed from
      // some size on, so a binary search finds it (counting up to it tested
      // 425,776 sizes in all, more steps than clang's constant evaluator
      // allows by default, -fconstexpr-steps=1048576).
      uint64_t lo = 0, hi = holds;  // sized_free_fits(hi)
      while (lo < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (sized_free_fits(mid, holds, aligned != 0))
          hi = mid;
        else
          lo = mid + 1;
      }
      t.lo[aligned][c] = lo;
      t.width[aligned][c] = holds - lo;
    }
  }
  return t;
}
inline constexpr SizedRanges kSizedRanges = make_sized_ranges();
FW_INLINE bool class_sized_free_fits(size_t n, size_t c, bool aligned) {
  return n - kSizedRanges.lo[aligned][c] <= kSizedRanges.width[aligned][c];
}

bool size_class_is_valid();

}  // namespace fw
