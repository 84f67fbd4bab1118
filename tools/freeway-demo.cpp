// freeway-demo: a multithreaded workload running on freeway, in phases that
// move every state and figure freeway-inspect shows (`make demo`).
//
// It starts telemetry (fw_telemetry_start), prints its pid and the command to
// attach, then runs six phases, logging each one and, every second, the
// figures of fw_stats (live, committed, blowup = committed / live):
//   1 ramp-up      every worker grows a working set of mixed sizes (small
//                  classes, some 1-64 KiB blocks, a few 256 KiB-4 MiB ones)
//   2 churn        workers replace random blocks of their working set
//   3 handover     producer-consumer: even workers allocate blocks and post
//                  them in mailboxes, odd workers take them into their own
//                  working set, freeing what they replace (remote frees)
//   4 fragment     every worker frees 15 blocks of each 16 it holds: many
//                  spans stay partially used and blowup rises
//   5 collect      fw_collect() gives free memory back to the OS
//   6 free-all     every worker frees what it still holds
// A phase's length is a share of --seconds (default 60). With --loop the
// phases repeat until SIGINT/SIGTERM; either signal ends the run early with
// the same summary (the `make demo` script stops the demo that way).
//   freeway-demo [--seconds S] [--threads N] [--loop] [--quiet]
#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "freeway.h"

namespace {

using Clock = std::chrono::steady_clock;

enum Phase : int { kIdle = 0, kRamp, kChurn, kHandover, kFragment, kCollect, kFreeAll, kPhaseCount };
const char* const kPhaseName[kPhaseCount] = {"idle", "ramp-up", "churn", "handover", "fragment", "collect", "free-all"};
// Share of the total run each phase takes (sums to 1).
const double kPhaseShare[kPhaseCount] = {0, 0.22, 0.18, 0.20, 0.15, 0.10, 0.15};

constexpr size_t kSmallSlots = 16384;  // working-set blocks per worker (up to 64 KiB each)
constexpr size_t kLargeSlots = 4;      // 256 KiB-4 MiB blocks per worker
constexpr size_t kBoxesPerWorker = 512;

// Set by SIGINT/SIGTERM; read by the main loop and the workers.
volatile std::sig_atomic_t g_signalled = 0;
void on_signal(int) { g_signalled = 1; }

struct Mailbox {  // one block in flight from a producer to a consumer
  std::atomic<void*> slot{nullptr};
};

// Shared state. Invariant: a worker reads `phase` and `generation` with acquire
// and acts on them; the main thread is their only writer (release). A worker
// that finished a one-shot phase (fragment, free-all) records the generation
// it did it for in done_gen, so it does it once per pass.
struct Shared {
  std::atomic<int> phase{kIdle};
  std::atomic<uint64_t> generation{0};  // phase changes so far
  std::atomic<bool> stop{false};
  std::atomic<double> ramp_fill{0};     // ramp-up: fraction of the working set to fill
  std::atomic<uint64_t> ops{0};         // mallocs + frees, all workers
  std::vector<Mailbox> boxes;
  int threads = 1;
};

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Mixed sizes: 96% small (16-1024 B), 4% medium (1-64 KiB).
size_t small_size(uint64_t r) { return (r % 100 < 96) ? 16 + (r >> 8) % 1009 : 1024 + (r >> 8) % (63 * 1024); }
size_t large_size(uint64_t r) { return (256u << 10) + (r >> 8) % ((4u << 20) - (256u << 10)); }

void* alloc_touch(size_t n, int t) {
  void* p = std::malloc(n);
  if (p == nullptr) {
    spdlog::error("malloc({}) failed: {}", n, std::strerror(errno));
    std::exit(1);
  }
  std::memset(p, t, n < 64 ? n : 64);
  return p;
}

class Worker {
 public:
  Worker(Shared& sh, int t) : sh_(sh), t_(t), rng_{0x2545f4914f6cdd1dull * uint64_t(t + 1)} {}

  void run() {
    uint64_t ops = 0;
    while (!sh_.stop.load(std::memory_order_acquire) && !g_signalled) {
      int phase = sh_.phase.load(std::memory_order_acquire);
      uint64_t gen = sh_.generation.load(std::memory_order_acquire);
      switch (phase) {
        case kRamp: ops += ramp(); break;
        case kChurn: ops += churn(); break;
        case kHandover: ops += handover(); break;
        case kFragment:
        case kFreeAll:
          if (done_gen_ != gen) {
            ops += phase == kFragment ? fragment() : free_all();
            done_gen_ = gen;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          break;
        default: std::this_thread::sleep_for(std::chrono::milliseconds(20)); break;
      }
      sh_.ops.fetch_add(ops, std::memory_order_relaxed);
      ops = 0;
    }
    free_all();
  }

 private:
  // Fills the working set up to the fraction the main thread sets, a batch at a time.
  uint64_t ramp() {
    size_t target = size_t(sh_.ramp_fill.load(std::memory_order_relaxed) * double(kSmallSlots));
    uint64_t ops = 0;
    for (int k = 0; k < 512 && filled_ < target && filled_ < kSmallSlots; k++, filled_++) {
      small_[filled_] = alloc_touch(small_size(rng_.next()), t_);
      ops++;
    }
    size_t large_target = target * kLargeSlots / kSmallSlots;
    for (size_t i = 0; i < large_target; i++)
      if (large_[i] == nullptr) large_[i] = alloc_touch(large_size(rng_.next()), t_), ops++;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return ops;
  }

  // Replaces random blocks of the working set; now and then a large one.
  uint64_t churn() {
    uint64_t ops = 0;
    for (int k = 0; k < 1024; k++) {
      uint64_t r = rng_.next();
      void*& slot = small_[r % kSmallSlots];
      std::free(slot);
      slot = alloc_touch(small_size(r >> 14), t_);
      ops += 2;
    }
    uint64_t r = rng_.next();
    if (r % 64 == 0) {
      void*& big = large_[(r >> 8) % kLargeSlots];
      std::free(big);
      big = alloc_touch(large_size(r >> 16), t_);
      ops += 2;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // leave CPU to the inspector
    return ops;
  }

  // Even workers post new blocks; odd workers (and a lone worker) take them
  // into their working set, freeing the block each one replaces. Blocks left
  // unclaimed in a mailbox are freed by the producer that finds them.
  uint64_t handover() {
    uint64_t ops = 0;
    bool producer = (t_ % 2 == 0);
    bool consumer = (t_ % 2 == 1) || sh_.threads == 1;
    int consumers = sh_.threads / 2;
    for (int k = 0; k < 512; k++) {
      uint64_t r = rng_.next();
      if (producer) {
        int to = consumers > 0 ? 1 + 2 * int((r >> 20) % uint64_t(consumers)) : t_;
        Mailbox& m = sh_.boxes[size_t(to) * kBoxesPerWorker + (r >> 8) % kBoxesPerWorker];
        void* p = alloc_touch(small_size(r >> 24), t_);
        std::free(m.slot.exchange(p, std::memory_order_acq_rel));
        ops += 2;
      }
      if (consumer) {
        Mailbox& m = sh_.boxes[size_t(t_) * kBoxesPerWorker + (r >> 8) % kBoxesPerWorker];
        if (void* p = m.slot.exchange(nullptr, std::memory_order_acq_rel)) {
          void*& slot = small_[(r >> 30) % kSmallSlots];
          std::free(slot);  // often a block another worker allocated
          slot = p;
          ops++;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return ops;
  }

  // Keeps 1 block of every 16 and every other large block.
  uint64_t fragment() {
    uint64_t ops = 0;
    for (size_t i = 0; i < kSmallSlots; i++)
      if (i % 16 != 0 && small_[i] != nullptr) std::free(small_[i]), small_[i] = nullptr, ops++;
    for (size_t i = 1; i < kLargeSlots; i += 2)
      if (large_[i] != nullptr) std::free(large_[i]), large_[i] = nullptr, ops++;
    filled_ = 0;  // the next ramp-up refills from the start, over what is kept
    return ops;
  }

  uint64_t free_all() {
    uint64_t ops = 0;
    for (void*& p : small_)
      if (p != nullptr) std::free(p), p = nullptr, ops++;
    for (void*& p : large_)
      if (p != nullptr) std::free(p), p = nullptr, ops++;
    filled_ = 0;
    return ops;
  }

  Shared& sh_;
  int t_;
  Rng rng_;
  std::vector<void*> small_ = std::vector<void*>(kSmallSlots, nullptr);
  std::vector<void*> large_ = std::vector<void*>(kLargeSlots, nullptr);
  size_t filled_ = 0;  // ramp-up: small_[0, filled_) were visited
  uint64_t done_gen_ = ~uint64_t(0);
};

double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }
double blowup(const fw_stats_t& s) { return s.live_bytes ? double(s.committed_bytes) / double(s.live_bytes) : 0.0; }

int usage(const std::string& msg) {
  std::fprintf(stderr,
               "freeway-demo: %s\n"
               "usage: freeway-demo [--seconds S] [--threads N] [--loop] [--quiet]\n"
               "  --seconds S  length of one pass of the six phases (default 60, 6-86400)\n"
               "  --threads N  worker threads (default 4, 1-256)\n"
               "  --loop       repeat the phases until Ctrl-C\n"
               "  --quiet      log phase changes and the summary only\n",
               msg.c_str());
  return 2;
}

bool parse_long(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != 0 || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long seconds = 60, threads = 4;
  bool loop = false, quiet = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--seconds" || a == "--threads") {
      if (i + 1 >= argc) return usage(a + " needs a value");
      bool ok = a == "--seconds" ? parse_long(argv[++i], 6, 86400, &seconds) : parse_long(argv[++i], 1, 256, &threads);
      if (!ok) return usage("bad value for " + a + ": '" + argv[i] + "'");
    } else if (a == "--loop") {
      loop = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "-h" || a == "--help") {
      usage("a workload in phases for freeway-inspect");
      return 0;
    } else {
      return usage("unknown argument '" + a + "'");
    }
  }
  void* probe = std::malloc(16);
  if (!fw_owns(probe)) {
    std::fprintf(stderr, "freeway-demo: malloc is not freeway's (is libfreeway.so linked?)\n");
    return 1;
  }
  std::free(probe);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  spdlog::set_pattern("[%H:%M:%S.%e] %v");

  if (fw_telemetry_start() != 0)
    spdlog::warn("telemetry is off ({}): freeway-inspect cannot attach", std::strerror(errno));
  long pid = long(getpid());
  spdlog::info("freeway demo: pid {}, {} threads, {} s per pass{}", pid, threads, seconds,
               loop ? ", looping until Ctrl-C" : "");
  spdlog::info("attach with: freeway-inspect {}   (or: freeway-inspect watch {})", pid, pid);

  Shared sh;
  sh.threads = int(threads);
  sh.boxes = std::vector<Mailbox>(size_t(threads) * kBoxesPerWorker);
  std::vector<Worker> workers;
  workers.reserve(size_t(threads));
  for (int t = 0; t < threads; t++) workers.emplace_back(sh, t);
  std::vector<std::thread> running;
  for (auto& w : workers) running.emplace_back([&w] { w.run(); });

  double max_blowup = 0,  // highest in the fragment phase
         max_live = 0, max_committed = 0;
  uint64_t committed_before_collect = 0, committed_after_collect = 0;
  uint64_t last_ops = 0;
  int passes = 0;
  int reached = -1;  // the furthest phase started (a signal may stop the demo early)
  auto run_start = Clock::now();
  do {
    for (int phase = kRamp; phase < kPhaseCount && !g_signalled; phase++) {
      auto len = std::chrono::duration<double>(double(seconds) * kPhaseShare[phase]);
      auto start = Clock::now();
      reached = std::max(reached, phase);
      if (phase == kRamp) sh.ramp_fill.store(0, std::memory_order_relaxed);
      sh.phase.store(phase, std::memory_order_release);
      sh.generation.fetch_add(1, std::memory_order_release);
      fw_stats_t st;
      fw_stats(&st);
      spdlog::info("phase {}/6 {} ({:.0f} s): live {:.1f} MiB, committed {:.1f} MiB, blowup {:.2f}", phase,
                   kPhaseName[phase], len.count(), mib(st.live_bytes), mib(st.committed_bytes), blowup(st));
      if (phase == kCollect) {
        committed_before_collect = st.committed_bytes;
        fw_collect();
        fw_stats(&st);
        committed_after_collect = st.committed_bytes;
        spdlog::info("fw_collect(): committed {:.1f} MiB -> {:.1f} MiB", mib(committed_before_collect),
                     mib(committed_after_collect));
      }
      auto tick = start;
      while (!g_signalled) {
        auto now = Clock::now();
        if (now - start >= len) break;
        if (phase == kRamp)
          sh.ramp_fill.store(std::chrono::duration<double>(now - start) / len * 1.05, std::memory_order_relaxed);
        if (now - tick >= std::chrono::seconds(1)) {
          tick += std::chrono::seconds(1);
          fw_stats(&st);
          uint64_t ops = sh.ops.load(std::memory_order_relaxed);
          max_live = std::max(max_live, mib(st.live_bytes));
          max_committed = std::max(max_committed, mib(st.committed_bytes));
          if (phase == kFragment && st.live_bytes > 0) max_blowup = std::max(max_blowup, blowup(st));
          if (!quiet)
            spdlog::info("  {:<9} {:6.2f} M ops/s | live {:7.1f} MiB | committed {:7.1f} MiB | blowup {:5.2f} | "
                         "spans hot {} full {} partial {} pooled {} large {}",
                         kPhaseName[phase], double(ops - last_ops) / 1e6, mib(st.live_bytes),
                         mib(st.committed_bytes), blowup(st), st.spans_hot, st.spans_full, st.spans_partial,
                         st.spans_pooled, st.spans_large);
          last_ops = ops;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (phase == kFragment) {  // the peak of fragmentation: before collect
        fw_stats(&st);
        if (st.live_bytes > 0) max_blowup = std::max(max_blowup, blowup(st));
        spdlog::info("fragmented: live {:.1f} MiB in committed {:.1f} MiB: blowup {:.2f}, {} partial spans",
                     mib(st.live_bytes), mib(st.committed_bytes), blowup(st), st.spans_partial);
      }
    }
    if (!g_signalled) passes++;
  } while (loop && !g_signalled);

  sh.stop.store(true, std::memory_order_release);
  for (auto& r : running) r.join();
  for (auto& b : sh.boxes) std::free(b.slot.exchange(nullptr, std::memory_order_acq_rel));
  double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();

  fw_stats_t st;
  fw_stats(&st);
  spdlog::info("== summary ==");
  spdlog::info("{} complete pass(es) in {:.1f} s{}, {} threads, {:.2f} M malloc+free per second", passes, elapsed,
               g_signalled ? " (stopped by a signal)" : "", threads, double(sh.ops.load()) / 1e6 / elapsed);
  spdlog::info("highest live {:.1f} MiB, highest committed {:.1f} MiB (sampled each second); peak figures: "
               "live {:.1f} MiB, committed {:.1f} MiB",
               max_live, max_committed, mib(st.peak_live_bytes), mib(st.peak_committed_bytes));
  if (reached >= kCollect)
    spdlog::info("blowup in the fragment phase {:.2f} (committed / live); fw_collect(): {:.1f} -> {:.1f} MiB",
                 max_blowup, mib(committed_before_collect), mib(committed_after_collect));
  else if (reached >= kFragment)
    spdlog::info("blowup in the fragment phase {:.2f} (committed / live); stopped before fw_collect()", max_blowup);
  else
    spdlog::info("stopped in phase {}/6 ({}), before the fragment phase and fw_collect()", reached,
                 kPhaseName[std::max(reached, 0)]);
  spdlog::info("at the end: live {:.1f} MiB, committed {:.1f} MiB, reserved {:.0f} MiB of address space",
               mib(st.live_bytes), mib(st.committed_bytes), mib(st.reserved_bytes));
  spdlog::info("thread caches: {} created, {} live; large blocks: {} allocated, {} freed", st.threads_created,
               st.threads_live, st.large_allocs, st.large_frees);
  int bad = fw_check_heap();
  spdlog::info("heap check: {}", bad == 0 ? "all invariants hold" : "VIOLATIONS FOUND (see above)");
  return bad == 0 ? 0 : 1;
}
