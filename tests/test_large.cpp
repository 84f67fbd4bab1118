// Large and huge objects: runs of virtual spans and regions of their own.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <initializer_list>
#include <thread>
#include <vector>

#include <cstdio>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "core/large.h"
#include "core/options.h"
#include "core/percpu.h"
#include "core/span_pool.h"
#include "freeway.h"
#include "test_util.h"

using namespace fw;

namespace {
// The vspans of live large runs, as statistics count them.
uint64_t large_spans_in_use() {
  fw_stats_t s;
  fw_stats(&s);
  return s.spans_large;
}
}  // namespace

TEST_CASE("a large block is validated from its descriptor in O(1) and freed back to the pool") {
  size_t n = 3 * kVspanSize + 100;
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  Span* d = span_of(p);
  REQUIRE(d != nullptr);
  CHECK(Anchor::unpack(d->anchor.load()).state == kLarge);
  // A pointer into a later span of the run leads to the head.
  Span* tail = span_of(p + 2 * kVspanSize);
  CHECK(Anchor::unpack(tail->anchor.load()).state == kLargeTail);
  CHECK(span_at(tail->run_len.load()) == d);
  CHECK(fw_usable_size(p) >= n);
  std::memset(p, 0xab, n);
  fw_free(p);
  CHECK(Anchor::unpack(d->anchor.load()).state == kFree);
  CHECK(Anchor::unpack(tail->anchor.load()).state == kFree);
  CHECK(pool_is_valid());
}

TEST_CASE("large alignments from 32 bytes to 64 MiB are honoured") {
  for (size_t align = 32; align <= (size_t(64) << 20); align *= 2) {
    for (size_t n : {kSmallMax + 1, size_t(1) << 20, align + 7}) {
      void* p = fw_malloc_aligned(align, n);
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(p) % align == 0);
      CHECK(fw_usable_size(p) >= n);
      static_cast<char*>(p)[n - 1] = 1;
      fw_free(p);
    }
  }
}

TEST_CASE("a freed large run is reused for the next large block of that length") {
  void* a = fw_malloc(2 * kVspanSize);
  REQUIRE(a != nullptr);
  fw_free(a);
  void* b = fw_malloc(2 * kVspanSize);
  CHECK(b == a);
  fw_free(b);
}

namespace {
// 0 while the thread below works, 1 once its large calls are done (or -1 if
// one failed), 2 when the test has read the counts.
std::atomic<int> g_large_only_step{0};

// Frees arg, a large block of another thread's, then makes large pairs and a
// huge one; nullptr, or arg if a malloc failed.
void* large_only_calls(void* arg) {
  fw_free(arg);
  for (int i = 0; i < 100; i++) {
    void* q = fw_malloc(2 * kVspanSize);
    if (q == nullptr) return arg;
    fw_free(q);
  }
  void* huge = fw_malloc(kLargeMax + 1);
  if (huge == nullptr) return arg;
  fw_free(huge);
  return nullptr;
}
// A thread whose calls are large_only_calls, and no C++ runtime of its own
// (std::thread frees its state object from the new thread); then, the counts
// read, one small block, whose call binds its thread cache.
void* large_only_thread(void* arg) {
  if (large_only_calls(arg) != nullptr) {
    g_large_only_step.store(-1);
    return arg;
  }
  g_large_only_step.store(1);
  while (g_large_only_step.load() != 2) sched_yield();
  void* small = fw_malloc(64);
  if (small == nullptr) return arg;
  fw_free(small);
  return nullptr;
}
}  // namespace

TEST_CASE("large blocks need no thread cache: a thread whose calls are large frees and mallocs binds none") {
  void* block = fw_malloc(kVspanSize + 100);
  REQUIRE(block != nullptr);
  fw_stats_t before, after;
  fw_stats(&before);
  pthread_t t;
  REQUIRE(pthread_create(&t, nullptr, large_only_thread, block) == 0);
  while (g_large_only_step.load() == 0) sched_yield();
  REQUIRE(g_large_only_step.load() == 1);  // else a large call failed (no memory)
  fw_stats(&after);
  CHECK(after.large_frees - before.large_frees == 102);
  CHECK(after.threads_created == before.threads_created);
  g_large_only_step.store(2);
  void* failed = block;
  REQUIRE(pthread_join(t, &failed) == 0);
  CHECK(failed == nullptr);
  // Its thread slot was left as it found it: the small call bound a cache
  // (none in per-CPU mode, where no cache is bound to a thread).
  fw_stats(&after);
  CHECK(after.threads_created == before.threads_created + (percpu_on() ? 0 : 1));
}

// A freed big run below a block in use (stranded): a (40 MiB, a run of 192
// vspans, 48 MiB) written and freed, with b (50 MiB) right above it, so that
// a's run cannot grow. Blocks that a pooled run served instead of b's place
// are held meanwhile.
struct Stranded {
  static constexpr size_t kMiB = size_t(1) << 20;
  char* a = nullptr;
  uint32_t ai = 0;     // a's run
  uint32_t a_len = 0;  // its length in vspans (a pooled run may be longer than 192)
  char* b = nullptr;
  std::vector<void*> held;
  // The size of a block longer than a's run by `extra` bytes: it cannot take
  // that run, whatever length the pool gave a.
  size_t past_a(size_t extra) const { return size_t(a_len) * kVspanSize + extra; }
  Stranded(const Stranded&) = delete;
  Stranded& operator=(const Stranded&) = delete;
  Stranded() {
    fw_collect();  // no pages pooled from earlier tests, and the pays start over (one process runs them all in per_thread.test_large)
    a = static_cast<char*>(fw_malloc(40 * kMiB));
    REQUIRE(a != nullptr);
    ai = span_index(span_of(a));
    a_len = span_of(a)->run_len.load();
    for (int i = 0; i < 16 && b == nullptr; i++) {
      char* t = static_cast<char*>(fw_malloc(50 * kMiB));
      REQUIRE(t != nullptr);
      if (span_index(span_of(t)) == ai + a_len)
        b = t;
      else
        held.push_back(t);
    }
    REQUIRE(b != nullptr);
    std::memset(a, 1, 40 * kMiB);
    std::memset(b, 2, 50 * kMiB);
    fw_free(a);
    REQUIRE(span_at(ai)->committed.load() == 40 * kMiB);  // kept with its pages
  }
  ~Stranded() {
    fw_free(b);
    for (void* h : held) fw_free(h);
    CHECK(large_spans_in_use() == 0);
    CHECK(pool_is_valid());
    fw_collect();
  }
};

TEST_CASE(
    "a big block that faults in fresh pages gives back as many of a freed big run's below a block in use, "
    "which it can neither use nor grow over (pool_pay_fresh)") {
  constexpr size_t kMiB = Stranded::kMiB;
  Stranded st;
  const uint64_t committed = committed_bytes();
  // c is longer than a's run (50 MiB for a run of 192 vspans): fresh pages,
  // and a's pay for them.
  char* c = static_cast<char*>(fw_malloc(st.past_a(2 * kMiB)));
  REQUIRE(c != nullptr);
  CHECK(span_index(span_of(c)) != st.ai);
  INFO("committed before c: ", committed >> 20, " MiB, after: ", committed_bytes() >> 20, " MiB");
  CHECK(committed_bytes() <= committed + 10 * kMiB);
  CHECK(span_at(st.ai)->committed.load() == 0);
  CHECK(pool_is_valid());
  // a's run still serves a block of its length.
  char* d = static_cast<char*>(fw_malloc(40 * kMiB));
  CHECK(d == st.a);
  fw_free(d);
  fw_free(c);
}

TEST_CASE(
    "once a block faults back the pages a stranded run paid with, such runs keep their pages for the decay "
    "delay (stranded_pays_wait)") {
  constexpr size_t kMiB = Stranded::kMiB;
  Stranded st;
  char* c = static_cast<char*>(fw_malloc(st.past_a(8 * kMiB)));  // a's run pays for c's fresh pages
  REQUIRE(c != nullptr);
  REQUIRE(span_at(st.ai)->committed.load() == 0);
  // d takes a's run and faults its pages in again: the program reuses the
  // runs it strands.
  char* d = static_cast<char*>(fw_malloc(40 * kMiB));
  REQUIRE(d == st.a);
  std::memset(d, 3, 40 * kMiB);
  const auto freed = std::chrono::steady_clock::now();
  fw_free(d);
  REQUIRE(span_at(st.ai)->committed.load() == 40 * kMiB);
  // e is longer than a's run too: fresh pages, and this time no pay.
  char* e = static_cast<char*>(fw_malloc(st.past_a(16 * kMiB)));
  REQUIRE(e != nullptr);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - freed);
  if (uint64_t(ms.count()) < uint64_t(option(Option::decay_ms)) / 8) {
    // (A purge pass may have tapered its tail since: a run younger than an
    // eighth of the delay keeps seven eighths of its pages at least. A pay
    // would have taken them all.)
    INFO("a's run committed ", span_at(st.ai)->committed.load() >> 20, " MiB after e");
    CHECK(span_at(st.ai)->committed.load() >= 30 * kMiB);
  } else {
    MESSAGE("e came ", ms.count(), " ms after d's free, an eighth of the decay delay or more: a's pages may have gone with it");
  }
  CHECK(pool_is_valid());
  fw_free(e);
  fw_free(c);
}

TEST_CASE("large calloc reads zero after the run held dirty data") {
  size_t n = 2 * kVspanSize + 4096;
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  std::memset(p, 0x5a, n);
  fw_free(p);
  char* q = static_cast<char*>(fw_calloc(1, n));
  REQUIRE(q != nullptr);
  bool zero = true;
  for (size_t i = 0; i < n; i++) zero &= q[i] == 0;
  CHECK(zero);
  fw_free(q);
}

TEST_CASE("a huge block has a region of its own that is unmapped when freed") {
  size_t n = kLargeMax + 12345;
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  CHECK(fw_owns(p));
  CHECK(reinterpret_cast<uintptr_t>(p) % kRegionSize == 0);
  p[0] = 1;
  p[n - 1] = 2;
  CHECK(fw_usable_size(p) >= n);
  uint64_t reserved = arena_reserved_bytes();
  fw_free(p);
  CHECK_FALSE(fw_owns(p));
  CHECK(arena_reserved_bytes() < reserved);
  CHECK(arena_is_valid());
}

TEST_CASE("a pointer anywhere into a huge block leads to its start (fw_block_start), as one into a large block does") {
  const size_t n = kLargeMax + (3u << 20) + 12345;  // past the first vspan and the first MiB
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  for (size_t off : {size_t(0), size_t(100), size_t(kVspanSize), size_t(1) << 20, n / 2, n - 1}) {
    CAPTURE(off);
    CHECK(fw_block_start(p + off) == p);
  }
  CHECK(fw_block_start(p + fw_usable_size(p) - 1) == p);
  // Only the start has a size (realloc and sized free rely on it).
  CHECK(fw_usable_size(p + 16) == 0);
  CHECK(fw_usable_size(p + (size_t(2) << 20)) == 0);
  // A large block's tails gave their head already; the same holds for it.
  char* l = static_cast<char*>(fw_malloc(size_t(8) << 20));
  REQUIRE(l != nullptr);
  CHECK(fw_block_start(l + (size_t(5) << 20)) == l);
  CHECK(fw_usable_size(l) >= (size_t(8) << 20));
  CHECK(fw_usable_size(l + 16) == 0);
  CHECK(fw_usable_size(l + (size_t(5) << 20)) == 0);
  fw_free(l);
  fw_free(p);
  CHECK(arena_is_valid());
}

TEST_CASE("realloc grows a large block in place when its run has room") {
  char* p = static_cast<char*>(fw_malloc(kSmallMax + 1000));
  REQUIRE(p != nullptr);
  std::memset(p, 7, kSmallMax + 1000);
  char* q = static_cast<char*>(fw_realloc(p, kVspanSize - 4096));  // still within its one vspan
  CHECK(q == p);
  CHECK(q[kSmallMax + 999] == 7);
  // Needs a bigger run: moves, or grows over the fresh vspans after its run
  // if it ends at the heap's top (the next test).
  char* r = static_cast<char*>(fw_realloc(q, 5 * kVspanSize));
  REQUIRE(r != nullptr);
  CHECK(r[0] == 7);
  CHECK(r[kSmallMax + 999] == 7);
  fw_free(r);
}

// Where the never-used vspans of the region holding p start (an index within
// the region), and where p's run ends.
static uint32_t fresh_after(const void* p) { return arena_vspans_used(span_index(span_of(p)) / kVspansPerRegion); }
static uint32_t run_end(const void* p) {
  const Span* d = span_of(p);
  return span_index(d) % kVspansPerRegion + d->run_len.load();
}

// A block of `size` bytes whose run ends where its region's fresh vspans
// start, in a region of the frontier its run belongs to (the heap's top of
// that frontier), with room for `grow` more vspans before the region's end (a
// region holds kVspansPerRegion at most). Where earlier tests in this process
// left runs in the pool, those serve first (a pooled run may lie in the other
// frontier's region), and their region may be nearly full, where a block
// cannot grow (under ThreadSanitizer, running the whole file, the 1 MiB block
// below once moved instead of growing): blocks are taken, and kept in `held`,
// until one will do.
static char* top_block(size_t size, uint32_t grow, std::vector<void*>& held) {
  for (int i = 0; i < 256; i++) {
    char* b = static_cast<char*>(fw_malloc(size));
    REQUIRE(b != nullptr);
    const Span* d = span_of(b);
    if (run_end(b) == fresh_after(b) && run_end(b) + grow <= kVspansPerRegion &&
        arena_frontier(span_index(d)) == frontier_of(d->run_len.load()))
      return b;
    held.push_back(b);
  }
  FAIL("no block of " << size << " bytes came from fresh vspans");
  return nullptr;
}

// Whether p's region can hold a run of `len` vspans from p's run's start:
// kReserved in what it has reserved; kProbed past it, where no other mapping
// lies now (probed with MAP_FIXED_NOREPLACE, as the arena reserves more:
// os::reserve_at); kNoRoom if another mapping lies there. Under
// ThreadSanitizer another mapping sometimes lay right after a region, which
// then could not grow, and the block moved.
enum Room { kNoRoom, kProbed, kReserved };
// p's region, and the address where a run of `len` vspans from p's run's start ends.
static const Region& region_of(const void* p) { return g_regions[span_index(span_of(p)) / kVspansPerRegion]; }
static uintptr_t run_end_at(const void* p, uint32_t len) {
  return region_of(p).base.load() + uintptr_t(span_index(span_of(p)) % kVspansPerRegion + len) * kVspanSize;
}
static Room region_room(const void* p, uint32_t len) {
  const Region& reg = region_of(p);
  const uintptr_t end = reg.base.load() + reg.size.load();
  const uintptr_t want = run_end_at(p, len);
  if (want <= end) return kReserved;
#ifdef MAP_FIXED_NOREPLACE
  void* at = reinterpret_cast<void*>(end);
  void* got = mmap(at, want - end, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) return kNoRoom;
  munmap(got, want - end);
  return got == at ? kProbed : kNoRoom;
#else
  return kProbed;
#endif
}
static bool region_has_room(const void* p, uint32_t len) { return region_room(p, len) != kNoRoom; }

TEST_CASE("realloc grows a large block at the heap's top in place over the fresh vspans after its run, within its "
          "frontier, and moves one that has a block after it") {
  fw_collect();  // the pool keeps no pages that a move could use instead (large.cpp, extend_run)
  std::vector<void*> held;
  // A buffer doubled from 5 MiB to 160 MiB (a vector's growth), every byte
  // written at each size: it stays where it is, so nothing is copied and
  // only its new pages fault in.
  size_t n = size_t(5) << 20;
  char* p = top_block(n, 768, held);  // 160 MiB takes a run of 768 vspans
  std::memset(p, 1, n);
  int in_place = 0;
  for (; n < (size_t(160) << 20); n *= 2) {
    INFO("from ", n, " bytes, the pool keeping ", pool_retained_bytes(), "; the run ending at vspan ", run_end(p),
         " of its region");
    // The run the grown block takes: its run class.
    const bool room = region_has_room(p, run_class(uint32_t((2 * n + kVspanSize - 1) / kVspanSize)));
    char* q = static_cast<char*>(fw_realloc(p, 2 * n));
    REQUIRE(q != nullptr);
    if (room) {
      CHECK(q == p);
      CHECK(fw_usable_size(q) >= 2 * n);
      CHECK(run_end(q) == fresh_after(q));
      CHECK(Anchor::unpack(span_of(q + 2 * n - 1)->anchor.load()).state == kLargeTail);
      CHECK(span_at(span_of(q + 2 * n - 1)->run_len.load()) == span_of(q));
      in_place++;
    } else {
      MESSAGE("another mapping lies after the region: the block may move");
    }
    std::memset(q + n, 2, n);
    p = q;
  }
  CHECK(in_place > 0);
  CHECK(p[0] == 1);
  CHECK(p[(size_t(5) << 20) - 1] == 1);
  CHECK(p[size_t(5) << 20] == 2);
  CHECK(p[n - 1] == 2);
  // A block of the single spans' frontier grows in place up to the longest
  // run that frontier holds (kBigRunVspans, 4 MiB), and past it moves to the
  // big blocks' frontier (arena.h, Frontiers). Before anything is freed, so
  // that the pool keeps no pages a move could use instead. (If the big
  // block moved above, another mapping lying after its region, its old run
  // holds such pages: the collect gives them back. Seen under
  // ThreadSanitizer, whose heap lies among its own mappings.)
  fw_collect();
  char* small = top_block(size_t(1) << 20, kBigRunVspans, held);
  std::memset(small, 3, size_t(1) << 20);
  INFO("the pool keeping ", pool_retained_bytes(), "; the run ending at vspan ", run_end(small), " of its region");
  const Room small_room = region_room(small, kBigRunVspans);
  INFO("room for the grown run (0 none, 1 probed, 2 reserved): ", int(small_room), "; the region reserves ",
       region_of(small).size.load() / kVspanSize, " vspans");
  char* s4 = static_cast<char*>(fw_realloc(small, kBigRunVspans * kVspanSize));
  REQUIRE(s4 != nullptr);
  if (small_room == kProbed && s4 != small && region_room(small, kBigRunVspans) == kNoRoom) {
    // The probe unmapped its space before realloc reserved it, and another
    // mapping (ThreadSanitizer's runtime maps its own) took it in between.
    MESSAGE("a mapping came to lie after the region between the probe and realloc: the block moved");
  } else if (small_room != kNoRoom) {
    CHECK(s4 == small);
  }
  char* s8 = static_cast<char*>(fw_realloc(s4, 2 * kBigRunVspans * kVspanSize));
  REQUIRE(s8 != nullptr);
  CHECK(s8 != s4);
  CHECK(arena_frontier(span_index(span_of(s8))) == kFrontierBigRuns);
  CHECK(s8[(size_t(1) << 20) - 1] == 3);
  // A block with another taken right after it: its run no longer ends at the
  // fresh vspans, so the next growth moves it, with its bytes. Both are taken
  // here. The big block above may have moved to another region (another
  // mapping lay after its own: under ThreadSanitizer, 3 runs in 40), and then
  // the next block did not follow it; and a block at a region's top may be
  // the end of a pooled run there, while the next fresh vspans are another
  // region's. So pairs are taken until the second follows the first.
  const size_t m = size_t(5) << 20;
  char* q = nullptr;
  char* after = nullptr;
  for (int i = 0; i < 64 && after == nullptr; i++) {
    char* a = top_block(m, 2 * uint32_t(m / kVspanSize), held);
    char* b = static_cast<char*>(fw_malloc(m));
    REQUIRE(b != nullptr);
    if (span_of(b) == span_of(a) + span_of(a)->run_len.load()) {
      q = a;
      after = b;
    } else {
      held.push_back(a);
      held.push_back(b);
    }
  }
  REQUIRE(after != nullptr);
  std::memset(q, 4, m);
  REQUIRE(run_end(q) < fresh_after(q));
  char* moved = static_cast<char*>(fw_realloc(q, size_t(span_of(q)->run_len.load()) * kVspanSize + (1 << 20)));
  REQUIRE(moved != nullptr);
  CHECK(moved != q);
  CHECK(moved[0] == 4);
  CHECK(moved[m - 1] == 4);
  uint64_t spans = span_of(moved)->run_len.load() + span_of(after)->run_len.load() + span_of(s8)->run_len.load() +
                   span_of(p)->run_len.load();
  for (void* h : held) spans += span_of(h)->run_len.load();
  CHECK(large_spans_in_use() == spans);
  fw_free(moved);
  fw_free(after);
  fw_free(s8);
  fw_free(p);
  for (void* h : held) fw_free(h);
  // The grown runs went back to the pool whole: their vspans free, the
  // books balanced.
  CHECK(large_spans_in_use() == 0);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

// A region reserves ahead in steps (region_grow, arena.cpp). Another mapping
// that lies within the next step, past what a growing block needs, must not
// stop the region growing up to it (it once did, and the block moved: seen
// under ThreadSanitizer, whose runtime maps memory of its own).
TEST_CASE("a region whose next reservation step would cross another mapping still grows up to it") {
  fw_collect();
  std::vector<void*> held;
  // A 1 MiB block at the heap's top whose growth to kBigRunVspans needs
  // vspans past what its region has reserved, where they are free; a mapping
  // of ours (the fence) goes right after them, inside the step the region
  // would take. (Under ThreadSanitizer the space after a region may be taken
  // already: then another block is tried.)
  char* b = nullptr;
  void* fence = MAP_FAILED;
  for (int i = 0; i < 256 && b == nullptr; i++) {
    char* c = top_block(size_t(1) << 20, kBigRunVspans, held);
    if (region_room(c, kBigRunVspans) == kProbed) {
      void* at = reinterpret_cast<void*>(run_end_at(c, kBigRunVspans));
      void* got =
          mmap(at, kVspanSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      if (got == at) {
        b = c;
        fence = got;
        break;
      }
      if (got != MAP_FAILED) munmap(got, kVspanSize);
    }
    held.push_back(c);
  }
  if (b == nullptr) {
    for (void* h : held) fw_free(h);
#if defined(FW_TSAN)
    // Its runtime's mappings lay after every region tried.
    MESSAGE("no region with free space after it: the case cannot be set up here");
    return;
#else
    FAIL("no region with free space after it");
#endif
  }
  std::memset(b, 5, size_t(1) << 20);
  char* g = static_cast<char*>(fw_realloc(b, kBigRunVspans * kVspanSize));
  REQUIRE(g != nullptr);
  CHECK(g == b);
  CHECK(g[(size_t(1) << 20) - 1] == 5);
  const Region& reg = region_of(g);
  CHECK(reg.base.load() + reg.size.load() == reinterpret_cast<uintptr_t>(fence));  // up to the mapping, not past it
  fw_free(g);
  for (void* h : held) fw_free(h);
  munmap(fence, kVspanSize);
  CHECK(arena_is_valid());
}

TEST_CASE("realloc grows a huge block in place once it has moved to a region with room") {
  // Past kLargeMax a block has a region of its own. One that realloc moves to
  // grow gets a region with room to double (address space only), so the next
  // steps grow in place instead of each taking a new region and copying the
  // whole block.
  const size_t n = kLargeMax + kVspanSize;
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  p[0] = 9;
  p[n - 1] = 5;
  char* q = static_cast<char*>(fw_realloc(p, n + kVspanSize));  // its region has no room: moves
  REQUIRE(q != nullptr);
  size_t m = n + kVspanSize;
  for (size_t step = 0; step < 8; step++) {
    m += n / 8;
    char* r = static_cast<char*>(fw_realloc(q, m));
    REQUIRE(r != nullptr);
    CHECK(r == q);
    q = r;
    q[m - 1] = 3;
  }
  CHECK(m <= 2 * (n + kVspanSize));
  CHECK(fw_usable_size(q) >= m);
  CHECK(q[0] == 9);
  CHECK(q[n - 1] == 5);
  CHECK(q[m - 1] == 3);
  fw_free(q);
}

// Whether this kernel moves pages with mremap(MREMAP_DONTUNMAP) (Linux 5.7+),
// tried on a mapping of the test's own.
static bool kernel_moves_pages() {
  const size_t n = 4 * size_t(sysconf(_SC_PAGESIZE));
  void* a = mmap(nullptr, 2 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return false;
  void* b = static_cast<char*>(a) + n;
  bool ok = mremap(a, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, b) == b;
  munmap(a, 2 * n);
  return ok;
}

// Writes each page's offset into its first bytes, and counts the pages that
// do not hold theirs: a page moved to the wrong place, or lost, shows.
static void fill_page_offsets(char* p, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t o = 0; o + sizeof(size_t) <= bytes; o += page) std::memcpy(p + o, &o, sizeof o);
}
static size_t pages_without_offset(const char* p, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t bad = 0;
  for (size_t o = 0; o + sizeof(size_t) <= bytes; o += page) {
    size_t v;
    std::memcpy(&v, p + o, sizeof v);
    bad += v != o;
  }
  return bad;
}

TEST_CASE("realloc grows a large block in place over the freed run after it, taking that run's pages from the pool "
          "(no copy, no fault) and giving back the rest of it") {
  std::vector<void*> held;
  constexpr size_t kMiB = size_t(1) << 20;
  // a at its frontier's top, then b right after it, written (its pages in),
  // then freed: a's neighbour is a pooled run with pages. (Under
  // ThreadSanitizer the space after a region may be taken already, and b
  // could not follow a there: then another block is tried, as above.)
  // a's run is 32 vspans, its 8 MiB: not a longer pooled run taken whole
  // (span_pool.cpp, take_whole_or_split), whose tail would fault in as a grows.
  char* a = nullptr;
  for (int i = 0; i < 256 && a == nullptr; i++) {
    char* t = top_block(8 * kMiB, 384, held);
    const Span* d = span_of(t);
    REQUIRE(d != nullptr);
    if (d->run_len.load() == 32 && region_has_room(t, d->run_len.load() + 384))
      a = t;
    else
      held.push_back(t);
  }
  REQUIRE(a != nullptr);
  std::memset(a, 1, 8 * kMiB);
  const uint32_t a_len = span_of(a)->run_len.load();
  char* b = nullptr;
  for (int i = 0; i < 16 && b == nullptr; i++) {
    char* c = static_cast<char*>(fw_malloc(96 * kMiB));
    REQUIRE(c != nullptr);
    if (span_index(span_of(c)) == span_index(span_of(a)) + a_len) b = c;
    else held.push_back(c);  // a pooled run served it: hold it, and try again
  }
  INFO("room after a's region now (0 none, 1 probed, 2 reserved): ", int(region_room(a, a_len + 384)));
  REQUIRE(b != nullptr);
  std::memset(b, 5, 96 * kMiB);
  fw_free(b);
  REQUIRE(Anchor::unpack(span_at(span_index(span_of(a)) + a_len)->anchor.load()).state == kFree);
  const uint64_t committed = committed_bytes(), retained = pool_retained_bytes(), pooled = pool_span_count();
  INFO("the pool holding ", pooled, " spans, ", retained, " bytes with pages");

  char* q = static_cast<char*>(fw_realloc(a, 64 * kMiB));
  REQUIRE(q != nullptr);
  CHECK(q == a);
  const uint32_t len = span_of(q)->run_len.load();
  CHECK(uint64_t(len) * kVspanSize >= 64 * kMiB);
  CHECK(fw_usable_size(q) >= 64 * kMiB);
  for (uint32_t i = a_len; i < len; i++) {
    CHECK(Anchor::unpack(span_at(span_index(span_of(q)) + i)->anchor.load()).state == kLargeTail);
    CHECK(span_at(span_index(span_of(q)) + i)->committed.load() == 0);
  }
  // b's pages moved from the pool to q's run: committed in all unchanged.
  CHECK(committed_bytes() == committed);
  CHECK(retained - pool_retained_bytes() == uint64_t(len - a_len) * kVspanSize);
  CHECK(pooled - pool_span_count() == len - a_len);  // the rest of b's run is back
  CHECK(span_of(q)->committed.load() == uint64_t(len) * kVspanSize);
  const long before = fwtest::minor_faults();
  std::memset(q + 8 * kMiB, 2, 56 * kMiB);
  const long faults = fwtest::minor_faults() - before;
  MESSAGE("minor faults writing the 56 MiB it grew by: ", faults);
  CHECK(faults < 64);  // 14,336 pages: they were b's, still there
  CHECK(q[0] == 1);
  CHECK(q[8 * kMiB - 1] == 1);
  CHECK(q[8 * kMiB] == 2);
  CHECK(pool_is_valid());
  CHECK(fw_check_heap() == 0);
  fw_free(q);
  for (void* h : held) fw_free(h);
  CHECK(large_spans_in_use() == 0);
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
}

TEST_CASE("realloc moves a huge block's pages to its new region instead of copying them, and keeps every byte") {
  // Each page of the block holds its own index: a page moved to the wrong
  // place, or lost, shows. A copy into a fresh region faults in every page of
  // the new one (69,632 here); a move of the pages faults in none.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t n = kLargeMax + (16u << 20);  // 272 MiB: a huge block
  const bool moves = kernel_moves_pages();
  if (!moves) MESSAGE("this kernel has no mremap(MREMAP_DONTUNMAP): realloc copies; the fault counts are not checked");
  // realloc to `bytes`, which must move the block: the new pointer, and the
  // minor faults the call took.
  auto moved_to = [&](char* from, size_t bytes, long& faults) {
    const long before = fwtest::minor_faults();
    char* to = static_cast<char*>(fw_realloc(from, bytes));
    faults = fwtest::minor_faults() - before;
    REQUIRE(to != nullptr);
    CHECK(to != from);
    return to;
  };
  char* p = static_cast<char*>(fw_malloc(n));
  REQUIRE(p != nullptr);
  fill_page_offsets(p, n);
  p[n - 1] = 0x5a;
  long grow_faults = 0, again_faults = 0, shrink_faults = 0;
  // Grows past its region (reserved at its size): it moves to one with room.
  char* q = moved_to(p, n + 10, grow_faults);
  CHECK_FALSE(fw_owns(p));  // the old region is released
  CHECK(pages_without_offset(q, n) == 0);
  CHECK(q[n - 1] == 0x5a);
  q[n + 9] = 0x3c;  // the new bytes are usable
  // Grows past the room of its new region (twice its size): moves again.
  const size_t big = 2 * n + (8u << 20);
  char* g = moved_to(q, big, again_faults);
  CHECK(pages_without_offset(g, n) == 0);
  CHECK(g[n + 9] == 0x3c);
  // Shrinks to below half of that: it moves to a region of its size, with
  // the part it keeps (whole pages moved, the last part copied).
  const size_t m = kLargeMax + (4u << 20) + 123;
  char* r = moved_to(g, m, shrink_faults);
  CHECK(pages_without_offset(r, m) == 0);
  CHECK(fw_usable_size(r) >= m);
  const long pages = long(n / page);
  MESSAGE("minor faults: " << grow_faults << " growing 272 MiB by 10 bytes, " << again_faults << " growing it to "
                           << (big >> 20) << " MiB, " << shrink_faults << " shrinking it to 260 MiB (" << pages
                           << " pages hold data)");
  if (moves) {
    // What the new regions' records and the copied last part touch: a few
    // pages (74, 94 and 1 here; about a thousand more under TSan, whose
    // shadow pages count too), not one per page moved (a copy: 69,700).
    CHECK(grow_faults < pages / 10);
    CHECK(again_faults < pages / 10);
    CHECK(shrink_faults < pages / 10);
  }
  fw_free(r);
  CHECK(arena_is_valid());
  CHECK(fw_check_heap() == 0);
}

// Mappings this process has now (lines of /proc/self/maps).
static int mapping_count() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  int lines = 0;
  for (int c; (c = std::fgetc(f)) != EOF;) lines += c == '\n';
  std::fclose(f);
  return lines;
}

TEST_CASE("realloc moves a large block's pages into the huge block it grows into, gives its run back with none, "
          "and leaves no mapping behind") {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t n = (200u << 20) + 123;  // a large block (a run of 801 vspans) whose last page is partial
  const size_t pages = n / page;
  const bool moves = kernel_moves_pages();
  if (!moves) MESSAGE("this kernel has no mremap(MREMAP_DONTUNMAP): realloc copies; the fault counts are not checked");
  int maps_after_first = 0;
  for (int round = 0; round < 3; round++) {
    char* p = static_cast<char*>(fw_malloc(n));
    REQUIRE(p != nullptr);
    REQUIRE(Anchor::unpack(span_of(p)->anchor.load()).state == kLarge);
    fill_page_offsets(p, n);
    p[n - 1] = 0x5a;
    Span* run = span_of(p);
    const long before = fwtest::minor_faults();
    char* q = static_cast<char*>(fw_realloc(p, kLargeMax + (16u << 20)));
    const long faults = fwtest::minor_faults() - before;
    REQUIRE(q != nullptr);
    CHECK(Anchor::unpack(span_of(q)->anchor.load()).state == kHuge);
    CHECK(pages_without_offset(q, n) == 0);
    CHECK(q[n - 1] == 0x5a);  // the partial last page, copied
    MESSAGE("round " << round << ": " << faults << " minor faults moving " << pages << " pages");
    if (moves) {
      CHECK(faults < long(pages / 10));  // a copy faults in every page of the new region
      // The run went back to the pool with no pages: they are in q now.
      CHECK(Anchor::unpack(run->anchor.load()).state == kFree);
      CHECK(run->committed.load() == 0);
    }
    // Its run, taken again for a zeroed block, reads as zeros (calloc
    // zeroes only what the pool says has pages).
    char* z = static_cast<char*>(fw_calloc(1, n));
    REQUIRE(z != nullptr);
    size_t nonzero = 0;
    for (size_t o = 0; o < n; o += page) nonzero += z[o] != 0;
    CHECK(nonzero == 0);
    CHECK(z[n - 1] == 0);
    fw_free(z);
    fw_free(q);
    // The move split only the huge block's mapping, released with it: the
    // arena's mappings are as they were, round after round.
    if (round == 0) maps_after_first = mapping_count();
    else CHECK(mapping_count() == maps_after_first);
  }
  CHECK(pool_is_valid());
  CHECK(arena_is_valid());
  CHECK(fw_check_heap() == 0);
}

// Bytes this process maps now (/proc/self/statm), 0 if it cannot tell.
static rlim_t mapped_bytes() {
  unsigned long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
  std::fclose(f);
  return rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE));
}

// Caps this process's address space (RLIMIT_AS) at `extra` bytes above what
// it maps now (sanitizers map terabytes); false if it cannot.
static bool cap_address_space(rlim_t extra) {
  const rlim_t now = mapped_bytes();
  if (now == 0) return false;
  struct rlimit cap = {now + extra, now + extra};
  return setrlimit(RLIMIT_AS, &cap) == 0;
}

// Whether no address-space limit is set; if one is (ulimit -v), a case that
// caps its child's address space cannot run, and says so.
static bool address_space_unlimited() {
  struct rlimit as;
  REQUIRE(getrlimit(RLIMIT_AS, &as) == 0);
  if (as.rlim_cur == RLIM_INFINITY) return true;
  MESSAGE("an address-space limit is set (ulimit -v): not run");
  return false;
}

// Runs `body` in a child process and checks that it exits with 0; `body`
// returns the child's exit status. False if an address-space limit is set.
template <typename Body>
static bool in_uncapped_child(Body body) {
  if (!address_space_unlimited()) return false;
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(body());
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return true;
}

TEST_CASE("under RLIMIT_AS a huge block that realloc moves takes a region of its exact size when one with room "
          "cannot be had") {
  in_uncapped_child([] {
    const size_t n = kLargeMax + (1u << 20), m = kRegionSize + kRegionSize / 2;
    const rlim_t before = mapped_bytes();
    char* p = static_cast<char*>(fw_malloc(n));
    if (p == nullptr) return 3;
    // What a region of n bytes costs this process in address space (more than
    // n under ThreadSanitizer, which maps its own shadow beside each mapping).
    const rlim_t cost = mapped_bytes() - before;
    if (before == 0 || cost < n) return 5;
    // Room for the exact move, even where its region must be placed by
    // reserving m + kRegionSize and trimming it to an aligned m (at the same
    // cost per byte, and a tenth more), but not for a region with room to
    // double (2 m: more than that, since m is more than kRegionSize).
    if (!cap_address_space(cost * (m + kRegionSize) / n * 11 / 10)) return 2;
    p[0] = 1;
    p[n - 1] = 2;
    char* q = static_cast<char*>(fw_realloc(p, m));
    if (q == nullptr) return 4;
    return q[0] == 1 && q[n - 1] == 2 && fw_usable_size(q) >= m ? 0 : 6;
  });
}

TEST_CASE("a block of more than 4 vspans takes a run of its class (2^k or 1.5 * 2^k vspans), and the exact length "
          "under RLIMIT_AS") {
  auto run_of = [](size_t vspans) {  // run length taken by a block just over `vspans` vspans
    void* p = fw_malloc(vspans * kVspanSize + 1);
    REQUIRE(p != nullptr);
    uint32_t len = span_of(p)->run_len.load(std::memory_order_relaxed);
    fw_free(p);
    return len;
  };
  if (!address_space_unlimited()) return;  // run under a cap: classes are off
  CHECK(run_of(3) == 4);
  CHECK(run_of(4) == 6);    // 5 vspans
  CHECK(run_of(8) == 12);   // 9
  CHECK(run_of(12) == 16);  // 13
  CHECK(run_of(40) == 48);  // 41
  CHECK(run_of(48) == 64);  // 49
  // Under a cap the rounding would spend the program's address space: exact,
  // once the arena has seen the cap (it looks when it reserves room for runs).
  in_uncapped_child([] {
    // 4 GiB above what the process maps: the loop below reserves up to a
    // region (1 GiB), and ThreadSanitizer's own allocator needs room beside
    // it (with 1 GiB, it ran out of memory in half the runs of the whole file
    // under TSan, once an earlier test had grown a region to its full size).
    if (!cap_address_space(rlim_t(4) << 30)) return 2;
    // Blocks of the longest large length until the arena reserves more (the
    // runs this process already has free go first).
    void* big[4] = {};
    const uint64_t reserved = arena_reserved_bytes();
    for (int i = 0; i < 4 && arena_reserved_bytes() == reserved; i++)
      if ((big[i] = fw_malloc(kLargeMax)) == nullptr) return 6;
    if (arena_reserved_bytes() == reserved) return 7;
    void* p = fw_malloc(8 * kVspanSize + 1);
    if (p == nullptr) return 3;
    return span_of(p)->run_len.load(std::memory_order_relaxed) == 9 ? 0 : 4;
  });
}

// Sets `linked` on s, as if s were still in a reusable stack from an earlier
// life (lazy removal, core/reusable.h).
static void mark_linked(Span* s) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    a.linked = true;
    a.tag++;
    if (s->anchor.compare_exchange_weak(w, a.pack(), std::memory_order_acq_rel, std::memory_order_acquire)) return;
  }
}

// What a reusable stack's popper does to a span it finds in another state
// (span_claim_reusable): clears `linked` with a CAS. True if this call did.
static bool popper_clears_linked(Span* s) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  Anchor a = Anchor::unpack(w);
  if (!a.linked) return false;
  Anchor b = a;
  b.linked = false;
  b.tag = a.tag + 1;
  return s->anchor.compare_exchange_strong(w, b.pack(), std::memory_order_acq_rel, std::memory_order_acquire);
}

static bool any_linked(const Span* s, int n) {
  for (int i = 0; i < n; i++)
    if (Anchor::unpack(s[i].anchor.load(std::memory_order_acquire)).linked) return true;
  return false;
}

// A thread that plays a reusable stack's popper on the spans the main thread
// marks linked, clearing each bit with a CAS (popper_clears_linked) and
// counting the bits it cleared. To land its CAS inside the main thread's
// large_free or large_alloc it must be running while they run, so it spins
// while work keeps coming; once it has found none for a while (its main
// thread is off the CPU) it blocks until the main thread hands it more, and
// the main thread likewise blocks when its wait for the popper is long. Two
// copies of these tests on 2 cores (ctest -j2 runs the per-thread and per-CPU
// copies at once) then do not make each round wait for a timeslice, as four
// spinning threads did.
class Popper {
 public:
  explicit Popper(int n_spans) : n_(n_spans), thread_([this] { run(); }) {}
  ~Popper() { finish(); }
  // Stops the popper thread and returns the bits it cleared, every count in:
  // the main thread may see a bit clear before the popper has counted it.
  uint32_t finish() {
    if (thread_.joinable()) {
      stop_.store(true, std::memory_order_release);
      work_.fetch_add(1, std::memory_order_release);
      work_.notify_one();
      thread_.join();
    }
    return cleared_.load(std::memory_order_acquire);
  }
  // The spans [head, head + n) have had their `linked` bits set: clear them.
  void hand(Span* head) {
    target_.store(head, std::memory_order_release);
    work_.fetch_add(1, std::memory_order_release);
    work_.notify_one();
  }
  // Stops clearing bits: the spans may start another life.
  void take_back() { target_.store(nullptr, std::memory_order_release); }
  // Returns once no span of [head, head + n) is linked. A bit still set after
  // the main thread's call is only ever cleared by the popper, which counts
  // it, so the wait on that count cannot miss its wake-up.
  void wait_unlinked(const Span* head) const {
    for (int spins = 0;; spins++) {
      uint32_t seen = cleared_.load(std::memory_order_acquire);
      if (!any_linked(head, n_)) return;
      if (spins >= kSpins) cleared_.wait(seen, std::memory_order_acquire);
    }
  }

 private:
  // A few microseconds. With 64 spins the old large_free still failed in each
  // of 6 runs; with 2^14 two copies on 2 cores took up to 26 s, with 2^8 2 s.
  static constexpr int kSpins = 1 << 8;
  void run() {
    uint32_t seen = work_.load(std::memory_order_acquire);
    int idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      bool did = false;
      if (Span* head = target_.load(std::memory_order_acquire))
        for (int i = 0; i < n_; i++)
          if (popper_clears_linked(head + i)) {
            cleared_.fetch_add(1, std::memory_order_release);
            cleared_.notify_one();
            did = true;
          }
      uint32_t now = work_.load(std::memory_order_acquire);
      if (did || now != seen) {
        seen = now;
        idle = 0;
      } else if (++idle >= kSpins) {
        work_.wait(seen, std::memory_order_acquire);
        idle = 0;
      }
    }
  }
  const int n_;
  std::atomic<Span*> target_{nullptr};
  std::atomic<uint32_t> work_{0};
  std::atomic<uint32_t> cleared_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_CASE("a large free is not taken for a double free when a reusable stack's popper clears `linked` on its head "
          "at the same moment") {
  // A span that went back to the pool while still linked in a reusable stack
  // (lazy removal, core/reusable.h) can become a large block's head; the
  // stack's popper later finds it in another state and clears `linked` with a
  // CAS (span_claim_reusable). That CAS may land between large_free's load of
  // the head's anchor and its own CAS. Here a thread plays the popper: the
  // main thread marks each large head linked just before freeing the block,
  // and the other clears the bit as soon as it sees it. Before large_free
  // retried, this stopped the process with "double free of a large block" in
  // each of 3 runs; with this Popper, in each of 10 runs, within 2 to 4,740
  // rounds alone and 5,669 to 57,923 beside test_kill_tolerance's hundreds of
  // threads, where 200,000 rounds took 20 s: so 200,000 rounds, or as many as
  // 10 s allow.
  const int max_rounds = 200000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int rounds = 0;
  {
    Popper popper(1);
    for (int i = 0; i < max_rounds && std::chrono::steady_clock::now() < deadline; i++, rounds++) {
      void* p = fw_malloc(kSmallMax + 1 + size_t(i % 7) * 4096);
      REQUIRE(p != nullptr);
      Span* head = span_of(p);
      REQUIRE(Anchor::unpack(head->anchor.load(std::memory_order_acquire)).state == kLarge);
      mark_linked(head);
      popper.hand(head);
      fw_free(p);
      // The popper clears it, in whatever state: as the real one would, before the span's next life.
      popper.wait_unlinked(head);
      popper.take_back();
    }
    CHECK(popper.finish() == uint32_t(rounds));
  }
  CHECK(pool_is_valid());
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("a large run's vspans keep a reusable stack's `linked` bit until its popper clears it, on malloc and on free") {
  // A vspan of a run may still be linked in a reusable stack from an earlier
  // life as a small span when a large block takes it, and when the block is
  // freed. large_alloc and large_free set such a descriptor's state with a
  // CAS, which keeps the bit and lets the popper's CAS clear it; an unlinked
  // one they set with a store (no other thread writes its anchor). Here the
  // main thread marks every vspan of a 4-vspan run linked before each free
  // and, once the run is back in the pool, before the next malloc takes it
  // again; another thread plays the popper, clearing the bit with a CAS as
  // soon as it sees it, and counts the bits it cleared, which must be the bits
  // set: a state change that dropped the bit would make the popper's CAS fail
  // (fewer cleared), and one that wrote back a bit the popper had just cleared
  // would have it cleared twice (more).
  constexpr int kRun = 4;
  auto mark_run_linked = [](Span* head) {
    for (int i = 0; i < kRun; i++) mark_linked(head + i);
  };
  // A run of kRun vspans, or a pooled one a little longer taken whole
  // (span_pool.cpp, take_whole_or_split): its first kRun are the ones marked.
  const size_t size = (kRun - 1) * kVspanSize + 4096;
  const int max_rounds = 20000;  // or as many as 10 s allow (under load: the first case)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int rounds = 0;
  void* p = fw_malloc(size);
  REQUIRE(p != nullptr);
  Span* head = span_of(p);
  REQUIRE(head->run_len.load() >= uint32_t(kRun));
  int reused = 0;
  {
    Popper popper(kRun);
    for (int i = 0; i < max_rounds && std::chrono::steady_clock::now() < deadline; i++, rounds++) {
      mark_run_linked(head);
      popper.hand(head);
      fw_free(p);
      popper.wait_unlinked(head);
      for (int k = 0; k < kRun; k++) REQUIRE(Anchor::unpack(head[k].anchor.load()).state == kFree);
      mark_run_linked(head);  // in the pool, still linked: the next malloc takes the run so
      popper.hand(head);
      p = fw_malloc(size);
      REQUIRE(p != nullptr);
      popper.wait_unlinked(head);
      popper.take_back();
      if (span_of(p) != head) {  // another run this time: its bits were never set
        head = span_of(p);
        continue;
      }
      reused++;
      CHECK(Anchor::unpack(head->anchor.load()).state == kLarge);
      for (int k = 1; k < kRun; k++) REQUIRE(Anchor::unpack(head[k].anchor.load()).state == kLargeTail);
    }
    fw_free(p);
    CHECK(reused > rounds / 2);
    CHECK(popper.finish() == uint32_t(2 * kRun) * uint32_t(rounds));
  }
  CHECK(pool_is_valid());
  CHECK(fw_check_heap() == 0);
}
