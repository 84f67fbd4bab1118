// The spare run (spare.h): a per-thread LAB keeps the run of the last large
// block its thread freed, and its thread's next large malloc of the same run
// length takes it back without the span-pool. Run with FREEWAY_PERCPU=0 (only
// per-thread LABs keep runs) and FREEWAY_DECAY_MS=300 (the expiry case).
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/alloc.h"
#include "core/arena.h"
#include "core/lab.h"
#include "core/options.h"
#include "core/large.h"
#include "core/span_pool.h"
#include "core/spare.h"
#include "freeway.h"

using namespace fw;

namespace {

constexpr size_t kMiB = size_t(1) << 20;

uint32_t state_of(const Span* s) { return Anchor::unpack(s->anchor.load()).state; }
Span* spare() { return lab_current()->spare; }

// Runs f on a new thread and joins it. The thread's LAB may be one an earlier
// case's thread parked, spare run and kept spans included: fw_collect gives
// them back first.
template <class F>
void on_thread(F f) {
  std::thread([&f] {
    fw_collect();
    REQUIRE(spare() == nullptr);
    f();
  }).join();
}

// Makes the calling thread take spans from the shared stacks: blocks of a
// size whose spans hold a few each, more than a fresh thread's LAB has.
std::vector<void*> take_spans() {
  std::vector<void*> v;
  v.reserve(64);
  const size_t size = 96 * 1024;
  for (uint32_t i = 0; i < 3 * class_info(class_of(size)).capacity + 1; i++) v.push_back(fw_malloc(size));
  return v;
}

void free_all(const std::vector<void*>& v) {
  for (void* p : v) fw_free(p);
}

}  // namespace

TEST_CASE("a freed large block's run becomes its thread's spare, and the next large malloc of that run length "
          "takes it without the span-pool") {
  on_thread([] {
    char* p = static_cast<char*>(fw_malloc(kMiB));
    REQUIRE(p != nullptr);
    Span* head = span_of(p);
    REQUIRE(head->run_len.load() == 4u);
    std::memset(p, 0x5a, kMiB);
    const uint64_t pooled = pool_span_count();
    const uint32_t kept = lab_current()->kept_bytes;
    fw_free(p);
    CHECK(spare() == head);
    CHECK(state_of(head) == kFree);
    for (uint32_t i = 1; i < 4; i++) CHECK(state_of(span_at(span_index(head) + i)) == kFree);
    CHECK(pool_span_count() == pooled);  // not in the pool
    CHECK(lab_current()->spare_bytes == head->committed.load());
    CHECK(lab_current()->kept_bytes == kept + lab_current()->spare_bytes);  // counted in the kept budget
    CHECK(fw_check_heap() == 0);
    // A smaller block of the same run length (4 vspans) takes it, pages and all.
    const uint64_t committed = committed_bytes();
    char* q = static_cast<char*>(fw_malloc(kMiB - 10000));
    CHECK(q == p);
    CHECK(spare() == nullptr);
    CHECK(lab_current()->kept_bytes == kept);
    CHECK(committed_bytes() == committed);  // no page committed again
    CHECK(state_of(head) == kLarge);
    CHECK(fw_usable_size(q) >= kMiB - 10000);
    fw_free(q);
    CHECK(fw_check_heap() == 0);
  });
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("calloc of a spare run's length reads zeros though the run held data") {
  on_thread([] {
    char* p = static_cast<char*>(fw_malloc(2 * kMiB));
    REQUIRE(p != nullptr);
    std::memset(p, 0xab, 2 * kMiB);
    fw_free(p);
    REQUIRE(spare() == span_of(p));
    char* z = static_cast<char*>(fw_calloc(1, 2 * kMiB));
    REQUIRE(z == p);
    size_t nonzero = 0;
    for (size_t i = 0; i < 2 * kMiB; i++) nonzero += z[i] != 0;
    CHECK(nonzero == 0);
    fw_free(z);
  });
}

TEST_CASE("a large malloc of another run length leaves the spare and a newer free takes its place, the older run "
          "going to the span-pool") {
  on_thread([] {
    void* a = fw_malloc(kMiB);
    void* b = fw_malloc(2 * kMiB);
    REQUIRE((a != nullptr && b != nullptr));
    Span* ha = span_of(a);
    Span* hb = span_of(b);
    fw_free(a);
    REQUIRE(spare() == ha);
    void* c = fw_malloc(3 * kMiB);  // 12 vspans: another run class
    REQUIRE(c != nullptr);
    CHECK(span_of(c) != ha);
    CHECK(spare() == ha);
    const uint64_t pooled = pool_span_count();
    fw_free(b);
    CHECK(spare() == hb);
    CHECK(pool_span_count() == pooled + 4);  // a's run
    CHECK(fw_check_heap() == 0);
    fw_free(c);  // 3 MiB: within kSpareMaxBytes, the spare now
    CHECK(spare() == span_of(c));
    CHECK(fw_check_heap() == 0);
  });
}

TEST_CASE("a run with more than kSpareMaxBytes committed goes to the span-pool, and a block whose run is the spare "
          "is no block") {
  on_thread([] {
    const size_t big = kSpareMaxBytes + kMiB;
    void* p = fw_malloc(big);
    REQUIRE(p != nullptr);
    std::memset(p, 1, big);
    Span* head = span_of(p);
    const uint64_t pooled = pool_span_count();
    fw_free(p);
    CHECK(spare() == nullptr);
    CHECK(pool_span_count() == pooled + head->run_len.load());
    // A block whose run is the spare: its head is FREE, which large_free_run
    // reports as a double free (test_misuse runs that through a process).
    void* q = fw_malloc(kMiB);
    fw_free(q);
    REQUIRE(spare() == span_of(q));
    CHECK(large_usable_size(q, span_of(q)) == 0);
    CHECK(fw_block_start(static_cast<char*>(q) + kVspanSize + 8) == nullptr);  // no block in a spare's tail
  });
}

TEST_CASE("the spare goes back to the span-pool at fw_collect, and with its thread's parked LAB") {
  Span* head = nullptr;
  on_thread([&head] {
    void* p = fw_malloc(kMiB);
    fw_free(p);
    head = spare();
    REQUIRE(head != nullptr);
    const uint64_t pooled = pool_span_count();
    fw_collect();
    CHECK(spare() == nullptr);
    CHECK(pool_span_count() == pooled + 4);
    CHECK(lab_current()->kept_bytes == 0);
    p = fw_malloc(kMiB);
    fw_free(p);
    REQUIRE(spare() == span_of(p));
  });
  // The thread exited with a spare: its LAB is parked with it (or released,
  // with every parking slot taken); fw_collect releases parked LABs.
  fw_collect();
  for (Lab* lab = lab_first(); lab != nullptr; lab = lab->all_next.load()) {
    const bool none = lab->spare == nullptr || lab == lab_current();
    CHECK(none);
  }
  CHECK(pool_is_valid());
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("a spare no large malloc takes goes back to the span-pool at its thread's first span acquisition "
          "FREEWAY_DECAY_MS after one that found it") {
  on_thread([] {
    void* p = fw_malloc(kMiB);
    fw_free(p);
    REQUIRE(spare() != nullptr);
    std::vector<void*> first = take_spans();  // stamps it
    CHECK(spare() != nullptr);
    // FREEWAY_DECAY_MS (300 under ctest) and a margin.
    std::this_thread::sleep_for(std::chrono::milliseconds(option(Option::decay_ms) + 100));
    std::vector<void*> second = take_spans();
    CHECK(spare() == nullptr);
    CHECK(fw_check_heap() == 0);
    free_all(first);
    free_all(second);
  });
}
