// inspector/model/snapshot.h: one consistent copy of a process's telemetry.
//
// The model knows nothing of any GUI: the GUI, the CLI and the tests share it.
// A Snapshot is plain data copied out of a segment (or a recording) and
// validated (every count within its capacity, every index in bounds); nothing
// in it points into the watched process's memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freeway_telemetry.h"

namespace fwi {

struct Snapshot {
  // Identity (from the header).
  uint64_t pid = 0;
  uint64_t process_start_ticks = 0;
  std::string exe;
  uint32_t version_major = 0, version_minor = 0;
  uint32_t vspans_per_region = 0, vspan_shift = 0, page_size = 0;
  uint64_t hz = 0;
  // The snapshot proper (taken under the segment's sequence lock).
  fwt_process process{};
  std::vector<fwt_class> classes;   // process.class_count records
  std::vector<fwt_region> regions;  // process.region_count records
  std::vector<fwt_span> spans;      // process.span_count = region_count * vspans_per_region
  std::vector<fwt_lab> labs;        // process.lab_count records
  // Events read since the previous snapshot of the same reader, oldest first.
  std::vector<fwt_event> events;
  uint64_t events_missed = 0;   // overwritten before this reader could read them (cumulative)
  uint64_t events_dropped = 0;  // the writer's own dropped counter (header.event_dropped)
  uint64_t rss_bytes() const { return process.rss_bytes; }
};

}  // namespace fwi
