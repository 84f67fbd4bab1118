// Multithreaded stress through the fw_* API (so it also runs under ASan and
// TSan, whose runtimes own malloc): random sizes, blocks handed between threads
// through shared slots (so most frees are remote), every block's contents
// checked before it is freed, and the heap invariants checked at the end.
// Deterministic: each thread's choices come from its own seeded generator.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "freeway.h"
#include "test_util.h"

namespace {

using fwtest::Rng;

size_t pick_size(Rng& r) {
  uint64_t k = r.next() % 100;
  if (k < 70) return r.next() % 257;
  if (k < 97) return 257 + r.next() % 32768;
  return 131072 + r.next() % (2 << 20);
}

// A block carries its size and a tag; every byte after the header is the tag's low byte.
struct Header {
  size_t size;
  uint64_t tag;
};

void fill(void* p, size_t n, uint64_t tag) {
  if (n < sizeof(Header)) {
    std::memset(p, int(tag & 0xff), n);
    return;
  }
  Header h{n, tag};
  std::memcpy(p, &h, sizeof h);
  std::memset(static_cast<char*>(p) + sizeof h, int(tag & 0xff), n - sizeof h);
}

bool verify(const void* p, size_t n, uint64_t tag) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  size_t from = 0;
  if (n >= sizeof(Header)) {
    Header h;
    std::memcpy(&h, p, sizeof h);
    if (h.size != n || h.tag != tag) return false;
    from = sizeof h;
  }
  // Large blocks: check the first and last 4 KiB and a stride in between.
  for (size_t i = from; i < n; i += (n > 65536 && i > 4096 && i < n - 4096) ? 4093 : 1)
    if (c[i] != (tag & 0xff)) return false;
  return true;
}

struct Slot {
  std::atomic<void*> p{nullptr};
  std::atomic<size_t> n{0};
  std::atomic<uint64_t> tag{0};
};

// Slots are claimed with an exchange to a sentinel, so size/tag travel with the block.
void* const kBusy = reinterpret_cast<void*>(1);

void run(int threads, int ops, size_t slots) {
  std::vector<Slot> table(slots);
  std::atomic<long> errors{0};
  fw_stats_t before;
  fw_stats(&before);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([&, t] {
      Rng r{0x9e3779b97f4a7c15ull * uint64_t(t + 1)};
      for (int i = 0; i < ops; i++) {
        Slot& s = table[r.next() % slots];
        void* old = s.p.exchange(kBusy, std::memory_order_acquire);
        if (old == kBusy) continue;  // another thread is using this slot
        if (old != nullptr) {
          if (!verify(old, s.n.load(std::memory_order_relaxed), s.tag.load(std::memory_order_relaxed))) errors++;
          fw_free(old);
        }
        void* p = nullptr;
        size_t n = pick_size(r);
        if (r.next() % 4 != 0) {
          uint64_t tag = r.next();
          switch (r.next() % 4) {
            case 0: p = fw_malloc(n); break;
            case 1: p = fw_calloc(1, n); if (p && n && static_cast<char*>(p)[n - 1] != 0) errors++; break;
            case 2: p = fw_aligned_alloc(64, n); if (reinterpret_cast<uintptr_t>(p) % 64) errors++; break;
            default: p = fw_realloc(fw_malloc(8), n); break;
          }
          if (p == nullptr && n != 0) errors++;
          if (p) fill(p, n, tag);
          s.n.store(n, std::memory_order_relaxed);
          s.tag.store(tag, std::memory_order_relaxed);
        }
        s.p.store(p, std::memory_order_release);
      }
    });
  }
  for (auto& t : ts) t.join();
  for (Slot& s : table) {
    void* p = s.p.load();
    if (p) {
      if (!verify(p, s.n.load(), s.tag.load())) errors++;
      fw_free(p);
    }
  }
  CHECK(errors.load() == 0);
  CHECK(fw_check_heap() == 0);
  ts.clear();
  ts.shrink_to_fit();
  fw_collect();  // secure mode: frees what the quarantine still holds
  fw_stats_t after;
  fw_stats(&after);
  // Every block the test made is freed. What glibc itself keeps for exited
  // threads (the malloc'd TLS vector of each cached thread stack) stays live,
  // a few hundred bytes per cached stack: allow 256 KiB for it.
  CHECK(after.live_bytes <= before.live_bytes + (256u << 10));
}

}  // namespace

TEST_CASE("threads exchanging blocks keep every block's contents and the heap consistent") {
  run(8, 60000, 4096);
}

TEST_CASE("oversubscribed: 128 threads on a few cores exchanging blocks stay consistent") {
  run(128, 4000, 8192);
}
