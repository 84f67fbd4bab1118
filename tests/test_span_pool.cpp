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
#include "test_util.h"

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
  Span* part = pool_take_run(6, 0);
  REQUIRE(part != nullptr);
  CHECK(span_index(part) == head);  // the exact-length stack for 10 was the first fit
  CHECK(part->run_len.load() == 6);
  Span* rest = pool_take_run(4, 0);
  REQUIRE(rest != nullptr);
  CHECK(span_index(rest) == head + 6);
  CHECK(rest->run_len.load() == 4);
  pool_give(part, 6);
  pool_give(rest, 4);
  CHECK(pool_is_valid());
}

TEST_CASE(
    "a take keeps a pooled run whole when the rest would be at most half of it, unless that would trim its pages") {
  // 10 for a take of 7: a rest of 3 would serve no block of 7's run class or
  // the one below, so the run comes whole and goes back whole.
  Span* run = pool_take_run(10, 0);
  REQUIRE(run != nullptr);
  const uint32_t head = span_index(run);
  pool_give(run, 10);
  Span* whole = pool_take_run(7, 0);
  REQUIRE(whole != nullptr);
  CHECK(span_index(whole) == head);
  CHECK(whole->run_len.load() == 10);
  pool_give(whole, 10);
  // With 10 vspans of pages, for a block of 4 vspans (a rest of 2, at most
  // half of 4): keeping the run whole would have the block trim 6 vspans of
  // pages (reuse_trims), so it is split, and the rest takes them to the pool.
  run = pool_take_run(10, 0);
  REQUIRE(run != nullptr);
  REQUIRE(span_index(run) == head);
  REQUIRE(span_commit(run, 10 * kVspanSize));
  pool_give(run, 10);
  const uint64_t committed = committed_bytes();
  Span* part = pool_take_run(4, 4 * kVspanSize);
  REQUIRE(part != nullptr);
  CHECK(span_index(part) == head);
  CHECK(part->run_len.load() == 4);
  CHECK(part->committed.load() == 4 * kVspanSize);
  Span* rest = span_at(head + 4);
  CHECK(rest->committed.load() == 6 * kVspanSize);
  CHECK(committed_bytes() == committed);
  pool_give(part, 4);
  CHECK(pool_is_valid());
  pool_collect();
  CHECK(pool_is_valid());
}

// Four free-to-be pieces with a held span on either side, so that free
// neighbours cannot join them when the pool merges: `first` is the first
// piece's index; give back `before` and `after` when done.
struct Fenced {
  Span* before = nullptr;
  Span* after = nullptr;
  uint32_t first = 0;
};
static Fenced take_fenced_four() {
  Span* run = pool_take_run(6, 0);
  REQUIRE(run != nullptr);
  Fenced f;
  f.before = run;
  f.after = span_at(span_index(run) + 5);
  f.before->run_len.store(1);
  f.after->run_len.store(1);
  f.first = span_index(run) + 1;
  return f;
}

TEST_CASE("free pieces merged into a run keep their committed pages: a gap before pages worth more is committed") {
  // Pieces 0-1 (fully committed), 2 (half) and 3 (three quarters), given back
  // apart: no run of 4 is pooled, so taking one merges them. The half vspan
  // missing from piece 2 is a gap before piece 3's pages, which are worth more:
  // the gap is committed, and the run keeps every page.
  const Fenced f = take_fenced_four();
  const uint32_t i = f.first;
  Span* p0 = span_at(i);
  Span* p2 = span_at(i + 2);
  Span* p3 = span_at(i + 3);
  REQUIRE(span_commit(p0, 2 * kVspanSize));
  REQUIRE(span_commit(p2, kVspanSize / 2));
  REQUIRE(span_commit(p3, kVspanSize / 4 * 3));
  uint64_t committed = committed_bytes();
  p0->run_len.store(2);
  pool_give(p0, 2);
  pool_give(p2, 1);
  pool_give(p3, 1);
  Span* merged = pool_take_run(4, 4 * kVspanSize);  // for a block that wants pages: warm runs first
  REQUIRE(merged == p0);
  CHECK(merged->committed.load() == 3 * kVspanSize + kVspanSize / 4 * 3);
  CHECK(p2->committed.load() == 0);
  CHECK(p3->committed.load() == 0);
  CHECK(committed_bytes() == committed + kVspanSize / 2);  // the gap
  pool_give(merged, 4);
  pool_give(f.before, 1);
  pool_give(f.after, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("a run merged from a clean piece and a warm one ages from the warm pages") {
  // Piece 0 comes back clean (no pages: its time stamp is from an earlier
  // use, or none), pieces 1 to 3 with their pages, now, each a single span.
  // Taking 2 merges them (the gap before 1-3's pages is committed) and leaves
  // pieces 2-3 pooled with pages that came back just now: a purge within the
  // delay keeps the share of them that their age allows (the taper), not
  // none, as it would if the run took piece 0's stamp.
  const Fenced f = take_fenced_four();
  const uint32_t i = f.first;
  Span* p0 = span_at(i);
  Span* p2 = span_at(i + 2);
  for (uint32_t k = 1; k < 4; k++) REQUIRE(span_commit(span_at(i + k), kVspanSize));
  for (uint32_t k = 0; k < 4; k++) span_at(i + k)->run_len.store(1);
  for (uint32_t k = 0; k < 4; k++) pool_give(span_at(i + k), 1);
  const auto given = std::chrono::steady_clock::now();
  Span* got = pool_take_run(2, 2 * kVspanSize);
  REQUIRE(got == p0);
  REQUIRE(got->run_len.load() == 2);
  Span* rest = p2;
  REQUIRE(rest->run_len.load() == 2);
  REQUIRE(rest->committed.load() == 2 * kVspanSize);
  // A purge pass may run once per quarter of the delay: let one be due, well
  // within the delay of the rest's pages, then give back a span with pages
  // (which runs it).
  const uint64_t delay = uint64_t(option(Option::decay_ms));
  REQUIRE(delay >= 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay / 4 + 50));
  REQUIRE(span_commit(f.before, os::page_size()));
  pool_give(f.before, 1);
  const uint64_t waited =
      uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - given).count());
  REQUIRE(waited + 20 < delay);
  // At least, with 20 ms for the pool's coarse clock (its stamps and ages).
  const uint64_t share = 2 * kVspanSize * (delay - waited - 20) / delay;
  CHECK(rest->committed.load() >= share);
  CHECK(rest->committed.load() <= 2 * kVspanSize);
  pool_give(got, 2);
  pool_give(f.after, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("a free piece whose pages are worth less than the gap before it is not merged, and keeps them") {
  const Fenced f = take_fenced_four();
  const uint32_t i = f.first;
  Span* p0 = span_at(i);
  Span* p3 = span_at(i + 3);
  REQUIRE(span_commit(p0, kVspanSize));  // piece 0-2: its first vspan committed, a gap of two after
  REQUIRE(span_commit(p3, kVspanSize / 4));
  uint64_t committed = committed_bytes();
  p0->run_len.store(3);
  pool_give(p0, 3);
  pool_give(p3, 1);
  Span* other = pool_take_run(4, 0);  // a run of 4 from elsewhere: these two do not merge
  REQUIRE(other != nullptr);
  CHECK(other != p0);
  CHECK(other != p3);
  CHECK(p0->committed.load() == kVspanSize);      // kept, in a run of three
  CHECK(p3->committed.load() == kVspanSize / 4);  // kept, in a run of its own
  CHECK(committed_bytes() >= committed);          // nothing given back
  pool_give(other, 4);
  pool_give(f.before, 1);
  pool_give(f.after, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("a take for a block that wants pages splits a run with pages before it faults in a clean one that fits") {
  Span* clean = pool_take_run(4, 0);
  Span* warm = pool_take_run(8, 0);
  REQUIRE(clean != nullptr);
  REQUIRE(warm != nullptr);
  span_trim(clean, 0);
  REQUIRE(span_commit(warm, 8 * kVspanSize));
  pool_give(clean, 4);
  pool_give(warm, 8);
  Span* got = pool_take_run(4, 4 * kVspanSize);
  REQUIRE(got != nullptr);
  CHECK(got->committed.load() == 4 * kVspanSize);  // no page faults ahead
  pool_give(got, 4);
  CHECK(pool_is_valid());
}

TEST_CASE("of warm runs of one length, a take keeps the one whose pages cover the block with the fewest to spare") {
  // Given back in this order, the run with every page is above the one with
  // just enough; a clean-ish one is on top.
  Span* fit = pool_take_run(6, 0);
  Span* full = pool_take_run(6, 0);
  Span* thin = pool_take_run(6, 0);
  REQUIRE((fit != nullptr && full != nullptr && thin != nullptr));
  for (Span* s : {fit, full, thin}) span_trim(s, 0);
  REQUIRE(span_commit(fit, 4 * kVspanSize));
  REQUIRE(span_commit(full, 6 * kVspanSize));
  REQUIRE(span_commit(thin, 2 * kVspanSize));
  pool_give(fit, 6);
  pool_give(full, 6);
  pool_give(thin, 6);
  const uint64_t want = 3 * kVspanSize;
  Span* got = pool_take_run(6, want);
  REQUIRE(got != nullptr);
  CHECK(got->committed.load() >= want);               // no page faults ahead
  CHECK(got->committed.load() <= 4 * kVspanSize);     // and the fully committed run left for a bigger block
  pool_give(got, 6);
  CHECK(pool_is_valid());
}

TEST_CASE("a span's committed pages start at its base and stay when its use changes, and a trim gives back its tail") {
  const unsigned c = class_of(64);
  const uint32_t bytes = class_info(c).span_bytes;
  const size_t ps = os::page_size();
  // Four spans, descriptors in a row: until Stop 52, three in four put a small
  // span's pages at a colour above the base, and a large block's use gave them back.
  Span* spans[4];
  for (Span*& s : spans) {
    s = pool_take_span(0);
    REQUIRE(s != nullptr);
  }
  for (Span* s : spans) {
    span_set_use(s, c);
    span_trim(s, 0);  // whatever pages an earlier use left (span_make_hot trims them likewise)
    REQUIRE(span_commit(s, bytes));
    char* pages = reinterpret_cast<char*>(span_base(s));
    memset(pages, 0xab, bytes);
    uint64_t committed = committed_bytes();
    // Another class, or a large block, uses the same pages from the same base:
    // they stay committed, with what they held.
    span_set_use(s, class_of(100));
    CHECK(s->committed.load() == bytes);
    span_set_use(s, kNoClass);
    CHECK(s->committed.load() == bytes);
    CHECK(committed_bytes() == committed);
    CHECK(pages[0] == char(0xab));
    CHECK(pages[bytes - 1] == char(0xab));
    // A trim keeps the head and gives back the rest.
    span_trim(s, ps);
    CHECK(s->committed.load() == ps);
    CHECK(committed_bytes() == committed - (bytes - ps));
    CHECK(pages[0] == char(0xab));
    if (os::features().decommit_zeroes) CHECK(pages[ps] == 0);
  }
  for (Span* s : spans) pool_give(s, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("spans freed after a peak keep their pages, within the heap's recent high in use") {
  // Commit many spans, give them all back: the bound on what the pool keeps
  // is the most the heap had in use lately (here: all of them), not what is
  // still in use as the gives go on, so the next generation finds them warm.
  pool_collect();
  std::vector<Span*> spans;
  // 800 whole single spans: 200 MiB. (This case once committed 1 MiB on each
  // of 200 single spans, past their vspans. Under ThreadSanitizer the OS
  // placed region 0 right below the descriptor table in a few runs in a
  // hundred; decommitting the last span's 1 MiB then zeroed descriptors of
  // pooled spans, and pool_is_valid found a stack with a cycle.)
  for (int i = 0; i < 800; i++) {
    Span* s = pool_take_span(0);
    REQUIRE(s != nullptr);
    REQUIRE(span_commit(s, kVspanSize));
    spans.push_back(s);
  }
  const uint64_t high = committed_bytes() - pool_retained_bytes();
  const uint64_t limit = uint64_t(option(Option::retain_mb)) << 20;
  REQUIRE(high >= (200u << 20));
  REQUIRE(limit < (150u << 20));
  for (Span* s : spans) pool_give(s, 1);
  CHECK(pool_retained_bytes() >= (150u << 20));  // past FREEWAY_RETAIN_MB: kept
  CHECK(pool_retained_bytes() <= (high > limit ? high : limit));
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

// The commit policy (span_pool.h): freed blocks keep their pages while the
// program reuses them, and give them back after FREEWAY_DECAY_MS unused.
// A generation of big blocks: kBlocks of kSize, each written, then all freed
// (more than a last-run slot keeps: to the stacks, with their pages).
constexpr int kBlocks = 4;
constexpr size_t kSize = 6u << 20;
static void free_a_written_generation() {
  void* v[kBlocks];
  for (void*& p : v) {
    p = fw_malloc(kSize);
    REQUIRE(p != nullptr);
    memset(p, 1, kSize);
  }
  for (void* p : v) fw_free(p);
}

TEST_CASE("freed large blocks keep their pages for the next blocks, then go back after the decay delay") {
  fw_collect();  // an empty pool to start from
  free_a_written_generation();
  void* v[kBlocks];
  const uint64_t kept = pool_retained_bytes();
  CHECK(kept >= uint64_t(kBlocks - 1) * kSize);  // within FREEWAY_RETAIN_MB (32 MiB): kept
  // The same blocks again commit nothing new: they reuse the pages kept.
  const uint64_t committed = committed_bytes();
  for (void*& p : v) p = fw_malloc(kSize);
  CHECK(committed_bytes() <= committed);
  for (void* p : v) fw_free(p);
  CHECK(pool_retained_bytes() >= kept);
  // Unused for longer than the delay: the next pool operation gives them back.
  std::this_thread::sleep_for(std::chrono::milliseconds(option(Option::decay_ms) * 3 / 2));
  void* p = fw_malloc(3 * kSize);  // a run the pool cannot give from what it kept
  CHECK(pool_retained_bytes() < kSize);
  CHECK(committed_bytes() < committed);
  fw_free(p);
}

// A program that frees a generation of big blocks and then only churns
// smaller ones (blocks of 4 MiB or less, which go through the last-run slots,
// and spans for small blocks) still gets the decay: such a give, and each
// span taken for small blocks, runs a purge pass when one is due. Until Stop
// 95 they ran none, and clamscan held a generation of buffers (35 MB) for
// seconds past the decay delay.
TEST_CASE("pages freed longer ago than the decay delay go back at the next small take or last-run give") {
  fw_collect();  // an empty pool to start from
  // Frees a generation of big blocks, which the pool keeps with their pages,
  // then calls `after_frees`, and waits out the decay delay.
  auto free_a_generation = [](auto after_frees) {
    free_a_written_generation();
    REQUIRE(pool_retained_bytes() >= uint64_t(kBlocks - 1) * kSize);
    after_frees();
    std::this_thread::sleep_for(std::chrono::milliseconds(option(Option::decay_ms) * 3 / 2));
  };
  SUBCASE("a single span for small blocks") {
    free_a_generation([] {});
    Span* s = pool_take_span(kVspanSize);
    REQUIRE(s != nullptr);
    CHECK(pool_retained_bytes() < kSize);
    pool_give(s, 1);
  }
  SUBCASE("a block of 1 MiB freed into a last-run slot") {
    // Its run goes to the slot after the generation's frees (whose gives may
    // run a pass, which empties the slots), so that the mallocs below take it
    // from there, where no pass runs, and the frees give it back there. The
    // slot is the CPU's: the thread stays on one.
    cpu_set_t was;
    REQUIRE(sched_getaffinity(0, sizeof was, &was) == 0);
    REQUIRE(fwtest::pin_to_first_cpu() >= 0);
    void* x = fw_malloc(1u << 20);
    REQUIRE(x != nullptr);
    memset(x, 1, 1u << 20);
    free_a_generation([x] { fw_free(x); });
    for (uint32_t i = 0; i < kSlotGivesPerLook; i++) {  // one of them looks
      void* y = fw_malloc(1u << 20);
      REQUIRE(y == x);  // from the slot
      fw_free(y);
    }
    CHECK(pool_retained_bytes() < kSize);
    sched_setaffinity(0, sizeof was, &was);
  }
  CHECK(pool_is_valid());
}

// A cycle that touches more pages than it holds at any time: a buffer grown
// a step at a time, in place while its run has room and moved to a new block
// when it has not, leaves a run behind at each size it outgrows. That is what
// realloc does with a block that is not at the heap's top; at the top it now
// grows over the fresh vspans instead (large.cpp, extend_run;
// tests/test_large.cpp), so the cycle makes its moves itself: a new block, a
// copy, the old one freed.
// Within the retain bound alone, the pool gave back part of those at every
// cycle's end and the next cycle faulted them in again; once a cycle has
// faulted back what the bound gave back, the pool keeps the cycle's footprint
// and follows it as the cycles commit more (span_pool.cpp, give_bound), and
// the decay still gives it back once the cycles stop.
// Where the third cycle places its runs is the pool's choice: in about one
// run in twelve, it puts the 16 MiB run in the 24 MiB of warm pages the
// second cycle used for the 24 MiB run, and commits 8 MiB more for the
// 32 MiB one. A footprint fixed when the second cycle showed it gave 24 MiB
// back at that point, and the fourth cycle faulted them in again; so the
// check is that no cycle from the third on gives pages back, and that the
// fourth faults in next to nothing.
TEST_CASE("a buffer grown again and again, moved each time it outgrows its run, stops faulting in what the retain bound gave back: the bound follows the cycle's footprint") {
  fw_collect();
  const size_t max = size_t(option(Option::retain_mb)) << 20;  // past the bound with what it leaves behind
  constexpr size_t kStep = 256u << 10;
  // One cycle; returns how far the committed bytes rose above where they were
  // when it started (the pages it had to fault in), and adds to `fell` the
  // bytes they fell by between steps (pages given back).
  auto cycle = [&](uint64_t* fell) {
    const uint64_t start = committed_bytes();
    uint64_t peak = start, last = start;
    char* buf = nullptr;
    for (size_t n = kStep; n <= max; n += kStep) {
      if (buf != nullptr && n <= size_t(span_of(buf)->run_len.load()) * kVspanSize) {
        buf = static_cast<char*>(fw_realloc(buf, n));  // within its run: in place
      } else {
        char* next = static_cast<char*>(fw_malloc(n));
        REQUIRE(next != nullptr);
        if (buf != nullptr) memcpy(next, buf, n - kStep);
        fw_free(buf);
        buf = next;
      }
      REQUIRE(buf != nullptr);
      memset(buf + n - kStep, 1, kStep);
      const uint64_t now = committed_bytes();
      if (now < last) *fell += last - now;
      if (now > peak) peak = now;
      last = now;
    }
    fw_free(buf);
    const uint64_t end = committed_bytes();
    if (end < last) *fell += last - end;
    return peak - start;
  };
  uint64_t fell_early = 0, fell_late = 0;
  const uint64_t first = cycle(&fell_early);
  REQUIRE(first > max);  // the runs it outgrew and its own
  const auto second_start = std::chrono::steady_clock::now();
  const uint64_t second = cycle(&fell_early);
  // The premise: the bound gave pages back at the first cycle's end, and
  // the second faulted them in again.
  REQUIRE(fell_early > 0);
  REQUIRE(second > max / 8);
  const uint64_t third = cycle(&fell_late);
  const uint64_t fourth = cycle(&fell_late);
  // The pool kept the cycles' pages: unless they took longer than the delay,
  // after which pages unused that long go back (ThreadSanitizer's memset
  // under a loaded machine; checked below).
  const auto cycles_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - second_start).count();
  INFO("cycles 2 to 4 took ", cycles_ms, " ms; the delay is ", option(Option::decay_ms), " ms; cycles 2 to 4 faulted in ",
       second, ", ", third, " and ", fourth, " bytes");
  if (cycles_ms < option(Option::decay_ms)) {
    CHECK(fell_late == 0);
    CHECK(third < second);
    CHECK(fourth < max / 32);
  } else {
    MESSAGE("the cycles outlasted the delay: the later ones may fault pages in again");
  }
  CHECK(pool_retained_bytes() > max);
  CHECK(pool_is_valid());
  // Unused for longer than the delay: the pages go back all the same.
  std::this_thread::sleep_for(std::chrono::milliseconds(option(Option::decay_ms) * 3 / 2));
  void* p = fw_malloc(3 * max);  // a run the pool cannot give from what it kept
  CHECK(pool_retained_bytes() < max / 8);
  fw_free(p);
}

// A run's place in its arena region: the index just past it, and the region's
// bump index (the first vspan never handed out).
static uint32_t end_in_region(const Span* s, uint32_t len) { return span_index(s) % kVspansPerRegion + len; }
// Where the fresh vspans of s's region start (its index within the region).
static uint32_t fresh_from(const Span* s) { return arena_vspans_used(span_index(s) / kVspansPerRegion); }

TEST_CASE("a run with pages that ends where the region's fresh vspans start grows in place for a longer block") {
  // One block's run given back with its pages, then a block twice as long:
  // no pooled run fits, so the pool merges and the run grows over the fresh
  // vspans after it, keeping its pages (a heap's top), instead of faulting in
  // a fresh run and keeping both.
  Span* run = pool_take_run(4, 0);
  REQUIRE(run != nullptr);
  REQUIRE(end_in_region(run, 4) == fresh_from(run));  // a new process: the region's last run
  REQUIRE(span_commit(run, 4 * kVspanSize));
  pool_give(run, 4);
  const uint64_t committed = committed_bytes(), retained = pool_retained_bytes();
  Span* grown = pool_take_run(8, 8 * kVspanSize);
  REQUIRE(grown == run);
  CHECK(grown->run_len.load() == 8);
  CHECK(grown->committed.load() == 4 * kVspanSize);  // its pages, the new vspans after them
  CHECK(fresh_from(run) == end_in_region(run, 8));
  CHECK(committed_bytes() == committed);
  CHECK(pool_retained_bytes() == retained - 4 * kVspanSize);
  pool_give(grown, 8);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE("a run with pages that does not end at the region's fresh vspans keeps them, and a longer block takes a fresh run") {
  Span* run = pool_take_run(4, 0);
  Span* held = pool_take_run(1, 0);  // taken after it: the run no longer ends at the fresh vspans
  REQUIRE((run != nullptr && held != nullptr));
  REQUIRE(end_in_region(run, 4) < fresh_from(run));
  REQUIRE(span_commit(run, 4 * kVspanSize));
  pool_give(run, 4);
  Span* other = pool_take_run(8, 8 * kVspanSize);
  REQUIRE(other != nullptr);
  CHECK(other != run);
  CHECK(run->committed.load() == 4 * kVspanSize);  // still pooled, with its pages
  CHECK(run->run_len.load() == 4);
  pool_give(other, 8);
  pool_give(held, 1);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

// A big block's run of n vspans (more than kBigRunVspans) from the big blocks'
// frontier, ending where its region's fresh vspans start (free above it), with
// every page committed, given back to the pool.
static Span* give_top_big_run(uint32_t n) {
  Span* run = pool_take_run(n, 0);
  REQUIRE(run != nullptr);
  REQUIRE(arena_frontier(span_index(run)) == kFrontierBigRuns);
  REQUIRE(end_in_region(run, n) == fresh_from(run));
  REQUIRE(span_commit(run, uint64_t(n) * kVspanSize));
  pool_give(run, n);
  return run;
}

TEST_CASE("single spans and short runs do not cut up a big block's freed run that can grow, and it grows in place for a bigger block") {
  // A big block's run (more than kBigRunVspans) comes from the big blocks'
  // frontier. Given back with its pages, it is the only run pooled, and the
  // vspans above it are fresh; single spans and a short run taken next come
  // from the other frontier's fresh vspans instead of being split off it, so
  // a bigger block then finds it whole, still ending at its frontier, and
  // grows it in place.
  constexpr uint32_t n = kBigRunVspans + 4;
  Span* big = give_top_big_run(n);
  auto outside_big = [big](const Span* s, uint32_t len) {
    return span_index(s) + len <= span_index(big) || span_index(s) >= span_index(big) + n;
  };
  std::vector<Span*> singles;
  for (int i = 0; i < 8; i++) {
    Span* s = pool_take_span(kVspanSize);
    REQUIRE(s != nullptr);
    CHECK(outside_big(s, 1));
    CHECK(arena_frontier(span_index(s)) == kFrontierSpans);
    singles.push_back(s);
  }
  Span* shorter = pool_take_run(4, 4 * kVspanSize);
  REQUIRE(shorter != nullptr);
  CHECK(outside_big(shorter, 4));
  CHECK(big->run_len.load() == n);  // still whole in the pool
  const uint64_t committed = committed_bytes();
  Span* grown = pool_take_run(2 * n, uint64_t(2 * n) * kVspanSize);
  REQUIRE(grown == big);
  CHECK(grown->run_len.load() == 2 * n);
  CHECK(grown->committed.load() == uint64_t(n) * kVspanSize);  // its pages kept, the new vspans after them
  CHECK(committed_bytes() == committed);
  pool_give(grown, 2 * n);
  pool_give(shorter, 4);
  for (Span* s : singles) pool_give(s, 1);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE("a run younger than the decay delay gives back a share of its pages that grows with its age") {
  // A big block's run at the top of its frontier (free above: no single span
  // is split off it), with every page committed, given back; half the delay
  // later, a pass (from a single span's take) leaves it about half its pages,
  // the tail going first: a share that falls as it waits, rather than all of
  // them until the delay and none after.
  constexpr uint32_t n = kBigRunVspans + 4;
  const uint64_t delay = uint64_t(option(Option::decay_ms));
  REQUIRE(delay >= 100);
  Span* run = give_top_big_run(n);
  const auto given = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(delay / 2));
  Span* s = pool_take_span(kVspanSize);
  REQUIRE(s != nullptr);
  CHECK(s != run);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - given);
  const uint64_t kept = run->committed.load();
  CHECK(kept < uint64_t(n) * kVspanSize);
  CHECK(kept % os::page_size() == 0);
  if (uint64_t(waited.count()) < delay) CHECK(kept > 0);  // younger than the delay: a share stays
  pool_give(s, 1);
  CHECK(pool_is_valid());
}

TEST_CASE("a big block's freed run below a block in use serves single spans with its pages") {
  // With a big block in use above it, the run can neither grow nor merge
  // upwards: its pages serve the small blocks' spans before fresh address
  // space, as they did with one frontier (a program's old buffer below the
  // one that replaced it).
  constexpr size_t kBig = size_t(kBigRunVspans + 4) * kVspanSize;
  void* below = fw_malloc(kBig);
  void* above = fw_malloc(kBig);
  REQUIRE((below != nullptr && above != nullptr));
  std::memset(below, 1, kBig);
  Span* run = span_of(below);
  const uint32_t n = run->run_len.load();
  REQUIRE(arena_frontier(span_index(run)) == kFrontierBigRuns);
  REQUIRE(span_of(above) == span_at(span_index(run) + n));
  fw_free(below);  // more than a last-run slot keeps: to the stacks, with its pages
  REQUIRE(run->committed.load() >= kBig);
  const uint64_t committed = committed_bytes();
  Span* s = pool_take_span(kVspanSize);
  REQUIRE(s == run);  // split off its head
  CHECK(s->committed.load() == kVspanSize);
  CHECK(committed_bytes() == committed);
  CHECK(span_at(span_index(run) + 1)->run_len.load() == n - 1);  // the rest, still pooled with its pages
  pool_give(s, 1);
  fw_free(above);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE("small blocks' fresh spans are paid with a big block's freed run that they do not cut up") {
  // A big block at its frontier's top (free vspans above: single spans are not
  // split off its run), written, then freed with its pages. Small blocks then
  // take fresh spans from the other frontier, 8 MiB of them, with no big block
  // taken meanwhile. The run pays for them with its last pages, a quantum
  // (kLastRunMax) at a time, so the heap's committed bytes stay within a
  // quantum and a span of where they were, instead of holding the freed
  // run's pages and the small blocks' both until the decay (R's peak,
  // docs/benchmarks.md, Stop 97). The run stays whole, its pages a prefix.
  constexpr size_t kBig = size_t(kBigRunVspans + 16) * kVspanSize;
  void* big = fw_malloc(kBig);
  REQUIRE(big != nullptr);
  std::memset(big, 1, kBig);
  Span* run = span_of(big);
  const uint32_t n = run->run_len.load();
  REQUIRE(arena_frontier(span_index(run)) == kFrontierBigRuns);
  REQUIRE(end_in_region(run, n) == fresh_from(run));  // a new process: nothing above it
  fw_free(big);                                       // more than a last-run slot keeps: to the stacks, with its pages
  REQUIRE(run->committed.load() >= kBig);
  const uint64_t committed = committed_bytes();
  constexpr size_t kBlock = 1024, kSmall = size_t(8) << 20, kBelowQuantum = size_t(3) << 20;
  std::vector<void*> small;
  for (size_t k = 0; k < kSmall / kBlock; k++) {
    if (k == kBelowQuantum / kBlock) CHECK(run->committed.load() >= kBig);  // less than a quantum owed: no pay yet
    small.push_back(fw_malloc(kBlock));
    REQUIRE(small.back() != nullptr);
    CHECK(arena_frontier(span_index(span_of(small.back()))) == kFrontierSpans);
  }
  CHECK(committed_bytes() <= committed + kLastRunMax + kVspanSize);
  CHECK(run->run_len.load() == n);  // whole, not cut up
  CHECK(run->committed.load() <= kBig - kLastRunMax);
  CHECK(run->committed.load() % os::page_size() == 0);
  for (void* p : small) fw_free(p);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE("small blocks' fresh spans do not pay with big blocks' runs while big blocks are taken between them") {
  // As above, but another big block, below the freed run, is freed and taken
  // again after every 1 MiB of small blocks: big blocks' runs are in use, and
  // the freed run keeps its pages for them (a program that allocates a buffer
  // and small blocks beside it, again and again, faulted in twice the pages
  // when its small spans paid at any time).
  constexpr size_t kBig = size_t(kBigRunVspans + 16) * kVspanSize, kOther = size_t(kBigRunVspans + 4) * kVspanSize;
  void* other = fw_malloc(kOther);
  void* big = fw_malloc(kBig);
  REQUIRE((other != nullptr && big != nullptr));
  std::memset(big, 1, kBig);
  std::memset(other, 1, kOther);
  Span* run = span_of(big);
  REQUIRE(arena_frontier(span_index(run)) == kFrontierBigRuns);
  REQUIRE(end_in_region(run, run->run_len.load()) == fresh_from(run));
  fw_free(big);
  REQUIRE(run->committed.load() >= kBig);
  constexpr size_t kBlock = 1024, kSmall = size_t(8) << 20, kEvery = size_t(1) << 20;
  std::vector<void*> small;
  for (size_t k = 0; k < kSmall / kBlock; k++) {
    small.push_back(fw_malloc(kBlock));
    REQUIRE(small.back() != nullptr);
    if ((k + 1) % (kEvery / kBlock) == 0) {
      Span* was = span_of(other);
      fw_free(other);
      other = fw_malloc(kOther);
      REQUIRE(other != nullptr);
      CHECK(span_of(other) == was);  // its own run again
    }
  }
  CHECK(run->committed.load() >= kBig);
  fw_free(other);
  for (void* p : small) fw_free(p);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE(
    "a merge for a short run leaves big blocks' freed runs as they are, and the next big blocks take their pages where "
    "they lie") {
  // Two big blocks' runs side by side in the big blocks' frontier, freed with
  // their pages, the first with a gap after them (its block did not fill its
  // run). A take of a short run that finds none merges the pool, and that
  // merge joins only the short runs' frontier. Merged too, the big runs would
  // become one run with the gap committed, and the next big blocks would be
  // placed on it at other offsets: they fault in the gap while the old pages
  // beside them stay, and the heap keeps both placements' pages (clamscan's
  // second generation of buffers, docs/design.md).
  constexpr uint32_t n1 = kBigRunVspans + 8, n2 = kBigRunVspans + 4;
  Span* a = pool_take_run(n1 + n2, 0);  // one run, cut in two: side by side
  REQUIRE(a != nullptr);
  REQUIRE(arena_frontier(span_index(a)) == kFrontierBigRuns);
  Span* b = span_at(span_index(a) + n1);
  a->run_len.store(n1);
  b->run_len.store(n2);
  REQUIRE(span_commit(a, uint64_t(n1 - 4) * kVspanSize));
  REQUIRE(span_commit(b, uint64_t(n2) * kVspanSize));
  pool_give(a, n1);
  pool_give(b, n2);
  // Four single spans of the spans' frontier, fenced, given back one by one:
  // the take of four finds no run of four and merges them.
  const Fenced f = take_fenced_four();
  REQUIRE(arena_frontier(f.first) == kFrontierSpans);
  for (uint32_t k = 0; k < 4; k++) pool_give(span_at(f.first + k), 1);
  const uint64_t committed = committed_bytes();
  Span* merged = pool_take_run(4, 0);
  REQUIRE(merged == span_at(f.first));  // the merge ran
  CHECK(a->run_len.load() == n1);
  CHECK(a->committed.load() == uint64_t(n1 - 4) * kVspanSize);
  CHECK(b->run_len.load() == n2);
  CHECK(b->committed.load() == uint64_t(n2) * kVspanSize);
  CHECK(committed_bytes() == committed);  // no gap committed
  // The next generation: blocks of the same lengths take the same runs, with
  // the pages they need already there.
  Span* b2 = pool_take_run(n2, uint64_t(n2) * kVspanSize);
  Span* a2 = pool_take_run(n1, uint64_t(n1 - 4) * kVspanSize);
  CHECK(b2 == b);
  CHECK(a2 == a);
  CHECK(committed_bytes() == committed);
  if (a2 != nullptr) pool_give(a2, a2->run_len.load());
  if (b2 != nullptr) pool_give(b2, b2->run_len.load());
  pool_give(merged, 4);
  pool_give(f.before, 1);
  pool_give(f.after, 1);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}
