// inspector/model/segment.cpp: finding, attaching to and reading telemetry segments.
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
#include "inspector/model/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <mutex>
#include <setjmp.h>
#include <thread>

namespace fwi {

namespace {

// Bounds on what a header may declare (a hostile header must not make the
// reader allocate or loop absurdly). docs/recording.md lists them too.
constexpr uint32_t kMaxClasses = 64;
constexpr uint32_t kMaxRegions = 1u << 20;
constexpr uint32_t kMaxVspansPerRegion = 1u << 20;
constexpr uint32_t kMaxSpans = 1u << 26;
constexpr uint32_t kMaxLabs = 1u << 20;
constexpr uint32_t kMaxEvents = 1u << 20;
constexpr uint32_t kMaxRecordSize = 1u << 16;   // one record of any table
constexpr uint32_t kMinVspanShift = 12, kMaxVspanShift = 40;

// Retries of take(): about a second in all on a live segment.
constexpr std::chrono::milliseconds kTakePatience{1000};
constexpr std::chrono::microseconds kOddWait{100};

bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// A mapped file that shrinks while it is read (a writer, or a hostile
// process, truncating its segment) raises SIGBUS on the pages past its end.
// take() checks the size first, but the file can shrink between that check
// and the copy: while a copy runs, this thread's guard turns SIGBUS into an
// error. A SIGBUS outside a guarded copy goes to the previous disposition.
thread_local sigjmp_buf* t_bus_guard = nullptr;
struct sigaction g_prev_bus;

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* g = t_bus_guard) siglongjmp(*g, 1);
  if ((g_prev_bus.sa_flags & SA_SIGINFO) != 0 && g_prev_bus.sa_sigaction != nullptr) {
    g_prev_bus.sa_sigaction(sig, info, ctx);
    return;
  }
  if ((g_prev_bus.sa_flags & SA_SIGINFO) == 0 && g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN) {
    g_prev_bus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void install_bus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

uint64_t load_acquire(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}
uint64_t load_relaxed(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_RELAXED);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// The exe name from a header: at most FWT_EXE_MAX bytes, NUL or not, with
// control characters replaced (it is printed on terminals).
std::string exe_of(const fwt_header& h) {
  size_t n = strnlen(h.exe, FWT_EXE_MAX);
  std::string s(h.exe, n);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

// One table: capacity records of `size` bytes (>= ours) at `offset`.
struct Table {
  uint64_t offset = 0;
  uint32_t size = 0, capacity = 0;
};

// Checks that [offset, offset + capacity * size) lies inside [0, limit),
// without overflow. The record size was checked against ours already.
bool table_inside(const Table& t, uint64_t limit) {
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
    size_t ours;
  } recs[] = {{"process", h.process_size, sizeof(fwt_process)}, {"class", h.class_size, sizeof(fwt_class)},
              {"region", h.region_size, sizeof(fwt_region)},    {"span", h.span_size, sizeof(fwt_span)},
              {"lab", h.lab_size, sizeof(fwt_lab)},             {"event", h.event_size, sizeof(fwt_event)}};
  for (const Rec& r : recs) {
    if (r.size < r.ours)
      return fmt("%s record size %u is smaller than version %u.0's %zu bytes", r.name, r.size,
                 unsigned(FWT_VERSION_MAJOR), r.ours);
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
template <class T>
void copy_table(const uint8_t* base, const Table& t, uint32_t count, std::vector<T>* v) {
  v->resize(count);
  const uint8_t* p = base + t.offset;
  if (t.size == sizeof(T)) {
    if (count != 0) std::memcpy(v->data(), p, size_t(count) * sizeof(T));
    return;
  }
  for (uint32_t i = 0; i < count; i++) std::memcpy(&(*v)[i], p + size_t(i) * t.size, sizeof(T));
}

// Validates the counts of a copied process record against the layout.
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

}  // namespace

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
    if (sp.state == FWT_SPAN_LARGE_TAIL && sp.run_len >= n)
      return fmt("span %zu: large tail names head %u beyond %zu spans", i, sp.run_len, n);
    if (sp.owner > lab_capacity) return fmt("span %zu: owner %u over lab capacity %u", i, sp.owner, lab_capacity);
  }
  return "";
}

namespace {

// Fields 3 (state) and 22 (start time in clock ticks since boot) of /proc/<pid>/stat.
bool read_proc_stat(uint64_t pid, char* state, uint64_t* ticks) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  p++;
  while (*p == ' ') p++;
  *state = *p;
  // Field 3 is the first after ')'; field 22 is the 20th from there.
  for (int field = 3; field < 22; field++) {
    while (*p == ' ') p++;
    while (*p != ' ' && *p != '\0') p++;
    if (*p == '\0') return false;
  }
  while (*p == ' ') p++;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p || errno != 0) return false;
  *ticks = v;
  return true;
}

// Whether pid names a process that has not exited: kill(pid, 0) succeeds (or
// is refused: another user's process), and it is not a zombie waiting for
// its parent (an exited process keeps its pid until then).
bool pid_runs(uint64_t pid) {
  if (pid == 0 || pid > uint64_t(INT32_MAX)) return false;
  if (kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
  char state = 0;
  uint64_t t = 0;
  if (read_proc_stat(pid, &state, &t)) return state != 'Z' && state != 'X';
  return true;  // no /proc: kill() is all there is
}

// Whether pid runs and is the process whose start time is start_ticks.
bool same_process(uint64_t pid, uint64_t start_ticks) {
  if (!pid_runs(pid)) return false;
  char state = 0;
  uint64_t t = 0;
  if (!read_proc_stat(pid, &state, &t)) return false;
  return t == start_ticks;
}

// Parses "freeway.<digits>" into pid; false for any other name.
bool parse_segment_name(const char* name, uint64_t* pid) {
  static const char kPrefix[] = "freeway.";
  if (std::strncmp(name, kPrefix, sizeof kPrefix - 1) != 0) return false;
  const char* d = name + sizeof kPrefix - 1;
  if (*d == '\0' || std::strlen(d) > 10) return false;
  uint64_t v = 0;
  for (; *d; d++) {
    if (*d < '0' || *d > '9') return false;
    v = v * 10 + uint64_t(*d - '0');
  }
  if (v == 0 || v > uint64_t(INT32_MAX)) return false;
  *pid = v;
  return true;
}

bool pread_all(int fd, void* buf, size_t n, uint64_t off) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
    off += uint64_t(r);
  }
  return true;
}

}  // namespace

bool process_start_ticks(uint64_t pid, uint64_t* ticks) {
  char state = 0;
  return read_proc_stat(pid, &state, ticks);
}

// ---------------------------------------------------------------------------
// list_processes

std::vector<ProcessEntry> list_processes(bool prune, const std::string& dir) {
  std::vector<ProcessEntry> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  int dfd = dirfd(d);
  while (dirent* e = readdir(d)) {
    uint64_t pid = 0;
    if (!parse_segment_name(e->d_name, &pid)) continue;
    int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;  // a symbolic link (ELOOP), another user's file, or gone
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      continue;
    }
    ProcessEntry pe;
    pe.pid = pid;
    pe.path = dir + "/" + e->d_name;
    fwt_header h{};
    bool have_header = uint64_t(st.st_size) >= sizeof h && pread_all(fd, &h, sizeof h, 0) &&
                       h.magic == FWT_MAGIC && h.pid == pid;
    if (have_header) {
      pe.exe = exe_of(h);
      pe.alive = same_process(pid, h.process_start_ticks);
      // Best-effort figures: a copy of the process record bracketed by the
      // sequence word (pread, not a mapping: a truncated file cannot fault).
      Layout L;
      if (validate_header(h, uint64_t(st.st_size), &L).empty()) {
        for (int attempt = 0; attempt < 20; attempt++) {
          uint64_t s1 = 0, s2 = 0;
          fwt_process p{};
          const uint64_t seq_off = offsetof(fwt_header, snapshot_seq);
          if (!pread_all(fd, &s1, sizeof s1, seq_off) || (s1 & 1) != 0) continue;
          if (!pread_all(fd, &p, sizeof p, L.process.offset)) break;
          if (!pread_all(fd, &s2, sizeof s2, seq_off)) break;
          if (s1 != s2) continue;
          pe.live_bytes = p.live_bytes;
          pe.committed_bytes = p.committed_bytes;
          break;
        }
      }
    } else {
      // No header yet (a process starting to publish) or one that stopped:
      // the pid is all there is to go on.
      pe.alive = pid_runs(pid);
    }
    close(fd);
    if (!pe.alive && prune && st.st_uid == geteuid()) {
      if (unlinkat(dfd, e->d_name, 0) == 0) continue;
    }
    out.push_back(std::move(pe));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const ProcessEntry& a, const ProcessEntry& b) { return a.pid < b.pid; });
  return out;
}

// ---------------------------------------------------------------------------
// Segment

struct Segment::Impl {
  // Either a read-only shared mapping of a file (fd >= 0) or owned bytes.
  int fd = -1;
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

  ~Impl() {
    if (fd >= 0) {
      munmap(const_cast<uint8_t*>(base), mapped);
      close(fd);
    }
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
      if (seq < want) break;  // still being written (or a writer froze in it): next time
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

Segment::~Segment() = default;

std::unique_ptr<Segment> Segment::attach(uint64_t pid, std::string* err, const std::string& dir) {
  std::string label = fmt("process %llu", static_cast<unsigned long long>(pid));
  std::string path = dir + "/freeway." + std::to_string(pid);
  const bool runs = pid_runs(pid);
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)" : "no " + label;
    else if (e == ELOOP)
      *err = label + ": " + path + " is a symbolic link (refused)";
    else
      *err = label + ": cannot open " + path + ": " + std::strerror(e);
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *err = label + ": " + path + " is not a regular file";
    return nullptr;
  }
  if (uint64_t(st.st_size) < sizeof(fwt_header)) {
    close(fd);
    *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)"
                : label + ": stale segment (the process has exited)";
    return nullptr;
  }
  size_t len = size_t(st.st_size);
  void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    *err = label + ": cannot map " + path + ": " + std::strerror(e);
    return nullptr;
  }
  std::unique_ptr<Segment> s(new Segment);
  s->impl_ = std::make_unique<Impl>();
  Impl& I = *s->impl_;
  I.fd = fd;
  I.base = static_cast<const uint8_t*>(m);
  I.mapped = len;
  I.path = path;
  I.label = label;
  I.pid = pid;
  I.live = true;
  // A stopped publisher zeroes the magic: say so before calling it corrupt.
  if (load_acquire(I.base + offsetof(fwt_header, magic)) == 0) {
    *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)"
                : label + ": stale segment (the process has exited)";
    return nullptr;
  }
  if (!I.init(len, err)) return nullptr;
  if (I.header.pid != pid) {
    *err = label + ": the segment names pid " + std::to_string(I.header.pid);
    return nullptr;
  }
  if (!same_process(pid, I.start_ticks)) {
    *err = label + ": stale segment (the process has exited)";
    return nullptr;
  }
  return s;
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

bool Segment::take(Snapshot* out, std::string* err) {
  Impl& I = *impl_;
  // Every read of a mapped file runs under the SIGBUS guard (see on_sigbus).
  // The snapshot is built in *scratch, owned outside the guarded frame, so a
  // jump out of a copy leaks nothing.
  Snapshot scratch;
  sigjmp_buf guard;
  if (I.fd >= 0) {
    install_bus_guard();
    if (sigsetjmp(guard, 1) != 0) {
      t_bus_guard = nullptr;
      *err = I.err("the segment shrank while it was read (the process stopped publishing)");
      return false;
    }
    t_bus_guard = &guard;
  }
  struct Unguard {
    ~Unguard() { t_bus_guard = nullptr; }
  } unguard;
  return I.take_guarded(&scratch, out, err);
}

bool Segment::Impl::take_guarded(Snapshot* scratch, Snapshot* out, std::string* err) {
  Impl& I = *this;
  if (I.fd >= 0) {
    // A mapping read past the end of its file faults: check the size first.
    struct stat st;
    if (fstat(I.fd, &st) != 0 || uint64_t(st.st_size) < I.layout.segment_size) {
      *err = I.err("the segment was truncated (the process stopped publishing)");
      return false;
    }
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

bool Segment::alive() const {
  if (!impl_->live) return true;
  return same_process(impl_->pid, impl_->start_ticks);
}

const std::string& Segment::path() const { return impl_->path; }
uint64_t Segment::pid() const { return impl_->pid; }

}  // namespace fwi
