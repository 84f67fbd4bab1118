/* passive-false: Berger et al. 2000 (Hoard) §2.1 and §5.3; Michael 2004 §4.1.
 *
 * Tests whether the allocator *passively* induces false sharing: the main
 * thread allocates T small blocks back to back (likely in one cache line)
 * and hands one to each thread, which frees it at once and then proceeds as
 * in active-false: repeatedly allocate one block, write every byte of it W
 * times, free it.  An allocator that lets each thread reuse the piece of the
 * shared cache line it just freed keeps the false sharing going.
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

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_ready, gate_open;
static void gate_wait(void) {
  pthread_mutex_lock(&gate_mu);
  gate_ready++;
  pthread_cond_broadcast(&gate_cv);
  while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
  pthread_mutex_unlock(&gate_mu);
}
static double gate_release(int nthreads) {
  pthread_mutex_lock(&gate_mu);
  while (gate_ready < nthreads) pthread_cond_wait(&gate_cv, &gate_mu);
  double t0 = now();
  gate_open = 1;
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_mu);
  return t0;
}

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
    volatile unsigned char *p = malloc(size);
    if (!p) { fprintf(stderr, "malloc(%zu) failed\n", size); exit(2); }
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
        fprintf(stderr, "usage: %s [-t threads] [-n pairs_per_thread] [-w writes] [-s size]\n", argv[0]);
        return 1;
    }
  }
  if (nthreads < 1 || npairs < 1 || writes < 1 || size < 1) { fprintf(stderr, "bad arguments\n"); return 1; }
  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  const char *name = "passive-false";
  for (int i = 0; i < nthreads; i++) {
    w[i].initial = malloc(size);
    if (!w[i].initial) { fprintf(stderr, "malloc failed\n"); return 2; }
    memset(w[i].initial, 1, size);
  }
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
