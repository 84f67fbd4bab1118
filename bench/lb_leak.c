/* lb-leak: Lever & Boreham 2000, benchmark 2 (§4.2, §5.2): heap leakage
 * when threads are recreated in rounds and free each other's objects.
 *
 * The main thread allocates T arrays of N objects of S bytes each.  It then
 * starts T worker threads, one per array.  A worker replaces K randomly
 * chosen objects of its array one at a time (free, then malloc a new one),
 * then creates a fresh thread, hands it the array and exits; each new thread
 * is one "round".  After R rounds in every chain the main thread reads
 * getrusage(): the live heap is fixed at about T*N objects all along, so a
 * perfect allocator shows the same minor-fault count and peak RSS for any R;
 * growth with R is heap leakage (memory stranded in heaps of dead threads).
 *
 *   -t T   concurrent chains/threads (1)   -r R   rounds (4)
 *   -n N   objects per thread (10000)      -s S   object size (40)
 *   -k K   replacements per round (N)      -S SEED random seed (1)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static long nobjs = 10000, nrepl = -1, nrounds = 4;
static size_t size = 40;
static sem_t done_sem;
static pthread_attr_t detached;

struct chain {
  unsigned char **objs;
  uint64_t rng, sum;
  long rounds_done;
  int failed;
};

static void *worker(void *arg) {
  struct chain *c = arg;
  for (long i = 0; i < nrepl; i++) {
    long k = (long)(rng_next(&c->rng) % (uint64_t)nobjs);
    c->sum += c->objs[k][0];
    free(c->objs[k]);
    unsigned char *p = malloc_or_die(size);
    memset(p, (int)(i & 0xff), size);
    c->objs[k] = p;
  }
  if (++c->rounds_done < nrounds) {
    pthread_t next;
    if (pthread_create(&next, &detached, worker, c) == 0) return NULL;
    c->failed = 1;
  }
  sem_post(&done_sem);
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = 1, ch;
  uint64_t seed = 1;
  while ((ch = getopt(argc, argv, "t:r:n:s:k:S:")) != -1) {
    switch (ch) {
      case 't': nthreads = atoi(optarg); break;
      case 'r': nrounds = atol(optarg); break;
      case 'n': nobjs = atol(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      case 'k': nrepl = atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default:
        return usage(argv[0], "[-t threads] [-r rounds] [-n objects_per_thread] [-s size] "
                "[-k replacements_per_round] [-S seed]");
    }
  }
  if (nrepl < 0) nrepl = nobjs;
  if (nthreads < 1 || nrounds < 1 || nobjs < 1 || size < 1) return bad_arguments();
  sem_init(&done_sem, 0, 0);
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  struct rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);

  struct chain *chains = calloc((size_t)nthreads, sizeof *chains);
  for (int t = 0; t < nthreads; t++) {
    chains[t].rng = (seed + (uint64_t)t) * 0x9E3779B97F4A7C15ULL | 1;
    chains[t].objs = malloc((size_t)nobjs * sizeof(void *));
    if (!chains[t].objs) { fprintf(stderr, "out of memory\n"); return 2; }
    for (long i = 0; i < nobjs; i++) {
      chains[t].objs[i] = malloc(size);
      if (!chains[t].objs[i]) { fprintf(stderr, "out of memory\n"); return 2; }
      memset(chains[t].objs[i], 1, size);
    }
  }
  double t0 = now();
  for (int t = 0; t < nthreads; t++) {
    pthread_t tid;
    if (pthread_create(&tid, &detached, worker, &chains[t])) { perror("pthread_create"); return 2; }
  }
  for (int t = 0; t < nthreads; t++) sem_wait(&done_sem);
  double secs = now() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  uint64_t sum = 0;
  int failed = 0;
  for (int t = 0; t < nthreads; t++) {
    sum += chains[t].sum;
    failed |= chains[t].failed;
    for (long i = 0; i < nobjs; i++) free(chains[t].objs[i]);
    free(chains[t].objs);
  }
  free(chains);
  double live_kib = (double)nthreads * (double)nobjs * (double)size / 1024.0;
  printf("RESULT name=lb-leak threads=%d rounds=%ld objects_per_thread=%ld size=%zu replacements=%ld "
         "seconds=%.6f minflt=%ld minflt_run=%ld maxrss_kb=%ld live_kib=%.0f checksum=%llu\n",
         nthreads, nrounds, nobjs, size, nrepl, secs, ru.ru_minflt, ru.ru_minflt - ru0.ru_minflt,
         ru.ru_maxrss, live_kib, (unsigned long long)sum);
  if (failed) { fprintf(stderr, "lb-leak: a successor thread could not be created\n"); return 3; }
  return 0;
}
