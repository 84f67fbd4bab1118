// The kept pool (lab.h): past its own kKeptBytes a per-thread LAB keeps the
// spans it fills from a pool shared by the process, the allowances of the
// per-thread caches the default mode allows that no bound thread uses.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/lab.h"
#include "core/percpu.h"
#include "kept_util.h"

using namespace fw;
using fwtest::fill_spans;
using fwtest::kKeptTestSize;
using fwtest::state_of;

namespace {

// The per-thread caches the default mode allows (percpu.h).
uint64_t caches_allowed() { return uint64_t(percpu_switch_threads()) + 1; }

// Threads bound to LABs that wait until the object goes: with the calling
// thread's, n threads hold LABs (the test program's main thread holds none).
struct BoundThreads {
  std::atomic<bool> done{false};
  std::atomic<unsigned> ready{0};
  std::vector<std::thread> threads;
  explicit BoundThreads(unsigned n) {
    for (unsigned i = 0; i < n; i++)
      threads.emplace_back([this] {
        fw_free(fw_malloc(8));
        ready.fetch_add(1);
        while (!done.load()) std::this_thread::yield();
      });
    while (ready.load() < n) std::this_thread::yield();
  }
  ~BoundThreads() {
    done.store(true);
    for (std::thread& t : threads) t.join();
  }
};

}  // namespace

TEST_CASE("past its own kKeptBytes a lone thread keeps the spans it fills from the kept pool, frees into them stay "
          "local, and the pool gets them back when they go") {
  fw_collect();
  REQUIRE(kept_pool_taken() == 0);
  std::thread([] {
    const unsigned c = class_of(kKeptTestSize);
    const uint64_t span = class_info(c).span_bytes;
    REQUIRE(span * kKeptSpans == kKeptBytes);
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(kKeptSpans + 8, &spans);
    REQUIRE(spans.size() == kKeptSpans + 8);
    CHECK(kept_pool_limit() == (caches_allowed() - 1) * kKeptBytes);
    Lab* lab = lab_current();
    CHECK(lab->kept_n[c] == kKeptSpans + 7);  // every span it filled but the hot one
    CHECK(lab->kept_bytes == kKeptBytes + 7 * span);
    CHECK(lab->kept_pooled == 7 * span);
    CHECK(kept_pool_taken() == 7 * span);
    for (Span* s : spans) CHECK(state_of(s) == kHot);  // none floated
    // A free into a span kept from the pool goes onto the span's own list.
    Span* pooled = spans[kKeptSpans + 6];
    for (void*& p : v)
      if (span_of(p) == pooled) {
        fw_free(p);
        p = nullptr;
        break;
      }
    CHECK(own_count(pooled) == 1);
    CHECK(fw_check_heap() == 0);
    for (void* p : v) fw_free(p);
    fw_collect();  // gives back its kept spans
    CHECK(lab->kept_n[c] == 0);
    CHECK(lab->kept_pooled == 0);
    CHECK(kept_pool_taken() == 0);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE("the kept pool holds the allowances of the caches no bound thread uses: past them the exhausted hot span "
          "floats, and with as many threads bound as caches it holds nothing") {
  fw_collect();
  const uint64_t caches = caches_allowed();
  BoundThreads others(unsigned(caches - 2));  // with the thread below, caches - 1 hold LABs
  std::thread([caches] {
    fw_free(fw_malloc(kKeptTestSize));
    REQUIRE(lab_threads_live() == caches - 1);
    REQUIRE(kept_pool_limit() == kKeptBytes);  // one cache's allowance
    const unsigned c = class_of(kKeptTestSize);
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(2 * kKeptSpans + 4, &spans);
    Lab* lab = lab_current();
    CHECK(lab->kept_n[c] == 2 * kKeptSpans);  // its own allowance and the pool's
    CHECK(lab->kept_pooled == kKeptBytes);
    CHECK(kept_pool_taken() == kKeptBytes);
    unsigned hot = 0, full = 0;
    for (Span* s : spans) {
      hot += state_of(s) == kHot;
      full += state_of(s) == kFull;
    }
    CHECK(hot == 2 * kKeptSpans + 1);  // the kept ones and the hot one
    CHECK(full == spans.size() - hot);
    CHECK(full >= 2);
    // One more thread bound: no cache's allowance is left unused.
    std::thread([] {
      fw_free(fw_malloc(8));
      CHECK(kept_pool_limit() == 0);
    }).join();
    CHECK(fw_check_heap() == 0);
    for (void* p : v) fw_free(p);
    fw_collect();
    CHECK(kept_pool_taken() == 0);
  }).join();
}
