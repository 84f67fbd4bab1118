/* larson: the server simulation of Larson & Krishnan as described in
 * Berger et al. 2000 (Hoard) §5.2 and Michael 2004 §4.1, with the start
 * barrier of Dice & Garthwaite 2002 §4.1.
 *
 * Set-up (untimed): the main thread allocates T*C blocks of random sizes in
 * [MIN, MAX], replaces random ones in random order to scatter them over the
 * heap, and hands C blocks to each of T slots.
 * Timed phase (D seconds): a worker thread per slot repeatedly picks a random
 * block of its slot, frees it and allocates a new random-sized block in its
 * place.  After R replacements the thread creates a successor thread, hands
 * it the slot and exits ("bleeding": blocks allocated by one thread are freed
 * by a later one).  Workers wait on a barrier until the main thread has taken
 * the start time (Dice & Garthwaite's fix: no work outside the timed
 * interval).
 * Reports memory operations (mallocs + frees) per second.
 *
 *   -t T   threads (1)        -d D   seconds of timed phase (2)
 *   -m MIN smallest size (16) -M MAX largest size (80)
 *   -c C   blocks per thread (1024)
 *   -r R   replacements per thread before handing over (10000)
 *   -S SEED random seed (1)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static size_t min_size = 16, max_size = 80;
static long chunks = 1024, replacements = 10000;
static atomic_int stop_flag;
static sem_t done_sem;
static pthread_attr_t detached;

struct slot {
  unsigned char **blocks;
  size_t *sizes;
  uint64_t rng;
  uint64_t pairs;       /* free+malloc pairs done by this slot's threads */
  uint64_t sum;
  long generations;     /* threads that have run this slot */
  int first;
  int failed;
  char pad[64];
};

static size_t rand_size(uint64_t *rng) {
  return min_size + (size_t)(rng_next(rng) % (max_size - min_size + 1));
}

static unsigned char *new_block(size_t sz, uint64_t tag) {
  unsigned char *p = malloc_or_die(sz);
  p[0] = (unsigned char)tag;
  p[sz - 1] = (unsigned char)(tag >> 8);
  return p;
}

static void *worker(void *arg) {
  struct slot *s = arg;
  if (s->first) { s->first = 0; gate_wait(); }
  s->generations++;
  uint64_t sum = s->sum, pairs = s->pairs;
  for (long i = 0; i < replacements; i++) {
    if (atomic_load_explicit(&stop_flag, memory_order_relaxed)) break;
    long idx = (long)(rng_next(&s->rng) % (uint64_t)chunks);
    unsigned char *old = s->blocks[idx];
    sum += old[0] + old[s->sizes[idx] - 1];
    free(old);
    size_t sz = rand_size(&s->rng);
    s->blocks[idx] = new_block(sz, pairs);
    s->sizes[idx] = sz;
    pairs++;
  }
  s->sum = sum;
  s->pairs = pairs;
  if (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    pthread_t next;
    int err = pthread_create(&next, &detached, worker, s);
    if (err == 0) return NULL;  /* the successor owns the slot now */
    fprintf(stderr, "pthread_create: %s\n", strerror(err));
    s->failed = 1;
  }
  sem_post(&done_sem);
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, c;
  double duration = 2.0;
  uint64_t seed = 1;
  while ((c = getopt(argc, argv, "t:d:m:M:c:r:S:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'd': duration = atof(optarg); break;
      case 'm': min_size = (size_t)atol(optarg); break;
      case 'M': max_size = (size_t)atol(optarg); break;
      case 'c': chunks = atol(optarg); break;
      case 'r': replacements = atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default:
        return usage(argv[0],
                "[-t threads] [-d seconds] [-m min] [-M max] [-c blocks_per_thread] "
                "[-r replacements_per_thread] [-S seed]");
    }
  }
  if (nthreads < 1 || duration <= 0 || min_size < 1 || max_size < min_size || chunks < 1 || replacements < 1)
    return bad_arguments();
  sem_init(&done_sem, 0, 0);
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);

  /* Untimed set-up by one thread: allocate, then scatter by random
   * replacements, then hand C blocks to each slot. */
  uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 1;
  long total = chunks * nthreads;
  unsigned char **all = malloc((size_t)total * sizeof *all);
  size_t *sizes = malloc((size_t)total * sizeof *sizes);
  if (!all || !sizes) { fprintf(stderr, "out of memory\n"); return 2; }
  for (long i = 0; i < total; i++) { sizes[i] = rand_size(&rng); all[i] = new_block(sizes[i], i); }
  for (long i = 0; i < total; i++) {
    long idx = (long)(rng_next(&rng) % (uint64_t)total);
    free(all[idx]);
    sizes[idx] = rand_size(&rng);
    all[idx] = new_block(sizes[idx], i);
  }
  struct slot *slots = calloc((size_t)nthreads, sizeof *slots);
  for (int t = 0; t < nthreads; t++) {
    slots[t].blocks = all + (size_t)t * chunks;
    slots[t].sizes = sizes + (size_t)t * chunks;
    slots[t].rng = rng_next(&rng) | 1;
    slots[t].first = 1;
    pthread_t tid;
    int err = pthread_create(&tid, &detached, worker, &slots[t]);
    if (err) { fprintf(stderr, "pthread_create: %s\n", strerror(err)); return 2; }
  }
  double t0 = gate_release(nthreads);
  sleep_seconds(duration);
  double t1 = now();
  atomic_store(&stop_flag, 1);
  for (int t = 0; t < nthreads; t++) sem_wait(&done_sem);

  uint64_t pairs = 0, sum = 0;
  long gens = 0;
  int failed = 0;
  for (int t = 0; t < nthreads; t++) {
    pairs += slots[t].pairs;
    sum += slots[t].sum;
    gens += slots[t].generations;
    failed |= slots[t].failed;
  }
  for (long i = 0; i < total; i++) free(all[i]);
  free(all); free(sizes); free(slots);
  double secs = t1 - t0;
  printf("RESULT name=larson threads=%d min=%zu max=%zu blocks_per_thread=%ld replacements=%ld "
         "seconds=%.6f ops_per_sec=%.0f pairs=%llu thread_generations=%ld checksum=%llu\n",
         nthreads, min_size, max_size, chunks, replacements, secs, 2.0 * (double)pairs / secs,
         (unsigned long long)pairs, gens, (unsigned long long)sum);
  if (failed) { fprintf(stderr, "larson: a successor thread could not be created\n"); return 3; }
  return 0;
}
