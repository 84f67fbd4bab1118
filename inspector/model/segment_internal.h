// inspector/model/segment_internal.h: what segment.cpp (the reader, every OS)
// shares with segment_posix.cpp and segment_windows.cpp (finding and mapping
// segments). Not part of the model's interface.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "freeway_telemetry.h"
#include "inspector/model/printf.h"
#include "inspector/model/segment.h"

namespace fwi::detail {


// Bounds on what a header may declare (a hostile header must not make the
// reader allocate or loop absurdly). docs/recording.md lists them too.
inline constexpr uint32_t kMaxClasses = 64;
inline constexpr uint32_t kMaxRegions = 1u << 20;
inline constexpr uint32_t kMaxVspansPerRegion = 1u << 20;
inline constexpr uint32_t kMaxSpans = 1u << 26;
inline constexpr uint32_t kMaxLabs = 1u << 20;
inline constexpr uint32_t kMaxEvents = 1u << 20;
inline constexpr uint32_t kMaxRecordSize = 1u << 16;   // one record of any table
inline constexpr uint32_t kMinVspanShift = 12, kMaxVspanShift = 40;

// Retries of take(): about a second in all on a live segment.
inline constexpr std::chrono::milliseconds kTakePatience{1000};
inline constexpr std::chrono::microseconds kOddWait{100};

inline bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

inline uint64_t load_acquire(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}
inline uint64_t load_relaxed(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_RELAXED);
}

std::string fmt(const char* f, ...) __attribute__((format(FWI_PRINTF, 1, 2)));

// The exe name from a header: at most FWT_EXE_MAX bytes, NUL or not, made
// printable (printable_exe).
std::string exe_of(const fwt_header& h);

// One table: capacity records of `size` bytes (>= ours) at `offset`.
struct Table {
  uint64_t offset = 0;
  uint32_t size = 0, capacity = 0;
};

// Checks that [offset, offset + capacity * size) lies inside [0, limit),
// without overflow. The record size was checked against ours already.
inline bool table_inside(const Table& t, uint64_t limit) {
  uint64_t bytes, end;
  if (__builtin_mul_overflow(uint64_t(t.capacity), uint64_t(t.size), &bytes)) return false;
  if (__builtin_add_overflow(t.offset, bytes, &end)) return false;
  return end <= limit;
}

// The validated geometry of a segment (from its header, which never changes
// after the writer publishes the magic).
struct Layout {
  Table process, classes, regions, spans, labs, events;
  uint32_t vspans_per_region = 0;
  uint64_t segment_size = 0;
};

// Validates a header against the bytes available (`avail`: the mapped or
// buffer size). Returns an empty string or one line (without the "process N:"
// prefix, which the caller adds).
std::string validate_header(const fwt_header& h, uint64_t avail, Layout* out);

// A writer's records may be bigger (a newer minor: its extra fields are
// skipped) or, for a record that grew since x.0, smaller (an older minor: the
// fields it lacks read as 0).
template <class T>
void copy_table(const uint8_t* base, const Table& t, uint32_t count, std::vector<T>* v) {
  v->assign(count, T{});
  const uint8_t* p = base + t.offset;
  if (t.size == sizeof(T)) {
    if (count != 0) std::memcpy(v->data(), p, size_t(count) * sizeof(T));
    return;
  }
  const size_t n = t.size < sizeof(T) ? t.size : sizeof(T);
  for (uint32_t i = 0; i < count; i++) std::memcpy(&(*v)[i], p + size_t(i) * t.size, n);
}

// Validates the counts of a copied process record against the layout.

std::string validate_counts(const fwt_process& p, const Layout& L);

// The OS's handle of a mapped segment (POSIX: the file descriptor; Windows:
// the section handle); -1 for bytes held in memory.
struct OsView {
  intptr_t handle = -1;
};
// Whether pid runs and is the process whose start time, in the OS's units
// (the writer's process_start_ticks), is start_ticks.
bool same_process(uint64_t pid, uint64_t start_ticks);
// Unmaps base (mapped bytes) and closes the handle.
void os_view_close(OsView& v, const uint8_t* base, size_t mapped);
// Whether the segment still holds segment_size bytes (POSIX: a file can be
// truncated under its mapping; a Windows section cannot shrink).
bool os_view_intact(const OsView& v, uint64_t segment_size);
// Whether process pid still maps the segment. POSIX: a process that exec'd a
// program without freeway keeps its pid and start time but no longer
// publishes, and its segment stays until it exits (true when pid's mappings
// cannot be read: no way to tell). Windows: the section lives only while
// the writer holds it, so always true.
bool os_view_mapped_by(const OsView& v, uint64_t pid);

}  // namespace fwi::detail

namespace fwi {
using namespace fwi::detail;

struct Segment::Impl {
  // Either a read-only view of a published segment (os.handle >= 0) or owned bytes.
  OsView os;
  const uint8_t* base = nullptr;
  size_t mapped = 0;
  std::vector<uint8_t> bytes;
  std::string path;
  std::string label;  // "process N" or "segment": the prefix of every error
  uint64_t pid = 0, start_ticks = 0;
  fwt_header header{};  // the header as validated at attach (only atomics change after)
  Layout layout;
  bool live = false;              // a file of a running process (retries make sense)
  uint64_t next_event = 0;        // the next event sequence number this reader wants
  uint64_t events_missed = 0;     // cumulative
  // The event the read stopped at while a later one was complete, and since
  // when (read_events passes it after kStuckSlot).
  uint64_t stuck_event = UINT64_MAX;
  std::chrono::steady_clock::time_point stuck_since;

  ~Impl() {
    if (os.handle >= 0) os_view_close(os, base, mapped);
  }
  std::string err(const std::string& what) const { return label + ": " + what; }

  // Validates the header at base (avail bytes) and sets up the reader.
  bool init(size_t avail, std::string* e) {
    if (avail < sizeof(fwt_header)) {
      *e = err(fmt("segment of %zu bytes is smaller than a header (%zu)", avail, sizeof(fwt_header)));
      return false;
    }
    std::memcpy(&header, base, sizeof header);
    header.magic = load_acquire(base + offsetof(fwt_header, magic));
    std::string v = validate_header(header, avail, &layout);
    if (!v.empty()) {
      *e = err(v);
      return false;
    }
    start_ticks = header.process_start_ticks;
    uint64_t en = load_acquire(base + offsetof(fwt_header, event_next));
    next_event = en > header.event_capacity ? en - header.event_capacity : 0;
    return true;
  }

  // take() under the SIGBUS guard; builds the snapshot in *scratch.
  bool take_guarded(Snapshot* scratch, Snapshot* out, std::string* err);

  // One attempt at a consistent copy. 1: done; 0: torn or odd (retry); -1: error.
  int try_take(Snapshot* s, std::string* e) {
    const uint64_t seq_off = offsetof(fwt_header, snapshot_seq);
    uint64_t s1 = load_acquire(base + seq_off);
    if ((s1 & 1) != 0) return 0;
    std::memcpy(&s->process, base + layout.process.offset, sizeof(fwt_process));
    std::string bad = validate_counts(s->process, layout);
    if (bad.empty()) {
      copy_table(base, layout.classes, s->process.class_count, &s->classes);
      copy_table(base, layout.regions, s->process.region_count, &s->regions);
      copy_table(base, layout.spans, s->process.span_count, &s->spans);
      copy_table(base, layout.labs, s->process.lab_count, &s->labs);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    uint64_t s2 = load_relaxed(base + seq_off);
    if (s1 != s2) return 0;
    if (!bad.empty()) {  // consistent, and still wrong: the writer's fault (or a hostile one)
      *e = err(bad);
      return -1;
    }
    return 1;
  }

  // A writer holds its slot for well under a microsecond; one held this long
  // is frozen (a signal handler, a debugger) or was given up (above).
  static constexpr std::chrono::milliseconds kStuckSlot{250};

  // Whether one of the (up to 64) events after n, below en, is complete.
  bool later_complete(const uint8_t* ring, uint64_t n, uint64_t en) const {
    const uint64_t cap = header.event_capacity;
    for (uint64_t m = n + 1; m < en && m <= n + 64; m++) {
      const uint8_t* slot = ring + (m & (cap - 1)) * uint64_t(layout.events.size);
      if (load_acquire(slot + offsetof(fwt_event, seq)) == 2 * m + 2) return true;
    }
    return false;
  }

  // Reads the events completed since the last call (docs/telemetry.md).
  void read_events(Snapshot* s) {
    s->events.clear();
    const uint64_t cap = header.event_capacity;
    const uint64_t en = load_acquire(base + offsetof(fwt_header, event_next));
    if (en > cap && next_event < en - cap) {  // fell more than a lap behind
      events_missed += (en - cap) - next_event;
      next_event = en - cap;
    }
    const uint8_t* ring = base + layout.events.offset;
    uint64_t n = next_event;
    for (; n < en && s->events.size() < cap; n++) {
      const uint8_t* slot = ring + (n & (cap - 1)) * uint64_t(layout.events.size);
      const uint64_t want = 2 * n + 2;
      uint64_t seq = load_acquire(slot + offsetof(fwt_event, seq));
      if (seq < want) {
        // Still being written: next time. Unless a later event is complete
        // and this one stays short for kStuckSlot: then its writer froze in
        // it (2n+1: counted as missed) or never got it, having found an older
        // lap's writer frozen there (less: the writer counted it as dropped),
        // and waiting longer would stop the stream until the next lap.
        if (!later_complete(ring, n, en)) break;
        const auto now = std::chrono::steady_clock::now();
        if (stuck_event != n) {
          stuck_event = n;
          stuck_since = now;
          break;
        }
        if (now - stuck_since < kStuckSlot) break;
        if (seq == want - 1) events_missed++;
        continue;
      }
      if (seq > want) {
        events_missed++;
        continue;
      }
      fwt_event ev;
      std::memcpy(&ev, slot, sizeof ev);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (load_relaxed(slot + offsetof(fwt_event, seq)) != want) {
        events_missed++;  // overwritten while copied
        continue;
      }
      ev.seq = want;
      s->events.push_back(ev);
    }
    next_event = n;
    s->events_missed = events_missed;
    s->events_dropped = __atomic_load_n(reinterpret_cast<const uint64_t*>(base + offsetof(fwt_header, event_dropped)),
                                        __ATOMIC_RELAXED);
  }
};

}  // namespace fwi
