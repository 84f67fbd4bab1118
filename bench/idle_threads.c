/* idle_threads: the memory that allocator caches hold for threads that
 * allocated a little and now wait (issue 10's experiment; Dice & Garthwaite
 * 2002 §1 on caches per thread versus per processor).
 *
 * Each of T threads allocates and frees blocks of 21 sizes, 16 B to 16 KiB,
 * four rounds, keeps 8 small blocks (at most 64 B) and waits. While all wait,
 * main samples the process's RSS (/proc/self/statm) 5 times over 0.2 s and
 * reports the median; then the threads free their blocks and exit. Live data
 * while they wait: T x 8 small blocks (under 1 MiB for 1,000 threads).
 *
 *   idle_threads -t THREADS
 * RESULT: seconds (the whole cycle: start, allocate, wait, sample, free, join),
 * rss_waiting_kb. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

static const size_t kSizes[21] = {16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320,
                                  384, 512, 640, 768, 1024, 2048, 3072, 4096, 8192, 16384};
static pthread_barrier_t waiting, release;

static void* worker(void* arg) {
  (void)arg;
  void* kept[8];
  int n = 0;
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 21; i++) {
      char* p = malloc_or_die(kSizes[i]);
      memset(p, i, kSizes[i]);
      if (kSizes[i] <= 64 && n < 8) kept[n++] = p;
      else free(p);
    }
  pthread_barrier_wait(&waiting);
  pthread_barrier_wait(&release);
  for (int i = 0; i < n; i++) free(kept[i]);
  return NULL;
}

static int cmp_long(const void* a, const void* b) {
  long x = *(const long*)a, y = *(const long*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  int threads = 512;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else return usage(argv[0], "[-t threads]");
  }
  if (threads < 1) return bad_arguments();
  pthread_t* t = malloc_or_die(sizeof(pthread_t) * (size_t)threads);
  pthread_barrier_init(&waiting, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&release, NULL, (unsigned)threads + 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  double t0 = now();
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], &attr, worker, NULL) != 0) {
      fprintf(stderr, "pthread_create failed at thread %d\n", i);
      return 2;
    }
  pthread_barrier_wait(&waiting);
  long rss[5];
  for (int i = 0; i < 5; i++) {
    rss[i] = rss_kb();
    sleep_seconds(0.04);
  }
  qsort(rss, 5, sizeof rss[0], cmp_long);
  pthread_barrier_wait(&release);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double secs = now() - t0 - 0.2;  /* less the sampling */
  printf("RESULT name=idle_threads threads=%d seconds=%.6f rss_waiting_kb=%ld\n", threads, secs, rss[2]);
  free(t);
  return 0;
}
