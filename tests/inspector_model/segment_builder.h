// tests/inspector_model/segment_builder.h: lays out a telemetry segment in
// memory exactly as include/freeway_telemetry.h describes it, with the tables,
// records and events a test chooses. Shared by the model's tests and the
// reader's fuzz harness (which mutates the segments it builds).
//
// The layout: the header at 0, then the process record, classes, regions,
// spans, labs and the event ring, each table 8-byte aligned (the real writer
// puts each on its own page; the reader must not care). `extra` bytes are
// appended to every record and to the header, as a newer minor version would.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "freeway_telemetry.h"

namespace fwitest {

struct SegmentBuilder {
  uint64_t pid = 4242, start_ticks = 777, hz = 20;
  std::string exe = "synthetic";
  uint16_t minor = FWT_VERSION_MINOR;
  uint32_t extra = 0;  // bytes appended to each record and the header (a newer minor)
  uint32_t span_bytes = sizeof(fwt_span);  // FWT_SPAN_SIZE_1_0: span records as a 1.0/1.1 writer has them
  uint32_t vspans_per_region = 8, vspan_shift = 20, page_size = 4096;
  uint32_t class_capacity = 8, region_capacity = 4, lab_capacity = 8, event_capacity = 16;
  uint64_t snapshot_seq = 2;
  fwt_process process{};
  std::vector<fwt_class> classes;
  std::vector<fwt_region> regions;
  std::vector<fwt_span> spans;  // regions.size() * vspans_per_region (fill() pads with UNUSED)
  std::vector<fwt_lab> labs;
  uint64_t event_next = 0, event_dropped = 0;
  std::vector<std::pair<uint64_t, fwt_event>> events;  // (sequence number n, event) as written

  uint32_t span_capacity() const { return region_capacity * vspans_per_region; }

  // Writes event n = event_next++ (complete: seq = 2n + 2).
  void add_event(uint32_t kind, uint32_t arg, uint64_t addr, uint64_t size, uint64_t time_ns) {
    fwt_event e{};
    uint64_t n = event_next++;
    e.seq = 2 * n + 2;
    e.time_ns = time_ns;
    e.kind = kind;
    e.arg = arg;
    e.addr = addr;
    e.size = size;
    events.emplace_back(n, e);
  }

  // Offsets of the layout build() makes.
  struct Offsets {
    uint64_t header_size, process, classes, regions, spans, labs, events, total;
  };
  Offsets offsets() const {
    auto up8 = [](uint64_t x) { return (x + 7) & ~uint64_t(7); };
    Offsets o{};
    o.header_size = sizeof(fwt_header) + up8(extra);
    o.process = up8(o.header_size);
    o.classes = up8(o.process + rec(sizeof(fwt_process)));
    o.regions = up8(o.classes + uint64_t(class_capacity) * rec(sizeof(fwt_class)));
    o.spans = up8(o.regions + uint64_t(region_capacity) * rec(sizeof(fwt_region)));
    o.labs = up8(o.spans + uint64_t(span_capacity()) * rec(span_bytes));
    o.events = up8(o.labs + uint64_t(lab_capacity) * rec(sizeof(fwt_lab)));
    o.total = o.events + uint64_t(event_capacity) * rec(sizeof(fwt_event));
    return o;
  }
  uint32_t rec(size_t ours) const { return uint32_t(ours + ((extra + 7) & ~7u)); }

  // The counts of the process record follow the tables unless a test set
  // them otherwise after calling sync_counts().
  void sync_counts() {
    process.class_count = uint32_t(classes.size());
    process.region_count = uint32_t(regions.size());
    process.span_count = uint32_t(spans.size());
    process.lab_count = uint32_t(labs.size());
  }
  // Pads the span table to regions.size() * vspans_per_region with UNUSED spans.
  void fill() {
    fwt_span unused{};
    unused.state = FWT_SPAN_UNUSED;
    spans.resize(regions.size() * vspans_per_region, unused);
  }

  std::vector<uint8_t> build() const {
    Offsets o = offsets();
    std::vector<uint8_t> b(o.total, 0);
    fwt_header h{};
    h.magic = FWT_MAGIC;
    h.version_major = FWT_VERSION_MAJOR;
    h.version_minor = minor;
    h.header_size = uint32_t(o.header_size);
    h.segment_size = o.total;
    h.process_size = rec(sizeof(fwt_process));
    h.class_size = rec(sizeof(fwt_class));
    h.region_size = rec(sizeof(fwt_region));
    h.span_size = rec(span_bytes);
    h.lab_size = rec(sizeof(fwt_lab));
    h.event_size = rec(sizeof(fwt_event));
    h.class_capacity = class_capacity;
    h.region_capacity = region_capacity;
    h.span_capacity = span_capacity();
    h.lab_capacity = lab_capacity;
    h.event_capacity = event_capacity;
    h.vspans_per_region = vspans_per_region;
    h.vspan_shift = vspan_shift;
    h.page_size = page_size;
    h.process_offset = o.process;
    h.classes_offset = o.classes;
    h.regions_offset = o.regions;
    h.spans_offset = o.spans;
    h.labs_offset = o.labs;
    h.events_offset = o.events;
    h.pid = pid;
    h.process_start_ticks = start_ticks;
    std::strncpy(h.exe, exe.c_str(), FWT_EXE_MAX - 1);
    h.hz = hz;
    h.snapshot_seq = snapshot_seq;
    h.event_next = event_next;
    h.event_dropped = event_dropped;
    h.publisher_state = 1;
    std::memcpy(b.data(), &h, sizeof h);
    // Extra bytes of a newer minor are filled with a pattern the reader must ignore.
    for (uint64_t i = sizeof h; i < o.header_size; i++) b[i] = 0xA5;
    put(&b, o.process, rec(sizeof(fwt_process)), &process, sizeof process);
    for (size_t i = 0; i < classes.size() && i < class_capacity; i++)
      put(&b, o.classes + i * rec(sizeof(fwt_class)), rec(sizeof(fwt_class)), &classes[i], sizeof(fwt_class));
    for (size_t i = 0; i < regions.size() && i < region_capacity; i++)
      put(&b, o.regions + i * rec(sizeof(fwt_region)), rec(sizeof(fwt_region)), &regions[i], sizeof(fwt_region));
    for (size_t i = 0; i < spans.size() && i < span_capacity(); i++)
      put(&b, o.spans + i * rec(span_bytes), rec(span_bytes), &spans[i], span_bytes < sizeof(fwt_span) ? span_bytes : sizeof(fwt_span));
    for (size_t i = 0; i < labs.size() && i < lab_capacity; i++)
      put(&b, o.labs + i * rec(sizeof(fwt_lab)), rec(sizeof(fwt_lab)), &labs[i], sizeof(fwt_lab));
    for (const auto& [n, e] : events)
      put(&b, o.events + (n % event_capacity) * rec(sizeof(fwt_event)), rec(sizeof(fwt_event)), &e, sizeof e);
    return b;
  }

  static void put(std::vector<uint8_t>* b, uint64_t off, uint32_t size, const void* r, size_t ours) {
    std::memcpy(b->data() + off, r, ours);
    for (uint64_t i = ours; i < size; i++) (*b)[off + i] = 0x5A;
  }
};

inline fwt_header* header_of(std::vector<uint8_t>& b) { return reinterpret_cast<fwt_header*>(b.data()); }

// A small, valid heap: two classes, one arena region of 8 virtual spans (one
// of each state), two thread caches, a few events. The numbers are chosen so
// that every derived figure can be worked out by hand (see the model tests).
inline SegmentBuilder small_heap() {
  SegmentBuilder sb;
  sb.process.time_ns = 12'500'000'000ull;
  sb.process.start_ns = 2'500'000'000ull;
  sb.process.snapshots = 200;
  sb.process.live_bytes = 1'000'000;
  sb.process.peak_live_bytes = 2'000'000;
  sb.process.committed_bytes = 3'000'000;
  sb.process.peak_committed_bytes = 3'500'000;
  sb.process.reserved_bytes = uint64_t(1) << 30;
  sb.process.rss_bytes = 5'000'000;
  sb.process.metadata_bytes = 65536;
  sb.process.threads_live = 1;
  sb.process.reuse_percent = 25;
  sb.classes.push_back(fwt_class{16, 65536, 4096, 1024, 5000, 1000, 4000});
  sb.classes.push_back(fwt_class{1024, 65536, 64, 16, 100, 90, 10});
  sb.regions.push_back(fwt_region{0x7f0000000000ull, uint64_t(1) << 30, FWT_REGION_ARENA, 7});
  fwt_span s[8]{};
  // state, flags, cls, owner, carved, remote_count, capacity, run_len, committed, large_size
  s[0] = {FWT_SPAN_HOT, 0, 0, 1, 3000, 100, 4096, 0, 65536, 0};
  s[1] = {FWT_SPAN_FULL, 0, 0, 0, 4096, 500, 4096, 0, 65536, 0};
  s[2] = {FWT_SPAN_PARTIAL, FWT_SPAN_LINKED, 1, 0, 64, 54, 64, 0, 65536, 0};
  s[3] = {FWT_SPAN_FREE, 0, 0, 0, 0, 0, 0, 0, 65536, 0};
  s[4] = {FWT_SPAN_LARGE, 0, 0, 0, 0, 0, 0, 2, 1572864, 1500000};
  s[5] = {FWT_SPAN_LARGE_TAIL, 0, 0, 0, 0, 0, 0, 4, 0, 0};
  s[6] = {FWT_SPAN_FREE, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  s[7] = {FWT_SPAN_UNUSED, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  sb.spans.assign(s, s + 8);
  sb.labs.push_back(fwt_lab{0, FWT_LAB_THREAD, 5000, 1000, 3, 0});
  sb.labs.push_back(fwt_lab{1, FWT_LAB_IDLE, 100, 90, 0, 0});
  sb.sync_counts();
  sb.add_event(FWT_EV_TELEMETRY_START, 0, 0, 1 << 20, 2'500'000'000ull);
  sb.add_event(FWT_EV_REGION_RESERVE, 0, 0x7f0000000000ull, uint64_t(1) << 30, 2'600'000'000ull);
  sb.add_event(FWT_EV_COMMIT, 3, 0x7f0000300000ull, 65536, 3'000'000'000ull);
  return sb;
}

}  // namespace fwitest
