/* phases: a program whose block size changes from phase to phase, with churn
 * inside each phase, as a compiler's passes or a server's request types do.
 *
 * Each of P phases picks one block size (an octave from 16-31 to 512-1023
 * bytes, each as likely, then a size in it, from the seed), allocates M bytes of blocks of that size, then runs C churn
 * rounds, each freeing a random half of the blocks and allocating them again,
 * and at the end frees them all, in a random order. So the memory one phase's
 * size class used is free (and part empty on the way) when the next phase's
 * class wants it: an allocator whose emptied memory can serve another size,
 * and whose part-empty memory is found again by its own size, keeps its peak
 * near M; one that loses track of part-empty memory takes fresh memory for
 * the churn instead.  With T threads, each runs its own phases (own seed),
 * all at once.  Reported:
 *   seconds        all phases of all threads
 *   live_kb_peak   the most bytes any phase holds live, all threads (M x T)
 *
 *   -t T   threads (1)          -p P   phases (8)
 *   -m MB  MiB per phase (64)   -c C   churn rounds per phase (3)
 *   -S SEED  seed (1)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

static long phases = 8, churn = 3, threads = 1;
static size_t phase_bytes = (size_t)64 << 20;
static uint64_t seed = 1;

struct worker {
  uint64_t rng, sum;
};

/* One phase: n blocks of `size` bytes, churned, then freed in random order. */
static void run_phase(struct worker *w, size_t size) {
  size_t n = phase_bytes / size;
  unsigned char **v = malloc_or_die(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    v[i] = malloc_or_die(size);
    memset(v[i], (int)(i & 0x7f), size);
  }
  for (long r = 0; r < churn; r++) {
    for (size_t i = 0; i < n; i++) {
      if (rng_next(&w->rng) & 1) {
        w->sum += v[i][size - 1];
        free(v[i]);
        v[i] = NULL;
      }
    }
    for (size_t i = 0; i < n; i++) {
      if (v[i] == NULL) {
        v[i] = malloc_or_die(size);
        memset(v[i], (int)((i + (size_t)r) & 0x7f), size);
      }
    }
  }
  /* Free in random order: a shuffle of the blocks first. */
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(rng_next(&w->rng) % i);
    unsigned char *t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    w->sum += v[i][0];
    free(v[i]);
  }
  free(v);
}

static void *work(void *arg) {
  struct worker *w = arg;
  gate_wait();
  for (long p = 0; p < phases; p++) {
    /* An octave [2^k, 2^(k+1)), k in 4..9, then a size in it: as many
     * phases at each octave, rounded to 8 bytes. */
    size_t base = (size_t)16 << (rng_next(&w->rng) % 6);
    size_t size = (base + (size_t)(rng_next(&w->rng) % base) + 7) & ~(size_t)7;
    run_phase(w, size);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int c;
  while ((c = getopt(argc, argv, "t:p:m:c:S:")) != -1) {
    switch (c) {
      case 't': threads = atol(optarg); break;
      case 'p': phases = atol(optarg); break;
      case 'm': phase_bytes = (size_t)atol(optarg) << 20; break;
      case 'c': churn = atol(optarg); break;
      case 'S': seed = (uint64_t)atoll(optarg); break;
      default: return usage(argv[0], "[-t threads] [-p phases] [-m MiB per phase] [-c churn rounds] [-S seed]");
    }
  }
  if (threads < 1 || phases < 1 || churn < 0 || phase_bytes < 1024) return bad_arguments();
  struct worker *ws = calloc((size_t)threads, sizeof *ws);
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  if (!ws || !tids) return 2;
  for (long i = 0; i < threads; i++) {
    ws[i].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i + 1;
    if (pthread_create(&tids[i], NULL, work, &ws[i]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 2;
    }
  }
  double t0 = gate_release((int)threads);
  uint64_t sum = 0;
  for (long i = 0; i < threads; i++) {
    pthread_join(tids[i], NULL);
    sum += ws[i].sum;
  }
  double t = now() - t0;
  printf("RESULT name=phases threads=%ld phases=%ld mb_per_phase=%zu churn=%ld seconds=%.6f live_kb_peak=%zu "
         "checksum=%llu\n",
         threads, phases, phase_bytes >> 20, churn, t, (phase_bytes >> 10) * (size_t)threads,
         (unsigned long long)sum);
  free(ws);
  free(tids);
  return 0;
}
