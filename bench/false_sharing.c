/* active-false and passive-false: Berger et al. 2000 (Hoard) §2.1 and §5.3;
 * Michael 2004 §4.1.  One source, built twice (bench/CMakeLists.txt): the
 * passive-false binary is compiled with -DPASSIVE_FALSE.
 *
 * active-false tests whether the allocator *actively* induces false sharing:
 * each of T threads repeatedly allocates one small block, writes every byte
 * of it W times, and frees it.  If the allocator hands blocks from one cache
 * line to different threads, the writes make the line ping-pong between
 * cores and the run slows down.  The allocation rate is low next to the
 * writes, so malloc latency matters little.  Every thread does the same work.
 *
 * passive-false tests whether it *passively* induces false sharing: the main
 * thread first allocates T small blocks back to back (likely in one cache
 * line) and hands one to each thread, which frees it at once and then
 * proceeds as in active-false.  An allocator that lets each thread reuse the
 * piece of the shared cache line it just freed keeps the false sharing going.
 *
 *   -t T   threads (1)       -n N   malloc/free pairs per thread (300000)
 *   -w W   writes to each byte per pair (1000)    -s S  block size (8)
 *
 * A "write" is a read-modify-write (volatile increment): on current x86
 * cores a stream of plain stores drains through the store buffer a whole
 * cache line at a time and hides most of the ping-pong, while increments
 * expose it (3x slower on this project's 2-core test machine).
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

static long npairs = 300000;
static int writes = 1000;
static size_t size = 8;

struct worker {
  pthread_t tid;
  unsigned char *initial;   /* passive-false: block handed over by main */
  uint64_t sum;
  double end;
  char pad[64];
};

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t sum = 0;
  gate_wait();
  if (w->initial) free(w->initial);
  for (long i = 0; i < npairs; i++) {
    volatile unsigned char *p = malloc_or_die(size);
    for (size_t b = 0; b < size; b++) p[b] = (unsigned char)b;
    for (int k = 0; k < writes; k++)
      for (size_t b = 0; b < size; b++) p[b]++;
    sum += p[0] + p[size - 1];
    free((void *)p);
  }
  w->end = now();
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  while ((c = getopt(argc, argv, "t:n:w:s:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'n': npairs = atol(optarg); break;
      case 'w': writes = atoi(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-n pairs_per_thread] [-w writes] [-s size]");
    }
  }
  if (nthreads < 1 || npairs < 1 || writes < 1 || size < 1) return bad_arguments();
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
#ifdef PASSIVE_FALSE
  const char *name = "passive-false";
  for (int i = 0; i < nthreads; i++) {
    w[i].initial = malloc(size);
    if (!w[i].initial) { fprintf(stderr, "malloc failed\n"); return 2; }
    memset(w[i].initial, 1, size);
  }
#else
  const char *name = "active-false";
#endif
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
  printf("RESULT name=%s threads=%d size=%zu pairs_per_thread=%ld writes=%d seconds=%.6f "
         "ops_per_sec=%.0f checksum=%llu\n",
         name, nthreads, size, npairs, writes, secs, 2.0 * (double)npairs * nthreads / secs,
         (unsigned long long)sum);
  free(w);
  return 0;
}
