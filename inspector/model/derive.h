// inspector/model/derive.h: every figure the views show, derived from a snapshot.
// Each formula is written in docs/stats.md ("Telemetry figures").
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "inspector/model/snapshot.h"

namespace fwi {

constexpr unsigned kOccupancyBuckets = 10;  // 0-10%, 10-20%, ... 90-100% of a span's blocks in use

struct ClassFigures {
  unsigned cls = 0;
  uint32_t block_size = 0, capacity = 0;
  uint64_t allocs = 0, frees = 0, live_blocks = 0, live_bytes = 0;
  uint64_t spans_hot = 0, spans_full = 0, spans_partial = 0;
  uint64_t committed_bytes = 0;          // committed by the class's spans
  uint64_t block_slots = 0;              // blocks its spans in use hold (each span's capacity: less with a guard page)
  double fullness = 0;                   // live blocks / block_slots
  std::array<uint32_t, kOccupancyBuckets> occupancy{};  // spans per bucket of (carved - remote_count) / capacity
};

struct LabFigures {
  uint32_t id = 0, kind = 0;
  bool alive = false;                    // bound to a running thread, or a CPU cache
  int32_t cpu = -1;                      // per-CPU mode: the CPU whose slot holds it (-1: none now)
  uint32_t hot_spans = 0;
  uint64_t bytes_held = 0;               // committed bytes of its hot spans
  uint64_t free_bytes_held = 0;          // bytes of its owned spans not carved or on their remote or own lists (what it can hand out, less its private lists)
  uint32_t pending = 0;
  uint64_t allocs = 0, frees = 0;
};

struct Figures {
  double time_s = 0;                      // seconds since publishing started
  uint64_t live = 0, peak_live = 0, committed = 0, peak_committed = 0, reserved = 0, rss = 0;
  double blowup = 0;                      // committed / live (0 when live is 0)
  double blowup_peak = 0;                 // committed / peak live (Hoard's definition)
  // Fragmentation: committed but not live.
  uint64_t frag_free_in_spans = 0;        // committed bytes of small spans not in live blocks
  uint64_t frag_pooled = 0;               // committed bytes of empty (FREE) spans in the pool
  uint64_t frag_large_slack = 0;          // committed bytes of large/huge runs beyond their usable size
  uint64_t metadata = 0;                  // committed bytes of the descriptor table
  std::array<uint64_t, FWT_SPAN_STATE_COUNT> spans_by_state{};
  std::vector<ClassFigures> classes;      // one per class with any span or allocation
  std::vector<LabFigures> labs;
  uint64_t threads_live = 0;
  size_t caches_in_cpu_slots = 0;         // per-CPU mode: caches a CPU's slot holds (LabFigures::cpu >= 0)
  uint64_t events_missed = 0, events_dropped = 0;
};

Figures derive(const Snapshot& s);

// Blocks of a small span in use as far as a reader can tell: carved minus those
// on its remote list and on its owner's list in the descriptor (own_free,
// format 1.2). For a class's hot span its cache's private free list is not
// published, so this is an upper bound there.
uint64_t span_blocks_in_use(const fwt_span& sp);

// "FREE", "HOT", ... "UNUSED" ("?" out of range).
const char* state_name(unsigned state);
// Bytes for people: "812 B", "1.50 KiB", "23.4 MiB", "118 GiB" (powers of 1024).
std::string format_bytes(uint64_t bytes);

// The equations of span_is_valid (core/span.h), checked from outside on a
// consistent snapshot. Each violation is one line naming the span index.
// UNSTABLE spans are skipped (their fields may mix two moments).
std::vector<std::string> check_spans(const Snapshot& s);

// One line per event, e.g. "12.345 s  commit span 17  64 KiB".
std::string describe_event(const fwt_event& e, uint64_t start_ns);

}  // namespace fwi
