// Thread churn and producer-consumer soak: memory must not creep.
//
// 1. Hundreds of rounds of thread recreation (Lever-Boreham's second
//    benchmark, scaled): each round's threads free the blocks the previous
//    round's threads allocated (those threads have exited: every free is a
//    remote free into a span whose thread cache is gone) and allocate new
//    ones. The live data stays the same size; so must the RSS.
// 2. Producer-consumer: producers allocate and fill blocks, consumers check
//    and free them (every free remote), through bounded queues.
// Each phase measures the RSS (/proc/self/statm) early and late: late / early
// must stay under 1.1, and the RSS must stay within a small factor of the
// live bytes freeway reports (fw_stats).
// 3. Phases of growing block sizes, each freed entirely: the reserved address
//    space must not grow with every phase.
//
// Runs ~300 rounds + 10 s by default; SOAK_SECONDS=N runs each phase N seconds.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/config.h"  // kVspanSize: what one span takes at most
#include "freeway.h"
#include "test_util.h"

namespace {

using fwtest::now_ns;
using fwtest::Rng;
using fwtest::rss_bytes;
using fwtest::sleep_ns;
using fwtest::soak_seconds;

double live_bytes() {
  fw_stats_t s;
  fw_stats(&s);
  return double(s.live_bytes);
}

// Self-describing blocks (>= 16 bytes), every byte written (so RSS is real)
// (fwtest::SelfBlocks; at most 4 MiB, big blocks checked with a stride of 97
// between their first and last 2 KiB).
constexpr fwtest::SelfBlocks kBlock{0xc4a2000000000000ull, 4u << 20, 8192, 2048, 97};

size_t pick_size(Rng& r) {
  uint64_t k = r.next() % 1000;
  if (k < 700) return 16 + r.next() % 240;
  if (k < 950) return 256 + r.next() % 3840;
  if (k < 998) return 4096 + r.next() % 28672;
  return 131072 + r.next() % (1 << 20);
}

std::atomic<uint64_t> g_progress{0};
std::atomic<bool> g_watchdog_stop{false};
const char* volatile g_phase = "start";

void* watchdog(void*) {
  fwtest::Watched w{"progress", &g_progress, 0, 0};
  fwtest::watch_from_now(&w, 1);
  // Every 100 ms until stopped.
  if (fwtest::wait_for_stall(&w, 1, g_watchdog_stop, 100000000, 30)) {
    const char* ph = g_phase;
    char m[256];
    int n = std::snprintf(m, sizeof m, "WATCHDOG: no progress for 30 s in phase '%s' (deadlock?)\n", ph);
    fwtest::write_fd(2, m, size_t(n));
    _exit(70);
  }
  return nullptr;
}

struct WatchdogGuard {
  pthread_t t;
  WatchdogGuard() {
    g_watchdog_stop = false;
    pthread_create(&t, nullptr, watchdog, nullptr);
  }
  ~WatchdogGuard() {
    g_watchdog_stop = true;
    pthread_join(t, nullptr);
  }
};

// An RSS series' two windows: early, its highest from 25% to 80% of the
// samples (from sample 10 at least); late, its highest in the last 20%. A
// heap's RSS climbs to a plateau and then swings on it (the pool's purges,
// docs/design.md, decay); the early window starts after the climb and reaches
// to the late one, so both see the plateau's highs and only a creep parts
// them. Each test says what it traced.
// early_at and late_at: the samples where those highs are.
struct RssWindows {
  double early, late;
  size_t early_at, late_at;
};

RssWindows rss_windows(const std::vector<double>& rss) {
  size_t n = rss.size();
  size_t a = std::min(n - 1, std::max<size_t>(10, n * 25 / 100)), b = std::min(n, std::max(a + 1, n * 80 / 100));
  auto e = std::max_element(rss.begin() + long(a), rss.begin() + long(b));
  auto l = std::max_element(rss.end() - long(std::max<size_t>(1, n / 5)), rss.end());
  return {*e, *l, size_t(e - rss.begin()), size_t(l - rss.begin())};
}

// The series, the highest of each `step` samples, to tell a creep from a late
// climb when late / early fails.
void print_rss_trace(const char* per, const std::vector<double>& rss, size_t step) {
  std::printf("RSS (MiB) per %s, highest of each:", per);
  for (size_t k = 0; k < rss.size(); k += step) {
    auto end = rss.begin() + long(std::min(rss.size(), k + step));
    std::printf(" %.1f", *std::max_element(rss.begin() + long(k), end) / 1048576.0);
  }
  std::printf("\n");
}

}  // namespace

TEST_CASE("hundreds of rounds of thread recreation, each freeing the previous round's blocks: RSS stops "
          "growing (late/early < 1.1) and stays near the live bytes") {
  g_phase = "thread churn";
  WatchdogGuard wd;
  const int kThreads = 4;
  const size_t kBlocks = 24000;  // live blocks (~70 MiB), split among the threads
  double seconds = soak_seconds(0);
  int min_rounds = 300;
  std::vector<void*> prev(kBlocks, nullptr), next(kBlocks, nullptr);
  std::atomic<uint64_t> errors{0};
  std::vector<double> rss_of_round;
  double live_sum = 0, rss_sum = 0, worst_factor = 0, peak_live = 0;
  int samples = 0;
  uint64_t t0 = now_ns();
  int round = 0;
  for (;; round++) {
    if (round >= min_rounds && double(now_ns() - t0) / 1e9 >= seconds) break;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++)
      ts.emplace_back([&, t] {
        Rng r{uint64_t(round * 131 + t + 1) * 0x9e3779b97f4a7c15ull};
        const size_t share = kBlocks / kThreads;
        for (size_t k = 0; k < share; k++) {
          size_t i = size_t(t) + kThreads * k;
          // Free one block of the previous round (allocated by a thread that
          // has exited), in a shuffled order (7919 is prime to the share), then
          // allocate one: the live data stays the same size throughout.
          size_t j = size_t(t) + kThreads * ((k * 7919 + size_t(round)) % share);
          if (prev[j]) {
            if (!kBlock.verify_self(prev[j])) errors++;
            free(prev[j]);
            prev[j] = nullptr;
          }
          size_t n = pick_size(r);
          void* p = malloc(n);
          next[i] = p;
          if (p == nullptr) {
            errors++;
            continue;
          }
          kBlock.fill(p, n, r.next());
          g_progress.fetch_add(1, std::memory_order_relaxed);
        }
        for (size_t i = size_t(t); i < kBlocks; i += kThreads)
          if (prev[i]) {
            if (!kBlock.verify_self(prev[i])) errors++;
            free(prev[i]);
            prev[i] = nullptr;
          }
      });
    for (auto& th : ts) th.join();
    prev.swap(next);
    double rss = rss_bytes(), live = live_bytes();
    rss_of_round.push_back(rss);
    if (round >= 10) {
      live_sum += live;
      rss_sum += rss;
      samples++;
      worst_factor = std::max(worst_factor, rss / live);
      peak_live = std::max(peak_live, live);
    }
  }
  double elapsed = double(now_ns() - t0) / 1e9;
  int rounds = round;
  // The windows of rss_windows: with 300 rounds, early is rounds 75-239 and
  // late 240-299. What the pool keeps (span_pool.cpp, commit policy) grows
  // with the heap over the first rounds, slowing as it nears a plateau. Traced
  // on 2 cores (highest of each 25 rounds): 123 MiB at round 0, 145 at 100,
  // 150 at 150, 154-159 at 275 and, over 1,873 rounds, a plateau swinging
  // between 147 and 159 with no trend. An early window of rounds 150-169 saw
  // the climb: 143.0 MiB in a CI run under load against 158.6 late, 1.109.
  // A creep shows less between these windows, so the RSS is also held against
  // the live bytes below, over the whole run: 100 KiB mapped and touched each
  // round, out of the heap's books, failed the worst RSS/live (3.05) though
  // late/early was 1.038 (it was 1.100 at 400 KiB a round).
  const RssWindows windows = rss_windows(rss_of_round);
  const double early = windows.early, late = windows.late;
  double live_end = live_bytes(), rss_end = rss_bytes();
  for (void* p : prev)
    if (p) {
      if (!kBlock.verify_self(p)) errors++;
      free(p);
    }
  fw_stats_t s;
  fw_stats(&s);
  std::printf(
      "churn: %d rounds x %d threads in %.1f s (%d threads made), %zu live blocks (%.1f MiB live at the end): "
      "RSS early %.1f MiB, late %.1f MiB, late/early %.3f; RSS/live %.2f at the end, %.2f on average, "
      "%.2f worst; RSS at the end / peak live %.2f; committed %.1f MiB, peak committed %.1f MiB; errors "
      "%llu\n",
      rounds, kThreads, elapsed, rounds * kThreads, kBlocks, live_end / 1048576.0, early / 1048576.0, late / 1048576.0,
      late / early, rss_end / live_end, rss_sum / live_sum, worst_factor, rss_end / peak_live,
      s.committed_bytes / 1048576.0, s.peak_committed_bytes / 1048576.0, (unsigned long long)errors.load());
  std::fflush(stdout);
  CHECK(errors.load() == 0);
  if (!(late / early < 1.1)) print_rss_trace("25 rounds", rss_of_round, 25);
  CHECK(late / early < 1.1);
  // "A small factor": the same workload (standalone, 300 rounds, RSS over
  // requested bytes) measured here ends at 3.8 with glibc, 3.2 mimalloc,
  // 2.3 tcmalloc, 1.6 jemalloc, 1.9 freeway: hot spans per thread cache and
  // FULL spans below the reuse threshold (25%) hold the rest. Against the
  // most live bytes of a round, not the last round's: those swing with the
  // few blocks of 128 KiB-1.1 MiB a round draws (0.2% of 24,000, about 30
  // MiB), while the RSS keeps the highs. A 50 s soak (Stop 71) ended at 57.5
  // MiB live against 68.6-73.4 in others, with the same RSS: 2.53 at the end.
  CHECK(rss_end / peak_live < 2.5);
  CHECK(worst_factor < 3.0);
  CHECK(fw_check_heap() == 0);
}

namespace {

// A bounded single-producer single-consumer ring of blocks.
struct Ring {
  static constexpr size_t kCap = 8192;
  std::atomic<size_t> head{0}, tail{0};
  void* slot[kCap];
  bool push(void* p) {
    size_t t = tail.load(std::memory_order_relaxed);
    if (t - head.load(std::memory_order_acquire) == kCap) return false;
    slot[t % kCap] = p;
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  void* pop() {
    size_t h = head.load(std::memory_order_relaxed);
    if (h == tail.load(std::memory_order_acquire)) return nullptr;
    void* p = slot[h % kCap];
    head.store(h + 1, std::memory_order_release);
    return p;
  }
};

}  // namespace

TEST_CASE("producer-consumer: blocks allocated by producers and freed by consumers keep RSS flat "
          "(late/early < 1.1) and near the live bytes") {
  g_phase = "producer-consumer";
  WatchdogGuard wd;
  double seconds = soak_seconds(20);
  constexpr int kPairs = 2;
  static Ring rings[kPairs];
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> produced{0}, consumed{0}, errors{0};
  // Bytes of the blocks in the queues, by the test's own count: unlike the
  // heap's live bytes, it leaves out any block the heap lost.
  std::atomic<int64_t> queued{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kPairs; i++) {
    ts.emplace_back([&, i] {  // producer
      Rng r{uint64_t(i + 7) * 0x2545f4914f6cdd1dull};
      while (!stop.load(std::memory_order_relaxed)) {
        // Small and medium blocks only: the queues then hold a steady amount
        // of live data (a few large blocks more or less would swing it by MiBs).
        size_t n = 16 + r.next() % (r.next() % 8 == 0 ? 32768 : 1024);
        void* p = malloc(n);
        if (p == nullptr) {
          errors++;
          continue;
        }
        kBlock.fill(p, n, r.next());
        while (!rings[i].push(p)) {
          if (stop.load()) {
            free(p);
            return;
          }
          sched_yield();
        }
        queued.fetch_add(int64_t(n), std::memory_order_relaxed);
        produced.fetch_add(1, std::memory_order_relaxed);
      }
    });
    ts.emplace_back([&, i] {  // consumer
      for (;;) {
        void* p = rings[i].pop();
        if (p == nullptr) {
          if (stop.load()) return;
          sched_yield();
          continue;
        }
        if (!kBlock.verify_self(p)) errors++;
        queued.fetch_sub(int64_t(kBlock.self_size(p)), std::memory_order_relaxed);
        free(p);
        consumed.fetch_add(1, std::memory_order_relaxed);
        g_progress.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // Sample RSS, live bytes and the caches' hot spans every 100 ms.
  std::vector<double> rss, live, hot;
  double peak_queued = 0;
  uint64_t t0 = now_ns();
  while (double(now_ns() - t0) / 1e9 < seconds) {
    sleep_ns(100000000);
    rss.push_back(rss_bytes());
    live.push_back(live_bytes());
    fw_stats_t now;
    fw_stats(&now);
    hot.push_back(double(now.spans_hot) * double(fw::kVspanSize));
    peak_queued = std::max(peak_queued, double(queued.load(std::memory_order_relaxed)));
  }
  stop = true;
  for (auto& t : ts) t.join();
  uint64_t drained = 0;  // left in the queues at the end
  for (auto& r : rings)
    while (void* p = r.pop()) {
      if (!kBlock.verify_self(p)) errors++;
      free(p);
      drained++;
    }
  double elapsed = double(now_ns() - t0) / 1e9;
  size_t n = rss.size();
  REQUIRE(n >= 20);
  // The windows of rss_windows, over samples every 0.1 s. The RSS does not
  // rise smoothly here. It climbs for the first seconds, as the queues'
  // blocks spread over more spans, to a plateau it then keeps: on
  // 2 cores with both also busy, traced every 0.1 s over 20 s, the plateau
  // came at 2-6 s, and over 60 s the highest RSS of the first and last fifths
  // were within 5%. On it the pool's purges (docs/design.md, decay) swing it
  // by about 10%. A 10 s run with its early window at 1.5-5.5 s caught the
  // climb instead of the plateau (late/early 1.114 in a CI run under load:
  // early 57.9 MiB, late 64.5 MiB, the plateau of the 60 s runs); one of
  // 1.13 earlier came from a 2 s window that missed the swings. The windows
  // here start after the climb. The swings are slow: with the early window at
  // 25-60% a CI-like run under load saw 54-59 MiB there and 62-65 MiB in the
  // last 6 s (1.101), so the early window reaches to the late one, and sees
  // the plateau's highs. A creep then shows less between them (consumers that
  // leak one block in 1,000: 1.094), so the late RSS is also held against the
  // most the queues held by the test's own count, which a lost block does not
  // raise: 1.50-1.57 under load, 2.41 with that leak.
  //
  // The late high may also exceed the early one by what the caches' hot
  // spans (a vspan each, as below) grew between the two samples: in per-CPU
  // mode they double when the second CPU's cache comes into use, which can
  // first happen late in the run. A CI run under load (Stop 67) went from
  // 71.2 MiB (seconds 3-16) to 78.5 MiB in its last 3 s, with 81 hot spans
  // (20.2 MiB) at the end: late/early 1.103. That step is the caches' bounded
  // term of the blowup bound, not a creep. In per-thread mode the hot spans
  // (with the kept ones) hardly change on the plateau.
  auto [early, late, early_at, late_at] = rss_windows(rss);
  // A creep shows where the run ends; a swing need not. The level held
  // against the early high is the highest RSS of the last second, not of the
  // whole late window: a CI run under load (Stop 81, 417,000 blocks a second,
  // a third of the usual) rose from 70 to 79 MiB for two seconds of that
  // window and came back to 70-71 in its last two (late/early 1.111 by the
  // window's high, 0.99 by the last second's).
  const size_t end_from = n - 10;
  const size_t end_at = size_t(std::max_element(rss.begin() + long(end_from), rss.end()) - rss.begin());
  const double end_level = rss[end_at];
  const double hot_grew = std::max(0.0, hot[end_at] - hot[early_at]);
  double peak_live = *std::max_element(live.begin(), live.end());
  double mean_live = 0;
  for (double v : live) mean_live += v;
  mean_live /= double(n);
  std::printf(
      "producer-consumer: %d producers -> %d consumers, %.1f s: %llu blocks passed (%.0f/s); live bytes mean "
      "%.1f MiB, peak %.1f MiB; RSS early %.1f MiB, late %.1f MiB (late/early %.3f), last second %.1f MiB "
      "(end/early %.3f), hot spans grew by %.1f MiB between them; RSS late / peak live %.2f; RSS late / the queues' "
      "peak %.2f (%.1f MiB); errors %llu\n",
      kPairs, kPairs, elapsed, (unsigned long long)consumed.load(), double(consumed.load()) / elapsed,
      mean_live / 1048576.0, peak_live / 1048576.0, early / 1048576.0, late / 1048576.0, late / early,
      end_level / 1048576.0, end_level / early, hot_grew / 1048576.0, late / peak_live, late / peak_queued,
      peak_queued / 1048576.0, (unsigned long long)errors.load());
  std::fflush(stdout);
  CHECK(errors.load() == 0);
  CHECK(consumed.load() > 0);
  CHECK(consumed.load() + drained == produced.load());  // every block passed on was taken, once
  if (!(end_level < 1.1 * early + hot_grew)) print_rss_trace("second", rss, 10);
  CHECK(end_level < 1.1 * early + hot_grew);
  // Less what the caches hold in their hot spans, up to a vspan each (every
  // class's span is one, size_class.h): per-CPU mode has a cache per CPU, and
  // with both of this machine's CPUs' caches in use (about half the runs on
  // a 2-core Intel guest, Stop 60) they held 82 hot spans and the late RSS
  // came to 1.89-1.96 x the queues' peak (20.5 MiB of them), against 1.41-1.43
  // with one cache in use (41). Less the hot spans: 1.18-1.39 per-CPU,
  // 1.36-1.41 per-thread (20 hot spans), and 2.49-3.75 with the leak of one
  // block in 1,000 in either mode.
  fw_stats_t st;
  fw_stats(&st);
  const double hot_bytes = double(st.spans_hot) * double(fw::kVspanSize);
  std::printf("producer-consumer: %llu hot spans (%.1f MiB); RSS late less those / the queues' peak %.2f, / peak live %.2f\n",
              (unsigned long long)st.spans_hot, hot_bytes / 1048576.0, (late - hot_bytes) / peak_queued,
              (late - hot_bytes) / peak_live);
  CHECK((late - hot_bytes) / peak_queued < 1.9);
  // The same pattern standalone (2 pairs, 8192-block queues, blocks of 16 B to
  // 32 KiB), max RSS / peak live: glibc 1.13, tcmalloc 1.35, mimalloc 1.42,
  // jemalloc 1.55. Twice the live data is a generous bound (less the hot
  // spans, as above: 1.74-1.80 with them in per-CPU mode's runs with both
  // caches in use).
  CHECK((late - hot_bytes) / peak_live < 2.0);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("phases of growing block sizes (1 MiB to 64 MiB), each freed entirely, reuse the address space the "
          "earlier phases freed: reserved address space stays bounded") {
  // A long-running program whose working set moves to bigger blocks: 1 GiB in
  // 1 MiB blocks, all freed, then 1 GiB in 2 MiB blocks, and so on. Freed runs
  // of virtual spans must serve the larger runs later on; otherwise each phase
  // reserves a new region, and the 1 TiB arena (kMaxRegions) runs out after
  // about a thousand such phases even with no memory limit.
  std::vector<void*> v;
  v.reserve(1024);
  fw_stats_t at_start;
  fw_stats(&at_start);
  std::printf("phases: reserved before them %.0f MiB\n", double(at_start.reserved_bytes) / 1048576.0);
  uint64_t after_first = 0, after_last = 0;
  for (size_t sz = size_t(1) << 20; sz <= (size_t(64) << 20); sz *= 2) {
    for (size_t got = 0; got < (size_t(1) << 30); got += sz) {
      void* p = malloc(sz);
      REQUIRE(p != nullptr);
      *static_cast<uint64_t*>(p) = sz;  // touch one page only
      v.push_back(p);
    }
    for (void* p : v) free(p);
    v.clear();
    fw_stats_t s;
    fw_stats(&s);
    if (sz == (size_t(1) << 20)) after_first = s.reserved_bytes;
    after_last = s.reserved_bytes;
    std::printf("phases: 1 GiB in %zu MiB blocks, all freed: reserved %.0f MiB\n", sz >> 20,
                double(s.reserved_bytes) / 1048576.0);
  }
  std::fflush(stdout);
  // The phases end at most one GiB past what the first left reserved, or
  // three past what was reserved before them, whichever is more. From a fresh
  // heap the first phase reserves two (its GiB of blocks does not fit in one
  // 1 GiB slot beside the process's other spans): 3 MiB before, 2,049 after,
  // a bound of 3,075. In a heap used before (this binary with all its cases in
  // one process; ctest and `make soak` run each case alone) the first phase
  // may fit in a region reserved earlier and grown in place (152 MiB before,
  // 1,085 after), and a later phase then takes the second GiB (2,246 MiB after
  // the last; a bound of 3,224). Phases that each reserved a GiB of their own
  // would pass the bound by the third phase from a fresh heap, by the fourth
  // from a used one.
  const uint64_t first = std::max(after_first, at_start.reserved_bytes + (uint64_t(2) << 30));
  CHECK(after_last <= first + (uint64_t(1) << 30));
}
