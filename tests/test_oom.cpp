// Out of memory. Each case runs in a child process under an address-space
// limit (RLIMIT_AS) and reports through its exit status (0 = every check held;
// otherwise the number of the first check that failed, named on stderr).
//
// freeway reserves address space as it needs it: each arena region starts with
// a few MiB at a 1 GiB slot boundary and grows in place (core/arena.h), so the
// limits below are the program's current size (VmSize) plus a headroom, and a
// fresh program runs under a 64 MiB limit. What an allocation can get under
// each headroom is measured and printed (the "address-space headroom" case).
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "freeway.h"
#include "test_util.h"

namespace {

constexpr size_t MiB = size_t(1) << 20;
constexpr size_t GiB = size_t(1) << 30;

size_t vm_size() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmSize:", 7) == 0) kb = std::strtoull(line + 7, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

bool limit_as(size_t bytes) {
  rlimit rl{bytes, bytes};
  return setrlimit(RLIMIT_AS, &rl) == 0;
}

// Runs fn in a child; returns its exit status, or 1000 + signal if it died.
template <class F>
int in_child(F fn) {
  pid_t pid = fwtest::fork_flushed();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 201;
    try {
      rc = fn();
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "oom child: unexpected std::bad_alloc escaped\n");
      rc = 200;
    } catch (...) {
      rc = 202;
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  return fwtest::exit_code(st);
}

#define EXPECT(code, cond)                                                                   \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "oom child: check %d failed: %s (line %d, errno %d)\n", code, #cond, \
                   __LINE__, errno);                                                         \
      return code;                                                                           \
    }                                                                                        \
  } while (0)

// Allocates blocks of n bytes into v (reserved beforehand: no allocation of
// its own here) until malloc fails or v is full; returns errno of the failure.
int exhaust(std::vector<void*>& v, size_t n) {
  int err = 0;
  while (v.size() < v.capacity()) {
    errno = 0;
    void* p = malloc(n);
    if (p == nullptr) {
      err = errno;
      break;
    }
    *static_cast<uint64_t*>(p) = reinterpret_cast<uintptr_t>(p);
    v.push_back(p);
  }
  return err;
}

// Pins the calling thread to CPU c and says whether it runs there now.
bool pin(int c) { return c >= 0 && fwtest::pin_to_cpu(unsigned(c)) && sched_getcpu() == c; }
// Pins the calling thread to the CPU it runs on: in per-CPU mode a thread
// that moved would leave spans in another CPU's cache, which it cannot reclaim.
bool pin_here() { return pin(sched_getcpu()); }

bool intact(const std::vector<void*>& v) {
  for (void* p : v)
    if (*static_cast<uint64_t*>(p) != reinterpret_cast<uintptr_t>(p)) return false;
  return true;
}

}  // namespace

TEST_CASE("at the address-space limit malloc, calloc, realloc, aligned allocation fail with ENOMEM, new throws "
          "bad_alloc, nothrow new returns nullptr, and after freeing everything works again") {
  int rc = in_child([]() -> int {
    size_t base = vm_size();
    EXPECT(2, base > 0);
    // Keep the vectors' own memory out of the fight: reserve it first.
    std::vector<void*> big, small;
    big.reserve(1 << 16);
    small.reserve(1 << 22);
    EXPECT(3, limit_as(base + 512 * MiB));

    // 1 MiB blocks (large objects, one virtual span each) until malloc fails.
    int err = exhaust(big, MiB);
    EXPECT(4, err == ENOMEM);
    EXPECT(5, !big.empty());
    size_t first_round = big.size();

    // Give back 8 virtual spans, then exhaust them with small blocks: each
    // becomes a span of class 64 B, which uses 64 KiB of its 1 MiB (virtual
    // spans, scalloc §3.2), so at least ~8 x 1024 blocks fit.
    for (int i = 0; i < 8; i++) {
      free(big.back());
      big.pop_back();
    }
    err = exhaust(small, 64);
    EXPECT(6, err == ENOMEM);
    EXPECT(7, small.size() >= 7 * 1024);
    size_t small_count = small.size();

    // Everything fails the standard way now.
    errno = 0;
    EXPECT(10, malloc(MiB) == nullptr && errno == ENOMEM);
    errno = 0;
    EXPECT(11, calloc(1, MiB) == nullptr && errno == ENOMEM);
    errno = 0;
    EXPECT(12, calloc(MiB, 4) == nullptr && errno == ENOMEM);
    void* keep = small.back();
    small.pop_back();
    std::memset(keep, 0x3c, 64);
    errno = 0;
    EXPECT(13, realloc(keep, 4 * MiB) == nullptr && errno == ENOMEM);
    for (int i = 0; i < 64; i++) EXPECT(14, static_cast<unsigned char*>(keep)[i] == 0x3c);  // old block intact
    void* al = reinterpret_cast<void*>(1);
    EXPECT(15, posix_memalign(&al, 4096, MiB) == ENOMEM && al == reinterpret_cast<void*>(1));
    errno = 0;
    EXPECT(16, aligned_alloc(64, 2 * MiB) == nullptr && errno == ENOMEM);
    errno = 0;
    EXPECT(17, malloc(size_t(1) << 40) == nullptr && errno == ENOMEM);  // huge: a region of its own
    bool threw = false;
    try {
      void* volatile p = ::operator new(MiB);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    EXPECT(18, threw);
    threw = false;
    try {
      char* volatile p = new char[3 * MiB];
      delete[] p;
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    EXPECT(19, threw);
    threw = false;
    try {  // a small class: operator new's own way into malloc_slow (shim/new.cpp, new_slow)
      void* volatile p = ::operator new(64);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    EXPECT(25, threw);
    EXPECT(20, new (std::nothrow) char[MiB] == nullptr);
    EXPECT(21, ::operator new(MiB, std::align_val_t(4096), std::nothrow) == nullptr);
    EXPECT(22, intact(big) && intact(small));
    // A small block that would move to another small class (realloc's own
    // path for it, core/alloc.cpp realloc_small_move) fails the same way.
    errno = 0;
    EXPECT(23, realloc(keep, 100000) == nullptr && errno == ENOMEM);
    for (int i = 0; i < 64; i++) EXPECT(24, static_cast<unsigned char*>(keep)[i] == 0x3c);

    // Free everything: allocation works again, and the address space given
    // back is all reusable (a second round gets as many blocks).
    free(keep);
    for (void* p : small) free(p);
    for (void* p : big) free(p);
    small.clear();
    big.clear();  // keeps its capacity
    void* p = malloc(MiB);
    EXPECT(30, p != nullptr);
    std::memset(p, 1, MiB);
    void* q = calloc(1, MiB);
    EXPECT(31, q != nullptr && static_cast<char*>(q)[MiB - 1] == 0);
    void* r = realloc(p, MiB / 2);  // shrinks (moves to a small span or stays)
    EXPECT(32, r != nullptr && static_cast<char*>(r)[MiB / 2 - 1] == 1);
    char* n = new (std::nothrow) char[MiB];
    EXPECT(33, n != nullptr);
    delete[] n;
    free(q);
    free(r);
    err = exhaust(big, MiB);
    EXPECT(34, err == ENOMEM);
    EXPECT(35, big.size() + 8 >= first_round);
    size_t second_round = big.size();
    for (void* b : big) free(b);
    EXPECT(36, fw_check_heap() == 0);
    std::printf("oom: limit VmSize + 512 MiB: %zu MiB in 1 MiB blocks before ENOMEM (again %zu MiB after freeing "
                "all), 8 freed virtual spans refilled with %zu blocks of 64 B; every allocation function failed the "
                "standard way\n",
                first_round, second_round, small_count);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("at the address-space limit, after every 1 MiB block is freed, 2 MiB and 64 MiB blocks can be "
          "allocated (freed virtual spans must be reusable for larger runs)") {
  int rc = in_child([]() -> int {
    std::vector<void*> big;
    big.reserve(1 << 16);
    EXPECT(2, limit_as(vm_size() + 512 * MiB));
    EXPECT(3, exhaust(big, MiB) == ENOMEM);
    size_t n = big.size();
    for (void* b : big) free(b);
    big.clear();
    // About n MiB of address space is free again, all of it in one-span runs.
    void* two = malloc(2 * MiB);
    void* sixty_four = malloc(64 * MiB);
    std::printf("oom: %zu MiB freed in 1 MiB blocks at the limit; then malloc(2 MiB) %s, malloc(64 MiB) %s\n", n,
                two ? "succeeds" : "fails (ENOMEM)", sixty_four ? "succeeds" : "fails (ENOMEM)");
    EXPECT(4, n >= 128);
    EXPECT(5, two != nullptr);
    EXPECT(6, sixty_four != nullptr);
    free(two);
    free(sixty_four);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("at the address-space limit, small blocks and one-span large blocks come out of a freed 30 MiB block "
          "(a free run longer than 64 spans serves single spans)") {
  // 6 MiB of 1 KiB blocks take 24 spans (a vspan of 256 KiB each), 20 MiB
  // of 200 KiB blocks 100: both fit in the 120 vspans the freed block leaves,
  // and neither fits in the 2 MiB of headroom.
  for (size_t n : {size_t(1024), size_t(200) << 10}) {
    int rc = in_child([n]() -> int {
      std::vector<void*> v;
      v.reserve((n == 1024 ? 6 * MiB : 20 * MiB) / n);
      // A large block of 120 vspans: freed, it is one run in the pool's stacks
      // for runs longer than 64.
      char* big = static_cast<char*>(malloc(30 * MiB));
      EXPECT(2, big != nullptr);
      std::memset(big, 1, 4096);
      free(big);
      EXPECT(3, limit_as(vm_size() + 2 * MiB));
      int err = exhaust(v, n);
      std::printf("oom: blocks of %zu bytes under RLIMIT_AS = VmSize + 2 MiB beside a freed 30 MiB block: "
                  "%zu KiB, %s\n",
                  n, v.size() * n >> 10, err == 0 ? "all of them" : std::strerror(err));
      EXPECT(4, err == 0);
      EXPECT(5, intact(v));
      for (void* p : v) free(p);
      return 0;
    });
    CHECK(rc == 0);
  }
}

TEST_CASE(
    "at the address-space limit, the spans a thread emptied serve a large block, and the hot spans of "
    "classes it no longer uses serve new classes") {
  // Without reclaiming them (lab_reclaim, core/lab.h) the first and last
  // children failed with ENOMEM: the thread's LAB (or its CPU's) kept its
  // emptied spans and its hot spans, address space the pool could not give
  // out again. The second fails so in secure mode without the reclaim of the
  // LAB its slow path holds, whose quarantine keeps the spans in use
  // (tests/reliability.cmake runs this binary again with FREEWAY_SECURE=1).
  // Each child stays on one CPU, whose cache is the one it can reclaim.
  // 12 MiB of 1 KiB blocks, all freed by their thread: 48 spans its LAB (or
  // its CPU's) keeps or floats, none in use. They are freed in 64 passes, each
  // taking every 64th block, so each pass frees a few blocks of every span: in
  // secure mode the quarantine's blocks (the last ones freed,
  // core/secure_heap.h) then keep most spans in use until a failure flushes it.
  // Then 2 MiB of headroom. 0, or the check that failed.
  auto emptied_spans = []() -> int {
    EXPECT(1, pin_here());
    std::vector<void*> v;
    v.reserve(12 * 1024);
    EXPECT(2, exhaust(v, 1024) == 0);
    for (size_t k = 0; k < 64; k++)
      for (size_t i = k; i < v.size(); i += 64) free(v[i]);
    EXPECT(3, limit_as(vm_size() + 2 * MiB));
    return 0;
  };
  // 12 MiB of large blocks.
  int rc = in_child([&emptied_spans]() -> int {
    if (int failed = emptied_spans()) return failed;
    void* big = malloc(4 * MiB);
    EXPECT(4, big != nullptr);
    void* bigger = malloc(8 * MiB);
    EXPECT(5, bigger != nullptr);
    std::memset(big, 7, 4 * MiB);
    std::memset(bigger, 8, 8 * MiB);
    free(big);
    free(bigger);
    return 0;
  });
  CHECK(rc == 0);
  // 6 MiB in blocks of 128 KiB, the largest small size. Secure mode makes each
  // a large block (a small one has no room for its tail), allocated on the
  // slow path that holds the thread's LAB (secure_block), so a failure there
  // must reclaim that LAB: the one its thread slot no longer names.
  rc = in_child([&emptied_spans]() -> int {
    if (int failed = emptied_spans()) return failed;
    constexpr size_t kLargestSmall = 128 * 1024;  // kSmallMax, core/config.h
    std::vector<void*> got;
    got.reserve(48);
    for (size_t i = 0; i < 48; i++) {
      void* p = malloc(kLargestSmall);
      if (p == nullptr) std::fprintf(stderr, "oom child: block %zu of 128 KiB failed\n", i);
      EXPECT(4, p != nullptr);
      std::memset(p, 3, kLargestSmall);
      got.push_back(p);
    }
    for (void* p : got) free(p);
    return 0;
  });
  CHECK(rc == 0);
  rc = in_child([]() -> int {
    EXPECT(1, pin_here());
    // One block of each even class up to 64 KiB, freed: a hot span each (a
    // vspan of 256 KiB), every block free. Then one block of each odd class
    // under 1 MiB of headroom: only those hot spans can hold them.
    std::vector<size_t> sizes;
    for (size_t n = 16; n <= 128; n += 16) sizes.push_back(n);
    for (size_t b = 128; b < 64 * 1024; b *= 2)
      for (size_t q = 1; q <= 4; q++) sizes.push_back(b + q * b / 4);
    for (size_t i = 0; i < sizes.size(); i += 2) {
      void* p = malloc(sizes[i]);
      EXPECT(2, p != nullptr);
      std::memset(p, 1, sizes[i]);
      free(p);
    }
    std::vector<void*> kept;
    kept.reserve(sizes.size());
    EXPECT(3, limit_as(vm_size() + 1 * MiB));
    for (size_t i = 1; i < sizes.size(); i += 2) {
      void* p = malloc(sizes[i]);
      if (p == nullptr) std::fprintf(stderr, "oom child: malloc(%zu) failed\n", sizes[i]);
      EXPECT(4, p != nullptr);
      std::memset(p, 2, sizes[i]);
      kept.push_back(p);
    }
    for (void* p : kept) free(p);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("with RLIMIT_AS lowered just above current use after start, threads allocate until ENOMEM: once they "
          "exit, allocation works again, in the main thread and in new threads") {
  // After glibc's tst-malloc-thread-fail: the limit comes after start, so the
  // allocator's first reservations must be small enough to leave room for
  // thread stacks, and running out inside threads must be survivable. While a
  // thread lives, the spans its cache holds are its own (Hoard's ownership),
  // so what it freed is certain to serve others only once it exits.
  int rc = in_child([]() -> int {
    constexpr int kThreads = 8;
    struct Work {
      std::vector<void*> blocks;
      int err = 0;
      size_t got = 0;
    };
    static Work work[kThreads];
    for (Work& w : work) w.blocks.reserve(1 << 18);  // before the limit: the vectors never grow
    static pthread_barrier_t started;  // all threads exist before any allocates
    pthread_barrier_init(&started, nullptr, kThreads);
    EXPECT(2, limit_as(vm_size() + 128 * MiB));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    auto run = [](void* arg) -> void* {
      Work& w = *static_cast<Work*>(arg);
      uint64_t x = reinterpret_cast<uintptr_t>(arg) | 1;
      pthread_barrier_wait(&started);
      // Random sizes from 16 B to 256 KiB until the first failure.
      while (w.blocks.size() < w.blocks.capacity()) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 16 + size_t(x % 4 == 0 ? x % (256 * 1024) : x % 2048);
        errno = 0;
        void* p = malloc(n);
        if (p == nullptr) {
          w.err = errno;
          break;
        }
        std::memset(p, 0x5a, n < 64 ? n : 64);
        w.blocks.push_back(p);
      }
      w.got = w.blocks.size();
      for (void* p : w.blocks) free(p);
      w.blocks.clear();
      return nullptr;
    };
    // Allocation of every small size and a few large ones, checked.
    auto allocates = []() -> bool {
      for (size_t n = 16; n <= 512 * 1024; n += n < 4096 ? 16 : 4096) {
        void* p = malloc(n);
        if (p == nullptr) return false;
        std::memset(p, 1, n < 256 ? n : 256);
        free(p);
      }
      return true;
    };
    size_t totals[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
      pthread_t t[kThreads];
      for (int i = 0; i < kThreads; i++) EXPECT(3, pthread_create(&t[i], &attr, run, &work[i]) == 0);
      for (int i = 0; i < kThreads; i++) pthread_join(t[i], nullptr);
      for (Work& w : work) {
        EXPECT(4, w.err == ENOMEM);
        totals[round] += w.got;
        w.err = 0;
      }
      EXPECT(5, totals[round] > 100);  // a few MiB at least (how much depends on how the threads interleave)
      EXPECT(6, allocates());
    }
    EXPECT(8, fw_check_heap() == 0);
    std::printf("oom: RLIMIT_AS = VmSize + 128 MiB after start: %d threads got %zu blocks before ENOMEM, then %zu in "
                "a second round; allocation worked after each\n",
                kThreads, totals[0], totals[1]);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("at the address-space limit, a thread that moves to a CPU it has not run on yet still allocates from "
          "the memory the heap has free") {
  // In per-CPU mode (per_cpu.test_oom) the first call on a CPU finds its slot
  // empty; the LAB it then took was made with a new mapping, which the limit
  // refused, so malloc failed with ENOMEM beside 8 MiB free in the heap
  // (core/lab.h, lab_make_idle). Per-thread mode gives the same answers.
  int rc = in_child([]() -> int {
    cpu_set_t allowed;
    EXPECT(2, sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    int cpus[2], found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
      if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
    if (found < 2) {
      std::printf("oom: one CPU only: the move to another CPU is not tried\n");
      return 0;
    }
    EXPECT(3, pin(cpus[0]));
    std::vector<void*> v;
    v.reserve(1 << 16);
    void* big = malloc(8 * MiB);  // freed below: spans for the small blocks to come
    EXPECT(4, big != nullptr);
    std::memset(big, 1, 8 * MiB);
    free(big);
    EXPECT(5, limit_as(vm_size()));  // no new mapping from here on
    EXPECT(6, pin(cpus[1]));
    for (int i = 0; i < 1000; i++) {
      errno = 0;
      void* p = malloc(64 + size_t(i % 8) * 64);
      EXPECT(7, p != nullptr);
      std::memset(p, 2, 64);
      v.push_back(p);
    }
    EXPECT(8, pin(cpus[0]));
    for (void* p : v) free(p);
    EXPECT(9, fw_check_heap() == 0);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("address-space headroom: what freeway can allocate under RLIMIT_AS = VmSize + headroom (figures)") {
  // Printed, not asserted: how the 1 GiB region scheme meets an address-space
  // limit. For each headroom: the MiB obtained in 1 MiB blocks until ENOMEM,
  // and whether one 300 MiB block (a huge object) could be had.
  const size_t headrooms[] = {256 * MiB, 512 * MiB, GiB, GiB + GiB / 2, 2 * GiB, 2 * GiB + GiB / 2, 3 * GiB,
                              4 * GiB};
  std::printf("oom: headroom (MiB) -> MiB obtained in 1 MiB blocks | one 300 MiB block\n");
  for (size_t h : headrooms) {
    int got = in_child([h]() -> int {
      std::vector<void*> v;
      v.reserve(1 << 14);
      if (!limit_as(vm_size() + h)) return 255;
      exhaust(v, MiB);
      return int(v.size() / 64);  // in units of 64 MiB (exit status is 8 bits)
    });
    int huge = in_child([h]() -> int {
      if (!limit_as(vm_size() + h)) return 255;
      void* p = malloc(300 * MiB);
      return p != nullptr ? 0 : 1;
    });
    std::printf("oom:   %5zu -> ~%5d | %s\n", h / MiB, got * 64, huge == 0 ? "yes" : "no (ENOMEM)");
  }
  std::fflush(stdout);
}

TEST_CASE("a fresh process started under a 64 MiB address-space limit can allocate 24 MiB and blocks of every size") {
  // A program whose first malloc happens under `ulimit -v 65536`: the program
  // (this test binary with libstdc++ and doctest, about 12 MiB) plus what
  // freeway reserves must leave room for 24 MiB of 1 MiB blocks, then for a
  // block of every small size class, as the C library does.
  if (getenv("FW_OOM_FRESH_CHILD") != nullptr) return;  // the child runs the program below instead
  pid_t pid = fwtest::fork_flushed();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    limit_as(64 * MiB);
    setenv("FW_OOM_FRESH_CHILD", "1", 1);
    // A new image of this program: its first malloc happens under the limit.
    execl("/proc/self/exe", "test_oom", "--fw-oom-fresh", static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  int status = fwtest::exit_code(st);
  std::printf("oom: fresh process under RLIMIT_AS = 64 MiB: %s (status %d)\n",
              status == 0 ? "allocated 24 MiB, then every size" : "could not allocate", status);
  CHECK(status == 0);
}

// The fresh child: runs before doctest sees its command line (a constructor),
// so that it needs nothing but malloc to report.
namespace {
__attribute__((constructor(200))) void fresh_child() {
  if (getenv("FW_OOM_FRESH_CHILD") == nullptr) return;
  FILE* f = std::fopen("/proc/self/cmdline", "r");
  char buf[256] = {};
  size_t n = f ? std::fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) std::fclose(f);
  bool me = false;
  for (size_t i = 0; i < n; i += std::strlen(buf + i) + 1)
    if (std::strcmp(buf + i, "--fw-oom-fresh") == 0) me = true;
  if (!me) return;
  std::vector<void*> v;
  for (int i = 0; i < 24; i++) {
    void* p = malloc(MiB);
    if (p == nullptr) {
      const char m[] = "oom fresh child: malloc(1 MiB) returned NULL\n";
      fwtest::write_fd(2, m, sizeof m - 1);
      _exit(3);
    }
    std::memset(p, 1, 4096);
    v.push_back(p);
  }
  for (void* p : v) free(p);
  v.clear();
  for (int i = 0; i < 100000; i++) {
    void* p = malloc(16 + i % 500);
    if (p == nullptr) _exit(4);
    free(p);
  }
  // One block of every size up to 128 KiB in 1 KiB steps: each size class
  // takes a span (a virtual span of address space) of its own.
  for (size_t n = 16; n <= 128 * 1024; n += 1024) {
    void* p = malloc(n);
    if (p == nullptr) _exit(5);
    std::memset(p, 2, n);
    v.push_back(p);
  }
  for (void* p : v) free(p);
  _exit(0);
}
}  // namespace
