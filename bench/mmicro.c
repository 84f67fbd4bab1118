/* mmicro: Dice & Garthwaite 2002 §4.1.
 *
 * Fixed-time throughput: T threads are created before timing starts and
 * wait on a barrier; the main thread takes the start time, drops the
 * barrier, sleeps D milliseconds and raises a stop flag.  Each thread loops:
 * malloc B blocks of S bytes, then free them in the same order in which they
 * were allocated.  No threads are created or destroyed in the timed
 * interval, so scheduling and thread start-up do not enter the score.
 * Reports malloc-free pairs per second (and ops_per_sec = 2 x pairs).
 *
 *   -t T   threads (1)       -d D   milliseconds (2000)
 *   -b B   blocks per batch (64)    -s S   block size (64)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static long nblocks = 64;
static size_t size = 64;
static atomic_int stop_flag;

struct worker {
  pthread_t tid;
  unsigned char **blocks;
  uint64_t pairs, sum;
  char pad[64];
};

static void *run(void *arg) {
  struct worker *w = arg;
  unsigned char **b = w->blocks;
  uint64_t pairs = 0, sum = 0;
  gate_wait();
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    for (long j = 0; j < nblocks; j++) {
      unsigned char *p = malloc_or_die(size);
      p[0] = (unsigned char)j;
      p[size - 1] = (unsigned char)pairs;
      b[j] = p;
    }
    for (long j = 0; j < nblocks; j++) {
      sum += b[j][0] + b[j][size - 1];
      free(b[j]);
    }
    pairs += (uint64_t)nblocks;
  }
  w->pairs = pairs;
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  long ms = 2000;
  while ((c = getopt(argc, argv, "t:d:b:s:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'd': ms = atol(optarg); break;
      case 'b': nblocks = atol(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-d milliseconds] [-b blocks] [-s size]");
    }
  }
  if (nthreads < 1 || ms < 1 || nblocks < 1 || size < 1) return bad_arguments();
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++) {
    w[i].blocks = malloc((size_t)nblocks * sizeof(void *));
    if (!w[i].blocks) { fprintf(stderr, "out of memory\n"); return 2; }
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  }
  double t0 = gate_release(nthreads);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
  double t1 = now();
  atomic_store(&stop_flag, 1);
  uint64_t pairs = 0, sum = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    pairs += w[i].pairs;
    sum += w[i].sum;
    free(w[i].blocks);
  }
  double secs = t1 - t0;
  printf("RESULT name=mmicro threads=%d blocks=%ld size=%zu seconds=%.6f pairs_per_sec=%.0f "
         "ops_per_sec=%.0f checksum=%llu\n",
         nthreads, nblocks, size, secs, (double)pairs / secs, 2.0 * (double)pairs / secs,
         (unsigned long long)sum);
  free(w);
  return 0;
}
