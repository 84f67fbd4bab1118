/* threadtest: Berger et al. 2000 (Hoard) §5.2; Michael 2004 §4.1;
 * Aigner et al. 2015 (scalloc) §7.2.
 *
 * Each of T threads runs I rounds; a round allocates a batch of N/T blocks
 * of S bytes and then frees them in allocation order.  Threads neither
 * synchronise nor share objects.  The total work (I rounds of N blocks) is
 * fixed, so perfect scaling halves the time when T doubles (up to the core
 * count).  Large batches force the allocator to go to its back end (the
 * working set of a round is bigger than any per-thread cache).
 *
 *   -t T   threads (1)           -i I   rounds (2000)
 *   -n N   blocks per round, split over the threads (100000)
 *   -s S   block size (8)        -w W   local work per block (0)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static long rounds = 2000, per_thread;
static size_t size = 8;
static int work;

struct worker {
  pthread_t tid;
  unsigned char **blocks;
  uint64_t sum;
  double end;
  char pad[64];
};

static void local_work(int n, uint64_t *sum) {
  volatile uint64_t x = *sum;
  for (int i = 0; i < n; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  *sum = x;
}

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t sum = 0;
  unsigned char **b = w->blocks;
  gate_wait();
  for (long r = 0; r < rounds; r++) {
    for (long j = 0; j < per_thread; j++) {
      unsigned char *p = malloc_or_die(size);
      p[0] = (unsigned char)j;
      p[size - 1] = (unsigned char)r;
      b[j] = p;
      if (work) local_work(work, &sum);
    }
    for (long j = 0; j < per_thread; j++) {
      sum += b[j][0] + b[j][size - 1] + ((uintptr_t)b[j] & 0xff);
      free(b[j]);
      if (work) local_work(work, &sum);
    }
  }
  w->end = now();
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  long total = 100000;
  while ((c = getopt(argc, argv, "t:i:n:s:w:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'i': rounds = atol(optarg); break;
      case 'n': total = atol(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      case 'w': work = atoi(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-i rounds] [-n blocks_per_round] [-s size] [-w work]");
    }
  }
  if (nthreads < 1 || rounds < 1 || total < nthreads || size < 1) return bad_arguments();
  per_thread = total / nthreads;
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++) {
    w[i].blocks = malloc((size_t)per_thread * sizeof(void *));
    if (!w[i].blocks) { fprintf(stderr, "out of memory\n"); return 2; }
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  }
  double t0 = gate_release(nthreads), t1 = t0;
  uint64_t sum = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    if (w[i].end > t1) t1 = w[i].end;
    sum += w[i].sum;
    free(w[i].blocks);
  }
  double secs = t1 - t0;
  double ops = 2.0 * (double)rounds * (double)per_thread * nthreads;
  printf("RESULT name=threadtest threads=%d size=%zu rounds=%ld blocks_per_thread=%ld work=%d "
         "seconds=%.6f ops_per_sec=%.0f checksum=%llu\n",
         nthreads, size, rounds, per_thread, work, secs, ops / secs, (unsigned long long)sum);
  free(w);
  return 0;
}
