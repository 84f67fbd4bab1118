// core/size_class.cpp: the out-of-line parts of size classes (see size_class.h).
#include "core/size_class.h"

#include "core/report.h"

namespace fw {

unsigned class_of_aligned(size_t n, size_t align) {
  if (n > kSmallMax) return kClassCount;
  for (unsigned c = class_of(n == 0 ? 1 : n); c < kClassCount; c++) {
    if (class_block_size(c) % align == 0) return c;
  }
  return kClassCount;
}

bool size_class_is_valid() {
  bool ok = true;
  for (unsigned c = 0; c < kClassCount; c++) {
    const ClassInfo& ci = class_info(c);
    if (ci.block_size % kMinAlign != 0) ok = report_invariant("size class: block size not a multiple of 16", c);
    if (c > 0 && ci.block_size <= class_info(c - 1).block_size)
      ok = report_invariant("size class: block sizes not increasing", c);
    if (ci.capacity < (ci.block_size <= kVspanSize / 8 ? 8u : 2u))
      ok = report_invariant("size class: too few blocks per span", c);
    if (ci.span_bytes > kVspanSize) ok = report_invariant("size class: span larger than a virtual span", c);
  }
  for (size_t n = 1; n <= kSmallMax; n++) {
    unsigned c = class_of(n);
    if (class_block_size(c) < n || (c > 0 && class_block_size(c - 1) >= n)) {
      ok = report_invariant("size class: class_of is not the smallest fitting class", n);
      break;
    }
  }
  return ok;
}

}  // namespace fw
