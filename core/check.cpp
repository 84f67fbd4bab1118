// core/check.cpp: fw_check_heap, the whole-heap invariant walk.
//
// Besides each structure's own is_valid, it checks the block equation of every
// size class, which ties the thread caches, the spans and the counters together:
//   sum over spans of class c of (carved - remote free - owner-side free),
//   owner-side free being the LABs' free[c] lists and their owned spans' own lists,
//     == allocs(c) - frees(c)
// It is exact only while no other thread allocates or frees.
#include "core/arena.h"
#include "core/lab.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/size_class.h"
#include "core/span_pool.h"
#include "core/stats.h"

namespace fw {

int check_heap() {
  int bad = 0;
  if (!size_class_is_valid()) bad++;
  if (!arena_is_valid()) bad++;
  if (!pool_is_valid()) bad++;
  uint64_t in_use[kClassCount] = {};
  uint64_t pooled = 0;  // the kept pool's bytes taken, by LAB (lab.h)
  for (Lab* lab = lab_first(); lab != nullptr; lab = lab->all_next.load(std::memory_order_acquire)) {
    pooled += lab->kept_pooled;
    if (!lab_is_valid(lab)) {
      // Reported; its lists are not walked again: a corrupt link (a write
      // after free) would be followed out of the heap. The class counts
      // below then differ too, and say so.
      bad++;
      continue;
    }
    for (unsigned i = 0; i <= lab->pending_mask && i < kPendingMax; i++) {
      const PendingChain& ch = lab->pending[i];
      const unsigned c = ch.span != nullptr ? ch.span->cls.load(std::memory_order_relaxed) : kClassCount;
      if (c < kClassCount) in_use[c] -= pending_count(ch);
    }
    for (unsigned c = 0; c < kClassCount; c++) {
      uint64_t n = 0;
      for (void* b = lab->lists[c].head; b != nullptr && n < (1u << 20); b = block_next(b)) n++;
      in_use[c] -= n;  // owner-side free blocks (wraps back when the spans are added)
      // The own lists of its hot and kept spans (span.h).
      in_use[c] -= lab_own_frees(lab, c);  // a taken span is FREE: not counted below
    }
  }
  if (pooled != kept_pool_taken())
    bad += !report_invariant("lab: the LABs' pooled kept bytes are not the pool's count", pooled);
  arena_each_vspan([&](const Span& s) {
    if (!span_is_valid(&s)) bad++;
    Anchor a = Anchor::unpack(s.anchor.load(std::memory_order_acquire));
    if (a.state != kHot && a.state != kFull && a.state != kPartial) return;
    // The class is read apart from the state: a span recycled in between (a
    // call made while other threads allocate) may have no class any more.
    const unsigned c = s.cls.load(std::memory_order_relaxed);
    if (c < kClassCount) in_use[c] += s.carved.load(std::memory_order_relaxed) - a.count;
  });
  fw_stats_t st;
  stats_fill(&st);
  for (unsigned c = 0; c < kClassCount; c++) {
    uint64_t counted = st.classes[c].allocs - st.classes[c].frees;
    if (in_use[c] != counted) {
      Line l;
      l.str("freeway: invariant violated: class ").dec(c).str(": blocks in use by the spans ")
          .dec(in_use[c]).str(" != allocs - frees ").dec(counted).str("\n");
      l.write(2);
      bad++;
    }
  }
  return bad;
}

}  // namespace fw
