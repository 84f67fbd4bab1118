// Secure mode (this program runs with FREEWAY_SECURE=1): encoded free lists
// and guard pages that turn overflows into faults.
#include <doctest/doctest.h>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/secure.h"
#include "freeway.h"

using namespace fw;

namespace {
// Runs fn in a child; returns the signal that ended it (0 if it exited).
template <class Fn>
int child_signal(Fn fn) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The default action, not doctest's fatal-signal handler (which allocates,
    // and under TSan reports that instead of letting the fault end the child).
    signal(SIGSEGV, SIG_DFL);
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}
}  // namespace

TEST_CASE("secure mode stores free-list links encoded with a random key") {
  void* a = fw_malloc(64);
  void* b = fw_malloc(64);
  REQUIRE(secure_mode());
  CHECK(g_list_key.load() != 0);
  fw_free(a);
  fw_free(b);  // b's link word now points (encoded) at a
  uintptr_t raw = *static_cast<uintptr_t*>(b);
  CHECK(raw != reinterpret_cast<uintptr_t>(a));
  CHECK(block_next(b) == a);
}

TEST_CASE("secure mode: writing past the last block of a small span hits a guard page") {
  int sig = child_signal([] {
    // Allocate 4 KiB blocks until one is the last block of its span.
    for (int i = 0; i < 1000; i++) {
      char* p = static_cast<char*>(fw_malloc(4096));
      Span* s = span_of(p);
      uint32_t last = s->capacity.load() - 1;
      if (block_number(p, s->cls.load()) == last) {
        volatile char* over = p + 4096;
        *over = 1;  // the guard page: must fault
        _exit(0);
      }
    }
    _exit(2);
  });
  CHECK(sig == SIGSEGV);
}

TEST_CASE("secure mode: writing past the end of a large block hits a guard page") {
  int sig = child_signal([] {
    char* p = static_cast<char*>(fw_malloc(300 * 1024));  // usable up to the page end
    size_t usable = fw_usable_size(p);
    p[usable - 1] = 1;  // fine
    volatile char* over = p + usable;
    *over = 1;  // must fault
  });
  CHECK(sig == SIGSEGV);
}

TEST_CASE("secure mode keeps the heap invariants") {
  void* v[1000];
  for (int i = 0; i < 1000; i++) v[i] = fw_malloc(16 + (i * 97) % 20000);
  for (int i = 0; i < 1000; i += 2) fw_free(v[i]);
  CHECK(fw_check_heap() == 0);
  for (int i = 1; i < 1000; i += 2) fw_free(v[i]);
  CHECK(fw_check_heap() == 0);
}
