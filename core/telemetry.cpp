// core/telemetry.cpp: the telemetry segment, its publisher thread and the
// event ring (see telemetry.h; the format is include/freeway_telemetry.h).
#include "core/telemetry.h"

#include <cerrno>
#include <cstring>

#include "core/arena.h"
#include "core/lab.h"
#include "core/percpu.h"
#include "core/options.h"
#include "core/report.h"
#include "core/size_class.h"
#include "core/span_pool.h"
#include "core/stats.h"
#include "platform/os.h"

namespace fw {

std::atomic<fwt_header*> g_telemetry{nullptr};

namespace {

// --- Layout: every table starts on its own page, at offsets fixed at compile time. ---
constexpr uint64_t kEventCapacity = 4096;  // a power of two
constexpr uint64_t kSpanCapacity = uint64_t(kMaxRegions) * kVspansPerRegion;

constexpr uint64_t page_up(uint64_t n) { return (n + 4095) & ~uint64_t(4095); }

struct Layout {
  uint64_t process, classes, regions, spans, labs, events, size;
};
constexpr Layout make_layout() {
  Layout l{};
  l.process = page_up(sizeof(fwt_header));
  l.classes = page_up(l.process + sizeof(fwt_process));
  l.regions = page_up(l.classes + kClassCount * sizeof(fwt_class));
  l.spans = page_up(l.regions + kMaxRegions * sizeof(fwt_region));
  l.labs = page_up(l.spans + kSpanCapacity * sizeof(fwt_span));
  l.events = page_up(l.labs + uint64_t(kMaxLabs) * sizeof(fwt_lab));
  l.size = page_up(l.events + kEventCapacity * sizeof(fwt_event));
  return l;
}
constexpr Layout kLayout = make_layout();
static_assert(kClassCount <= 64 && kEventCapacity % 2 == 0, "format limits");

template <class T>
T* table(fwt_header* h, uint64_t offset) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(h) + offset);
}

// The shared words of the format are plain uint64_t fields; they are only ever
// accessed through atomic_ref (orders named at each use).
std::atomic_ref<uint64_t> shared_word(uint64_t& w) { return std::atomic_ref<uint64_t>(w); }

// --- Start/stop state. Only telemetry_start/stop, the exit and fork hooks touch it. ---
enum : uint32_t { kOff = 0, kStarting = 1, kOn = 2, kStopping = 3 };
std::atomic<uint32_t> g_state{kOff};
std::atomic<bool> g_run{false};        // the publisher loops while true
std::atomic<bool> g_hooks{false};      // fork and exit hooks registered
fwt_header* g_segment = nullptr;       // the segment being published (kOn), else nullptr
uint64_t g_owner_pid = 0;              // the process that created g_segment
uintptr_t g_thread = 0;
char g_name[32];                       // "freeway.<pid>"

void make_name(uint64_t pid) {
  Line l;  // report.h's allocation-free formatter
  l.str("freeway.").dec(pid);
  std::memcpy(g_name, l.data(), l.size());
  g_name[l.size()] = 0;
}

// --- The snapshot ---

// One descriptor into its published record. Its anchor is read before and
// after the other fields; if it changed, the fields may belong to two states,
// so the read is repeated, and after three tries the record is marked UNSTABLE.
void mirror_span(const Span& d, fwt_span* out) {
  fwt_span r{};
  for (int attempt = 0;; attempt++) {
    // acquire: the fields read below are at least as new as this anchor.
    uint64_t before = d.anchor.load(std::memory_order_acquire);
    Anchor a = Anchor::unpack(before);
    r = fwt_span{};
    r.state = uint8_t(a.state);
    r.flags = uint8_t((a.linked ? FWT_SPAN_LINKED : 0) |
                      (d.guard_page.load(std::memory_order_relaxed) != 0 ? FWT_SPAN_GUARD : 0));
    r.cls = d.cls.load(std::memory_order_relaxed);
    Lab* owner = d.owner.load(std::memory_order_relaxed);
    // LABs are never freed, so an owner read here is always a LAB (or null).
    if (a.state == kHot && owner != nullptr && !is_placeholder(owner)) r.owner = owner->id + 1;
    // acquire: a span started over (span_restart) shows carved 0 with its
    // own count 0, read below, not with the count of the list it dropped.
    r.carved = d.carved.load(std::memory_order_acquire);
    r.remote_count = a.count;
    r.capacity = d.capacity.load(std::memory_order_relaxed);
    r.run_len = d.run_len.load(std::memory_order_relaxed);
    r.committed = d.committed.load(std::memory_order_relaxed);
    // large_size is a large head's size; a HOT span's own list head (span.h).
    if (a.state == kLarge || a.state == kHuge) r.large_size = d.large_size.load(std::memory_order_relaxed);
    // An owned span's own list (span.h): empty for a hot one, whose frees
    // are on its LAB's free[c], as a per-thread LAB's kept spans' of the
    // classes listed across their spans are, on free[c] or its kept list;
    // own_frees means nothing in other states.
    if (a.state == kHot) r.own_free = uint32_t(own_count(&d));
    // A small span's colour: block 0's offset from its base (arena.h).
    if (a.state == kHot || a.state == kFull || a.state == kPartial)
      r.colour = span_colour_of(&d);
    // acquire fence: the field loads above happen before the anchor re-read.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (d.anchor.load(std::memory_order_relaxed) == before) break;
    if (attempt == 2) {
      r.flags |= FWT_SPAN_UNSTABLE;
      break;
    }
  }
  std::memcpy(out, &r, sizeof r);
}

void mirror_unused(fwt_span* out) {
  fwt_span r{};
  r.state = FWT_SPAN_UNUSED;
  std::memcpy(out, &r, sizeof r);
}

void write_snapshot(fwt_header* h, uint64_t start_ns, uint64_t last_publish_ns) {
  uint64_t now = os::now_ns();
  std::atomic_ref<uint64_t> seq = shared_word(h->snapshot_seq);
  uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  // release fence: a reader that sees any store below also sees the odd seq.
  std::atomic_thread_fence(std::memory_order_release);

  fw_stats_t st;
  stats_fill(&st);

  fwt_class* classes = table<fwt_class>(h, kLayout.classes);
  for (unsigned c = 0; c < kClassCount; c++) {
    fwt_class k{};
    const ClassInfo& info = class_info(c);
    k.block_size = info.block_size;
    k.span_bytes = info.span_bytes;
    k.capacity = info.capacity;
    k.reuse_threshold = reuse_threshold(info.capacity);
    k.allocs = st.classes[c].allocs;
    k.frees = st.classes[c].frees;
    k.live = st.classes[c].live;
    std::memcpy(&classes[c], &k, sizeof k);
  }

  fwt_region* regions = table<fwt_region>(h, kLayout.regions);
  fwt_span* spans = table<fwt_span>(h, kLayout.spans);
  Span* descriptors = g_spans.load(std::memory_order_acquire);
  uint32_t region_count = descriptors == nullptr ? 0 : arena_region_count();
  for (uint32_t r = 0; r < region_count; r++) {
    const Region& reg = g_regions[r];
    fwt_region out{};
    // acquire: a region's record and slice are complete once its kind is seen.
    out.kind = reg.kind.load(std::memory_order_acquire);
    out.base = reg.base.load(std::memory_order_relaxed);
    out.size = reg.size.load(std::memory_order_relaxed);
    out.next_vspan = arena_vspans_used(r);
    std::memcpy(&regions[r], &out, sizeof out);
    uint32_t in_use = out.kind == kRegionArena ? out.next_vspan : out.kind == kRegionHuge ? 1 : 0;
    const Span* slice = descriptors + size_t(r) * kVspansPerRegion;
    fwt_span* mirror = spans + size_t(r) * kVspansPerRegion;
    for (uint32_t v = 0; v < kVspansPerRegion; v++) {
      if (v < in_use) mirror_span(slice[v], &mirror[v]);
      else mirror_unused(&mirror[v]);
    }
  }

  fwt_lab* labs = table<fwt_lab>(h, kLayout.labs);
  uint32_t lab_count = 0;
  // Per-CPU mode: which CPU's slot holds which LAB now (racy: a slow path may
  // have one out for a moment; the inspector shows a snapshot).
  uint32_t cpus = percpu_cpus();
  for (Lab* lab = lab_first(); lab != nullptr && lab_count < kMaxLabs;
       lab = lab->all_next.load(std::memory_order_acquire)) {
    fwt_lab out{};
    out.id = lab->id;
    out.kind = lab->kind.load(std::memory_order_relaxed);
    for (unsigned c = 0; c < kClassCount; c++) {
      out.allocs += lab_allocs_of(lab, c);
      out.frees += lab_frees_of(lab, c);
    }
    out.pending = lab_pending_count(lab);
    out.frees += out.pending;  // frees too, counted when their chains go to their spans (lab.h)
    for (uint32_t k = 0; k < cpus && out.kind == kLabCpu; k++) {
      if (percpu_slot(k) != lab) continue;
      out.cpu_slot = k + 1;
      break;
    }
    std::memcpy(&labs[lab_count++], &out, sizeof out);
  }

  fwt_process p{};
  p.time_ns = now;
  p.start_ns = start_ns;
  p.snapshots = s / 2 + 1;
  p.publish_ns = last_publish_ns;
  p.live_bytes = st.live_bytes;
  p.peak_live_bytes = st.peak_live_bytes;
  p.reserved_bytes = st.reserved_bytes;
  p.committed_bytes = st.committed_bytes;
  p.peak_committed_bytes = st.peak_committed_bytes;
  p.large_live_bytes = st.large_live_bytes;
  p.large_allocs = st.large_allocs;
  p.large_frees = st.large_frees;
  p.spans_hot = st.spans_hot;
  p.spans_full = st.spans_full;
  p.spans_partial = st.spans_partial;
  p.spans_pooled = st.spans_pooled;
  p.spans_large = st.spans_large;
  p.threads_live = st.threads_live;
  p.threads_created = st.threads_created;
  p.rss_bytes = os::resident_bytes();
  p.retained_bytes = pool_retained_bytes();
  p.metadata_bytes = uint64_t(region_count) * kVspansPerRegion * sizeof(Span);
  p.class_count = kClassCount;
  p.region_count = region_count;
  p.span_count = region_count * kVspansPerRegion;
  p.lab_count = lab_count;
  p.reuse_percent = uint32_t(option(Option::reuse_percent));
  p.secure = uint32_t(option(Option::secure));
  std::memcpy(table<fwt_process>(h, kLayout.process), &p, sizeof p);

  // release: the snapshot is complete for a reader that sees the even seq.
  seq.store(s + 2, std::memory_order_release);
}

void init_header(fwt_header* h, uint64_t pid, uint64_t hz) {
  h->version_major = FWT_VERSION_MAJOR;
  h->version_minor = FWT_VERSION_MINOR;
  h->header_size = sizeof(fwt_header);
  h->segment_size = kLayout.size;
  h->process_size = sizeof(fwt_process);
  h->class_size = sizeof(fwt_class);
  h->region_size = sizeof(fwt_region);
  h->span_size = sizeof(fwt_span);
  h->lab_size = sizeof(fwt_lab);
  h->event_size = sizeof(fwt_event);
  h->class_capacity = kClassCount;
  h->region_capacity = kMaxRegions;
  h->span_capacity = uint32_t(kSpanCapacity);
  h->lab_capacity = kMaxLabs;
  h->event_capacity = uint32_t(kEventCapacity);
  h->vspans_per_region = kVspansPerRegion;
  h->vspan_shift = kVspanShift;
  h->page_size = uint32_t(os::page_size());
  h->process_offset = kLayout.process;
  h->classes_offset = kLayout.classes;
  h->regions_offset = kLayout.regions;
  h->spans_offset = kLayout.spans;
  h->labs_offset = kLayout.labs;
  h->events_offset = kLayout.events;
  h->pid = pid;
  h->process_start_ticks = os::process_start_ticks();
  os::program_name(h->exe, sizeof h->exe);
  h->hz = hz;
  shared_word(h->publisher_state).store(1, std::memory_order_relaxed);
}

uint64_t telemetry_hz() {
  int64_t hz = option(Option::telemetry_hz);
  return hz < 1 ? 1 : hz > 1000 ? 1000 : uint64_t(hz);
}

// The publisher thread: a snapshot every 1/hz seconds until g_run is cleared.
// It allocates nothing and never takes a LAB.
void publisher_main(void* arg) {
  fwt_header* h = static_cast<fwt_header*>(arg);
  const uint64_t period = 1000000000ull / telemetry_hz();
  const uint64_t start = table<fwt_process>(h, kLayout.process)->start_ns;
  uint64_t next = os::now_ns(), last_cost = 0;
  // acquire: pairs with the release store that stops the loop.
  while (g_run.load(std::memory_order_acquire)) {
    uint64_t t0 = os::now_ns();
    write_snapshot(h, start, last_cost);
    uint64_t t1 = os::now_ns();
    last_cost = t1 - t0;
    next += period;
    if (next < t1) next = t1;  // fell behind: no burst of catch-up snapshots
    // Sleep in slices so that a stop is answered within 50 ms at any rate.
    while (g_run.load(std::memory_order_acquire)) {
      uint64_t now = os::now_ns();
      if (now >= next) break;
      uint64_t left = next - now;
      os::sleep_ns(left < 50000000ull ? left : 50000000ull);
    }
  }
}

void say(const char* what, const char* why) {
  Line l;
  l.str("freeway: telemetry ").str(what).str(": ").str(why).str(" (/dev/shm/").str(g_name).str(")\n");
  l.write(2);
}

// At exit: remove the name; the publisher may still run while exit finishes,
// so the mapping stays. A forked child that inherited this hook does nothing.
// The state is claimed as telemetry_stop claims it: a stop on another thread
// at the same time then does nothing (or this does), and neither can take
// g_segment from under the other.
void on_exit() {
  if (g_owner_pid != os::process_id()) return;
  uint32_t state = kOn;
  if (!g_state.compare_exchange_strong(state, kStopping, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  g_run.store(false, std::memory_order_release);
  shared_word(g_segment->publisher_state).store(2, std::memory_order_release);
  os::shared_unlink(g_name);
}

// In a forked child (one thread, before fork returns): the parent's segment
// must never be written by the child. Its mapping becomes private memory and
// the child does not publish until it calls fw_telemetry_start() itself.
void on_fork_child() {
  g_telemetry.store(nullptr, std::memory_order_release);
  if (g_segment != nullptr) os::shared_detach(g_segment, kLayout.size);
  g_segment = nullptr;
  g_thread = 0;
  g_run.store(false, std::memory_order_relaxed);
  g_state.store(kOff, std::memory_order_release);
}

// The fork and exit hooks, once. At load (telemetry_start_from_options), so
// that the child's hook runs before any the program registers later: those
// may allocate in the child, and an event written then must not reach the
// parent's segment.
void install_hooks() {
  if (!g_hooks.exchange(true, std::memory_order_acq_rel)) {
    os::at_fork_child(&on_fork_child);
    os::at_exit(&on_exit);
  }
}

}  // namespace

void telemetry_event_write(fwt_header* h, uint32_t kind, uint32_t arg, uint64_t addr, uint64_t size) {
  // relaxed: the claim only has to be unique; the slot's seq orders the rest.
  uint64_t n = shared_word(h->event_next).fetch_add(1, std::memory_order_relaxed);
  fwt_event* e = &table<fwt_event>(h, kLayout.events)[n & (kEventCapacity - 1)];
  std::atomic_ref<uint64_t> seq = shared_word(e->seq);
  uint64_t cur = seq.load(std::memory_order_relaxed);
  // The slot must hold an older, complete event: odd means a writer of an
  // earlier lap is still in it (perhaps frozen there), newer means this
  // writer was overtaken by a whole lap. Either way the event is dropped,
  // never written over another writer's.
  if ((cur & 1) != 0 || cur >= 2 * n + 2 ||
      !seq.compare_exchange_strong(cur, 2 * n + 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
    shared_word(h->event_dropped).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // release fence: a reader that sees these stores also sees the odd seq.
  std::atomic_thread_fence(std::memory_order_release);
  fwt_event ev{};
  ev.time_ns = os::now_ns();
  ev.kind = kind;
  ev.arg = arg;
  ev.addr = addr;
  ev.size = size;
  std::memcpy(reinterpret_cast<char*>(e) + sizeof(uint64_t), reinterpret_cast<char*>(&ev) + sizeof(uint64_t),
              sizeof ev - sizeof(uint64_t));
  // release: the event is complete for a reader that sees 2n+2.
  seq.store(2 * n + 2, std::memory_order_release);
}

int telemetry_start() {
  uint32_t state = kOff;
  if (!g_state.compare_exchange_strong(state, kStarting, std::memory_order_acq_rel, std::memory_order_acquire)) {
    if (state == kOn) return 0;
    errno = EBUSY;  // another thread is starting or stopping it right now
    return -1;
  }
  install_hooks();
  uint64_t pid = os::process_id();
  make_name(pid);
  const char* why = nullptr;
  auto* h = static_cast<fwt_header*>(os::shared_create(g_name, kLayout.size, &why));
  if (h == nullptr) {
    say("off", why);
    g_state.store(kOff, std::memory_order_release);
    errno = EEXIST;
    return -1;
  }
  uint64_t hz = telemetry_hz();
  init_header(h, pid, hz);
  table<fwt_process>(h, kLayout.process)->start_ns = os::now_ns();
  write_snapshot(h, table<fwt_process>(h, kLayout.process)->start_ns, 0);
  // release: readers that see the magic see the whole header and a first snapshot.
  shared_word(h->magic).store(FWT_MAGIC, std::memory_order_release);
  g_segment = h;
  g_owner_pid = pid;
  g_telemetry.store(h, std::memory_order_release);
  telemetry_event(FWT_EV_TELEMETRY_START, 0, 0, kLayout.size);
  g_run.store(true, std::memory_order_release);
  if (!os::thread_start(&publisher_main, h, &g_thread)) {
    g_run.store(false, std::memory_order_release);
    g_telemetry.store(nullptr, std::memory_order_release);
    os::shared_unlink(g_name);
    os::shared_discard(h, kLayout.size);
    g_segment = nullptr;
    say("off", "cannot start the publisher thread");
    g_state.store(kOff, std::memory_order_release);
    errno = EAGAIN;
    return -1;
  }
  g_state.store(kOn, std::memory_order_release);
  return 0;
}

void telemetry_stop() {
  uint32_t state = kOn;
  if (!g_state.compare_exchange_strong(state, kStopping, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  g_run.store(false, std::memory_order_release);
  os::thread_join(g_thread);
  fwt_header* h = g_segment;
  shared_word(h->publisher_state).store(2, std::memory_order_release);
  // Readers holding a view see a stopped segment by its magic, whether or not
  // the OS gives the pages back (shared_discard).
  shared_word(h->magic).store(0, std::memory_order_release);
  g_telemetry.store(nullptr, std::memory_order_release);
  os::shared_unlink(g_name);
  // Event writers that loaded the old pointer may still write into it: the
  // mapping stays, only its pages go back (telemetry.h's invariant).
  os::shared_discard(h, kLayout.size);
  g_segment = nullptr;
  g_state.store(kOff, std::memory_order_release);
}

bool telemetry_active() { return g_state.load(std::memory_order_acquire) == kOn; }

void telemetry_start_from_options() {
  install_hooks();
  if (option(Option::telemetry) > 0) telemetry_start();
}

}  // namespace fw
