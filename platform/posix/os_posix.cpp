// platform/posix/os_posix.cpp: the platform contract (platform/os.h) on Linux and
// other POSIX systems, with mmap/madvise. See docs/porting.md.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "platform/cold_bss.h"
#include "platform/os.h"
#include "platform/read_once.h"
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#endif

namespace fw::os {
namespace {

// Linux overcommits: a MAP_NORESERVE mapping with read/write access costs no
// memory until touched, so commit is free and decommit is MADV_DONTNEED.
constexpr Features kFeatures = {
#if defined(__linux__)
    .commit_is_noop = true,
    .decommit_zeroes = true,
    .has_cpu_id = true,
    .reserve_extends = true,
#else
    .commit_is_noop = false,
    .decommit_zeroes = false,
    .has_cpu_id = false,
    .reserve_extends = true,
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

// Reads up to size-1 bytes of a small /proc file into buf; bytes read (0 on failure).
size_t read_small_file(const char* path, char* buf, size_t size) {
  int saved = errno;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  if (fd >= 0) {
    while (got + 1 < size) {
      ssize_t r = ::read(fd, buf + got, size - 1 - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += size_t(r);
    }
    ::close(fd);
  }
  buf[got] = 0;
  errno = saved;
  return got;
}

// The decimal number at s (0 if none).
uint64_t decimal_at(const char* s) {
  uint64_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) v = v * 10 + uint64_t(*s - '0');
  return v;
}

}  // namespace

const Features& features() { return kFeatures; }

size_t page_size() {
  static std::atomic<size_t> cached{0};
  return read_once(cached, [] {
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? size_t(v) : size_t(4096);
  });
}

size_t cpu_count() {
  static std::atomic<size_t> cached{0};
  return read_once(cached, [] {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? size_t(n) : size_t(1);
  });
}

namespace {

// Marks the reserved [p, p + size) for small pages and returns p. Spans touch
// their memory sparsely; transparent huge pages would fault in 2 MiB where a
// span uses 64 KiB. errno stays as it was: a kernel built without THP refuses
// the advice (EINVAL), and a malloc that succeeds leaves errno alone.
void* small_pages(void* p, size_t size) {
#ifdef MADV_NOHUGEPAGE
  const int saved = errno;
  madvise(p, size, MADV_NOHUGEPAGE);
  errno = saved;
#else
  (void)size;
#endif
  return p;
}

}  // namespace

void* reserve_aligned(size_t size, size_t align) {
  int prot = kFeatures.commit_is_noop ? (PROT_READ | PROT_WRITE) : PROT_NONE;
  const int saved = errno;  // a placement tried and refused on the way is no failure
  // First try exactly `size`: where the kernel puts it, then at the aligned
  // addresses just below and above (the kernel hands out addresses top-down,
  // so below is usually free), so that under an address-space limit
  // (RLIMIT_AS) a reservation never needs size + align of room.
  void* exact = mmap(nullptr, size, prot, map_flags(), -1, 0);
  if (exact != MAP_FAILED) {
    uintptr_t e = reinterpret_cast<uintptr_t>(exact);
    if ((e & (align - 1)) == 0) {
      errno = saved;
      return small_pages(exact, size);
    }
    munmap(exact, size);
    uintptr_t down = e & ~(uintptr_t(align) - 1);
    for (uintptr_t h : {down, down + align}) {
      if (h == 0) continue;
      void* hint = reinterpret_cast<void*>(h);
      void* again = mmap(hint, size, prot, map_flags(), -1, 0);
      if (again == hint) {
        errno = saved;
        return small_pages(again, size);
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
  errno = saved;
  return small_pages(reinterpret_cast<void*>(aligned), size);
}

Reserve reserve_at(void* addr, size_t size) {
  int prot = kFeatures.commit_is_noop ? (PROT_READ | PROT_WRITE) : PROT_NONE;
  int flags = map_flags();
#ifdef MAP_FIXED_NOREPLACE
  // Linux 4.17+: fails with EEXIST instead of moving. Older kernels ignore the
  // flag and take addr as a hint, which the check below handles.
  flags |= MAP_FIXED_NOREPLACE;
#endif
  int saved = errno;
  void* p = mmap(addr, size, prot, flags, -1, 0);
  int why = errno;
  errno = saved;
  if (p == addr) {
    small_pages(p, size);
    return Reserve::kDone;
  }
  if (p != MAP_FAILED) {  // placed elsewhere (an old kernel's hint): the range is in use
    munmap(p, size);
    return Reserve::kTaken;
  }
  return why == ENOMEM ? Reserve::kRefused : Reserve::kTaken;
}

void release(void* p, size_t size) { munmap(p, size); }

bool commit(void* p, size_t size) {
  if (kFeatures.commit_is_noop) return true;
  return mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
}

bool decommit(void* p, size_t size) {
  int saved = errno;
  bool ok = madvise(p, size, MADV_DONTNEED) == 0;
#if defined(__linux__)
  // Locked pages (mlock, mlockall) refuse MADV_DONTNEED with EINVAL, and the
  // heap's books would count them given back while they keep their bytes:
  // calloc, which trusts decommitted pages to read as zero (decommit_zeroes),
  // would hand them out dirty. Linux 5.18+ drops them with
  // MADV_DONTNEED_LOCKED; older kernels get them cleared in place (they stay
  // resident, as the lock asks).
  if (!ok && errno == EINVAL) {
    constexpr int kDontneedLocked = 24;  // MADV_DONTNEED_LOCKED, absent from older headers
    ok = madvise(p, size, kDontneedLocked) == 0;
    if (!ok && kFeatures.commit_is_noop) {
      std::memset(p, 0, size);
      ok = true;
    }
  }
#endif
  if (!kFeatures.commit_is_noop) ok = ok && mprotect(p, size, PROT_NONE) == 0;
  errno = saved;
  return ok;
}

bool protect(void* p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? (PROT_READ | PROT_WRITE) : PROT_NONE) == 0;
}

bool move_pages(void* from, void* to, size_t size) {
#if defined(__linux__) && defined(MREMAP_DONTUNMAP)
  // DONTUNMAP leaves the source mapped (empty), so no hole opens in its
  // reservation for another mapping to land in before release(); FIXED
  // replaces what `to` had, which is the destination's own reservation.
  const int saved = errno;  // a refusal (an older kernel: EINVAL) is no failure of the caller
  void* r = mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  errno = saved;
  return r == to;
#else
  (void)from;
  (void)to;
  (void)size;
  return false;
#endif
}

size_t map_count_limit() {
#if defined(__linux__)
  char buf[32];
  read_small_file("/proc/sys/vm/max_map_count", buf, sizeof buf);
  return size_t(decimal_at(buf));
#else
  return 0;
#endif
}

// Small pages too: a LAB's 359 KiB are touched a few pages at a time, and
// consecutive LABs merge into one mapping, where transparent huge pages
// ("always") would fault in 2 MiB at a LAB's first touch.
void* alloc_metadata(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : small_pages(p, size);
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

bool rseq_offset(ptrdiff_t* offset) {
#if defined(__linux__) && defined(__x86_64__) && !defined(FW_NO_RSEQ)
  // The sections use cpu_id (offset 4) and rseq_cs (offset 8): 16 bytes.
  if (&__rseq_size == nullptr || __rseq_size < 16) return false;
  const volatile int32_t* rs = reinterpret_cast<const volatile int32_t*>(
      static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
  if (rs[1] < 0) return false;  // -1: not registered, -2: registration failed
  *offset = __rseq_offset;
  return true;
#else
  (void)offset;
  return false;
#endif
}

bool affinity_get(Affinity* a) {
#if defined(__linux__)
  static_assert(sizeof(cpu_set_t) == sizeof(Affinity::words), "cpu_set_t is 1024 bits");
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  __builtin_memcpy(a->words, &set, sizeof set);
  return true;
#else
  (void)a;
  return false;
#endif
}

bool affinity_set(const Affinity& a) {
#if defined(__linux__)
  cpu_set_t set;
  __builtin_memcpy(&set, a.words, sizeof set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
#else
  (void)a;
  return false;
#endif
}

bool affinity_set_one(unsigned k) {
#if defined(__linux__)
  if (k >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(k, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
#else
  (void)k;
  return false;
#endif
}

size_t cpu_count_possible() {
  long n = sysconf(_SC_NPROCESSORS_CONF);
  size_t online = cpu_count();
  return n > 0 && size_t(n) > online ? size_t(n) : online;
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

uint64_t now_ms_coarse() {
  timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // Linux: the last tick's time, no clock source read
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return uint64_t(ts.tv_sec) * 1000ull + uint64_t(ts.tv_nsec) / 1000000ull;
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

namespace {
// The environment as the kernel gave it (/proc/self/environ), for a lookup
// before the C library has set `environ`: a first malloc from a program's
// .preinit_array runs before libc's own initialisation, where getenv finds
// nothing, and options read then would keep their defaults for good (a
// FREEWAY_SECURE=1 program would run unsecured). Read once, by the only
// thread there is then; entries past kEnvBytes - 1 are not seen.
constexpr size_t kEnvBytes = 32768;
// Past .bss (platform/cold_bss.h): most processes never read it, and in .bss
// it kept this file's small globals eight pages apart.
FW_COLD_BSS char g_env[kEnvBytes];
size_t g_env_len = 0;
bool g_env_read = false;

const char* getenv_from_kernel(const char* name) {
  if (!g_env_read) {
    g_env_read = true;
    g_env_len = read_small_file("/proc/self/environ", g_env, kEnvBytes);
  }
  const size_t n = strlen(name);
  for (size_t at = 0; at < g_env_len;) {
    const char* e = g_env + at;
    const size_t left = g_env_len - at;
    const char* end = static_cast<const char*>(memchr(e, 0, left));
    if (end == nullptr) break;  // cut off by kEnvBytes
    if (size_t(end - e) > n && memcmp(e, name, n) == 0 && e[n] == '=') return e + n + 1;
    at += size_t(end - e) + 1;
  }
  return nullptr;
}
}  // namespace

const char* getenv(const char* name) { return environ != nullptr ? ::getenv(name) : getenv_from_kernel(name); }

void set_errno_nomem() { errno = ENOMEM; }
void set_errno_inval() { errno = EINVAL; }

// --- Telemetry ---

namespace {
// /dev/shm/<name> into buf; false if it does not fit.
bool shm_path(const char* name, char* buf, size_t size) {
  int n = snprintf(buf, size, "/dev/shm/%s", name);
  return n > 0 && size_t(n) < size;
}

}  // namespace

void* shared_create(const char* name, size_t size, const char** why) {
  char path[128];
  if (!shm_path(name, path, sizeof path)) {
    *why = "segment name too long";
    return nullptr;
  }
  int saved = errno;
  int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(path, flags, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Our pid is ours alone, so an entry under our name is stale (a process
    // that died before removing it) or planted. Remove the name (never what it
    // points to) and try once more; if someone else's file cannot be removed,
    // publishing is off.
    ::unlink(path);
    fd = ::open(path, flags, 0600);
  }
  if (fd < 0) {
    *why = errno == EEXIST ? "the segment's name exists and cannot be replaced" : "cannot create the segment";
    errno = saved;
    return nullptr;
  }
  // The file is sparse and its pages are taken as the publisher writes them.
  // Two limits would turn that into a signal that ends the process: a file
  // size limit below the segment's (ftruncate raises SIGXFSZ), and a tmpfs
  // with less room than the segment (a page it cannot get is a SIGBUS at the
  // write, in whichever thread writes). Either keeps publishing off.
  struct rlimit fsize;
  struct statvfs room;
  const char* refused = nullptr;
  if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && fsize.rlim_cur < size)
    refused = "the file size limit (ulimit -f) is below the segment's size";
  else if (fstatvfs(fd, &room) == 0 && uint64_t(room.f_bavail) * room.f_frsize < size)
    refused = "/dev/shm has less room than the segment's size (a container's --shm-size)";
  void* p = MAP_FAILED;
  // fchmod: the mode must not depend on the umask being permissive or strict.
  if (refused == nullptr && ::fchmod(fd, 0600) == 0 && ::ftruncate(fd, off_t(size)) == 0)
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::unlink(path);
    *why = refused != nullptr ? refused : "cannot size or map the segment";
    errno = saved;
    return nullptr;
  }
  errno = saved;
  return p;
}

void shared_unlink(const char* name) {
  char path[128];
  int saved = errno;
  if (shm_path(name, path, sizeof path)) ::unlink(path);
  errno = saved;
}

void shared_discard(void* p, size_t size) {
  int saved = errno;
#ifdef MADV_REMOVE
  madvise(p, size, MADV_REMOVE);
#endif
  errno = saved;
}

void shared_detach(void* p, size_t size) {
  int saved = errno;
  mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  errno = saved;
}

namespace {
struct ThreadStart {
  void (*fn)(void*);
  void* arg;
};
ThreadStart g_thread_start;  // one telemetry thread at a time
}  // namespace

bool thread_start(void (*fn)(void*), void* arg, uintptr_t* handle) {
  g_thread_start = ThreadStart{fn, arg};
  sigset_t all, old;
  sigfillset(&all);
  // The new thread inherits this mask: the program's signals go to its own threads.
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(
      &t, nullptr,
      [](void*) -> void* {
        g_thread_start.fn(g_thread_start.arg);
        return nullptr;
      },
      nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) return false;
  *handle = uintptr_t(t);
  return true;
}

void thread_join(uintptr_t handle) { pthread_join(pthread_t(handle), nullptr); }

uintptr_t thread_self() { return uintptr_t(pthread_self()); }

void sleep_ns(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

uint64_t process_id() { return uint64_t(getpid()); }

#if defined(__linux__) && defined(__x86_64__)
namespace {
// membarrier's state for this process: 0 not asked yet, 1 registered, -1 none.
// Registering twice is harmless (threads racing at the first call).
std::atomic<int> g_barrier{0};
// glibc has no membarrier(), and libfreeway.so imports no syscall() (a futex
// could hide behind it: tests/scripts/no_locks.sh), so the instruction itself.
// Returns the kernel's result: -errno on failure, errno untouched.
long membarrier_call(int cmd) {
  long r;
  asm volatile("syscall"
               : "=a"(r)
               : "a"(long(__NR_membarrier)), "D"(long(cmd)), "S"(0L), "d"(0L)
               : "rcx", "r11", "memory");
  return r;
}
}  // namespace

bool process_barrier() {
  int state = g_barrier.load(std::memory_order_acquire);
  if (state == 0) {
    const long q = membarrier_call(MEMBARRIER_CMD_QUERY);
    state = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
                    membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
                ? 1
                : -1;
    g_barrier.store(state, std::memory_order_release);
  }
  return state > 0 && membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}
#else
bool process_barrier() { return false; }
#endif

#if defined(__linux__)
bool read_word_nofault(const void* addr, uintptr_t* out) {
  const int saved = errno;
  uintptr_t v = 0;
  iovec local{&v, sizeof v};
  iovec remote{const_cast<void*>(addr), sizeof v};
  const bool ok = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == ssize_t(sizeof v);
  errno = saved;
  if (ok) *out = v;
  return ok;
}
#else
bool read_word_nofault(const void*, uintptr_t*) { return false; }
#endif

bool address_space_limited() {
  struct rlimit r;
  return getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

#if defined(__linux__)
namespace {
// vm.overcommit_memory as reserve_is_charged read it (2 if unreadable); -1:
// not read yet. Racing first readers read the same file.
std::atomic<int> g_overcommit{-1};
}  // namespace
#endif

bool reserve_is_charged() {
#if defined(__linux__)
  int m = g_overcommit.load(std::memory_order_relaxed);
  if (m < 0) {
    char buf[16];
    const bool read = read_small_file("/proc/sys/vm/overcommit_memory", buf, sizeof buf) != 0;
    m = read && (buf[0] == '0' || buf[0] == '1') ? buf[0] - '0' : 2;
    g_overcommit.store(m, std::memory_order_relaxed);
  }
  return m == 2;
#else
  return true;  // no way to ask: assume a reservation may count against a commit limit
#endif
}

uint64_t resident_bytes() {
  char buf[128];
  if (read_small_file("/proc/self/statm", buf, sizeof buf) == 0) return 0;
  // "size resident shared ...": the second number, in pages.
  const char* s = buf;
  while (*s && *s != ' ') s++;
  return *s == ' ' ? decimal_at(s + 1) * page_size() : 0;
}

uint64_t process_start_ticks() {
  char buf[1024];
  if (read_small_file("/proc/self/stat", buf, sizeof buf) == 0) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted after its last ')'. That is field 2; starttime is field 22.
  const char* s = nullptr;
  for (const char* q = buf; *q; q++)
    if (*q == ')') s = q;
  if (s == nullptr) return 0;
  unsigned field = 2;
  for (s++; *s && field < 22; s++)
    if (*s == ' ') field++;
  return decimal_at(s);
}

void program_name(char* buf, size_t size) {
  if (size == 0) return;
  // /proc/self/cmdline: the arguments separated by NULs; the first one is argv[0].
  read_small_file("/proc/self/cmdline", buf, size);
}

bool at_fork_child(void (*fn)()) { return pthread_atfork(nullptr, nullptr, fn) == 0; }

bool at_exit(void (*fn)()) { return std::atexit(fn) == 0; }

}  // namespace fw::os
