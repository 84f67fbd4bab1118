// platform/posix/os_posix.cpp: the platform contract (platform/os.h) on Linux and
// other POSIX systems, with mmap/madvise. See docs/porting.md.
#include "platform/os.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

namespace fw::os {
namespace {

// Linux overcommits: a MAP_NORESERVE mapping with read/write access costs no
// memory until touched, so commit is free and decommit is MADV_DONTNEED.
constexpr Features kFeatures = {
#if defined(__linux__)
    .commit_is_noop = true,
    .decommit_zeroes = true,
    .has_cpu_id = true,
#else
    .commit_is_noop = false,
    .decommit_zeroes = false,
    .has_cpu_id = false,
#endif
};

int map_flags() {
  int f = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
  f |= MAP_NORESERVE;
#endif
  return f;
}

std::atomic<unsigned> g_exit_key{0};  // pthread key + 1; 0 = not created yet
std::atomic<void (*)(void*)> g_exit_fn{nullptr};

}  // namespace

const Features& features() { return kFeatures; }

size_t page_size() {
  static std::atomic<size_t> cached{0};
  size_t p = cached.load(std::memory_order_relaxed);
  if (p == 0) {
    long v = sysconf(_SC_PAGESIZE);
    p = v > 0 ? size_t(v) : 4096;
    cached.store(p, std::memory_order_relaxed);
  }
  return p;
}

size_t cpu_count() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? size_t(n) : 1;
}

void* reserve_aligned(size_t size, size_t align) {
  int prot = kFeatures.commit_is_noop ? (PROT_READ | PROT_WRITE) : PROT_NONE;
  // First try exactly `size`: where the kernel puts it, then at the aligned
  // addresses just below and above (the kernel hands out addresses top-down,
  // so below is usually free), so that under an address-space limit
  // (RLIMIT_AS) a reservation never needs size + align of room.
  void* exact = mmap(nullptr, size, prot, map_flags(), -1, 0);
  if (exact != MAP_FAILED) {
    uintptr_t e = reinterpret_cast<uintptr_t>(exact);
    if ((e & (align - 1)) == 0) {
#ifdef MADV_NOHUGEPAGE
      madvise(exact, size, MADV_NOHUGEPAGE);
#endif
      return exact;
    }
    munmap(exact, size);
    uintptr_t down = e & ~(uintptr_t(align) - 1);
    for (uintptr_t h : {down, down + align}) {
      if (h == 0) continue;
      void* hint = reinterpret_cast<void*>(h);
      void* again = mmap(hint, size, prot, map_flags(), -1, 0);
      if (again == hint) {
#ifdef MADV_NOHUGEPAGE
        madvise(again, size, MADV_NOHUGEPAGE);
#endif
        return again;
      }
      if (again != MAP_FAILED) munmap(again, size);
    }
  }
  size_t span = size + align;
  if (span < size) return nullptr;
  void* raw = mmap(nullptr, span, prot, map_flags(), -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (start + align - 1) & ~(uintptr_t(align) - 1);
  // Trim the unaligned head and the tail so exactly [aligned, aligned+size) stays.
  if (aligned > start) munmap(raw, aligned - start);
  uintptr_t end = start + span;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
#ifdef MADV_NOHUGEPAGE
  // Spans touch their memory sparsely; transparent huge pages would fault in
  // 2 MiB where a span uses 64 KiB.
  madvise(reinterpret_cast<void*>(aligned), size, MADV_NOHUGEPAGE);
#endif
  return reinterpret_cast<void*>(aligned);
}

void release(void* p, size_t size) { munmap(p, size); }

bool commit(void* p, size_t size) {
  if (kFeatures.commit_is_noop) return true;
  return mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
}

bool decommit(void* p, size_t size) {
  int saved = errno;
  bool ok = madvise(p, size, MADV_DONTNEED) == 0;
  if (!kFeatures.commit_is_noop) ok = ok && mprotect(p, size, PROT_NONE) == 0;
  errno = saved;
  return ok;
}

bool protect(void* p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? (PROT_READ | PROT_WRITE) : PROT_NONE) == 0;
}

void* alloc_metadata(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

#if defined(__linux__) && defined(__x86_64__)
// glibc (2.35+) registers a restartable-sequence area for every thread and
// exports where it is; the kernel keeps its cpu_id field current. Weak, so an
// older glibc leaves them null and sched_getcpu is used instead.
extern "C" const ptrdiff_t __rseq_offset __attribute__((weak));
extern "C" const unsigned int __rseq_size __attribute__((weak));
#endif

unsigned cpu_id() {
#if defined(__linux__) && defined(__x86_64__)
  if (&__rseq_size != nullptr && __rseq_size >= 8) {
    // struct rseq { u32 cpu_id_start; u32 cpu_id; ... } at thread pointer + offset.
    const volatile uint32_t* rs = reinterpret_cast<const volatile uint32_t*>(
        static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
    int32_t c = int32_t(rs[1]);
    if (c >= 0) return unsigned(c);
  }
#endif
#if defined(__linux__)
  int c = sched_getcpu();
  return c < 0 ? 0u : unsigned(c);
#else
  return 0;
#endif
}

uint64_t random_u64() {
  uint64_t v = 0;
  int saved = errno;
  ssize_t got = getrandom(&v, sizeof v, GRND_NONBLOCK);
  errno = saved;
  if (got == ssize_t(sizeof v)) return v;
  // No entropy yet (very early boot): mix the clock and an address.
  v = now_ns() ^ (reinterpret_cast<uintptr_t>(&v) << 17);
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  return v ^ (v >> 29);
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool thread_exit_init(void (*fn)(void*)) {
  if (g_exit_key.load(std::memory_order_acquire) != 0) return true;
  g_exit_fn.store(fn, std::memory_order_release);
  pthread_key_t key;
  if (pthread_key_create(&key, [](void* arg) { g_exit_fn.load(std::memory_order_acquire)(arg); }) != 0) return false;
  unsigned expected = 0;
  // Two threads may race here; the loser deletes its key. No lock is taken.
  if (!g_exit_key.compare_exchange_strong(expected, unsigned(key) + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
    pthread_key_delete(key);
  }
  return true;
}

bool thread_exit_register(void* arg) {
  unsigned k = g_exit_key.load(std::memory_order_acquire);
  if (k == 0) return false;
  return pthread_setspecific(pthread_key_t(k - 1), arg) == 0;
}

void* thread_exit_registered() {
  unsigned k = g_exit_key.load(std::memory_order_acquire);
  return k == 0 ? nullptr : pthread_getspecific(pthread_key_t(k - 1));
}

void write_stderr(const char* s, size_t n) { write_fd(2, s, n); }

void write_fd(int fd, const char* s, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = ::write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;
    }
    s += w;
    n -= size_t(w);
  }
  errno = saved;
}

[[noreturn]] void abort_process() { std::abort(); }

const char* getenv(const char* name) { return ::getenv(name); }

void set_errno_nomem() { errno = ENOMEM; }
void set_errno_inval() { errno = EINVAL; }

}  // namespace fw::os
