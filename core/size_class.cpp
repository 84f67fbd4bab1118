// core/size_class.cpp: the out-of-line parts of size classes (see size_class.h).
#include "core/size_class.h"

#include "core/report.h"

namespace fw {

bool size_class_is_valid() {
  bool ok = true;
  unsigned twins_used = 0;
  for (unsigned c = 0; c < kClassCount; c++) {
    const ClassInfo& ci = class_info(c);
    if (ci.block_size % kMinAlign != 0) ok = report_invariant("size class: block size not a multiple of 16", c);
    if (c > 0 && c < kSizeClasses && ci.block_size <= class_info(c - 1).block_size)
      ok = report_invariant("size class: block sizes not increasing", c);
    const bool twinned = ci.block_size <= kTwinColourMax;  // coloured with a plain twin, if coloured
    // Up to 1 KiB a colour stays below the size's power of two (a multiple of
    // 64 under it); past it, within the slack, so it costs no block.
    if (twinned && ((ci.colours & (ci.colours - 1)) != 0 || ci.colours > 16 ||
                    (ci.colours > 1 && ci.block_size % (ci.colours * kColourStep) != 0)))
      ok = report_invariant("size class: colours not a power of two dividing the block size in 64-byte steps", c);
    if (!twinned && (ci.colours == 0 || ci.colours != (ci.span_bytes - ci.capacity * ci.block_size) / kColourStep + 1 ||
                     ci.block_size % kColourStep != 0))
      ok = report_invariant("size class: colours past 1 KiB not the slack's 64-byte steps", c);
    const bool coloured = twinned && ci.colours > 1;
    if ((c >= kSizeClasses && coloured) || (c < kSizeClasses && (plain_class(c) != c) != coloured))
      ok = report_invariant("size class: a twin coloured, or a coloured class without a twin", c);
    if (c < kSizeClasses && coloured) {
      const unsigned t = plain_class(c);
      twins_used++;
      if (t < kSizeClasses || t >= kClassCount || class_info(t).block_size != ci.block_size)
        ok = report_invariant("size class: a plain twin out of range, or of another size", c);
    }
    if (ci.capacity < (ci.block_size <= kVspanSize / 8 ? 8u : 2u))
      ok = report_invariant("size class: too few blocks per span", c);
    if (ci.span_bytes > kVspanSize) ok = report_invariant("size class: span larger than a virtual span", c);
  }
  if (twins_used != kPlainTwins)
    ok = report_invariant("size class: plain twins not one for each coloured class", twins_used);
  for (size_t n = 1; n <= kSmallMax; n++) {
    unsigned c = class_of(n);
    if (class_block_size(c) < n || (c > 0 && class_block_size(c - 1) >= n)) {
      ok = report_invariant("size class: class_of is not the smallest fitting class", n);
      break;
    }
  }
  // Aligned allocation's table (detail::aligned_rule): each class it gives
  // holds the size's class's blocks, and its blocks all keep the alignment.
  for (unsigned k = kAlignLogMin; k <= kAlignLogMax; k++) {
    for (unsigned c = 0; c < kSizeClasses; c++) {
      const unsigned t = kClassTables.aligned[k - kAlignLogMin][c];
      if (t == kClassCount) continue;
      if (t >= kClassCount || class_block_size(t) < class_block_size(c) || class_align(t) % (1u << k) != 0)
        ok = report_invariant("size class: an aligned class too small, or of blocks not so aligned", c);
    }
  }
  return ok;
}

}  // namespace fw
