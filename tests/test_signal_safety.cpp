// Async-signal safety (Michael 2004 §1, §3): malloc and free may be called
// from a signal handler that interrupted malloc or free on the same thread.
//
// Worker threads allocate, check and free blocks nonstop; a signaller thread
// sends SIGUSR1 or SIGRTMIN+1 to a random worker about every 20 µs. Both handlers
// call malloc, calloc, realloc, posix_memalign and free, and hand blocks to
// each other (on any thread) through a shared array of atomic slots, checking
// the contents of every block they free. SIGRTMIN+1's handler may interrupt
// SIGUSR1's, so handlers nest two deep. A watchdog fails the test when any
// thread stops making progress (a deadlock) instead of letting it hang.
//
// Runs 12 s by default; SOAK_SECONDS=N runs N seconds (tools/soak).
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <unistd.h>
#include <vector>

#include "freeway.h"
#include "test_util.h"

namespace {

// ---------------------------------------------------------------------------
// Helpers that never allocate: usable in signal handlers and in the watchdog
// (test_util.h). Msg: a line formatted on the stack and written with one write(2).

using fwtest::Msg;
using fwtest::now_ns;
using fwtest::Rng;
using fwtest::sleep_ns;

// ---------------------------------------------------------------------------
// Block contents (fwtest::SelfBlocks). A block of n >= 16 bytes starts with
// {n ^ magic, tag}, so it describes itself (blocks in the shared slots must);
// every later byte is the tag's low byte. Blocks under 16 bytes hold only the
// tag byte. kBlock.verify(p, n, tag, limit) checks bytes [0, min(n, limit));
// big blocks: every byte of the first and last 4 KiB, a stride in between. A
// self-describing block is at most 8 MiB.

constexpr fwtest::SelfBlocks kBlock{0x5a17f00dcafe0000ull, 8u << 20, 16384, 4096, 509};

// ---------------------------------------------------------------------------
// Shared state.

constexpr int kWorkers = 4;
// SIGUSR1 (standard: coalesces while pending) and a real-time signal (queued:
// every one sent is handled), whose handler may interrupt SIGUSR1's.
#define kSigNest (SIGRTMIN + 1)
constexpr size_t kHandoffSlots = 512;
std::atomic<void*> g_handoff[kHandoffSlots];

std::atomic<uint64_t> g_handled{0}, g_nested{0}, g_in_freeway{0}, g_handler_ops{0};
std::atomic<uint64_t> g_handler_frees_foreign{0};  // handoff blocks freed by a handler
std::atomic<uint64_t> g_worker_ops{0}, g_sent{0};
std::atomic<uint64_t> g_errors{0};
std::atomic<bool> g_stop_workers{false}, g_stop_signals{false};

// Text segment of libfreeway.so: a handler whose interrupted PC is in here
// interrupted malloc/free itself.
fwtest::LoadedText g_fw;

void error(const char* what, const void* p) {
  if (g_errors.fetch_add(1) < 20) Msg().s("signal test: ").s(what).s(" ").x(uintptr_t(p)).to(2);
}

// ---------------------------------------------------------------------------
// The handler. Everything it calls is freeway or async-signal-safe.

thread_local Rng t_hrng{0};
thread_local int t_depth = 0;

void handler(int, siginfo_t*, void* uc) {
  int saved_errno = errno;
  if (t_hrng.s == 0) t_hrng.s = 0x2545f4914f6cdd1dull ^ (uint64_t(pthread_self()) * 0x9e3779b97f4a7c15ull) ^ now_ns();
  Rng& r = t_hrng;
  if (++t_depth > 1) g_nested.fetch_add(1, std::memory_order_relaxed);
  uintptr_t pc = fwtest::interrupted_pc(uc);
  if (pc >= g_fw.lo && pc < g_fw.hi) g_in_freeway.fetch_add(1, std::memory_order_relaxed);

  // malloc: mostly small, sometimes medium or large (the large path in a handler).
  uint64_t k = r.next() % 1000;
  size_t n = k < 900 ? 16 + r.next() % 1024 : k < 990 ? 1024 + r.next() % 65536 : 200000 + r.next() % 400000;
  uint64_t tag = r.next();
  void* a = malloc(n);
  if (a == nullptr) error("handler: malloc returned NULL", nullptr);
  else kBlock.fill(a, n, tag);

  // calloc: must be zeroed.
  size_t cn = 16 + r.next() % 3000;
  void* b = calloc(1, cn);
  if (b == nullptr) {
    error("handler: calloc returned NULL", nullptr);
  } else {
    for (size_t i = 0; i < cn; i++)
      if (static_cast<unsigned char*>(b)[i] != 0) {
        error("handler: calloc block not zeroed", b);
        break;
      }
    kBlock.fill(b, cn, tag + 1);
  }

  // realloc: the contents move with the block.
  if (a != nullptr) {
    size_t n2 = 16 + r.next() % (k < 990 ? 4096 : 700000);
    void* a2 = realloc(a, n2);
    if (a2 == nullptr) {
      error("handler: realloc returned NULL", a);
      free(a);
    } else {
      if (!kBlock.verify(a2, n, tag, n2)) error("handler: realloc lost the contents of", a2);
      kBlock.fill(a2, n2, tag);
      a = a2;
      n = n2;
    }
  }

  // aligned allocation.
  void* al = nullptr;
  size_t align = size_t(16) << (r.next() % 9);  // 16 .. 4096
  if (posix_memalign(&al, align, 32 + r.next() % 2000) != 0 || al == nullptr) error("handler: posix_memalign failed", nullptr);
  else if (uintptr_t(al) % align != 0) error("handler: posix_memalign misaligned", al);
  else std::memset(al, 0x5c, 32);

  // Hand b to whichever handler or worker comes next; free what was there,
  // which another thread (or a handler on it) allocated.
  if (b != nullptr) {
    void* old = g_handoff[r.next() % kHandoffSlots].exchange(b, std::memory_order_acq_rel);
    if (old != nullptr) {
      if (!kBlock.verify_self(old)) error("handler: handed-over block corrupted", old);
      free(old);
      g_handler_frees_foreign.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (a != nullptr) {
    if (!kBlock.verify(a, n, tag)) error("handler: block corrupted before free", a);
    free(a);
  }
  free(al);
  g_handler_ops.fetch_add(5, std::memory_order_relaxed);
  g_handled.fetch_add(1, std::memory_order_relaxed);
  t_depth--;
  errno = saved_errno;
}

// ---------------------------------------------------------------------------
// Watchdog: fails the process (it cannot fail a doctest case from a stuck
// thread) when a watched counter stays still for too long.

using fwtest::Watched;
Watched g_watched[16];
int g_nwatched = 0;
std::atomic<bool> g_watchdog_stop{false};
double g_stall_seconds = 10;

void* watchdog(void*) {
  fwtest::watch_from_now(g_watched, g_nwatched);
  // Every 100 ms until stopped.
  if (const Watched* w = fwtest::wait_for_stall(g_watched, g_nwatched, g_watchdog_stop, 100000000, g_stall_seconds)) {
    Msg().s("WATCHDOG: ").s(w->name).s(" made no progress for ").u(uint64_t(g_stall_seconds))
        .s(" s (deadlock?) after ").u(g_handled.load()).s(" signals handled, ")
        .u(g_worker_ops.load()).s(" worker operations")
        .to(2);
    _exit(70);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Workers.

std::atomic<uint64_t> g_progress[kWorkers];
pthread_t g_tids[kWorkers];
std::atomic<int> g_ready{0};

struct Own {
  void* p;
  size_t n;
  uint64_t tag;
};

size_t worker_size(Rng& r) {
  uint64_t k = r.next() % 1000;
  if (k < 700) return r.next() % 513;
  if (k < 995) return 513 + r.next() % 16384;
  return 16384 + r.next() % (1 << 20);
}

void* worker(void* arg) {
  int id = int(reinterpret_cast<intptr_t>(arg));
  Rng r{0x9e3779b97f4a7c15ull * uint64_t(id + 1)};
  std::vector<Own> own(256, Own{nullptr, 0, 0});
  g_ready.fetch_add(1);
  uint64_t ops = 0;
  while (!g_stop_workers.load(std::memory_order_relaxed)) {
    if (r.next() % 4 == 0) {
      // A burst of small blocks: most of its time is spent inside malloc and
      // free, where the signals should land.
      void* burst[32];
      for (int i = 0; i < 32; i++) {
        burst[i] = malloc(8 + (r.next() % 32) * 8);
        if (burst[i] == nullptr) error("worker: malloc returned NULL", nullptr);
        else *static_cast<uint64_t*>(burst[i]) = uint64_t(i) ^ reinterpret_cast<uintptr_t>(burst[i]);
      }
      for (int i = 31; i >= 0; i--) {
        if (burst[i] && *static_cast<uint64_t*>(burst[i]) != (uint64_t(i) ^ reinterpret_cast<uintptr_t>(burst[i])))
          error("worker: small block corrupted", burst[i]);
        free(burst[i]);
      }
      ops += 64;
      g_worker_ops.fetch_add(64, std::memory_order_relaxed);
    }
    Own& o = own[r.next() % own.size()];
    uint64_t k = r.next() % 100;
    if (o.p != nullptr) {
      if (!kBlock.verify(o.p, o.n, o.tag)) error("worker: block corrupted", o.p);
      if (k < 25) {  // realloc keeps the contents
        size_t n2 = worker_size(r);
        void* q = realloc(o.p, n2);
        if (q == nullptr && n2 != 0) {
          error("worker: realloc returned NULL", o.p);
        } else {
          if (q != nullptr && !kBlock.verify(q, o.n, o.tag, n2)) error("worker: realloc lost contents", q);
          o.p = q;
          o.n = n2;
          if (q) kBlock.fill(q, n2, o.tag);
        }
      } else if (k < 35 && o.n >= 16) {  // hand it to a handler or another worker
        void* old = g_handoff[r.next() % kHandoffSlots].exchange(o.p, std::memory_order_acq_rel);
        o.p = nullptr;
        if (old != nullptr) {
          if (!kBlock.verify_self(old)) error("worker: handed-over block corrupted", old);
          free(old);
        }
      } else {
        free(o.p);
        o.p = nullptr;
      }
    } else {
      size_t n = worker_size(r);
      o.tag = r.next();
      o.n = n;
      void* p = nullptr;
      switch (k % 4) {
        case 0: p = malloc(n); break;
        case 1:
          p = calloc(1, n);
          if (p)
            for (size_t i = 0; i < n; i += (n > 4096 ? 61 : 1))
              if (static_cast<unsigned char*>(p)[i] != 0) {
                error("worker: calloc block not zeroed", p);
                break;
              }
          break;
        case 2: {
          size_t align = size_t(16) << (r.next() % 8);
          p = aligned_alloc(align, n);
          if (p && uintptr_t(p) % align) error("worker: aligned_alloc misaligned", p);
          break;
        }
        default: p = realloc(nullptr, n); break;
      }
      if (p == nullptr) error("worker: allocation returned NULL", nullptr);
      else kBlock.fill(p, n, o.tag);
      o.p = p;
    }
    ops++;
    g_progress[id].store(ops, std::memory_order_relaxed);
    g_worker_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (Own& o : own) {
    if (o.p == nullptr) continue;
    if (!kBlock.verify(o.p, o.n, o.tag)) error("worker: block corrupted at the end", o.p);
    free(o.p);
  }
  return nullptr;
}

std::atomic<uint64_t> g_signaller_progress{0};

void* signaller(void*) {
  // One signal every 20 µs on average. A sleep lasts longer than that here
  // (timer and wake-up cost, ~80 µs), so each wake-up sends the signals that
  // fell due meanwhile, each to a random worker.
  Rng r{0xdeadbeefcafef00dull};
  uint64_t due = now_ns();
  while (!g_stop_signals.load(std::memory_order_relaxed)) {
    uint64_t t = now_ns();
    if (t > due + 1000000) due = t - 1000000;  // after a long stall, do not burst for long
    for (; due <= t; due += 20000) {
      int w = int(r.next() % kWorkers);
      int sig = (r.next() & 1) ? SIGUSR1 : kSigNest;
      if (pthread_kill(g_tids[w], sig) == 0) g_sent.fetch_add(1, std::memory_order_relaxed);
    }
    g_signaller_progress.fetch_add(1, std::memory_order_relaxed);
    sleep_ns(20000);
  }
  return nullptr;
}

void install(int sig, bool block_other) {
  sigset_t mask = fwtest::no_signals();
  // SIGUSR1's handler may be interrupted by kSigNest's (nesting); not the reverse.
  if (block_other) sigaddset(&mask, SIGUSR1);
  REQUIRE(fwtest::install_handler(sig, handler, mask));
}

}  // namespace

TEST_CASE("signal handlers interrupting malloc and free on every thread can malloc, calloc, realloc and free "
          "(nested, and freeing other threads' handler blocks) with no deadlock and no corruption") {
  double seconds = fwtest::soak_seconds(12);
  fwtest::find_loaded_text("libfreeway", g_fw);
  REQUIRE(g_fw.hi > g_fw.lo);  // malloc is freeway's in this program
  fw_stats_t before;
  fw_stats(&before);

  install(SIGUSR1, false);
  install(kSigNest, true);

  for (int i = 0; i < kWorkers; i++) {
    g_watched[g_nwatched++] = Watched{"a worker thread", &g_progress[i], 0, 0};
    REQUIRE(pthread_create(&g_tids[i], nullptr, worker, reinterpret_cast<void*>(intptr_t(i))) == 0);
  }
  while (g_ready.load() < kWorkers) sleep_ns(1000000);
  g_watched[g_nwatched++] = Watched{"the signaller thread", &g_signaller_progress, 0, 0};
  g_watched[g_nwatched++] = Watched{"signal handling (all threads)", &g_handled, 0, 0};
  pthread_t wd, sg;
  REQUIRE(pthread_create(&wd, nullptr, watchdog, nullptr) == 0);
  REQUIRE(pthread_create(&sg, nullptr, signaller, nullptr) == 0);

  uint64_t t0 = now_ns();
  while (double(now_ns() - t0) / 1e9 < seconds) sleep_ns(100000000);
  double elapsed = double(now_ns() - t0) / 1e9;

  g_stop_signals = true;
  pthread_join(sg, nullptr);
  sleep_ns(50000000);  // let pending signals be handled
  g_stop_workers = true;
  for (int i = 0; i < kWorkers; i++) pthread_join(g_tids[i], nullptr);
  g_watchdog_stop = true;
  pthread_join(wd, nullptr);
  signal(SIGUSR1, SIG_IGN);
  signal(kSigNest, SIG_IGN);

  uint64_t drained = fwtest::drain_slots(g_handoff, [](void* p) {
    if (!kBlock.verify_self(p)) error("main: handed-over block corrupted", p);
  });
  int heap_errors = fw_check_heap();
  fw_stats_t after;
  fw_stats(&after);

  std::printf("signal safety: %.1f s, %d workers: %llu worker operations, %llu signals sent, %llu handled "
              "(%.0f/s), %llu interrupted freeway code, %llu nested, %llu handler operations, "
              "%llu handed-over blocks freed in handlers, %llu drained at the end; errors %llu; "
              "fw_check_heap %d; live bytes %llu -> %llu\n",
              elapsed, kWorkers, (unsigned long long)g_worker_ops.load(), (unsigned long long)g_sent.load(),
              (unsigned long long)g_handled.load(), double(g_handled.load()) / elapsed,
              (unsigned long long)g_in_freeway.load(), (unsigned long long)g_nested.load(),
              (unsigned long long)g_handler_ops.load(), (unsigned long long)g_handler_frees_foreign.load(),
              (unsigned long long)drained, (unsigned long long)g_errors.load(), heap_errors,
              (unsigned long long)before.live_bytes, (unsigned long long)after.live_bytes);
  std::fflush(stdout);

  CHECK(g_errors.load() == 0);
  CHECK(heap_errors == 0);
  // At 20 µs between signals even a loaded 2-core machine handles thousands a second.
  CHECK(g_handled.load() >= uint64_t(1000 * elapsed));
  // The point of the test: handlers did interrupt malloc/free themselves.
  CHECK(g_in_freeway.load() >= 100);
  CHECK(g_nested.load() >= 10);
  CHECK(g_handler_frees_foreign.load() >= 1000);
  // Every block is freed (glibc's per-thread leftovers aside).
  CHECK(after.live_bytes <= before.live_bytes + (1u << 20));
}
