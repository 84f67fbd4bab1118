// The span-pool's last-run slots (span_pool.h): the run of the last large
// block given back on a CPU waits there for that CPU's next large take of its
// length. Run with FREEWAY_DECAY_MS=100000, so that no purge pass (which
// sweeps the slots into the stacks, every quarter of the delay) runs during a
// case once prime_purge has run the first.
#include <doctest/doctest.h>

#include <thread>

#include "core/arena.h"
#include "core/span_pool.h"
#include "test_util.h"

using namespace fw;

namespace {

// A run of n vspans from the pool with `bytes` committed, as a large block's would be.
Span* run_with_pages(uint32_t n, uint64_t bytes) {
  Span* r = pool_take_run(n, bytes);
  REQUIRE(r != nullptr);
  REQUIRE(r->run_len.load() == n);
  REQUIRE(span_commit(r, bytes));
  return r;
}

// A process's first give with pages runs a purge pass (none ran yet); so
// does the first after each quarter of the delay. Each case gives one first.
void prime_purge() {
  Span* r = run_with_pages(1, kVspanSize);
  pool_give(r, 1);
}

}  // namespace

TEST_CASE("a large block's run given back with its pages waits in its CPU's last-run slot, and the next take of "
          "its length there takes it") {
  const int cpu = fwtest::pin_to_first_cpu();  // each CPU has its own slot
  REQUIRE(cpu >= 0);
  prime_purge();
  Span* r = run_with_pages(4, 4 * kVspanSize);
  const uint64_t pooled = pool_span_count(), retained = pool_retained_bytes(), committed = committed_bytes();
  pool_give_large(r, 4);
  CHECK(pool_span_count() == pooled);  // a slot's run is counted when swept into the stacks
  CHECK(pool_retained_bytes() == retained);
  CHECK(committed_bytes() == committed);  // pages kept
  CHECK(pool_is_valid());
  // A take of another length leaves it in the slot.
  Span* other = pool_take_run(5, 0);
  REQUIRE(other != nullptr);
  CHECK(other != r);
  Span* again = pool_take_run(4, 4 * kVspanSize);
  CHECK(again == r);
  CHECK(again->committed.load() == 4 * kVspanSize);
  pool_give(other, 5);
  pool_give(again, 4);
  CHECK(pool_is_valid());
}

TEST_CASE("a newer large run displaces the slot's run into the stacks, and a run past kLastRunMax or without pages "
          "goes there at once") {
  const int cpu = fwtest::pin_to_first_cpu();  // each CPU has its own slot
  REQUIRE(cpu >= 0);
  prime_purge();
  pool_collect();  // the slots empty
  Span* a = run_with_pages(4, 4 * kVspanSize);
  Span* b = run_with_pages(8, 8 * kVspanSize);
  Span* big = run_with_pages(24, 24 * kVspanSize);  // 6 MiB of pages
  Span* clean = pool_take_run(6, 0);
  REQUIRE(clean != nullptr);
  const uint64_t pooled = pool_span_count();
  pool_give_large(a, 4);
  CHECK(pool_span_count() == pooled);
  pool_give_large(b, 8);
  CHECK(pool_span_count() == pooled + 4);  // a, displaced
  pool_give_large(big, 24);
  CHECK(pool_span_count() == pooled + 4 + 24);
  pool_give_large(clean, 6);
  CHECK(pool_span_count() == pooled + 4 + 24 + 6);
  CHECK(pool_is_valid());
  Span* t = pool_take_run(8, 8 * kVspanSize);
  CHECK(t == b);  // still in the slot
  pool_give(t, 8);
  CHECK(pool_is_valid());
}

TEST_CASE("fw_collect's pool pass sweeps the last-run slots: their pages go back") {
  const int cpu = fwtest::pin_to_first_cpu();  // each CPU has its own slot
  REQUIRE(cpu >= 0);
  prime_purge();
  Span* r = run_with_pages(4, 4 * kVspanSize);
  pool_give_large(r, 4);
  const uint64_t pooled = pool_span_count(), committed = committed_bytes();
  pool_collect();
  CHECK(r->committed.load() == 0);
  CHECK(committed_bytes() <= committed - 4 * kVspanSize);
  CHECK(pool_span_count() >= pooled + 4);  // in the stacks now
  CHECK(pool_is_valid());
}

TEST_CASE("threads that run on one CPU share its last-run slot: the run one gave back, the next one takes") {
  // What a per-thread cache could not do: a thread that frees a block and
  // then waits keeps nothing for itself (docs/benchmarks.md, Stop 46).
  const int cpu = fwtest::pin_to_first_cpu();  // each CPU has its own slot
  REQUIRE(cpu >= 0);
  prime_purge();
  Span* given = nullptr;
  Span* taken = nullptr;
  std::thread([&] {
    fwtest::pin_to_cpu(unsigned(cpu));
    given = run_with_pages(4, 4 * kVspanSize);
    pool_give_large(given, 4);
  }).join();
  std::thread([&] {
    fwtest::pin_to_cpu(unsigned(cpu));
    taken = pool_take_run(4, 4 * kVspanSize);
  }).join();
  CHECK(taken == given);
  if (taken != nullptr) pool_give(taken, 4);
  CHECK(pool_is_valid());
}
