/* teardown: a thread frees a big heap it built, in an order unrelated to the
 * order it allocated in: what an interpreter, a compiler or a database does
 * when it drops a large structure (a hash of a million entries, a parse tree,
 * a cache), and what perl does at the end of bench/realprog perl.
 *
 * Each of T threads allocates N blocks of random sizes in [MIN, MAX] and
 * writes the first byte of each (the build), then frees them all in a random
 * order (a Fisher-Yates shuffle of its pointer array, made before the clock
 * for the free phase starts), reading the first byte of each just before its
 * free, as a program reads an object it is about to drop.  The threads share
 * nothing.  Reported:
 *   seconds        the free phase (the slowest thread's)
 *   build_seconds  the allocation phase (the slowest thread's)
 *   ns_per_free    seconds / N
 *
 * Why this shape: with a heap much bigger than the caches, each free touches
 * a cold block, so the time per free is set by how many of those misses the
 * core can overlap, which the allocator's free path decides (its length, and
 * any atomic read-modify-write, which on x86 waits for every earlier load and
 * store).  A heap of a few hundred thousand blocks already shows it.
 *
 *   -t T   threads (1)              -n N   blocks per thread (1000000)
 *   -m MIN smallest size (16)       -M MAX largest size (48)
 *   -S SEED random seed (1)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_common.h"

static long nblocks = 1000000;
static size_t min_size = 16, max_size = 48;
static uint64_t seed = 1;

struct worker {
  pthread_t tid;
  int id;
  double build_s, free_s;
  uint64_t sum;
  char pad[64];
};

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t rng = (seed + 1) * 0x9E3779B97F4A7C15ULL + (uint64_t)w->id * 0xBF58476D1CE4E5B9ULL;
  rng |= 1;
  unsigned char **a = malloc_or_die((size_t)nblocks * sizeof *a);
  gate_wait();
  double t0 = now();
  for (long i = 0; i < nblocks; i++) {
    size_t sz = min_size + (size_t)(rng_next(&rng) % (max_size - min_size + 1));
    a[i] = malloc_or_die(sz);
    a[i][0] = (unsigned char)i;
  }
  double t1 = now();
  for (long i = nblocks - 1; i > 0; i--) {
    long j = (long)(rng_next(&rng) % (uint64_t)(i + 1));
    unsigned char *t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
  uint64_t sum = 0;
  double t2 = now();
  for (long i = 0; i < nblocks; i++) {
    sum += a[i][0];
    free(a[i]);
  }
  double t3 = now();
  free(a);
  w->build_s = t1 - t0;
  w->free_s = t3 - t2;
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  while ((c = getopt(argc, argv, "t:n:m:M:S:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'n': nblocks = atol(optarg); break;
      case 'm': min_size = (size_t)atol(optarg); break;
      case 'M': max_size = (size_t)atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default: return usage(argv[0], "[-t threads] [-n blocks] [-m min] [-M max] [-S seed]");
    }
  }
  if (nthreads < 1 || nblocks < 1 || min_size < 1 || max_size < min_size) return bad_arguments();
  struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
  if (!ws) { fprintf(stderr, "teardown: out of memory\n"); return 2; }
  for (int i = 0; i < nthreads; i++) {
    ws[i].id = i;
    if (pthread_create(&ws[i].tid, NULL, run, &ws[i])) { perror("pthread_create"); return 2; }
  }
  gate_release(nthreads);
  double build = 0, fr = 0;
  uint64_t sum = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(ws[i].tid, NULL);
    if (ws[i].build_s > build) build = ws[i].build_s;
    if (ws[i].free_s > fr) fr = ws[i].free_s;
    sum += ws[i].sum;
  }
  printf("RESULT name=teardown threads=%d blocks=%ld min=%zu max=%zu seconds=%.6f build_seconds=%.6f "
         "ns_per_free=%.1f checksum=%llu\n",
         nthreads, nblocks, min_size, max_size, fr, build, fr * 1e9 / (double)nblocks, (unsigned long long)sum);
  free(ws);
  return 0;
}
