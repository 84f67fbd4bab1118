// The OS contract's two calls for a thread that works on another thread's
// behalf (platform/os.h): the process-wide barrier and the read that cannot
// fault. Neither has a caller in the core yet (the kept-span hand-shake,
// docs/design.md); these tests pin down what it will rely on.
#include <doctest/doctest.h>

#include "platform/os.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <thread>

using namespace fw;

TEST_CASE("read_word_nofault reads a mapped word and refuses an unmapped one without a fault, errno kept") {
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* word = static_cast<uintptr_t*>(m) + 3;
  *word = 0x5eed1234abcdull;
  uintptr_t v = 0;
  // errno is read at once: doctest's own output may set it.
  errno = 4321;
  bool ok = os::read_word_nofault(word, &v);
  int e = errno;
  REQUIRE(ok);
  CHECK(v == 0x5eed1234abcdull);
  CHECK(e == 4321);
  static thread_local uintptr_t tls_word = 77;
  CHECK(os::read_word_nofault(&tls_word, &v));
  CHECK(v == 77);

  REQUIRE(munmap(m, 4096) == 0);
  v = 5;
  errno = 4321;
  ok = os::read_word_nofault(word, &v);
  e = errno;
  CHECK_FALSE(ok);
  CHECK(v == 5);  // untouched on failure
  CHECK(e == 4321);
  CHECK_FALSE(os::read_word_nofault(nullptr, &v));
  CHECK_FALSE(os::read_word_nofault(reinterpret_cast<void*>(uintptr_t(1) << 62), &v));
}

// The store-buffering litmus test with the barrier on one side only. The other
// thread stores x and then loads y with no fence (as an owner stores its BUSY
// mark and then loads a span's owner); this thread stores y, calls the barrier
// and loads x. Each saw the other's store in at least one of the two, every
// round: the barrier ran a full fence on the other thread between its two
// accesses, or before or after both. Without it, x86 lets both loads miss the
// other's store (the store buffer), which the control rounds count.
namespace {
struct Litmus {
  alignas(64) std::atomic<uint32_t> x{0};
  alignas(64) std::atomic<uint32_t> y{0};
  alignas(64) std::atomic<uint32_t> arrived{0};  // both threads add one a round, then wait for the other
  alignas(64) std::atomic<uint32_t> done{0};     // rounds the other thread finished
  alignas(64) std::atomic<uint32_t> r1{0};       // what the other thread's load saw
};

// Both threads leave round i's rendezvous within about one cache transfer of
// each other, so that their stores and loads overlap.
void rendezvous(std::atomic<uint32_t>& arrived, uint32_t i) {
  arrived.fetch_add(1, std::memory_order_seq_cst);
  while (arrived.load(std::memory_order_acquire) < 2 * i) {
  }
}

// Runs `rounds` rounds; returns how many ended with both loads missing, and
// counts in *refused the barriers that returned false (checked once the other
// thread is joined: a REQUIRE here would leave it running).
uint32_t run_litmus(uint32_t rounds, bool barrier, uint32_t* refused) {
  Litmus t;
  std::thread other([&] {
    for (uint32_t i = 1; i <= rounds; i++) {
      rendezvous(t.arrived, i);
      t.x.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      t.r1.store(t.y.load(std::memory_order_relaxed), std::memory_order_relaxed);
      t.done.store(i, std::memory_order_release);
    }
  });
  uint32_t both_missed = 0;
  for (uint32_t i = 1; i <= rounds; i++) {
    t.x.store(0, std::memory_order_relaxed);
    t.y.store(0, std::memory_order_relaxed);
    rendezvous(t.arrived, i);
    t.y.store(1, std::memory_order_relaxed);
    if (barrier) {
      if (!os::process_barrier()) ++*refused;
    } else {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    const uint32_t r2 = t.x.load(std::memory_order_relaxed);
    while (t.done.load(std::memory_order_acquire) != i) {
    }
    if (t.r1.load(std::memory_order_relaxed) == 0 && r2 == 0) both_missed++;
  }
  other.join();
  return both_missed;
}
}  // namespace

TEST_CASE("process_barrier orders another thread's store before its load, for the caller") {
  if (!os::process_barrier()) {
    MESSAGE("no process barrier here (membarrier refused): a caller has to do without");
    return;
  }
  uint32_t refused = 0;
  const uint32_t control = run_litmus(200000, false, &refused);
  MESSAGE("rounds where both loads missed without the barrier: " << control << " of 200000");
  CHECK(run_litmus(50000, true, &refused) == 0);
  CHECK(refused == 0);
}
