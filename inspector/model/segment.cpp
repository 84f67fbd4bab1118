// inspector/model/segment.cpp: reading telemetry segments, on every OS.
//
// The reader's rules are those of docs/telemetry.md ("Reading a consistent
// snapshot", "Reading events"). Everything read from a segment is treated as
// hostile: the header's geometry is validated once (every table inside the
// segment, all arithmetic overflow-checked), each snapshot is validated after
// it is copied, and no size read from the segment reaches an allocation
// unless it was bounded by the segment's own size first.
//
// Memory orders (the writer is core/telemetry.cpp):
//   header.snapshot_seq   acquire load before the copy; acquire fence, then a
//                         relaxed load after it (the sequence-lock read side)
//   header.event_next     acquire load (events below it were claimed)
//   header.event_dropped  relaxed load (a counter shown as is)
//   header.magic          acquire load (the writer stores it last, release)
//   fwt_event.seq         acquire load before copying a slot; acquire fence,
//                         then a relaxed load after it
// Every other field is copied with memcpy and only trusted once the sequence
// word confirms the copy.
//
// Finding and mapping a segment is the OS's part: segment_posix.cpp
// (/dev/shm/freeway.<pid>) and segment_windows.cpp (Local\freeway.<pid>).
#include "inspector/model/segment.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <thread>

#include "inspector/model/segment_internal.h"

namespace fwi {

std::string printable_exe(const char* name, size_t n) {
  std::string s(name, n);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

}  // namespace fwi

namespace fwi::detail {

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string exe_of(const fwt_header& h) { return printable_exe(h.exe, strnlen(h.exe, FWT_EXE_MAX)); }

std::string validate_header(const fwt_header& h, uint64_t avail, Layout* out) {
  if (h.magic != FWT_MAGIC) return "not a freeway telemetry segment (bad magic)";
  if (h.version_major != FWT_VERSION_MAJOR)
    return fmt("telemetry format %u.%u, this inspector reads %u.x", unsigned(h.version_major),
               unsigned(h.version_minor), unsigned(FWT_VERSION_MAJOR));
  if (h.header_size < sizeof(fwt_header))
    return fmt("header size %u is smaller than version %u.0's %zu bytes", h.header_size,
               unsigned(FWT_VERSION_MAJOR), sizeof(fwt_header));
  if (h.segment_size > avail)
    return fmt("segment size %llu is larger than the %llu bytes present",
               static_cast<unsigned long long>(h.segment_size), static_cast<unsigned long long>(avail));
  if (h.header_size > h.segment_size)
    return fmt("header size %u is beyond the segment's %llu bytes", h.header_size,
               static_cast<unsigned long long>(h.segment_size));

  struct Rec {
    const char* name;
    uint32_t size;
    size_t oldest;  // the record's size in version major.0 (later minors append fields)
  } recs[] = {{"process", h.process_size, sizeof(fwt_process)}, {"class", h.class_size, sizeof(fwt_class)},
              {"region", h.region_size, sizeof(fwt_region)},    {"span", h.span_size, FWT_SPAN_SIZE_1_0},
              {"lab", h.lab_size, sizeof(fwt_lab)},             {"event", h.event_size, sizeof(fwt_event)}};
  for (const Rec& r : recs) {
    if (r.size < r.oldest)
      return fmt("%s record size %u is smaller than version %u.0's %zu bytes", r.name, r.size,
                 unsigned(FWT_VERSION_MAJOR), r.oldest);
    if (r.size > kMaxRecordSize) return fmt("%s record size %u is absurd (over %u)", r.name, r.size, kMaxRecordSize);
    if (r.size % 8 != 0) return fmt("%s record size %u is not a multiple of 8", r.name, r.size);
  }

  if (h.class_capacity > kMaxClasses) return fmt("class capacity %u over %u", h.class_capacity, kMaxClasses);
  if (h.region_capacity > kMaxRegions) return fmt("region capacity %u over %u", h.region_capacity, kMaxRegions);
  if (h.vspans_per_region == 0 || h.vspans_per_region > kMaxVspansPerRegion || !is_pow2(h.vspans_per_region))
    return fmt("vspans per region %u is not a power of two in [1, %u]", h.vspans_per_region, kMaxVspansPerRegion);
  if (h.vspan_shift < kMinVspanShift || h.vspan_shift > kMaxVspanShift)
    return fmt("vspan shift %u outside [%u, %u]", h.vspan_shift, kMinVspanShift, kMaxVspanShift);
  uint64_t span_limit = uint64_t(h.region_capacity) * h.vspans_per_region;  // < 2^40, no overflow
  if (h.span_capacity > span_limit || h.span_capacity > kMaxSpans)
    return fmt("span capacity %u over regions x vspans (%llu) or %u", h.span_capacity,
               static_cast<unsigned long long>(span_limit), kMaxSpans);
  if (h.lab_capacity > kMaxLabs) return fmt("lab capacity %u over %u", h.lab_capacity, kMaxLabs);
  if (h.event_capacity > kMaxEvents || !is_pow2(h.event_capacity))
    return fmt("event capacity %u is not a power of two up to %u", h.event_capacity, kMaxEvents);

  Layout L;
  L.process = {h.process_offset, h.process_size, 1};
  L.classes = {h.classes_offset, h.class_size, h.class_capacity};
  L.regions = {h.regions_offset, h.region_size, h.region_capacity};
  L.spans = {h.spans_offset, h.span_size, h.span_capacity};
  L.labs = {h.labs_offset, h.lab_size, h.lab_capacity};
  L.events = {h.events_offset, h.event_size, h.event_capacity};
  L.vspans_per_region = h.vspans_per_region;
  L.segment_size = h.segment_size;
  struct Named {
    const char* name;
    const Table* t;
  } tables[] = {{"process", &L.process}, {"classes", &L.classes}, {"regions", &L.regions},
                {"spans", &L.spans},     {"labs", &L.labs},       {"events", &L.events}};
  for (const Named& n : tables) {
    if (n.t->offset % 8 != 0)
      return fmt("%s table offset %llu is not 8-byte aligned", n.name, static_cast<unsigned long long>(n.t->offset));
    if (n.t->offset < h.header_size)
      return fmt("%s table at %llu overlaps the header", n.name, static_cast<unsigned long long>(n.t->offset));
    if (!table_inside(*n.t, h.segment_size))
      return fmt("%s table (offset %llu, %u x %u bytes) is outside the %llu-byte segment", n.name,
                 static_cast<unsigned long long>(n.t->offset), n.t->capacity, n.t->size,
                 static_cast<unsigned long long>(h.segment_size));
  }
  *out = L;
  return "";
}

// Copies `count` records of table t into v, stepping by the writer's record
// size and keeping our sizeof of each (a newer minor appends fields).

std::string validate_counts(const fwt_process& p, const Layout& L) {
  if (p.class_count > L.classes.capacity)
    return fmt("class count %u over capacity %u", p.class_count, L.classes.capacity);
  if (p.region_count > L.regions.capacity)
    return fmt("region count %u over capacity %u", p.region_count, L.regions.capacity);
  uint64_t want = uint64_t(p.region_count) * L.vspans_per_region;
  if (p.span_count != want)
    return fmt("span count %u is not region count x vspans per region (%llu)", p.span_count,
               static_cast<unsigned long long>(want));
  if (p.span_count > L.spans.capacity) return fmt("span count %u over capacity %u", p.span_count, L.spans.capacity);
  if (p.lab_count > L.labs.capacity) return fmt("lab count %u over capacity %u", p.lab_count, L.labs.capacity);
  return "";
}

}  // namespace fwi::detail

namespace fwi {

std::string validate_snapshot(const Snapshot& s, uint32_t lab_capacity) {
  const fwt_process& p = s.process;
  if (p.class_count != s.classes.size() || p.region_count != s.regions.size() || p.span_count != s.spans.size() ||
      p.lab_count != s.labs.size())
    return "the process record's counts differ from the tables";
  if (s.classes.size() > kMaxClasses) return fmt("class count %zu over %u", s.classes.size(), kMaxClasses);
  if (uint64_t(s.regions.size()) * s.vspans_per_region != s.spans.size())
    return fmt("span count %zu is not region count %zu x vspans per region %u", s.spans.size(), s.regions.size(),
               s.vspans_per_region);
  for (size_t c = 0; c < s.classes.size(); c++)
    if (s.classes[c].block_size == 0) return fmt("class %zu: block size 0", c);
  for (size_t r = 0; r < s.regions.size(); r++) {
    const fwt_region& g = s.regions[r];
    if (g.kind > FWT_REGION_HUGE) return fmt("region %zu: unknown kind %u", r, g.kind);
    if (g.next_vspan > s.vspans_per_region)
      return fmt("region %zu: next vspan %u over %u", r, g.next_vspan, s.vspans_per_region);
  }
  const size_t n = s.spans.size();
  for (size_t i = 0; i < n; i++) {
    const fwt_span& sp = s.spans[i];
    if (sp.state >= FWT_SPAN_STATE_COUNT) return fmt("span %zu: unknown state %u", i, unsigned(sp.state));
    bool small = sp.state == FWT_SPAN_HOT || sp.state == FWT_SPAN_FULL || sp.state == FWT_SPAN_PARTIAL;
    if (small && sp.cls >= s.classes.size())
      return fmt("span %zu: class %u over class count %zu", i, unsigned(sp.cls), s.classes.size());
    if (sp.carved > sp.capacity) return fmt("span %zu: carved %u over capacity %u", i, sp.carved, sp.capacity);
    if (sp.remote_count > sp.capacity)
      return fmt("span %zu: remote count %u over capacity %u", i, sp.remote_count, sp.capacity);
    if (sp.own_free > sp.capacity) return fmt("span %zu: own list %u over capacity %u", i, sp.own_free, sp.capacity);
    if (sp.state == FWT_SPAN_LARGE_TAIL && sp.run_len >= n)
      return fmt("span %zu: large tail names head %u beyond %zu spans", i, sp.run_len, n);
    if (sp.owner > lab_capacity) return fmt("span %zu: owner %u over lab capacity %u", i, sp.owner, lab_capacity);
  }
  return "";
}

Segment::~Segment() = default;

std::unique_ptr<Segment> Segment::adopt(std::unique_ptr<Impl> impl, bool runs, std::string* err) {
  std::unique_ptr<Segment> s(new Segment);
  s->impl_ = std::move(impl);
  Impl& I = *s->impl_;
  I.live = true;
  const std::string& label = I.label;
  // A publisher that is starting has made the file but not stored the
  // magic yet (publisher_state 0 until its header is written, then 1 while it
  // writes the first snapshot); give it a second. A stopped publisher zeroes
  // the magic (publisher_state 2): say so before calling it corrupt.
  for (int i = 0; i < 100 && runs && load_acquire(I.base + offsetof(fwt_header, magic)) == 0 &&
                  load_acquire(I.base + offsetof(fwt_header, publisher_state)) != 2;
       i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (load_acquire(I.base + offsetof(fwt_header, magic)) == 0) {
    *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)"
                : label + ": stale segment (the process has exited)";
    return nullptr;
  }
  if (!I.init(I.mapped, err)) return nullptr;
  if (I.header.pid != I.pid) {
    *err = label + ": the segment names pid " + std::to_string(I.header.pid);
    return nullptr;
  }
  if (!same_process(I.pid, I.start_ticks)) {
    *err = label + ": stale segment (the process has exited)";
    return nullptr;
  }
  if (!os_view_mapped_by(I.os, I.pid)) {
    *err = label + ": stale segment (the process no longer maps it: it ran exec without freeway)";
    return nullptr;
  }
  return s;
}

bool Segment::alive() const {
  if (!impl_->live) return true;
  return same_process(impl_->pid, impl_->start_ticks) && os_view_mapped_by(impl_->os, impl_->pid);
}

std::unique_ptr<Segment> Segment::from_bytes(std::vector<uint8_t> bytes, std::string* err) {
  std::unique_ptr<Segment> s(new Segment);
  s->impl_ = std::make_unique<Impl>();
  Impl& I = *s->impl_;
  I.bytes = std::move(bytes);
  // Atomic loads need 8-byte alignment: vector storage from operator new is
  // aligned to at least 16.
  I.base = I.bytes.data();
  I.label = "segment";
  I.path = "(memory)";
  if (!I.init(I.bytes.size(), err)) return nullptr;
  I.pid = I.header.pid;
  return s;
}

bool Segment::Impl::take_guarded(Snapshot* scratch, Snapshot* out, std::string* err) {
  Impl& I = *this;
  // A mapping read past the end of its file faults: check the size first.
  if (I.os.handle >= 0 && !os_view_intact(I.os, I.layout.segment_size)) {
    *err = I.err("the segment was truncated (the process stopped publishing)");
    return false;
  }
  if (load_acquire(I.base + offsetof(fwt_header, magic)) != FWT_MAGIC) {
    *err = I.err("the process stopped publishing telemetry");
    return false;
  }
  Snapshot& s = *scratch;
  s.pid = I.header.pid;
  s.process_start_ticks = I.header.process_start_ticks;
  s.exe = exe_of(I.header);
  s.version_major = I.header.version_major;
  s.version_minor = I.header.version_minor;
  s.vspans_per_region = I.header.vspans_per_region;
  s.vspan_shift = I.header.vspan_shift;
  s.page_size = I.header.page_size;
  s.hz = I.header.hz;
  // Bytes in memory have no writer: one attempt decides. A live segment gets
  // about a second of retries.
  const auto deadline = std::chrono::steady_clock::now() + kTakePatience;
  for (unsigned attempt = 0;; attempt++) {
    int r = I.try_take(&s, err);
    if (r < 0) return false;
    if (r > 0) break;
    if (!I.live || attempt >= 10000 || std::chrono::steady_clock::now() >= deadline) {
      *err = I.err("could not get a consistent snapshot (the writer kept changing it)");
      return false;
    }
    std::this_thread::sleep_for(kOddWait);
  }
  std::string bad = validate_snapshot(s, I.layout.labs.capacity);
  if (!bad.empty()) {
    *err = I.err(bad);
    return false;
  }
  I.read_events(&s);
  *out = std::move(s);
  return true;
}

const std::string& Segment::path() const { return impl_->path; }
uint64_t Segment::pid() const { return impl_->pid; }

}  // namespace fwi
