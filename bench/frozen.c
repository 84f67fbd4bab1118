/* frozen: the memory a thread that stops for good keeps from everyone else
 * (issue 10; the kill-tolerance case of docs/design.md "What a frozen or
 * killed thread can strand").
 *
 * T threads churn: each keeps a window of 256 blocks of random sizes (16 B to
 * 4 KiB, one in 16 up to 32 KiB) and replaces them at random. After D seconds
 * K of them stop: in the control run they exit, leaving their window of
 * blocks allocated; in the frozen run a signal stops each at whatever point
 * it is, in or out of malloc, and its handler never returns. The other
 * threads then free their windows and exit, the allocator is asked to give
 * memory back (fw_collect, mi_collect or malloc_trim, whichever the process
 * has) and RSS is read. Both runs keep the K windows of live blocks, so the
 * difference is what a stopped thread holds beyond its own blocks (its cache):
 *   stranded per thread = (RSS frozen - RSS control) / K
 * Each run is a fresh child process; the figure is the median of 3 pairs. A
 * run that does not finish in 20 s means the frozen threads blocked the
 * others (they hold a lock): the program says so and exits with status 3.
 *
 *   frozen -t THREADS -k FROZEN -d SECONDS
 * RESULT: seconds (all six runs), stranded_kb_per_thread, rss_control_kb, rss_frozen_kb. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define WINDOW 256
#define MAXT 256

static int nthreads = 16, nfrozen = 8;
static double seconds = 0.5;
static atomic_int stop_all, stop_some, frozen_count;
static atomic_long live_bytes[MAXT];
static pthread_t tids[MAXT];

static void freeze(int sig) {
  (void)sig;
  atomic_fetch_add(&frozen_count, 1);
  for (;;) pause();
}

static void* worker(void* arg) {
  int id = (int)(size_t)arg;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
  void* w[WINDOW] = {0};
  size_t sz[WINDOW] = {0};
  for (;;) {
    if (id < nfrozen && atomic_load(&stop_some)) return NULL;  /* control: exit, blocks left allocated */
    if (atomic_load(&stop_all)) break;
    uint64_t r = rng_next(&rng);
    int k = (int)(r % WINDOW);
    size_t n = (r >> 20) % 16 == 0 ? 4096 + (r >> 32) % 28672 : 16 + (r >> 32) % 4080;
    if (w[k]) {
      free(w[k]);
      atomic_fetch_sub(&live_bytes[id], (long)sz[k]);
    }
    w[k] = malloc_or_die(n);
    memset(w[k], id, 16);
    sz[k] = n;
    atomic_fetch_add(&live_bytes[id], (long)n);
  }
  for (int k = 0; k < WINDOW; k++) free(w[k]);
  atomic_store(&live_bytes[id], 0);
  return NULL;
}

static void give_back(void) {
  void (*fw)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "fw_collect");
  void (*mi)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "mi_collect");
  int (*trim)(size_t) = (int (*)(size_t))dlsym(RTLD_DEFAULT, "malloc_trim");
  if (fw) fw();
  else if (mi) mi(1);
  else if (trim) trim(0);
}

static void hung(int sig) {
  (void)sig;
  static const char msg[] = "frozen: a run did not finish in 20 s: the frozen threads blocked the others\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(3);
}

/* One run in this (child) process; writes "rss live_frozen" in KiB to fd. */
static void run(int frozen, int fd) {
  signal(SIGALRM, hung);
  alarm(20);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = freeze;
  sigaction(SIGUSR1, &sa, NULL);
  for (int i = 0; i < nthreads; i++) pthread_create(&tids[i], NULL, worker, (void*)(size_t)i);
  sleep_seconds(seconds);
  long live_frozen = 0;
  if (frozen) {
    for (int i = 0; i < nfrozen; i++) pthread_kill(tids[i], SIGUSR1);
    while (atomic_load(&frozen_count) < nfrozen) sleep_seconds(0.001);
    for (int i = 0; i < nfrozen; i++) live_frozen += atomic_load(&live_bytes[i]);
  } else {
    atomic_store(&stop_some, 1);
    for (int i = 0; i < nfrozen; i++) pthread_join(tids[i], NULL);
  }
  atomic_store(&stop_all, 1);
  for (int i = nfrozen; i < nthreads; i++) pthread_join(tids[i], NULL);
  give_back();
  sleep_seconds(0.05);
  char buf[64];
  int len = snprintf(buf, sizeof buf, "%ld %ld\n", rss_kb(), live_frozen / 1024);
  if (write(fd, buf, (size_t)len) != len) _exit(3);
  _exit(0);
}

static int child(int frozen, long* rss, long* live) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    run(frozen, p[1]);
  }
  close(p[1]);
  char buf[64] = {0};
  ssize_t got = read(p[0], buf, sizeof buf - 1);
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) exit(3);
  if (got <= 0 || sscanf(buf, "%ld %ld", rss, live) != 2) return -1;
  return 0;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) nthreads = atoi(argv[++i]);
    else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc) nfrozen = atoi(argv[++i]);
    else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
    else return usage(argv[0], "[-t threads] [-k frozen] [-d seconds]");
  }
  if (nthreads < 2 || nthreads > MAXT || nfrozen < 1 || nfrozen >= nthreads || seconds <= 0) return bad_arguments();
  double t0 = now();
  double per[3];
  long rc[3], rf[3];
  for (int i = 0; i < 3; i++) {
    long live_c, live_f;
    if (child(0, &rc[i], &live_c) != 0 || child(1, &rf[i], &live_f) != 0) {
      fprintf(stderr, "a run failed\n");
      return 2;
    }
    (void)live_c, (void)live_f;
    per[i] = (double)(rf[i] - rc[i]) / nfrozen;
  }
  double sorted[3] = {per[0], per[1], per[2]};
  qsort(sorted, 3, sizeof sorted[0], cmp_double);
  int m = 0;
  for (int i = 0; i < 3; i++) if (per[i] == sorted[1]) m = i;
  printf("RESULT name=frozen threads=%d frozen=%d seconds=%.6f stranded_kb_per_thread=%.0f rss_control_kb=%ld "
         "rss_frozen_kb=%ld\n", nthreads, nfrozen, now() - t0, sorted[1], rc[m], rf[m]);
  return 0;
}
