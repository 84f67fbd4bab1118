// core/size_class.h: the sized-free test by class (one range per class, one
// subtraction and one compare) allows exactly the sizes sized_free_fits allows,
// for every class, both kinds of allocation, and sizes at and around each
// bound, up to sizes that only a wrapped subtraction could let through.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/size_class.h"

using namespace fw;

TEST_CASE("class_sized_free_fits agrees with sized_free_fits for every class and size") {
  unsigned checked = 0, allowed = 0;
  for (unsigned c = 0; c < kClassCount; c++) {
    const size_t holds = class_block_size(c);
    std::vector<size_t> sizes;
    for (size_t n = 0; n <= holds + 16; n++) sizes.push_back(n);
    for (size_t n : {holds * 2, size_t(UINT32_MAX), size_t(UINT32_MAX) + 1, size_t(UINT32_MAX) + holds / 2,
                     size_t(1) << 40, SIZE_MAX - holds, SIZE_MAX})
      sizes.push_back(n);
    for (bool aligned : {false, true}) {
      for (size_t n : sizes) {
        const bool want = sized_free_fits(n, holds, aligned);
        if (class_sized_free_fits(n, c, aligned) != want) {
          FAIL_CHECK("class " << c << " (" << holds << " B), size " << n << ", aligned " << aligned << ": want " << want);
        }
        checked++;
        allowed += want;
      }
    }
  }
  // Both answers were exercised, in the proportion the rule gives (over half
  // of each class's sizes up to holds fit).
  CHECK(checked > 100000);
  CHECK(allowed > checked / 3);
  CHECK(allowed < checked);
}

TEST_CASE("a block's own size and the smallest size its class serves fit, and one byte more does not") {
  for (unsigned c = 0; c < kClassCount; c++) {
    const size_t holds = class_block_size(c);
    // A malloc of it gives class c (or, for a plain twin, the class of its size).
    const unsigned sized = sized_class(c);
    const size_t smallest = sized == 0 ? 1 : class_block_size(sized - 1) + 1;
    CHECK(class_sized_free_fits(holds, c, false));
    CHECK(class_sized_free_fits(smallest, c, false));
    CHECK_FALSE(class_sized_free_fits(holds + 1, c, false));
    CHECK_FALSE(class_sized_free_fits(holds + 1, c, true));
  }
}
