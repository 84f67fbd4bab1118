// Kill tolerance (Michael 2004 §1, §3): a thread that stops for good in the
// middle of malloc or free never blocks the other threads.
//
// Worker threads allocate and free nonstop, keep a few blocks of their own and
// hand most of them to each other through shared atomic slots. A freezer
// thread sends SIGUSR1 to a random worker at random moments; the handler looks
// at the interrupted instruction and, when it lies in libfreeway.so (the worker
// is inside malloc, free, calloc or realloc), never returns: the thread stays
// frozen mid-operation until the process exits. Otherwise it returns and the
// freezer tries again. The main thread replaces every frozen worker with a new
// thread and keeps starting short-lived threads meanwhile. The survivors free
// the blocks that frozen threads handed over (remote frees into the spans
// their caches hold forever). A watchdog fails the test as soon as any running
// thread stops making progress.
//
// Runs 20 s by default; SOAK_SECONDS=N runs N seconds (tools/soak).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <pthread.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "freeway.h"
#include "test_util.h"

namespace {

// Helpers that never allocate (handler, watchdog), from test_util.h.
using fwtest::Msg;
using fwtest::now_ns;
using fwtest::sleep_ns;

using fwtest::Rng;
using fwtest::rss_bytes;

// ---------------------------------------------------------------------------
// Self-describing blocks: {n ^ kMagic, tag}, then the tag's low byte at every
// 61st byte and in the last 16 bytes (sparse, so that the workers spend their
// time in malloc and free rather than in memset). Every block is >= 16 bytes.

constexpr uint64_t kMagic = 0x6b111f00d0000000ull;
constexpr size_t kStride = 61;

void fill(void* p, size_t n, uint64_t tag) {
  uint64_t h[2] = {n ^ kMagic, tag};
  unsigned char* c = static_cast<unsigned char*>(p);
  std::memcpy(c, h, 16);
  for (size_t i = 16; i < n; i += kStride) c[i] = (unsigned char)tag;
  size_t tail = n >= 32 ? n - 16 : 16;
  std::memset(c + tail, int(tag & 0xff), n - tail);
}

bool verify_self(const void* p) {
  uint64_t h[2];
  std::memcpy(h, p, 16);
  size_t n = size_t(h[0] ^ kMagic);
  if (n < 16 || n > (4u << 20)) return false;
  const unsigned char* c = static_cast<const unsigned char*>(p);
  unsigned char b = (unsigned char)h[1];
  for (size_t i = 16; i < n; i += kStride)
    if (c[i] != b) return false;
  for (size_t i = n >= 32 ? n - 16 : 16; i < n; i++)
    if (c[i] != b) return false;
  return true;
}

// ---------------------------------------------------------------------------
// Threads.

constexpr int kLiveWorkers = 4;
constexpr int kMaxWorkers = 8192;
constexpr size_t kSlots = 2048;
std::atomic<void*> g_slots[kSlots];

enum : int { kUnused = 0, kRunning = 1, kFrozen = 2, kStopped = 3 };
struct Worker {
  pthread_t tid;
  std::atomic<int> state{kUnused};
  std::atomic<uint64_t> progress{0};
  std::atomic<uint64_t> signals_seen{0};
  bool replaced = false;  // main thread only
};
Worker g_workers[kMaxWorkers];
std::atomic<int> g_nworkers{0};

thread_local Worker* t_self = nullptr;

std::atomic<uint64_t> g_errors{0}, g_ops{0}, g_remote_frees{0}, g_frozen{0}, g_missed{0};
std::atomic<uint64_t> g_attempts{0}, g_short_lived{0}, g_main_progress{0}, g_freezer_progress{0};
std::atomic<bool> g_stop_workers{false}, g_stop_freezer{false}, g_watchdog_stop{false};
// The freezer ended its plan (its cap of frozen threads, or the RSS limit)
// before the run's end: from then on it makes no progress by design.
std::atomic<bool> g_freezer_done{false};
constexpr int kMaxPcs = 8192;
uintptr_t g_frozen_pcs[kMaxPcs];  // offsets into libfreeway.so

// libfreeway.so: its load address, text segment and path.
fwtest::LoadedText g_fw;

void error(const char* what, const void* p) {
  if (g_errors.fetch_add(1) < 20) Msg().s("kill test: ").s(what).s(" ").x(uintptr_t(p)).to(2);
}

// The freeze: never returns when the thread was inside freeway. Every signal
// is blocked while it runs (sa_mask), so sigsuspend with all blocked sleeps forever.
void freeze_handler(int, siginfo_t*, void* uc) {
  int saved = errno;
  Worker* w = t_self;
  uintptr_t pc = fwtest::interrupted_pc(uc);
  if (w != nullptr && w->state.load() == kRunning && pc >= g_fw.lo && pc < g_fw.hi) {
    uint64_t k = g_frozen.fetch_add(1);
    if (k < kMaxPcs) g_frozen_pcs[k] = pc - g_fw.base;
    w->state.store(kFrozen);
    w->signals_seen.fetch_add(1);
    sigset_t all;
    sigfillset(&all);
    for (;;) sigsuspend(&all);
  }
  g_missed.fetch_add(1, std::memory_order_relaxed);
  if (w) w->signals_seen.fetch_add(1);
  errno = saved;
}

size_t pick_size(Rng& r) {
  uint64_t k = r.next() % 1000;
  if (k < 750) return 16 + r.next() % 500;
  if (k < 995) return 512 + r.next() % 32768;
  return 131072 + r.next() % (2u << 20);  // large: runs of spans from the pool
}

void* alloc_some(Rng& r, size_t n) {
  switch (r.next() % 8) {
    case 0: {
      void* p = calloc(1, n);
      if (p && static_cast<unsigned char*>(p)[n - 1] != 0) error("calloc block not zeroed", p);
      return p;
    }
    case 1: {
      size_t align = size_t(32) << (r.next() % 8);
      void* p = aligned_alloc(align, n);
      if (p && uintptr_t(p) % align) error("aligned_alloc misaligned", p);
      return p;
    }
    case 2: return realloc(malloc(16 + r.next() % 64), n);
    default: return malloc(n);
  }
}

void* worker_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  t_self = w;
  Rng r{0x9e3779b97f4a7c15ull ^ (uint64_t(w - g_workers) * 0x2545f4914f6cdd1dull) ^ now_ns()};
  void* own[16] = {};
  uint64_t ops = 0;
  while (!g_stop_workers.load(std::memory_order_relaxed)) {
    uint64_t k = r.next() % 100;
    if (k < 40) {
      // A burst of small blocks: time spent mostly inside malloc and free.
      void* b[24];
      for (int i = 0; i < 24; i++) {
        b[i] = malloc(16 + (r.next() % 24) * 16);
        if (b[i] == nullptr) error("malloc returned NULL", nullptr);
        else *static_cast<uintptr_t*>(b[i]) = reinterpret_cast<uintptr_t>(b[i]) ^ 0x77;
      }
      for (int i = 0; i < 24; i++) {
        if (b[i] && *static_cast<uintptr_t*>(b[i]) != (reinterpret_cast<uintptr_t>(b[i]) ^ 0x77))
          error("small block corrupted", b[i]);
        free(b[i]);
      }
      ops += 48;
    } else if (k < 70) {
      // Own blocks: allocate, check, free (mostly local frees, the fast path).
      void*& o = own[r.next() % 16];
      if (o) {
        if (!verify_self(o)) error("own block corrupted", o);
        free(o);
        o = nullptr;
      } else {
        size_t n = pick_size(r);
        o = alloc_some(r, n);
        if (o == nullptr) error("allocation returned NULL", nullptr);
        else fill(o, n, r.next());
      }
      ops++;
    } else {
      // Hand a block over; free the one found there (often another thread's,
      // possibly a frozen thread's).
      size_t n = pick_size(r);
      void* p = alloc_some(r, n);
      if (p == nullptr) {
        error("allocation returned NULL", nullptr);
        continue;
      }
      fill(p, n, r.next());
      void* old = g_slots[r.next() % kSlots].exchange(p, std::memory_order_acq_rel);
      if (old) {
        if (!verify_self(old)) error("handed-over block corrupted", old);
        free(old);
        g_remote_frees.fetch_add(1, std::memory_order_relaxed);
      }
      ops += 2;
    }
    w->progress.store(ops, std::memory_order_relaxed);
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (void* o : own)
    if (o) {
      if (!verify_self(o)) error("own block corrupted at the end", o);
      free(o);
    }
  w->state.store(kStopped);
  return nullptr;
}

pthread_attr_t g_attr;

bool start_worker() {
  int i = g_nworkers.load();
  if (i >= kMaxWorkers) return false;
  Worker& w = g_workers[i];
  w.state.store(kRunning);
  if (pthread_create(&w.tid, &g_attr, worker_main, &w) != 0) {
    w.state.store(kUnused);
    return false;
  }
  g_nworkers.store(i + 1);
  return true;
}

// Sends the freeze signal to every running worker, at a random moment, round
// after round; a worker that was inside freeway freezes, the others go on.
struct FreezePlan {
  uint64_t cap;         // threads to freeze at most
  uint64_t spacing_ns;  // pause after each freeze
  double rss_limit;     // stop freezing above this RSS (each frozen thread pins its caches)
};
std::atomic<bool> g_rss_limit_hit{false};

void* freezer_main(void* arg) {
  const FreezePlan& plan = *static_cast<FreezePlan*>(arg);
  uint64_t cap = plan.cap;
  Rng r{0xfeedfacecafebeefull};
  std::vector<int> running;
  std::vector<uint64_t> seen;
  while (!g_stop_freezer.load() && g_frozen.load() < cap) {
    g_freezer_progress.fetch_add(1);
    running.clear();
    seen.clear();
    int n = g_nworkers.load();
    for (int i = 0; i < n; i++)
      if (g_workers[i].state.load() == kRunning) {
        running.push_back(i);
        seen.push_back(g_workers[i].signals_seen.load());
      }
    uint64_t frozen_before = g_frozen.load();
    for (size_t k = 0; k < running.size(); k++) {
      g_attempts.fetch_add(1);
      pthread_kill(g_workers[running[k]].tid, SIGUSR1);
    }
    // Wait until each has handled its signal (frozen or not).
    uint64_t t0 = now_ns();
    for (size_t k = 0; k < running.size(); k++)
      while (g_workers[running[k]].signals_seen.load() == seen[k] && now_ns() - t0 < 1000000000ull) sleep_ns(20000);
    // A random moment for the next round; a pause after a freeze, so that the
    // freezes spread over the run.
    if (g_frozen.load() > frozen_before) {
      sleep_ns(plan.spacing_ns / 2 + r.next() % plan.spacing_ns);
      if (rss_bytes() > plan.rss_limit) {
        g_rss_limit_hit = true;
        break;
      }
    } else {
      sleep_ns(r.next() % 200000);
    }
  }
  g_freezer_done = true;
  return nullptr;
}

// Short-lived threads started by the main thread: allocate, free others'
// blocks, exit (their caches are released at exit while frozen threads hold theirs).
void* short_lived(void*) {
  Rng r{now_ns() | 1};
  void* mine[64];
  for (int i = 0; i < 64; i++) {
    size_t n = pick_size(r);
    mine[i] = malloc(n);
    if (mine[i]) fill(mine[i], n, r.next());
    else error("short-lived: malloc returned NULL", nullptr);
  }
  for (int i = 0; i < 16; i++) {
    void* old = g_slots[r.next() % kSlots].exchange(nullptr, std::memory_order_acq_rel);
    if (old) {
      if (!verify_self(old)) error("short-lived: handed-over block corrupted", old);
      free(old);
    }
  }
  for (void* p : mine)
    if (p) {
      if (!verify_self(p)) error("short-lived: own block corrupted", p);
      free(p);
    }
  g_short_lived.fetch_add(1);
  return nullptr;
}

// ---------------------------------------------------------------------------
// Watchdog: every running worker, the main loop and the freezer must move.

double g_stall_seconds = 10;
std::atomic<uint64_t> g_longest_gap_ns{0};

void* watchdog_main(void*) {
  static uint64_t last[kMaxWorkers], since[kMaxWorkers];
  uint64_t main_last = 0, main_since = now_ns(), fr_last = 0, fr_since = now_ns();
  uint64_t ops_last = g_ops.load(), ops_since = now_ns();
  int known = 0;
  while (!g_watchdog_stop.load()) {
    sleep_ns(50000000);
    uint64_t t = now_ns();
    int n = g_nworkers.load();
    for (; known < n; known++) {  // a worker started since the last look: its clock starts now
      last[known] = g_workers[known].progress.load(std::memory_order_relaxed);
      since[known] = t;
    }
    for (int i = 0; i < n; i++) {
      Worker& w = g_workers[i];
      uint64_t v = w.progress.load(std::memory_order_relaxed);
      if (w.state.load() != kRunning || v != last[i]) {
        last[i] = v;
        since[i] = t;
      } else if (double(t - since[i]) / 1e9 > g_stall_seconds) {
        Msg().s("WATCHDOG: running worker ").u(uint64_t(i)).s(" made no progress for ")
            .u(uint64_t(g_stall_seconds)).s(" s (blocked by a frozen thread?) with ").u(g_frozen.load())
            .s(" threads frozen")
            .to(2);
        _exit(70);
      }
    }
    uint64_t ops = g_ops.load();
    if (ops != ops_last) {
      if (t - ops_since > g_longest_gap_ns.load()) g_longest_gap_ns.store(t - ops_since);
      ops_last = ops;
      ops_since = t;
    }
    uint64_t m = g_main_progress.load();
    if (m != main_last) main_last = m, main_since = t;
    uint64_t f = g_freezer_progress.load();
    if (f != fr_last || g_stop_freezer.load() || g_freezer_done.load()) fr_last = f, fr_since = t;
    const char* who = nullptr;
    if (double(t - main_since) / 1e9 > g_stall_seconds) who = "the main thread (starting and joining threads)";
    if (double(t - fr_since) / 1e9 > g_stall_seconds) who = "the freezer thread";
    if (who) {
      Msg().s("WATCHDOG: ").s(who).s(" made no progress for ").u(uint64_t(g_stall_seconds)).s(" s with ")
          .u(g_frozen.load()).s(" threads frozen")
          .to(2);
      _exit(70);
    }
  }
  return nullptr;
}

// Function names of the frozen PCs (addr2line on libfreeway.so), most frequent first.
std::string frozen_where(uint64_t count) {
  std::map<uintptr_t, int> offs;
  for (uint64_t i = 0; i < count && i < uint64_t(kMaxPcs); i++) offs[g_frozen_pcs[i]]++;
  std::string cmd = std::string("addr2line -f -C -e '") + g_fw.path + "'";
  for (auto& [off, n] : offs) {
    char b[32];
    std::snprintf(b, sizeof b, " 0x%lx", (unsigned long)off);
    cmd += b;
  }
  cmd += " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return "(addr2line unavailable)";
  std::map<std::string, int> by_fn;
  char line[1024];
  auto it = offs.begin();
  while (it != offs.end() && std::fgets(line, sizeof line, f)) {
    std::string fn(line);
    fn.erase(fn.find_last_not_of("\n") + 1);
    size_t anon = fn.find("(anonymous namespace)");
    if (anon != std::string::npos) fn.replace(anon, 21, "{anon}");
    fn = fn.substr(0, fn.find('('));
    by_fn[fn] += it->second;
    if (!std::fgets(line, sizeof line, f)) break;  // file:line
    ++it;
  }
  pclose(f);
  if (by_fn.empty()) return "(addr2line unavailable)";
  std::vector<std::pair<int, std::string>> v;
  for (auto& [fn, n] : by_fn) v.push_back({n, fn});
  std::sort(v.rbegin(), v.rend());
  std::string out;
  for (auto& [n, fn] : v) out += "    " + std::to_string(n) + "  " + fn + "\n";
  return out;
}

}  // namespace

TEST_CASE("threads frozen forever in the middle of malloc/free (hundreds of them) never stop the others: "
          "progress continues, blocks they handed over are freed, contents stay intact") {
  double seconds = fwtest::soak_seconds(20);
  // Hundreds of frozen threads, spread over the run. Each frozen thread pins
  // the hot spans of its thread cache (measured: ~24 MiB committed, ~14 MiB
  // resident each with this workload), so freezing stops at 4 GiB of RSS.
  FreezePlan plan{400, uint64_t(std::max(5e6, 0.8e9 * seconds / 400)), 4096.0 * 1048576.0};
  uint64_t cap = plan.cap;
  fwtest::find_loaded_text("libfreeway", g_fw);
  REQUIRE(g_fw.hi > g_fw.lo);

  fw_stats_t start;
  fw_stats(&start);
  double rss_start = rss_bytes();

  REQUIRE(fwtest::install_handler(SIGUSR1, freeze_handler, fwtest::all_signals()));

  pthread_attr_init(&g_attr);
  pthread_attr_setstacksize(&g_attr, 256 << 10);
  for (int i = 0; i < kLiveWorkers; i++) REQUIRE(start_worker());
  pthread_t wd, fz;
  REQUIRE(pthread_create(&wd, nullptr, watchdog_main, nullptr) == 0);
  REQUIRE(pthread_create(&fz, nullptr, freezer_main, &plan) == 0);

  uint64_t t0 = now_ns();
  uint64_t replacements = 0, start_failures = 0;
  while (double(now_ns() - t0) / 1e9 < seconds) {
    g_main_progress.fetch_add(1);
    // Replace every frozen worker.
    int n = g_nworkers.load();
    for (int i = 0; i < n; i++) {
      Worker& w = g_workers[i];
      if (w.state.load() == kFrozen && !w.replaced) {
        w.replaced = true;
        if (start_worker()) replacements++;
        else start_failures++;
      }
    }
    // And keep starting short-lived threads.
    pthread_t t;
    if (pthread_create(&t, &g_attr, short_lived, nullptr) == 0) pthread_join(t, nullptr);
    else start_failures++;
    sleep_ns(2000000);
  }
  g_stop_freezer = true;
  pthread_join(fz, nullptr);
  uint64_t frozen = g_frozen.load();

  // After all that, a new thread still gets through a full workload.
  uint64_t ops_before = g_ops.load();
  {
    Worker& w = g_workers[g_nworkers.load()];
    REQUIRE(start_worker());
    sleep_ns(500000000);
    CHECK(w.progress.load() > 1000);
  }
  uint64_t ops_after_freezing = g_ops.load() - ops_before;

  g_stop_workers = true;
  g_main_progress.fetch_add(1);
  int n = g_nworkers.load();
  int joined = 0;
  for (int i = 0; i < n; i++)
    if (g_workers[i].state.load() != kFrozen) {
      pthread_join(g_workers[i].tid, nullptr);
      joined++;
    }
  g_watchdog_stop = true;
  pthread_join(wd, nullptr);

  uint64_t drained = fwtest::drain_slots(g_slots, [](void* p) {
    if (!verify_self(p)) error("main: handed-over block corrupted", p);
  });
  fw_stats_t end;
  fw_stats(&end);
  double rss_end = rss_bytes();
  double elapsed = double(now_ns() - t0) / 1e9;

  std::printf("kill tolerance: %.1f s: %llu threads frozen mid-operation inside freeway (cap %llu%s), "
              "%llu freeze signals sent, %llu landed outside freeway and returned; "
              "%d worker threads started (%llu replacements), %llu short-lived threads, %d joined at the end; "
              "%llu operations (%llu after the last freeze), %llu handed-over blocks freed by others, %llu drained; "
              "longest pause of all progress %.0f ms; errors %llu\n",
              elapsed, (unsigned long long)frozen, (unsigned long long)cap,
              g_rss_limit_hit.load() ? ", stopped at the RSS limit" : "", (unsigned long long)g_attempts.load(),
              (unsigned long long)g_missed.load(), n,
              (unsigned long long)replacements, (unsigned long long)g_short_lived.load(), joined,
              (unsigned long long)g_ops.load(), (unsigned long long)ops_after_freezing,
              (unsigned long long)g_remote_frees.load(), (unsigned long long)drained,
              double(g_longest_gap_ns.load()) / 1e6, (unsigned long long)g_errors.load());
  std::printf("kill tolerance: committed %.1f MiB at start, %.1f MiB at end (%.2f MiB per frozen thread); "
              "RSS %.1f -> %.1f MiB; reserved %.0f -> %.0f MiB; live %.1f -> %.1f MiB; thread caches bound %llu -> %llu\n",
              start.committed_bytes / 1048576.0, end.committed_bytes / 1048576.0,
              frozen ? (double(end.committed_bytes) - double(start.committed_bytes)) / 1048576.0 / double(frozen) : 0.0,
              rss_start / 1048576.0, rss_end / 1048576.0, start.reserved_bytes / 1048576.0,
              end.reserved_bytes / 1048576.0, start.live_bytes / 1048576.0,
              end.live_bytes / 1048576.0, (unsigned long long)start.threads_live,
              (unsigned long long)end.threads_live);
  std::printf("kill tolerance: where the frozen threads stopped (function in libfreeway.so: count):\n%s",
              frozen_where(frozen).c_str());
  std::fflush(stdout);

  CHECK(g_errors.load() == 0);
  CHECK(start_failures == 0);
  // Hundreds in make test (20 s); a shorter run (SOAK_SECONDS < 20) needs fewer.
  CHECK(frozen >= uint64_t(std::min(100.0, 5 * seconds)));
  CHECK(ops_after_freezing > 0);
  // The frozen threads stay frozen: they are not joined, and exit ends them.
}
