// The span-pool: single spans, runs, retention, and lock-free concurrency.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/options.h"
#include "core/span_pool.h"
#include "freeway.h"
#include "platform/os.h"

using namespace fw;

TEST_CASE("a span given to the pool is handed out again before fresh address space") {
  Span* s = pool_take_span(0);
  REQUIRE(s != nullptr);
  uint32_t regions = arena_region_count();
  pool_give(s, 1);
  std::vector<Span*> taken;
  bool found = false;
  for (int i = 0; i < 4096 && !found; i++) {
    Span* t = pool_take_span(0);
    REQUIRE(t != nullptr);
    taken.push_back(t);
    found = t == s;
  }
  CHECK(found);
  CHECK(arena_region_count() == regions);
  for (Span* t : taken) pool_give(t, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("a run is split and its rest stays available as a shorter run") {
  Span* run = pool_take_run(10, 0);
  REQUIRE(run != nullptr);
  CHECK(run->run_len.load() == 10);
  uint32_t head = span_index(run);
  pool_give(run, 10);
  Span* part = pool_take_run(7, 0);
  REQUIRE(part != nullptr);
  CHECK(span_index(part) == head);  // the exact-length stack for 10 was the first fit
  Span* rest = pool_take_run(3, 0);
  REQUIRE(rest != nullptr);
  CHECK(span_index(rest) == head + 7);
  pool_give(part, 7);
  pool_give(rest, 3);
  CHECK(pool_is_valid());
}

TEST_CASE("free pieces merged into a run keep the committed pages that extend its prefix") {
  // Pieces 0-1 (fully committed), 2 (half) and 3 (a quarter), given back
  // apart: no run of 4 is pooled, so taking one merges them.
  Span* run = pool_take_run(4, 0);
  REQUIRE(run != nullptr);
  uint32_t i = span_index(run);
  Span* p0 = span_at(i);
  Span* p2 = span_at(i + 2);
  Span* p3 = span_at(i + 3);
  REQUIRE(span_commit(p0, 2 * kVspanSize));
  REQUIRE(span_commit(p2, kVspanSize / 2));
  REQUIRE(span_commit(p3, kVspanSize / 4));
  uint64_t committed = committed_bytes();
  p0->run_len.store(2);
  pool_give(p0, 2);
  pool_give(p2, 1);
  pool_give(p3, 1);
  Span* merged = pool_take_run(4, 0);
  REQUIRE(merged == p0);
  // 0-1 and 2 are a prefix without a gap; 3 follows a half-committed piece, so
  // its pages are given back.
  CHECK(merged->committed.load() == 2 * kVspanSize + kVspanSize / 2);
  CHECK(p2->committed.load() == 0);
  CHECK(p3->committed.load() == 0);
  CHECK(committed_bytes() == committed - kVspanSize / 4);
  pool_give(merged, 4);
  CHECK(pool_is_valid());
}

TEST_CASE("a span's committed pages sit at its colour while it holds small blocks, and move when its use does") {
  const unsigned c = class_of(64);
  // A span whose colour for class c is not 0 (one descriptor in 16 has 0).
  std::vector<Span*> zero;
  Span* s = pool_take_span(0);
  while (s != nullptr && span_colour(s, c) == 0 && zero.size() < 64) {
    zero.push_back(s);
    s = pool_take_span(0);
  }
  for (Span* z : zero) pool_give(z, 1);
  REQUIRE(s != nullptr);
  REQUIRE(span_colour(s, c) != 0);
  CHECK(s->cls.load() == kNoClass);  // a fresh vspan: its window is its base
  CHECK(span_window(s) == 0);
  const uint32_t bytes = class_info(c).span_bytes;
  span_set_use(s, c);
  REQUIRE(span_commit(s, bytes));
  const uint32_t colour = span_colour(s, c);
  CHECK(span_window(s) == colour);
  CHECK(colour % bytes == 0);
  CHECK(colour + bytes <= kVspanSize);
  // Consecutive descriptors step by the span size (mod the vspan).
  CHECK(span_colour(s + 1, c) == (colour + bytes) % kVspanSize);
  char* window = reinterpret_cast<char*>(span_base(s) + colour);
  memset(window, 0xab, bytes);
  uint64_t committed = committed_bytes();
  // Another use of the same span size keeps the pages; a large block's use
  // (window at the base) gives them back first.
  span_set_use(s, class_of(100));
  CHECK(s->committed.load() == bytes);
  span_set_use(s, kNoClass);
  CHECK(s->committed.load() == 0);
  CHECK(committed_bytes() == committed - bytes);
  if (os::features().decommit_zeroes) CHECK(window[0] == 0);
  REQUIRE(span_commit(s, 2 * bytes));
  CHECK(span_window(s) == 0);
  pool_give(s, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("committed memory kept in the pool stays under the retain limit") {
  // Commit many spans, give them all back: most must be decommitted.
  std::vector<Span*> spans;
  for (int i = 0; i < 200; i++) {
    Span* s = pool_take_span(0);
    REQUIRE(s != nullptr);
    REQUIRE(span_commit(s, 1 << 20));
    spans.push_back(s);
  }
  for (Span* s : spans) pool_give(s, 1);
  CHECK(pool_retained_bytes() <= (uint64_t(option(Option::retain_mb)) << 20));
  CHECK(pool_is_valid());
  pool_collect();
  CHECK(pool_retained_bytes() == 0);
  CHECK(pool_is_valid());
}

TEST_CASE("concurrent takes and gives never hand one span to two threads") {
  // Each span has an ownership flag: taking sets it (must have been clear),
  // giving clears it. A lost ABA race would show up as a doubly-owned span.
  constexpr int kThreads = 8, kRounds = 20000;
  static std::atomic<uint8_t> owned[1 << 20];
  std::atomic<int> errors{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&] {
      Span* mine[4] = {};
      for (int r = 0; r < kRounds; r++) {
        int k = r % 4;
        if (mine[k]) {
          owned[span_index(mine[k])].store(0);
          pool_give(mine[k], 1);
          mine[k] = nullptr;
        } else {
          Span* s = pool_take_span(0);
          if (s == nullptr) {
            errors++;
            continue;
          }
          if (owned[span_index(s)].exchange(1) != 0) errors++;
          mine[k] = s;
        }
      }
      for (Span* s : mine)
        if (s) {
          owned[span_index(s)].store(0);
          pool_give(s, 1);
        }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(errors.load() == 0);
  CHECK(pool_is_valid());
}

// The retain budget follows demand (span_pool.cpp): a working set of big
// blocks freed and allocated again in cycles is first given back to the OS,
// then kept, and given back again once the demand has been gone a while.
TEST_CASE("a working set cycled above the retain budget is kept once the program needs it again, then decays") {
  constexpr int kBlocks = 10;
  constexpr size_t kSize = 6u << 20;  // above FREEWAY_DECOMMIT_KB (4 MiB): decommitted while the budget is at its base
  void* v[kBlocks];
  auto round = [&] {
    for (void*& p : v) {
      p = fw_malloc(kSize);
      REQUIRE(p != nullptr);
    }
    for (void* p : v) fw_free(p);
  };
  round();
  const uint64_t first = pool_retained_bytes();
  CHECK(first < kSize);  // the first round's blocks went back to the OS
  round();               // committed again: demand raises the budget
  const uint64_t second = pool_retained_bytes();
  CHECK(second >= uint64_t(kBlocks - 2) * kSize);  // now kept
  fw_stats_t before, after;
  fw_stats(&before);
  round();  // reuses what was kept: commits nothing new
  fw_stats(&after);
  CHECK(after.peak_committed_bytes <= before.peak_committed_bytes + kSize);
  MESSAGE("retained after rounds 1 and 2: ", first >> 20, " MiB, ", second >> 20, " MiB");
  // Two seconds without demand: the budget halves twice, so the next big
  // block given back goes to the OS again.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  uint64_t kept = pool_retained_bytes();
  void* p = fw_malloc(kSize);  // from what was kept
  void* q = fw_malloc(kSize);
  fw_free(q);
  fw_free(p);
  CHECK(pool_retained_bytes() + kSize <= kept);  // at least one went back to the OS
}
