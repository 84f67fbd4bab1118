// core/stats.h: statistics. docs/stats.md explains every figure and its formula.
//
// The scalar figures of fw_stats_t are declared once here (FW_STAT_FIELDS);
// the printout, and later the telemetry record, are generated from the list,
// so a figure added to fw_stats_t and to this list shows up everywhere.
//
// Where the numbers come from:
//   per-class allocs/frees  summed over every LAB (single-writer counters read
//                           relaxed; per-CPU mode's sections write them too,
//                           percpu.h), plus frees made with no LAB (unbound)
//   live bytes              sum over classes of (allocs - frees) * block size,
//                           plus large_live_bytes
//   peak live bytes         the highest live figure seen by a sample: every
//                           FREEWAY_PEAK_SAMPLE-th span acquisition, every
//                           64th large block that leaves the large live bytes
//                           above the last sample's, and every fw_stats call
//   span counts             a walk of the descriptor table
//   reserved/committed      counters kept by the arena and the span-pool
#pragma once
#include "freeway.h"

namespace fw {

#define FW_STAT_FIELDS(X)                                                        \
  X(live_bytes, "bytes in blocks in use")                                        \
  X(peak_live_bytes, "highest live bytes sampled")                               \
  X(reserved_bytes, "address space reserved from the OS")                        \
  X(committed_bytes, "memory committed and not given back")                      \
  X(peak_committed_bytes, "highest committed bytes")                             \
  X(large_live_bytes, "live bytes in large and huge blocks")                     \
  X(large_allocs, "large and huge blocks allocated")                             \
  X(large_frees, "large and huge blocks freed")                                  \
  X(spans_hot, "spans owned by a thread cache")                                  \
  X(spans_full, "spans floating with few free blocks")                           \
  X(spans_partial, "spans waiting for reuse")                                    \
  X(spans_pooled, "free spans in the span-pool")                                 \
  X(spans_large, "spans holding large blocks")                                   \
  X(threads_live, "thread caches bound to running threads")                      \
  X(threads_created, "thread caches ever bound to a thread")

void stats_count_unbound_free(unsigned cls);
// n frees of class cls at once: the own list of a kept span another thread's
// free took to the pool (span.h, span_keep), which its owner no longer counts.
void stats_count_unbound_frees(unsigned cls, uint64_t n);
void stats_sample_peak();
// Whether the large live bytes are above what the last sample saw (a sample
// walks every LAB, so large blocks ask for one only when they rise: alloc.cpp).
bool stats_large_rose();
// How many times the LABs have been summed, samples and fw_stats calls (tests).
uint64_t stats_peak_samples();
void stats_fill(fw_stats_t* out);
void stats_print(int fd);

}  // namespace fw
