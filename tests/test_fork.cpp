// fork() from a process whose other threads are busy in malloc and free, under
// a storm of signals whose handlers allocate too. freeway takes no lock, so a
// thread that fork() leaves behind mid-operation (it does not exist in the
// child) must not matter to the child: the child frees blocks the parent's
// threads allocated and handed over, allocates and frees, starts threads that
// exchange blocks, sometimes forks again, and exits with status 0 within a
// time limit (the parent kills it and fails the test otherwise).
//
// Runs 10 s by default; SOAK_SECONDS=N runs N seconds (tools/soak).
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "freeway.h"
#include "test_util.h"

namespace {

using fwtest::Msg;
using fwtest::now_ns;
using fwtest::Rng;
using fwtest::sleep_ns;

// Self-describing blocks (>= 16 bytes): {n ^ magic, tag}, then the tag byte
// (fwtest::SelfBlocks; at most 4 MiB, big blocks checked with a stride of 509
// between their first and last 4 KiB).
constexpr fwtest::SelfBlocks kBlock{0xf0f0c0de00000000ull, 4u << 20, 16384, 4096, 509};

size_t pick_size(Rng& r) {
  uint64_t k = r.next() % 1000;
  if (k < 800) return 16 + r.next() % 1000;
  if (k < 995) return 1024 + r.next() % 65536;
  return 200000 + r.next() % (1 << 20);
}

constexpr int kWorkers = 3;
constexpr size_t kSlots = 1024;
std::atomic<void*> g_slots[kSlots];
std::atomic<uint64_t> g_progress[kWorkers];
std::atomic<uint64_t> g_errors{0}, g_ops{0}, g_handled{0}, g_main_progress{0};
std::atomic<bool> g_stop{false}, g_watchdog_stop{false};
pthread_t g_tids[kWorkers + 1];  // workers, then the main (forking) thread

void error(const char* what) {
  if (g_errors.fetch_add(1) < 20) Msg().s("fork test: ").s(what).to(2);
}

// Signal handler (in the parent, and inherited by children): allocate and free.
void handler(int) {
  int saved = errno;
  static thread_local Rng r{0};
  if (r.s == 0) r.s = now_ns() | 1;
  size_t n = 16 + r.next() % 2000;
  void* p = malloc(n);
  if (p) {
    kBlock.fill(p, n, r.next());
    void* q = realloc(p, n + 100);
    if (q == nullptr || !kBlock.verify_self(q)) error("handler: realloc lost contents");
    free(q ? q : p);
  }
  g_handled.fetch_add(1, std::memory_order_relaxed);
  errno = saved;
}

void* worker(void* arg) {
  int id = int(reinterpret_cast<intptr_t>(arg));
  Rng r{0x9e3779b97f4a7c15ull * uint64_t(id + 1)};
  std::vector<void*> own(128, nullptr);
  uint64_t ops = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    void*& o = own[r.next() % own.size()];
    if (o) {
      if (!kBlock.verify_self(o)) error("worker: block corrupted");
      free(o);
      o = nullptr;
    } else {
      size_t n = pick_size(r);
      o = (r.next() & 1) ? malloc(n) : calloc(1, n);
      if (o == nullptr) {
        error("worker: allocation failed");
        continue;
      }
      kBlock.fill(o, n, r.next());
      if (r.next() % 4 == 0) {  // hand it over: freed by another worker or by a child
        void* old = g_slots[r.next() % kSlots].exchange(o, std::memory_order_acq_rel);
        o = nullptr;
        if (old) {
          if (!kBlock.verify_self(old)) error("worker: handed-over block corrupted");
          free(old);
        }
      }
    }
    ops++;
    g_progress[id].store(ops, std::memory_order_relaxed);
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (void* p : own)
    if (p) free(p);
  return nullptr;
}

std::atomic<uint64_t> g_sent{0};
void* signaller(void*) {
  Rng r{12345};
  while (!g_stop.load(std::memory_order_relaxed)) {
    pthread_kill(g_tids[r.next() % (kWorkers + 1)], SIGUSR1);
    g_sent.fetch_add(1, std::memory_order_relaxed);
    sleep_ns(50000);
  }
  return nullptr;
}

void* watchdog(void*) {
  // The parent's workers, then the main (forking) thread; every clock starts
  // now, from 0.
  fwtest::Watched w[kWorkers + 1];
  for (int i = 0; i <= kWorkers; i++)
    w[i] = {i < kWorkers ? "a parent worker thread" : "the forking thread",
            i < kWorkers ? &g_progress[i] : &g_main_progress, 0, now_ns()};
  // Every 100 ms until stopped.
  if (const fwtest::Watched* s = fwtest::wait_for_stall(w, kWorkers + 1, g_watchdog_stop, 100000000, 30)) {
    Msg().s("WATCHDOG: ").s(s->name).s(" made no progress for 30 s (deadlock?)").to(2);
    _exit(70);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// The child. Exit status: 0 ok; 10+ a failed step.

int child_work(int depth, Rng r) {
  // Blocks the parent's threads allocated and handed over: their caches do not
  // exist here, so these are frees into spans whose owner is gone.
  int freed = 0;
  for (size_t i = 0; i < kSlots; i += 1 + r.next() % 4) {
    void* p = g_slots[i].exchange(nullptr);
    if (p == nullptr) continue;
    if (!kBlock.verify_self(p)) return 10;
    free(p);
    freed++;
  }
  // Allocate, check, free: small, medium, large.
  std::vector<std::pair<void*, size_t>> v;
  v.reserve(500);
  for (int i = 0; i < 500; i++) {
    size_t n = pick_size(r);
    void* p = malloc(n);
    if (p == nullptr) return 11;
    kBlock.fill(p, n, uint64_t(i));
    v.push_back({p, n});
  }
  for (auto& [p, n] : v)
    if (!kBlock.verify_self(p)) return 12;
  for (auto& [p, n] : v) free(p);
  // Threads that exchange blocks (cross-thread frees), joined.
  std::atomic<void*> box[64] = {};
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; t++)
    ts.emplace_back([&box, &bad, t] {
      Rng q{uint64_t(t + 1) * 0x2545f4914f6cdd1dull};
      for (int i = 0; i < 1000; i++) {
        size_t n = 16 + q.next() % 3000;
        void* p = malloc(n);
        if (p == nullptr) {
          bad++;
          return;
        }
        kBlock.fill(p, n, q.next());
        void* old = box[q.next() % 64].exchange(p);
        if (old) {
          if (!kBlock.verify_self(old)) bad++;
          free(old);
        }
      }
    });
  for (auto& t : ts) t.join();
  for (auto& b : box)
    if (void* p = b.exchange(nullptr)) {
      if (!kBlock.verify_self(p)) return 13;
      free(p);
    }
  if (bad.load()) return 14;
  // Sometimes fork again, from this child whose own threads are gone.
  if (depth == 0 && r.next() % 8 == 0) {
    pid_t g = fork();
    if (g < 0) return 15;
    if (g == 0) _exit(child_work(1, Rng{r.next() | 1}));
    int st = 0;
    if (waitpid(g, &st, 0) != g || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 16;
  }
  void* p = malloc(100);
  if (p == nullptr || !fw_owns(p)) return 17;  // still freeway's malloc
  free(p);
  (void)freed;
  return 0;
}

}  // namespace

TEST_CASE("fork from a process whose threads are busy in malloc/free under a signal storm: every child "
          "frees the parent's handed-over blocks, allocates, starts threads and exits 0 in time") {
  double seconds = fwtest::soak_seconds(10);
  REQUIRE(fwtest::install_handler(SIGUSR1, handler, fwtest::no_signals()));

  g_tids[kWorkers] = pthread_self();
  for (int i = 0; i < kWorkers; i++)
    REQUIRE(pthread_create(&g_tids[i], nullptr, worker, reinterpret_cast<void*>(intptr_t(i))) == 0);
  pthread_t sg, wd;
  REQUIRE(pthread_create(&sg, nullptr, signaller, nullptr) == 0);
  REQUIRE(pthread_create(&wd, nullptr, watchdog, nullptr) == 0);

  uint64_t forks = 0, ok = 0, failed = 0, killed = 0, exit_calls = 0;
  uint64_t child_ns_max = 0, child_ns_sum = 0;
  const uint64_t limit_ns = 20000000000ull;  // a child gets 20 s
  // At least kMinForks forks, however long the soak: on a busy machine (ctest
  // -j2 beside other tests) a child took 0.44-0.66 s and 10 s gave 16-23. The
  // forks go on past `seconds` until there are kMinForks, up to 6 x seconds,
  // after which the check below fails: children that slow are a finding.
  const uint64_t kMinForks = 30;
  uint64_t t0 = now_ns();
  for (;;) {
    const double el = double(now_ns() - t0) / 1e9;
    if ((el >= seconds && forks >= kMinForks) || el >= 6 * seconds) break;
    g_main_progress.fetch_add(1);
    std::fflush(nullptr);
    uint64_t f0 = now_ns();
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = child_work(0, Rng{f0 | 1});
      // Half the children leave through exit() (atexit handlers, destructors
      // and stdio, which free), half through _exit.
      if (forks % 2) exit(rc);
      _exit(rc);
    }
    forks++;
    if (forks % 2 == 0) exit_calls++;
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_ns() - f0 < limit_ns) {
      sleep_ns(200000);
      g_main_progress.fetch_add(1);
    }
    uint64_t dt = now_ns() - f0;
    if (w == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      killed++;
      Msg().s("fork test: child ").u(uint64_t(pid)).s(" (fork ").u(forks).s(") did not exit within 20 s: killed").to(2);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ok++;
    } else {
      failed++;
      if (failed <= 10)
        Msg().s("fork test: child of fork ").u(forks).s(WIFEXITED(status) ? " exited with status " : " died of signal ")
            .u(uint64_t(WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status))).to(2);
    }
    child_ns_sum += dt;
    if (dt > child_ns_max) child_ns_max = dt;
  }
  double elapsed = double(now_ns() - t0) / 1e9;
  g_stop = true;
  for (int i = 0; i < kWorkers; i++) pthread_join(g_tids[i], nullptr);
  pthread_join(sg, nullptr);
  g_watchdog_stop = true;
  pthread_join(wd, nullptr);
  signal(SIGUSR1, SIG_IGN);
  fwtest::drain_slots(g_slots, [](void* p) {
    if (!kBlock.verify_self(p)) error("main: handed-over block corrupted");
  });
  int heap = fw_check_heap();

  std::printf("fork: %.1f s: %llu forks (%llu children exited 0, %llu failed, %llu killed after 20 s; %llu left "
              "through exit(), the rest _exit), child time mean %.1f ms max %.1f ms; parent: %llu operations on %d "
              "threads, %llu signals sent, %llu handled; errors %llu; fw_check_heap %d\n",
              elapsed, (unsigned long long)forks, (unsigned long long)ok, (unsigned long long)failed,
              (unsigned long long)killed, (unsigned long long)exit_calls,
              forks ? double(child_ns_sum) / double(forks) / 1e6 : 0.0, double(child_ns_max) / 1e6,
              (unsigned long long)g_ops.load(), kWorkers, (unsigned long long)g_sent.load(),
              (unsigned long long)g_handled.load(), (unsigned long long)g_errors.load(), heap);
  std::fflush(stdout);

  CHECK(forks >= kMinForks);
  CHECK(ok == forks);
  CHECK(failed == 0);
  CHECK(killed == 0);
  CHECK(g_errors.load() == 0);
  CHECK(heap == 0);
}
