// tests/litmus.h: the store-buffering litmus test of os::process_barrier,
// header-only and portable (tests/test_os.cpp and the Windows suite run it,
// each starting the other thread its own way).
//
// The barrier is on one side only. The other thread stores x and then loads y
// with no fence (as an owner stores its BUSY mark and then loads a span's
// owner); this thread stores y, calls the barrier and loads x. Each saw the
// other's store in at least one of the two, every round: the barrier ran a
// full fence on the other thread between its two accesses, or before or after
// both. Without it, x86 lets both loads miss the other's store (the store
// buffer), which control rounds (no barrier) count.
#pragma once
#include <atomic>
#include <cstdint>

namespace fwtest {

struct StoreBuffering {
  alignas(64) std::atomic<uint32_t> x{0};
  alignas(64) std::atomic<uint32_t> y{0};
  alignas(64) std::atomic<uint32_t> arrived{0};  // both threads add one a round, then wait for the other
  alignas(64) std::atomic<uint32_t> done{0};     // rounds the other thread finished
  alignas(64) std::atomic<uint32_t> r1{0};       // what the other thread's load saw
  uint32_t rounds = 0;

  explicit StoreBuffering(uint32_t n) : rounds(n) {}

  // Both threads leave round i's rendezvous within about one cache transfer of
  // each other, so that their stores and loads overlap.
  void rendezvous(uint32_t i) {
    arrived.fetch_add(1, std::memory_order_seq_cst);
    while (arrived.load(std::memory_order_acquire) < 2 * i) {
    }
  }

  // The other thread's side: every round, x then y with no fence.
  void operator()() {
    for (uint32_t i = 1; i <= rounds; i++) {
      rendezvous(i);
      x.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      r1.store(y.load(std::memory_order_relaxed), std::memory_order_relaxed);
      done.store(i, std::memory_order_release);
    }
  }

  // This thread's side, with the other thread started on operator(): y, then
  // barrier() (nullptr: none, a control run), then x. Returns the rounds where
  // both loads missed, and counts in *refused the barriers that returned false
  // (for the caller to check once the other thread is joined).
  uint32_t run(bool (*barrier)(), uint32_t* refused) {
    uint32_t both_missed = 0;
    for (uint32_t i = 1; i <= rounds; i++) {
      x.store(0, std::memory_order_relaxed);
      y.store(0, std::memory_order_relaxed);
      rendezvous(i);
      y.store(1, std::memory_order_relaxed);
      if (barrier != nullptr) {
        if (!barrier()) ++*refused;
      } else {
        std::atomic_signal_fence(std::memory_order_seq_cst);
      }
      const uint32_t r2 = x.load(std::memory_order_relaxed);
      while (done.load(std::memory_order_acquire) != i) {
      }
      if (r1.load(std::memory_order_relaxed) == 0 && r2 == 0) both_missed++;
    }
    return both_missed;
  }
};

}  // namespace fwtest
