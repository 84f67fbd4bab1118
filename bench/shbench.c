/* shbench-style stress test: Berger et al. 2000 (Hoard) §5.2 and §5.4,
 * Aigner et al. 2015 (scalloc) §7.2.
 *
 * Each of T threads runs R rounds.  A round allocates B blocks of random
 * sizes in [MIN, MAX] and gives each block a random lifetime: it is freed at
 * the end of this round (probability 1/2), of the next round (1/4), the one
 * after (1/8) ... up to L-1 rounds later, and about 1 block in 64 is
 * long-lived: it joins a pool of up to P blocks that survive until a later
 * block evicts it (random replacement) or the run ends.  Blocks due in a
 * round are freed in random order.  Unlike threadtest the lifetimes are not
 * one round, so spans/superblocks hold a changing mix of live and dead
 * blocks of many size classes.  All threads do the same fixed work.
 *
 *   -t T   threads (1)          -r R   rounds per thread (50000)
 *   -b B   blocks per round (1000)
 *   -m MIN smallest size (8)    -M MAX largest size (100)
 *   -l L   longest short lifetime in rounds (8)
 *   -p P   long-lived pool size per thread (20000)
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

static long rounds = 50000, batch = 1000, pool_cap = 20000;
static size_t min_size = 8, max_size = 100;
static int lifetimes = 8;
static uint64_t seed = 1;

/* A bucket holds the blocks due to be freed at the end of one round. */
struct bucket { unsigned char **p; long n, cap; };

struct worker {
  pthread_t tid;
  int id;
  uint64_t sum, mallocs, frees;
  double end;
  char pad[64];
};

static void free_block(unsigned char *p, uint64_t *sum) {
  *sum += p[0];
  free(p);
}

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t rng = (seed + 1) * 0x9E3779B97F4A7C15ULL + (uint64_t)w->id * 0xBF58476D1CE4E5B9ULL;
  rng |= 1;
  struct bucket *bk = calloc((size_t)lifetimes, sizeof *bk);
  unsigned char **pool = malloc((size_t)pool_cap * sizeof *pool);
  if (!bk || !pool) { fprintf(stderr, "out of memory\n"); exit(2); }
  for (int i = 0; i < lifetimes; i++) {
    bk[i].cap = 2 * batch;
    bk[i].p = malloc((size_t)bk[i].cap * sizeof(void *));
    if (!bk[i].p) { fprintf(stderr, "out of memory\n"); exit(2); }
  }
  long pool_n = 0;
  uint64_t sum = 0, mallocs = 0, frees = 0;
  gate_wait();
  for (long r = 0; r < rounds; r++) {
    int cur = (int)(r % lifetimes);
    for (long j = 0; j < batch; j++) {
      uint64_t x = rng_next(&rng);
      size_t sz = min_size + (size_t)(x % (max_size - min_size + 1));
      unsigned char *p = malloc_or_die(sz);
      mallocs++;
      p[0] = (unsigned char)j;
      p[sz - 1] = (unsigned char)r;
      uint64_t y = x >> 32;
      if ((y & 63) == 0) { /* long-lived */
        if (pool_n < pool_cap) pool[pool_n++] = p;
        else {
          long v = (long)((y >> 6) % (uint64_t)pool_cap);
          free_block(pool[v], &sum);
          frees++;
          pool[v] = p;
        }
        continue;
      }
      int life = __builtin_ctzll((y >> 6) | (1ULL << 40)); /* geometric: 0 w.p. 1/2, 1 w.p. 1/4 ... */
      if (life >= lifetimes) life = lifetimes - 1;
      struct bucket *b = &bk[(cur + life) % lifetimes];
      if (b->n == b->cap) b = &bk[cur];  /* full: die this round */
      if (b->n == b->cap) { free_block(p, &sum); frees++; continue; }
      b->p[b->n++] = p;
    }
    /* Free the blocks due now, in random order. */
    struct bucket *b = &bk[cur];
    while (b->n > 0) {
      long k = (long)(rng_next(&rng) % (uint64_t)b->n);
      free_block(b->p[k], &sum);
      frees++;
      b->p[k] = b->p[--b->n];
    }
  }
  for (int i = 0; i < lifetimes; i++) {
    for (long k = 0; k < bk[i].n; k++) { free_block(bk[i].p[k], &sum); frees++; }
    free(bk[i].p);
  }
  for (long k = 0; k < pool_n; k++) { free_block(pool[k], &sum); frees++; }
  w->end = now();
  free(pool);
  free(bk);
  w->sum = sum;
  w->mallocs = mallocs;
  w->frees = frees;
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  while ((c = getopt(argc, argv, "t:r:b:m:M:l:p:S:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'r': rounds = atol(optarg); break;
      case 'b': batch = atol(optarg); break;
      case 'm': min_size = (size_t)atol(optarg); break;
      case 'M': max_size = (size_t)atol(optarg); break;
      case 'l': lifetimes = atoi(optarg); break;
      case 'p': pool_cap = atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default:
        return usage(argv[0], "[-t threads] [-r rounds] [-b blocks_per_round] [-m min] [-M max] "
                "[-l lifetimes] [-p pool] [-S seed]");
    }
  }
  if (nthreads < 1 || rounds < 1 || batch < 1 || min_size < 1 || max_size < min_size || lifetimes < 1 ||
      pool_cap < 1)
    return bad_arguments();
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++) {
    w[i].id = i;
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  }
  double t0 = gate_release(nthreads), t1 = t0;
  uint64_t sum = 0, mallocs = 0, frees = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    if (w[i].end > t1) t1 = w[i].end;
    sum += w[i].sum; mallocs += w[i].mallocs; frees += w[i].frees;
  }
  double secs = t1 - t0;
  printf("RESULT name=shbench threads=%d min=%zu max=%zu rounds=%ld blocks_per_round=%ld seconds=%.6f "
         "ops_per_sec=%.0f mallocs=%llu frees=%llu checksum=%llu\n",
         nthreads, min_size, max_size, rounds, batch, secs, (double)(mallocs + frees) / secs,
         (unsigned long long)mallocs, (unsigned long long)frees, (unsigned long long)sum);
  free(w);
  return mallocs == frees ? 0 : 3;
}
