// freeway-demo: a multithreaded workload running on freeway, with a live line
// of figures every second and a readable summary at the end (`make demo`).
//
// Workers allocate blocks of mixed sizes, keep a working set, and hand a share
// of their blocks to the next worker, which frees them: a producer-consumer
// pattern, so remote frees, span reuse and the pool all get exercised.
//   freeway-demo [--threads N] [--seconds S]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "freeway.h"

#ifdef FREEWAY_HAVE_SPDLOG
#include <spdlog/spdlog.h>
#define LOG(...) spdlog::info(__VA_ARGS__)
#else
#include <iostream>
#define LOG(fmt, ...) std::printf("%s\n", fmt)
#endif

namespace {

struct Mailbox {  // one block in flight between two workers
  std::atomic<void*> slot{nullptr};
};

double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }

int usage(const char* msg) {
  std::fprintf(stderr, "freeway-demo: %s\nusage: freeway-demo [--threads N] [--seconds S]\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 4, seconds = 5;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if ((a == "--threads" || a == "--seconds") && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != 0 || v < 1 || v > 4096) return usage(("bad value for " + a).c_str());
      (a == "--threads" ? threads : seconds) = int(v);
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (!fw_owns(std::malloc(16))) {
    std::fprintf(stderr, "freeway-demo: malloc is not freeway's (is libfreeway.so linked?)\n");
    return 1;
  }
  LOG("freeway demo: {} threads for {} s; every block handed between threads is freed by another thread", threads,
      seconds);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::vector<Mailbox> boxes(size_t(threads) * 256);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&, t] {
      uint64_t rng = 0x2545f4914f6cdd1dull * uint64_t(t + 1), local_ops = 0;
      auto next = [&] { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
      std::vector<void*> keep(4096, nullptr);
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 1024; k++) {
          uint64_t r = next();
          size_t n = (r % 1000 < 900) ? 16 + r % 512 : (r % 1000 < 998 ? 1024 + r % 65536 : 256 * 1024 + r % (4 << 20));
          void*& slot = keep[r % keep.size()];
          std::free(slot);
          slot = std::malloc(n);
          std::memset(slot, int(t), n < 64 ? n : 64);
          if (r % 8 == 0) {  // hand a block to the next worker's mailbox
            Mailbox& m = boxes[((t + 1) % threads) * 256 + (r >> 8) % 256];
            std::free(m.slot.exchange(std::malloc(32 + r % 200), std::memory_order_acq_rel));
          }
          if (r % 8 == 1) {  // free what a neighbour handed us
            Mailbox& m = boxes[t * 256 + (r >> 8) % 256];
            std::free(m.slot.exchange(nullptr, std::memory_order_acq_rel));
          }
          local_ops += 2;
        }
        ops.fetch_add(local_ops, std::memory_order_relaxed);
        local_ops = 0;
      }
      for (void* p : keep) std::free(p);
    });
  }

  auto start = std::chrono::steady_clock::now();
  uint64_t last_ops = 0;
  for (int s = 1; s <= seconds; s++) {
    std::this_thread::sleep_until(start + std::chrono::seconds(s));
    fw_stats_t st;
    fw_stats(&st);
    uint64_t now = ops.load();
    LOG("[{}/{} s] {:.1f} M ops/s | live {:.1f} MiB | committed {:.1f} MiB | spans hot {} full {} partial {} "
        "pooled {} large {}",
        s, seconds, double(now - last_ops) / 1e6, mib(st.live_bytes), mib(st.committed_bytes), st.spans_hot,
        st.spans_full, st.spans_partial, st.spans_pooled, st.spans_large);
    last_ops = now;
  }
  stop = true;
  for (auto& w : workers) w.join();
  for (auto& b : boxes) std::free(b.slot.exchange(nullptr));

  fw_stats_t st;
  fw_stats(&st);
  LOG("done: {:.1f} M malloc+free per second over {} threads", double(ops.load()) / 1e6 / seconds, threads);
  LOG("peak live {:.1f} MiB, peak committed {:.1f} MiB (blowup {:.2f}), reserved {:.0f} MiB of address space",
      mib(st.peak_live_bytes), mib(st.peak_committed_bytes),
      st.peak_live_bytes ? double(st.peak_committed_bytes) / double(st.peak_live_bytes) : 0.0, mib(st.reserved_bytes));
  LOG("thread caches: {} created, {} live; large blocks: {} allocated, {} freed", st.threads_created, st.threads_live,
      st.large_allocs, st.large_frees);
  std::printf("\nsize classes in use at the end:\n");
  std::printf("  %10s %14s %14s %10s %6s\n", "block", "allocs", "frees", "live", "spans");
  for (unsigned c = 0; c < st.class_count; c++) {
    const fw_class_stats& cs = st.classes[c];
    if (cs.allocs == 0) continue;
    std::printf("  %10llu %14llu %14llu %10llu %6llu\n", (unsigned long long)cs.block_size,
                (unsigned long long)cs.allocs, (unsigned long long)cs.frees, (unsigned long long)cs.live,
                (unsigned long long)cs.spans);
  }
  int bad = fw_check_heap();
  LOG("heap check: {}", bad == 0 ? "all invariants hold" : "VIOLATIONS FOUND (see above)");
  return bad == 0 ? 0 : 1;
}
