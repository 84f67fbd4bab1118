// inspector/model/derive.cpp: every figure the views show, from one snapshot.
//
// Each formula here is written in docs/stats.md, "Telemetry figures"; the two
// must change together. derive() and check_spans() accept any Snapshot (also
// one that was never validated): out-of-range states, classes and owners are
// skipped, never indexed, and byte counts are computed in 64 bits from 32-bit
// factors (no overflow) and clamped at 0 where a difference could go negative.
#include "inspector/model/derive.h"

#include <cinttypes>
#include <cstdio>
#include <unordered_map>

namespace fwi {

namespace {

bool is_small(uint8_t state) {
  return state == FWT_SPAN_HOT || state == FWT_SPAN_FULL || state == FWT_SPAN_PARTIAL;
}

uint64_t sub_clamped(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t(1) << 30) && b % (uint64_t(1) << 30) == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " GiB", b >> 30);
  else if (b >= (uint64_t(1) << 20) && b % (uint64_t(1) << 20) == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", b >> 10);
  else
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

}  // namespace

uint64_t span_blocks_in_use(const fwt_span& sp) {
  uint64_t free = uint64_t(sp.remote_count) + sp.own_free;
  return sp.carved >= free ? sp.carved - free : 0;
}

const char* state_name(unsigned s) {
  static const char* const kNames[] = {"FREE", "HOT", "FULL", "PARTIAL", "LARGE", "LARGE_TAIL", "HUGE", "UNUSED"};
  return s < FWT_SPAN_STATE_COUNT ? kNames[s] : "?";
}

std::string format_bytes(uint64_t b) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buf[32];
  if (b < 1024) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
    return buf;
  }
  double v = double(b);
  unsigned u = 0;
  while (v >= 1024 && u + 1 < sizeof kUnits / sizeof kUnits[0]) {
    v /= 1024;
    u++;
  }
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, kUnits[u]);
  return buf;
}

Figures derive(const Snapshot& s) {
  Figures f;
  const fwt_process& p = s.process;
  f.time_s = p.time_ns >= p.start_ns ? double(p.time_ns - p.start_ns) / 1e9 : 0.0;
  f.live = p.live_bytes;
  f.peak_live = p.peak_live_bytes;
  f.committed = p.committed_bytes;
  f.peak_committed = p.peak_committed_bytes;
  f.reserved = p.reserved_bytes;
  f.rss = p.rss_bytes;
  f.blowup = f.live != 0 ? double(f.committed) / double(f.live) : 0.0;
  f.blowup_peak = f.peak_live != 0 ? double(f.committed) / double(f.peak_live) : 0.0;
  f.metadata = p.metadata_bytes;
  f.threads_live = p.threads_live;
  f.events_missed = s.events_missed;
  f.events_dropped = s.events_dropped;

  // Per class: start from the class records, then add each span.
  const size_t nclass = s.classes.size();
  std::vector<ClassFigures> cf(nclass);
  std::vector<bool> has_span(nclass, false);
  for (size_t c = 0; c < nclass; c++) {
    const fwt_class& k = s.classes[c];
    ClassFigures& x = cf[c];
    x.cls = unsigned(c);
    x.block_size = k.block_size;
    x.capacity = k.capacity;
    x.allocs = k.allocs;
    x.frees = k.frees;
    x.live_blocks = k.live;
    x.live_bytes = k.live * uint64_t(k.block_size);
  }

  // Thread caches: span owner (id + 1) -> index in f.labs.
  f.labs.resize(s.labs.size());
  std::unordered_map<uint64_t, size_t> lab_of_owner;
  lab_of_owner.reserve(s.labs.size());
  for (size_t i = 0; i < s.labs.size(); i++) {
    const fwt_lab& l = s.labs[i];
    LabFigures& x = f.labs[i];
    x.id = l.id;
    x.kind = l.kind;
    x.alive = l.kind == FWT_LAB_THREAD || l.kind == FWT_LAB_CPU;
    x.cpu = l.kind == FWT_LAB_CPU && l.cpu_slot > 0 ? int32_t(l.cpu_slot - 1) : -1;
    f.caches_in_cpu_slots += x.cpu >= 0;
    x.pending = l.pending;
    x.allocs = l.allocs;
    x.frees = l.frees;
    lab_of_owner.emplace(uint64_t(l.id) + 1, i);
  }

  for (const fwt_span& sp : s.spans) {
    if (sp.state >= FWT_SPAN_STATE_COUNT) continue;
    f.spans_by_state[sp.state]++;
    switch (sp.state) {
      case FWT_SPAN_FREE:
        f.frag_pooled += sp.committed;
        break;
      case FWT_SPAN_LARGE:
      case FWT_SPAN_HUGE:
        f.frag_large_slack += sub_clamped(sp.committed, sp.large_size);
        break;
      default:
        break;
    }
    if (!is_small(sp.state) || sp.cls >= nclass) continue;
    ClassFigures& x = cf[sp.cls];
    has_span[sp.cls] = true;
    const uint64_t bs = x.block_size;
    const uint64_t used = span_blocks_in_use(sp);
    f.frag_free_in_spans += sub_clamped(sp.committed, used * bs);
    x.committed_bytes += sp.committed;
    if (sp.state == FWT_SPAN_HOT) x.spans_hot++;
    if (sp.state == FWT_SPAN_FULL) x.spans_full++;
    if (sp.state == FWT_SPAN_PARTIAL) x.spans_partial++;
    x.block_slots += sp.capacity;
    if (sp.capacity != 0) {
      uint64_t b = used * kOccupancyBuckets / sp.capacity;
      if (b >= kOccupancyBuckets) b = kOccupancyBuckets - 1;
      x.occupancy[b]++;
    }
    if (sp.state == FWT_SPAN_HOT && sp.owner != 0) {
      auto it = lab_of_owner.find(sp.owner);
      if (it != lab_of_owner.end()) {
        LabFigures& l = f.labs[it->second];
        l.hot_spans++;
        l.bytes_held += sp.committed;
        uint64_t unhanded = sp.capacity >= sp.carved ? uint64_t(sp.capacity - sp.carved) : 0;
        l.free_bytes_held += (unhanded + sp.remote_count + sp.own_free) * bs;
      }
    }
  }

  for (size_t c = 0; c < nclass; c++) {
    ClassFigures& x = cf[c];
    x.fullness = x.block_slots != 0 ? double(x.live_blocks) / double(x.block_slots) : 0.0;
    if (has_span[c] || x.allocs != 0) f.classes.push_back(x);
  }
  return f;
}

namespace {
// The allocator's reuse threshold of a span of `capacity` blocks
// (core/span.cpp reuse_threshold: ceil(capacity * percent / 100), at least
// 1), from the span's own capacity: a span with a guard page holds fewer
// blocks than its class's and has a lower threshold.
uint64_t reuse_threshold_of(uint32_t capacity, uint32_t percent) {
  const uint64_t pct = percent > 100 ? 100 : percent;
  const uint64_t t = (uint64_t(capacity) * pct + 99) / 100;
  return t == 0 ? 1 : t;
}
}  // namespace

std::vector<std::string> check_spans(const Snapshot& s) {
  std::vector<std::string> out;
  char buf[256];
  auto say = [&](size_t i, const fwt_span& sp, const char* what) {
    std::snprintf(buf, sizeof buf, "span %zu (%s, class %u): %s", i, state_name(sp.state), unsigned(sp.cls), what);
    out.emplace_back(buf);
  };
  const uint64_t vspan_bytes = s.vspan_shift < 64 ? uint64_t(1) << s.vspan_shift : UINT64_MAX;
  for (size_t i = 0; i < s.spans.size(); i++) {
    const fwt_span& sp = s.spans[i];
    if ((sp.flags & FWT_SPAN_UNSTABLE) != 0 || !is_small(sp.state)) continue;
    if (sp.cls >= s.classes.size()) {
      say(i, sp, "class beyond the class table");
      continue;
    }
    const fwt_class& k = s.classes[sp.cls];
    if (sp.carved > sp.capacity) say(i, sp, "carved > capacity");
    if (uint64_t(sp.remote_count) + sp.own_free > sp.carved)
      say(i, sp, "more free blocks than carved (remote_count + own_free > carved)");
    // Secure mode gives up a span's last page to its guard page (FWT_SPAN_GUARD);
    // a span with a colour (1.4) holds the blocks that fit past it.
    if (sp.colour != 0 && sp.colour >= k.block_size) say(i, sp, "colour not below its block size");
    if ((sp.flags & FWT_SPAN_GUARD) == 0) {
      const uint64_t capacity =
          sp.colour == 0 || sp.colour >= k.span_bytes ? k.capacity : (k.span_bytes - sp.colour) / k.block_size;
      if (sp.capacity != capacity) say(i, sp, "capacity differs from its class's past its colour");
    } else {
      const bool room = k.block_size != 0 && s.page_size <= k.span_bytes;
      const uint64_t capacity = room ? (k.span_bytes - s.page_size) / k.block_size : 0;
      if (sp.capacity != capacity) say(i, sp, "capacity differs from its class's less a guard page");
    }
    if (sp.colour + uint64_t(sp.capacity) * k.block_size > sp.committed) say(i, sp, "blocks beyond committed memory");
    if (sp.committed > vspan_bytes) say(i, sp, "committed beyond its virtual span");
    if (sp.state == FWT_SPAN_HOT) continue;
    // FULL and PARTIAL: floating spans, no owner, at least one block in use.
    if (sp.remote_count >= sp.carved) say(i, sp, "empty span not returned (remote_count >= carved)");
    if (sp.owner != 0) say(i, sp, "unowned span names an owner");
    if (sp.state == FWT_SPAN_FULL && sp.carved <= sp.capacity &&
        uint64_t(sp.remote_count) + (sp.capacity - sp.carved) >=
            (s.process.reuse_percent != 0 ? reuse_threshold_of(sp.capacity, s.process.reuse_percent) : k.reuse_threshold))
      say(i, sp, "full span at or above its reuse threshold (remote_count + capacity - carved)");
  }
  return out;
}

std::string describe_event(const fwt_event& e, uint64_t start_ns) {
  char buf[256];
  double t = e.time_ns >= start_ns ? double(e.time_ns - start_ns) / 1e9 : -double(start_ns - e.time_ns) / 1e9;
  int n = std::snprintf(buf, sizeof buf, "%.3f s  ", t);
  char* p = buf + n;
  size_t room = sizeof buf - size_t(n);
  const unsigned long long addr = e.addr;
  switch (e.kind) {
    case FWT_EV_TELEMETRY_START:
      std::snprintf(p, room, "telemetry start  segment %s", human_bytes(e.size).c_str());
      break;
    case FWT_EV_REGION_RESERVE:
      std::snprintf(p, room, "reserve region %u  at 0x%llx  %s", e.arg, addr, human_bytes(e.size).c_str());
      break;
    case FWT_EV_REGION_RELEASE:
      std::snprintf(p, room, "release region %u  at 0x%llx  %s", e.arg, addr, human_bytes(e.size).c_str());
      break;
    case FWT_EV_COMMIT:
      std::snprintf(p, room, "commit span %u  %s", e.arg, human_bytes(e.size).c_str());
      break;
    case FWT_EV_DECOMMIT:
      std::snprintf(p, room, "decommit span %u  %s", e.arg, human_bytes(e.size).c_str());
      break;
    case FWT_EV_THREAD_START:
      std::snprintf(p, room, "thread start  cache %u", e.arg);
      break;
    case FWT_EV_THREAD_EXIT:
      std::snprintf(p, room, "thread exit  cache %u", e.arg);
      break;
    case FWT_EV_BAD_FREE:
      std::snprintf(p, room, "bad free  0x%llx (the process is stopping)", addr);
      break;
    case FWT_EV_OUT_OF_MEMORY:
      std::snprintf(p, room, "out of memory  asked %s", human_bytes(e.size).c_str());
      break;
    default:
      std::snprintf(p, room, "event kind %u  arg %u  addr 0x%llx  size %llu", e.kind, e.arg, addr,
                    static_cast<unsigned long long>(e.size));
      break;
  }
  return buf;
}

}  // namespace fwi
