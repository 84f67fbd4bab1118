/* linux-scalability: Lever & Boreham 2000, benchmark 1 (§4.1, §5.1);
 * the same loop is Michael 2004 §4.1 "Linux scalability".
 *
 * T threads each perform N malloc/free pairs of one fixed size in a tight
 * loop.  Measures allocator latency and scalability under a regular, purely
 * thread-private pattern; with T > cores it shows the cost of preemption.
 *
 *   -t T   threads (1)        -n N   pairs per thread (200000000)
 *   -s S   block size (8)
 *
 * Only the standard malloc API is used, so the program runs unchanged under
 * LD_PRELOAD of any allocator.  Build with -fno-builtin-malloc/-free so the
 * compiler cannot elide the pairs; each block is also written and folded
 * into a checksum that is printed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static long npairs = 200000000;
static size_t size = 8;

struct worker {
  pthread_t tid;
  uint64_t sum;
  double end;
  char pad[64];
};

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t sum = 0;
  gate_wait();
  for (long i = 0; i < npairs; i++) {
    unsigned char *p = malloc_or_die(size);
    p[0] = (unsigned char)i;
    p[size - 1] = (unsigned char)(i >> 3);
    sum += p[0] + p[size - 1] + ((uintptr_t)p & 0xff);
    free(p);
  }
  w->end = now();
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  while ((c = getopt(argc, argv, "t:n:s:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'n': npairs = atol(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-n pairs_per_thread] [-s size]");
    }
  }
  if (nthreads < 1 || npairs < 1 || size < 1) return bad_arguments();
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  double t0 = gate_release(nthreads), t1 = t0;
  uint64_t sum = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    if (w[i].end > t1) t1 = w[i].end;
    sum += w[i].sum;
  }
  double secs = t1 - t0;
  double ops = 2.0 * (double)npairs * nthreads;
  printf("RESULT name=linux-scalability threads=%d size=%zu pairs_per_thread=%ld seconds=%.6f "
         "ops_per_sec=%.0f checksum=%llu\n",
         nthreads, size, npairs, secs, ops / secs, (unsigned long long)sum);
  free(w);
  return 0;
}
