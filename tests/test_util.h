// Helpers shared by freeway's tests: header-only, namespace fwtest, and no
// dependency on freeway's internals (only the C library, POSIX and the
// dynamic loader). The helpers marked "no allocation" never call malloc, so
// signal handlers and watchdog threads may use them while the heap is busy.
#pragma once

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <link.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "rng.h"  // fwtest::Rng

namespace fwtest {

// ---------------------------------------------------------------------------
// Randomness, time, output.

// CLOCK_MONOTONIC in nanoseconds (no allocation).
inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Sleeps ns nanoseconds in all, however many signals interrupt it (no allocation).
inline void sleep_ns(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Minor page faults of this process so far (no allocation).
inline long minor_faults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// One write(2), its result ignored (no allocation).
inline void write_fd(int fd, const void* buf, size_t n) {
  ssize_t r = write(fd, buf, n);
  (void)r;
}

// A line formatted on the stack and written with one write(2) (no allocation).
struct Msg {
  char buf[512];
  size_t n = 0;
  Msg& s(const char* t) {
    while (*t && n < sizeof buf - 1) buf[n++] = *t++;
    return *this;
  }
  Msg& u(uint64_t v) {
    char t[24];
    int k = 0;
    do t[k++] = char('0' + v % 10), v /= 10;
    while (v);
    while (k && n < sizeof buf - 1) buf[n++] = t[--k];
    return *this;
  }
  Msg& x(uint64_t v) {
    s("0x");
    char t[16];
    int k = 0;
    do t[k++] = "0123456789abcdef"[v & 15], v >>= 4;
    while (v);
    while (k && n < sizeof buf - 1) buf[n++] = t[--k];
    return *this;
  }
  void to(int fd) {
    buf[n++] = '\n';
    write_fd(fd, buf, n);
  }
};

// ---------------------------------------------------------------------------
// CPUs.

// Pins the calling thread to CPU cpu; false if the OS refused.
inline bool pin_to_cpu(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

// Pins the calling thread to the first CPU it may run on; that CPU, or -1 if
// its affinity mask could not be read or set.
inline int pin_to_first_cpu() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (unsigned c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) return pin_to_cpu(c) ? int(c) : -1;
  return -1;
}

// ---------------------------------------------------------------------------
// Run length and memory.

// SOAK_SECONDS=N (tools/soak) when N > 0, else dflt.
inline double soak_seconds(double dflt) {
  const char* s = getenv("SOAK_SECONDS");
  double v = s ? atof(s) : 0;
  return v > 0 ? v : dflt;
}

// Resident set size from /proc/self/statm (bytes).
inline double rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long size = 0, rss = 0;
  if (f) {
    if (std::fscanf(f, "%lu %lu", &size, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return double(rss) * double(sysconf(_SC_PAGESIZE));
}

// ---------------------------------------------------------------------------
// Self-describing blocks (no allocation). A block of n >= 16 bytes starts with
// {n ^ magic, tag}, so it describes itself (a block found in a shared slot
// must); every later byte is the tag's low byte. A block under 16 bytes holds
// only the tag byte. Each test picks its own magic, its largest plausible
// size and how sparsely big blocks are checked.
struct SelfBlocks {
  uint64_t magic;
  size_t max_size;      // a header claiming more than this is not one of ours
  size_t sparse_above;  // blocks larger than this are checked densely over
  size_t dense_edge;    //   their first and last dense_edge bytes,
  size_t stride;        //   and at every stride-th byte in between

  unsigned char byte_at(size_t n, uint64_t tag, size_t i) const {
    if (n >= 16 && i < 16) {
      uint64_t w = i < 8 ? (n ^ magic) : tag;
      return (unsigned char)(w >> (8 * (i % 8)));
    }
    return (unsigned char)tag;
  }

  void fill(void* p, size_t n, uint64_t tag) const {
    unsigned char* c = static_cast<unsigned char*>(p);
    if (n >= 16) {
      uint64_t h[2] = {n ^ magic, tag};
      std::memcpy(c, h, 16);
      std::memset(c + 16, int(tag & 0xff), n - 16);
    } else {
      std::memset(c, int(tag & 0xff), n);
    }
  }

  // Checks bytes [0, min(n, limit)) of a block filled with (n, tag).
  bool verify(const void* p, size_t n, uint64_t tag, size_t limit = SIZE_MAX) const {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    size_t end = n < limit ? n : limit;
    for (size_t i = 0; i < end; i += (end > sparse_above && i > dense_edge && i + dense_edge < end) ? stride : 1)
      if (c[i] != byte_at(n, tag, i)) return false;
    return true;
  }

  // Size of a self-describing block, or 0 when its header is not one of ours.
  size_t self_size(const void* p) const {
    uint64_t h;
    std::memcpy(&h, p, 8);
    size_t n = size_t(h ^ magic);
    return (n >= 16 && n <= max_size) ? n : 0;
  }

  bool verify_self(const void* p) const {
    size_t n = self_size(p);
    if (n == 0) return false;
    uint64_t tag;
    std::memcpy(&tag, static_cast<const char*>(p) + 8, 8);
    return verify(p, n, tag);
  }
};

// ---------------------------------------------------------------------------
// Hand-over slots.

// Empties an array of std::atomic<void*> slots through which threads hand
// blocks to each other: calls check(p) on every block found, then free(p).
// Returns how many blocks it freed.
template <class Slots, class Check>
uint64_t drain_slots(Slots& slots, Check check) {
  uint64_t drained = 0;
  for (auto& s : slots) {
    void* p = s.exchange(nullptr);
    if (p == nullptr) continue;
    check(p);
    free(p);
    drained++;
  }
  return drained;
}

// ---------------------------------------------------------------------------
// Progress watchdog (no allocation). A stuck thread cannot fail a doctest case,
// so the watchdog thread prints what stalled and ends the process (_exit(70)).

// A progress counter the watchdog watches: its value and since when (ns) it has
// had that value.
struct Watched {
  const char* name;
  const std::atomic<uint64_t>* counter;
  uint64_t last;
  uint64_t since;
};

// Starts every counter's clock now, from its current value.
inline void watch_from_now(Watched* w, int n) {
  for (int i = 0; i < n; i++) w[i].last = w[i].counter->load(), w[i].since = now_ns();
}

// Looks at the counters every period_ns until stop is set (then returns
// nullptr); returns the first counter that has not moved for more than
// stall_seconds, for the caller to report before it calls _exit(70).
inline Watched* wait_for_stall(Watched* w, int n, const std::atomic<bool>& stop, uint64_t period_ns,
                               double stall_seconds) {
  while (!stop.load()) {
    sleep_ns(period_ns);
    uint64_t t = now_ns();
    for (int i = 0; i < n; i++) {
      uint64_t v = w[i].counter->load(std::memory_order_relaxed);
      if (v != w[i].last) {
        w[i].last = v;
        w[i].since = t;
      } else if (double(t - w[i].since) / 1e9 > stall_seconds) {
        return &w[i];
      }
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Signals.

inline sigset_t no_signals() {
  sigset_t s;
  sigemptyset(&s);
  return s;
}

inline sigset_t all_signals() {
  sigset_t s;
  sigfillset(&s);
  return s;
}

// Installs fn for sig (SA_SIGINFO | SA_RESTART), blocking mask while it runs.
inline bool install_handler(int sig, void (*fn)(int, siginfo_t*, void*), const sigset_t& mask) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sa.sa_mask = mask;
  return sigaction(sig, &sa, nullptr) == 0;
}

// Installs fn for sig (SA_RESTART), blocking mask while it runs.
inline bool install_handler(int sig, void (*fn)(int), const sigset_t& mask) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = SA_RESTART;
  sa.sa_mask = mask;
  return sigaction(sig, &sa, nullptr) == 0;
}

// The instruction a signal interrupted, from the handler's ucontext argument.
inline uintptr_t interrupted_pc(void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
#if defined(__x86_64__)
  return uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return uintptr_t(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

// Where a loaded shared object lies: its load address, its executable segment
// [lo, hi) and its path.
struct LoadedText {
  uintptr_t base = 0, lo = 0, hi = 0;
  char path[4096] = {};
};

// Finds the first loaded object whose name contains name_part; false if none.
inline bool find_loaded_text(const char* name_part, LoadedText& out) {
  struct Query {
    const char* name_part;
    LoadedText* out;
  } q{name_part, &out};
  return dl_iterate_phdr(
             [](dl_phdr_info* info, size_t, void* data) -> int {
               const Query& query = *static_cast<Query*>(data);
               if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, query.name_part) == nullptr) return 0;
               LoadedText& t = *query.out;
               t.base = info->dlpi_addr;
               std::snprintf(t.path, sizeof t.path, "%s", info->dlpi_name);
               for (int i = 0; i < info->dlpi_phnum; i++) {
                 const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                 if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
                   t.lo = info->dlpi_addr + ph.p_vaddr;
                   t.hi = t.lo + ph.p_memsz;
                 }
               }
               return 1;
             },
             &q) != 0;
}

// ---------------------------------------------------------------------------
// Child processes.

// fork() after flushing stdio, so that the child does not print the parent's
// buffered output a second time.
inline pid_t fork_flushed() {
  std::fflush(nullptr);
  return fork();
}

// A waitpid status as one number: the exit status, or 1000 + the signal that
// killed the child.
inline int exit_code(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1000 + WTERMSIG(wait_status);
}

}  // namespace fwtest
