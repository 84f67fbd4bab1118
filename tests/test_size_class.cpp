// Size classes: mapping, waste bound, alignment.
#include <doctest/doctest.h>

#include <initializer_list>

#include "core/size_class.h"

using namespace fw;

TEST_CASE("size_class_is_valid holds for the built-in table") { CHECK(size_class_is_valid()); }

TEST_CASE("every size up to 128 KiB maps to the smallest class that holds it") {
  for (size_t n = 1; n <= kSmallMax; n++) {
    unsigned c = class_of(n);
    REQUIRE(c < kClassCount);
    REQUIRE(class_block_size(c) >= n);
    if (c > 0) REQUIRE(class_block_size(c - 1) < n);
  }
  CHECK(class_of(0) == 0);
}

TEST_CASE("internal fragmentation is at most 25 percent from 64 bytes up") {
  double worst = 0;
  for (size_t n = 64; n <= kSmallMax; n++) {
    double waste = double(class_block_size(class_of(n)) - n) / double(n);
    if (waste > worst) worst = waste;
  }
  CHECK(worst <= 0.25);
}

TEST_CASE("classes step by 16 bytes below 128 and four per doubling above") {
  for (unsigned c = 0; c < 8; c++) CHECK(class_block_size(c) == 16 * (c + 1));
  for (size_t b = 128; b < kSmallMax; b *= 2) {
    unsigned in_doubling = 0;
    for (unsigned c = 0; c < kSizeClasses; c++)
      if (class_block_size(c) > b && class_block_size(c) <= 2 * b) in_doubling++;
    CHECK(in_doubling == 4);
  }
}

TEST_CASE("every span fits its virtual span and holds at least 8 blocks (2 for blocks above an eighth of a vspan)") {
  for (unsigned c = 0; c < kClassCount; c++) {
    CHECK(class_info(c).capacity >= (class_block_size(c) <= kVspanSize / 8 ? 8u : 2u));
    CHECK(class_info(c).span_bytes <= kVspanSize);
    CHECK(class_info(c).capacity == class_info(c).span_bytes / class_info(c).block_size);
  }
}

TEST_CASE("aligned class lookup gives block sizes that are multiples of the alignment") {
  for (size_t align = 16; align <= kSmallMax; align *= 2) {
    for (size_t n : {size_t(1), align - 1, align, align + 1, 3 * align}) {
      unsigned c = class_of_aligned(n, align);
      if (n > kSmallMax) {
        CHECK(c == kClassCount);
        continue;
      }
      if (c == kClassCount) continue;  // no class: the caller uses a large block
      CHECK(class_block_size(c) % align == 0);
      CHECK(class_align(c) % align == 0);  // the colour too (past 64 bytes, a plain twin)
      CHECK(class_block_size(c) >= n);
    }
  }
  CHECK(class_of_aligned(kSmallMax + 1, 16) == kClassCount);
}

TEST_CASE(
    "aligned class lookup gives, for every size and alignment, the class of the smallest blocks that hold the "
    "size and all keep the alignment") {
  // Worked out here from the classes themselves, not from the table's rule.
  for (size_t align = 1; align <= 4 * kSmallMax; align *= 2) {
    for (size_t n = 0; n <= kSmallMax + 1; n += (n < 2048 ? 1 : 61)) {
      uint32_t best = 0;  // the smallest block size that serves, 0: none
      for (unsigned x = 0; x < kClassCount; x++) {
        const uint32_t bs = class_block_size(x);
        if (n <= kSmallMax && bs >= n && class_align(x) % align == 0 && (best == 0 || bs < best)) best = bs;
      }
      const unsigned c = class_of_aligned(n, align);
      if (best == 0) {
        REQUIRE(c == kClassCount);
        continue;
      }
      REQUIRE(c < kClassCount);
      REQUIRE(class_block_size(c) == best);
      REQUIRE(class_align(c) % align == 0);
    }
  }
}

TEST_CASE("the coloured classes are those of 128 B to 1 KiB that are multiples of 128, each with a plain twin of its "
          "size, which only aligned allocation past 64 bytes takes") {
  unsigned coloured = 0;
  for (unsigned c = 0; c < kSizeClasses; c++) {
    const uint32_t bs = class_block_size(c);
    const bool want = bs % 128 == 0 && bs <= 1024;
    if (bs > 1024) continue;  // coloured in their slack (next test)
    CHECK((class_info(c).colours > 1) == want);
    if (!want) {
      CHECK(plain_class(c) == c);
      continue;
    }
    coloured++;
    // 2^k / 64 colours, 2^k the size's power of two: 16 for 1 KiB, 2 for 640 B.
    CHECK(class_info(c).colours == (bs & (0u - bs)) / 64);
    CHECK(class_align(c) == 64);
    const unsigned t = plain_class(c);
    CHECK(t >= kSizeClasses);
    CHECK(t < kClassCount);
    CHECK(class_block_size(t) == bs);
    CHECK(class_info(t).colours == 1);
    CHECK(class_align(t) == (bs & (0u - bs)));
    CHECK(class_of_aligned(bs, 64) == c);
    CHECK(class_of_aligned(bs, 128) == t);
  }
  CHECK(coloured == kPlainTwins);
  CHECK(class_info(class_of(1024)).colours == 16);
  CHECK(class_info(class_of(640)).colours == 2);
  CHECK(class_info(class_of(2048)).colours == 1);
  for (size_t n = 1; n <= kSmallMax; n++) REQUIRE(class_of(n) < kSizeClasses);
}

TEST_CASE(
    "past 1 KiB a class takes a colour in 64-byte steps within its span's slack, so no block is lost, has no "
    "twin, and aligned allocation past 64 bytes goes on to a class whose blocks keep the alignment") {
  unsigned slack_coloured = 0;
  for (unsigned c = 0; c < kSizeClasses; c++) {
    const ClassInfo& ci = class_info(c);
    if (ci.block_size <= 1024) continue;
    const uint32_t slack = ci.span_bytes - ci.capacity * ci.block_size;
    CHECK(ci.capacity == ci.span_bytes / ci.block_size);
    CHECK(ci.colours == slack / 64 + 1);
    CHECK((ci.colours - 1) * 64 <= slack);  // the last colour still fits every block
    CHECK(plain_class(c) == c);
    const uint32_t low = ci.block_size & (0u - ci.block_size);
    if (ci.colours == 1) {
      CHECK(slack < 64);  // a power of two: no slack
      CHECK(class_align(c) == low);
      continue;
    }
    slack_coloured++;
    CHECK(class_align(c) == 64);
    CHECK(class_of_aligned(ci.block_size, 64) == c);
    for (size_t align = 128; align <= low; align *= 2) {
      const unsigned t = class_of_aligned(ci.block_size, align);
      REQUIRE(t < kClassCount);
      CHECK(t != c);
      CHECK(class_info(t).colours == 1);
      CHECK(class_align(t) % align == 0);
    }
  }
  // 10 KiB: 25 blocks and 6 KiB left, 97 colours; 128 KiB: 2 blocks, none left.
  CHECK(class_info(class_of(10240)).colours == 97);
  CHECK(class_info(class_of(131072)).colours == 1);
  CHECK(slack_coloured == 21);  // three of every four classes from 1280 B to 112 KiB
}
