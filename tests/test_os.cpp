// The OS contract's two calls for a thread that works on another thread's
// behalf (platform/os.h): the process-wide barrier and the read that cannot
// fault. Neither has a caller in the core yet (the kept-span hand-shake,
// docs/design.md); these tests pin down what it will rely on.
#include <doctest/doctest.h>

#include "platform/os.h"
#include "tests/litmus.h"

#include <sys/mman.h>

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

namespace {
// Runs `rounds` rounds of tests/litmus.h (barrier: os::process_barrier, or
// none); returns the rounds where both loads missed.
uint32_t run_litmus(uint32_t rounds, bool barrier, uint32_t* refused) {
  fwtest::StoreBuffering t(rounds);
  std::thread other([&t] { t(); });
  const uint32_t both_missed = t.run(barrier ? &os::process_barrier : nullptr, refused);
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
