// Life cycle with malloc replaced: first calls, thread exit and churn, fork.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "freeway.h"

TEST_CASE("a thread whose first call is a free of another thread's block works") {
  void* p = malloc(123);
  std::thread([p] { free(p); }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("thousands of short-lived threads leave no thread cache bound and no growth") {
  fw_stats_t a, b;
  fw_stats(&a);
  for (int round = 0; round < 50; round++) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 100; i++)
      ts.emplace_back([i] {
        std::vector<void*> v;
        for (int k = 0; k < 50; k++) v.push_back(malloc(16 + (i * 31 + k * 7) % 2000));
        for (void* p : v) free(p);
      });
    for (auto& t : ts) t.join();
  }
  fw_stats(&b);
  if (fw_caches_per_cpu()) {
    CHECK(b.threads_created - a.threads_created < 5000);  // per-CPU caches: none bound after the switch
  } else {
    CHECK(b.threads_created - a.threads_created >= 5000);
  }
  CHECK(b.threads_live <= a.threads_live);
  // glibc keeps a malloc'd TLS vector per cached thread stack: a little stays live.
  CHECK(b.live_bytes <= a.live_bytes + (256u << 10));
  // 5000 threads came and went: what stays committed is bounded by the reuse
  // of spans, not by the number of threads.
  CHECK(b.committed_bytes < a.committed_bytes + (64u << 20));
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("thread churn with cross-thread frees: committed memory stops growing") {
  // Lever-Boreham benchmark 2: threads made in rounds free each other's blocks.
  std::vector<void*> prev(2000, nullptr);
  uint64_t early = 0, late = 0;
  for (int round = 0; round < 60; round++) {
    std::vector<void*> next(prev.size());
    std::thread t([&] {
      for (size_t i = 0; i < prev.size(); i++) {
        free(prev[i]);
        next[i] = malloc(64 + (i % 50) * 16);
        std::memset(next[i], 1, 64);
      }
    });
    t.join();
    prev.swap(next);
    fw_stats_t s;
    fw_stats(&s);
    if (round == 10) early = s.committed_bytes;
    if (round == 59) late = s.committed_bytes;
  }
  for (void* p : prev) free(p);
  CHECK(double(late) / double(early) < 1.1);
}

TEST_CASE("fork from a busy multithreaded process: the child allocates, starts threads and exits cleanly") {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 4; t++)
    busy.emplace_back([&] {
      std::vector<void*> v;
      while (!stop.load(std::memory_order_relaxed)) {
        v.push_back(malloc(32 + v.size() % 500));
        if (v.size() > 1000) {
          for (void* p : v) free(p);
          v.clear();
        }
      }
      for (void* p : v) free(p);
    });
  for (int k = 0; k < 20; k++) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::vector<void*> v;
      for (int i = 0; i < 10000; i++) v.push_back(malloc(i % 3000 + 1));
      for (void* p : v) free(p);
      std::thread th([] {
        void* p = malloc(1 << 20);
        std::memset(p, 3, 1 << 20);
        free(p);
      });
      th.join();
      _exit(fw_owns(malloc(10)) ? 0 : 3);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  stop = true;
  for (auto& t : busy) t.join();
}
