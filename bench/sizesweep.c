/* sizesweep: object-size robustness, after Aigner et al. 2015 (scalloc)
 * §7.5 (ACDC configured for thread-local objects of growing size).
 *
 * Each of T threads runs C cycles.  A cycle allocates new objects with sizes
 * drawn uniformly from [2^X, 2^(X+2)) until V bytes have been allocated,
 * accesses them (writes the first and last byte and one byte in every 4 KiB
 * page), and then frees the objects of the previous cycle, so two
 * generations are live at a time.  bench/run calls it once per range,
 * X = 4, 6, ..., 20 (16 B ... 4 MiB).  Small ranges stress size-class
 * allocation, large ones the large-object path (mmap/madvise) and page
 * faults.  (scalloc allocates 2^X KB per cycle; a fixed V keeps the run
 * short on a small machine.)
 *
 *   -t T   threads (1)         -x X   size range exponent (4)
 *   -v V   bytes per cycle (16777216)     -c C  cycles (60)
 *   -S SEED random seed (1)
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

static int xexp = 4;
static long cycles = 60;
static size_t volume = 16u << 20;
static uint64_t seed = 1;

struct worker {
  pthread_t tid;
  int id;
  uint64_t sum, objects;
  double end;
  char pad[64];
};

static void *run(void *arg) {
  struct worker *w = arg;
  size_t lo = (size_t)1 << xexp, span = ((size_t)1 << (xexp + 2)) - lo;
  long cap = (long)(volume / lo) + 2;
  unsigned char **gen[2];
  long n[2] = {0, 0};
  gen[0] = malloc((size_t)cap * sizeof(void *));
  gen[1] = malloc((size_t)cap * sizeof(void *));
  if (!gen[0] || !gen[1]) { fprintf(stderr, "out of memory\n"); exit(2); }
  uint64_t rng = (seed + (uint64_t)w->id) * 0x9E3779B97F4A7C15ULL | 1;
  uint64_t sum = 0, objects = 0;
  gate_wait();
  for (long cyc = 0; cyc < cycles; cyc++) {
    int g = (int)(cyc & 1);
    size_t bytes = 0;
    n[g] = 0;
    while (bytes < volume && n[g] < cap) {
      size_t sz = lo + (size_t)(rng_next(&rng) % span);
      unsigned char *p = malloc_or_die(sz);
      for (size_t o = 4096; o < sz; o += 4096) p[o] = (unsigned char)o;
      p[0] = (unsigned char)(objects | 1);
      p[sz - 1] = (unsigned char)cyc;
      gen[g][n[g]++] = p;
      bytes += sz;
      objects++;
    }
    int old = g ^ 1;
    for (long i = 0; i < n[old]; i++) { sum += gen[old][i][0]; free(gen[old][i]); }
    n[old] = 0;
  }
  for (int g = 0; g < 2; g++)
    for (long i = 0; i < n[g]; i++) { sum += gen[g][i][0]; free(gen[g][i]); }
  w->end = now();
  free(gen[0]);
  free(gen[1]);
  w->sum = sum;
  w->objects = objects;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  while ((c = getopt(argc, argv, "t:x:v:c:S:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'x': xexp = atoi(optarg); break;
      case 'v': volume = (size_t)atoll(optarg); break;
      case 'c': cycles = atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default:
        return usage(argv[0], "[-t threads] [-x size_exponent] [-v bytes_per_cycle] [-c cycles] [-S seed]");
    }
  }
  if (nthreads < 1 || xexp < 0 || xexp > 28 || cycles < 1 || volume < 1) return bad_arguments();
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++) {
    w[i].id = i;
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  }
  double t0 = gate_release(nthreads), t1 = t0;
  uint64_t sum = 0, objects = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    if (w[i].end > t1) t1 = w[i].end;
    sum += w[i].sum;
    objects += w[i].objects;
  }
  double secs = t1 - t0;
  printf("RESULT name=sizesweep threads=%d range=%zu-%zu cycles=%ld bytes_per_cycle=%zu seconds=%.6f "
         "ops_per_sec=%.0f objects=%llu checksum=%llu\n",
         nthreads, (size_t)1 << xexp, (size_t)1 << (xexp + 2), cycles, volume, secs,
         2.0 * (double)objects / secs, (unsigned long long)objects, (unsigned long long)sum);
  free(w);
  return 0;
}
