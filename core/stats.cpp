// core/stats.cpp: gathering and printing statistics (see stats.h).
#include "core/stats.h"

#include <atomic>
#include <cstring>

#include "core/arena.h"
#include "core/lab.h"
#include "core/percpu.h"
#include "core/large.h"
#include "core/report.h"
#include "core/size_class.h"
#include "core/span_pool.h"

namespace fw {
namespace {

std::atomic<uint64_t> g_unbound_frees[kClassCount];
std::atomic<uint64_t> g_peak_live{0};
// The large live bytes the last sample saw (stats_large_rose), and how many
// samples sum_labs has made (stats_peak_samples).
std::atomic<uint64_t> g_large_at_sample{0};
std::atomic<uint64_t> g_samples{0};

struct ClassTotals {
  uint64_t allocs[kClassCount];
  uint64_t frees[kClassCount];
};

void sum_labs(ClassTotals& t) {
  g_samples.fetch_add(1, std::memory_order_relaxed);
  for (unsigned c = 0; c < kClassCount; c++) {
    t.allocs[c] = 0;
    t.frees[c] = g_unbound_frees[c].load(std::memory_order_relaxed);
  }
  for (Lab* lab = lab_first(); lab != nullptr; lab = lab->all_next.load(std::memory_order_acquire)) {
    for (unsigned c = 0; c < kClassCount; c++) {
      t.allocs[c] += lab_allocs_of(lab, c);
      t.frees[c] += lab_frees_of(lab, c);
    }
    lab_add_pending_frees(lab, t.frees);
  }
}

// Counters of different threads are read at slightly different moments, so a
// class can momentarily show more frees than allocs; clamp to zero.
uint64_t live_of(const ClassTotals& t, unsigned c) {
  return t.allocs[c] > t.frees[c] ? t.allocs[c] - t.frees[c] : 0;
}

uint64_t live_bytes(const ClassTotals& t) {
  uint64_t live = large_live_bytes();
  g_large_at_sample.store(live, std::memory_order_relaxed);
  for (unsigned c = 0; c < kClassCount; c++) live += live_of(t, c) * class_block_size(c);
  return live;
}

void note_peak(uint64_t live) {
  uint64_t peak = g_peak_live.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_live.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

}  // namespace

void stats_count_unbound_frees(unsigned cls, uint64_t n) {
  g_unbound_frees[cls].fetch_add(n, std::memory_order_relaxed);
}
void stats_count_unbound_free(unsigned cls) { stats_count_unbound_frees(cls, 1); }

bool stats_large_rose() {
  return large_live_bytes() > g_large_at_sample.load(std::memory_order_relaxed);
}

uint64_t stats_peak_samples() { return g_samples.load(std::memory_order_relaxed); }

void stats_sample_peak() {
  ClassTotals t;
  sum_labs(t);
  note_peak(live_bytes(t));
}

void stats_fill(fw_stats_t* out) {
  std::memset(out, 0, sizeof(*out));
  ClassTotals t;
  sum_labs(t);
  LargeStats large = large_stats();
  out->live_bytes = live_bytes(t);
  note_peak(out->live_bytes);
  out->peak_live_bytes = g_peak_live.load(std::memory_order_relaxed);
  out->reserved_bytes = arena_reserved_bytes();
  out->committed_bytes = committed_bytes();
  // The peak is raised after the count (span_pool.cpp count_committed): a fill
  // between the two would show a peak below the figure.
  const uint64_t peak = peak_committed_bytes();
  out->peak_committed_bytes = peak > out->committed_bytes ? peak : out->committed_bytes;
  out->large_live_bytes = large.live_bytes;
  out->large_allocs = large.allocs;
  out->large_frees = large.frees;
  out->spans_pooled = pool_span_count();
  out->threads_live = lab_threads_live();
  out->threads_created = lab_threads_created();
  // By size: a plain twin's counts go to the class of its size (size_class.h).
  out->class_count = kSizeClasses;
  for (unsigned c = 0; c < kClassCount; c++) {
    fw_class_stats& cs = out->classes[sized_class(c)];
    cs.block_size = class_block_size(c);
    cs.allocs += t.allocs[c];
    cs.frees += t.frees[c];
    cs.live += live_of(t, c);
  }
  // Span states: one pass over the descriptors of the regions handed out.
  arena_each_vspan([out](const Span& s) {
    uint32_t state = Anchor::unpack(s.anchor.load(std::memory_order_relaxed)).state;
    if (state == kLarge || state == kLargeTail) {  // a live run's head and tails (large.cpp)
      out->spans_large++;
      return;
    }
    uint32_t c = s.cls.load(std::memory_order_relaxed);
    if (state == kHot)
      out->spans_hot++;
    else if (state == kFull)
      out->spans_full++;
    else if (state == kPartial)
      out->spans_partial++;
    else
      return;
    if (c < kClassCount) out->classes[sized_class(c)].spans++;
  });
}

void stats_print(int fd) {
  fw_stats_t s;
  stats_fill(&s);
  Line head;
  head.str("freeway statistics (").str(percpu_mode_name()).str(" caches)\n");
  head.write(fd);
#define FW_STAT_PRINT(field, doc)                                               \
  {                                                                             \
    Line l;                                                                     \
    l.str("  ").str(#field).str(": ").dec(s.field).str("  (").str(doc).str(")\n"); \
    l.write(fd);                                                                \
  }
  FW_STAT_FIELDS(FW_STAT_PRINT)
#undef FW_STAT_PRINT
  Line cols;
  cols.str("  class  block_size      allocs       frees        live  spans\n");
  cols.write(fd);
  for (unsigned c = 0; c < s.class_count; c++) {
    const fw_class_stats& cs = s.classes[c];
    if (cs.allocs == 0 && cs.spans == 0) continue;
    Line l;
    l.str("  ").dec(c).str("  ").dec(cs.block_size).str("  ").dec(cs.allocs).str("  ").dec(cs.frees)
        .str("  ").dec(cs.live).str("  ").dec(cs.spans).str("\n");
    l.write(fd);
  }
}

}  // namespace fw
