/* lb-falseshare: Lever & Boreham 2000, benchmark 3 (§4.3, §5.3): false
 * cache-line sharing of heap objects, for object sizes 3 to 52 bytes.
 *
 * For each size k in [A, B] the main thread allocates T objects of k bytes
 * back to back and passes one to each of T threads (T <= number of CPUs).
 * Each thread writes a byte at the front and a byte at the back of its
 * object W times (front and back, in case the object straddles a line).
 * Each write is a volatile increment (read-modify-write): plain stores are
 * absorbed by the store buffer of current x86 cores and hide most of the
 * ping-pong, increments expose it.
 * The time for all threads to finish is recorded per size.  If the
 * allocator placed two of the objects in one cache line the line
 * ping-pongs between cores and that size runs much slower.  As reference
 * the same test runs on objects 128 bytes apart in static memory ("ideal").
 * The program also checks the addresses: "shared_sizes" counts the sizes
 * for which two threads' objects touch a common cache line.
 *
 *   -t T   threads (2)       -w W   writes per thread per size (5000000)
 *   -a A   first size (3)    -b B   last size (52)
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

#define MAX_THREADS 256
static long nwrites = 5000000;

struct job {
  pthread_t tid;
  volatile unsigned char *obj;
  size_t size;
  double end;
  uint64_t sum;
};

static void *writer(void *arg) {
  struct job *j = arg;
  gate_wait();
  volatile unsigned char *p = j->obj;
  size_t last = j->size - 1;
  for (long i = 0; i < nwrites; i++) {
    p[0]++;
    p[last]++;
  }
  j->sum = p[0] + p[last];
  j->end = now();
  return NULL;
}

/* Runs one trial: thread i writes objs[i] (size bytes).  Returns seconds.
 * The start gate is reset for each trial's set of threads. */
static double trial(int nthreads, unsigned char **objs, size_t size, uint64_t *sum) {
  struct job jobs[MAX_THREADS];
  gate_ready = 0;
  gate_open = 0;
  for (int i = 0; i < nthreads; i++) {
    jobs[i].obj = objs[i];
    jobs[i].size = size;
    if (pthread_create(&jobs[i].tid, NULL, writer, &jobs[i])) { perror("pthread_create"); exit(2); }
  }
  double t0 = gate_release(nthreads), t1 = t0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(jobs[i].tid, NULL);
    if (jobs[i].end > t1) t1 = jobs[i].end;
    *sum += jobs[i].sum;
  }
  return t1 - t0;
}

static _Alignas(128) unsigned char ideal_mem[MAX_THREADS][128];

int main(int argc, char **argv) {
  int nthreads = 2, c;
  long first = 3, last = 52;
  while ((c = getopt(argc, argv, "t:w:a:b:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'w': nwrites = atol(optarg); break;
      case 'a': first = atol(optarg); break;
      case 'b': last = atol(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-w writes] [-a first_size] [-b last_size]");
    }
  }
  if (nthreads < 1 || nthreads > MAX_THREADS || nwrites < 1 || first < 1 || last < first || last > 128)
    return bad_arguments();
  long line = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  if (line <= 0) line = 64;
  uint64_t sum = 0;
  unsigned char *objs[MAX_THREADS];

  /* Reference: objects in separate cache lines, not from malloc. */
  for (int i = 0; i < nthreads; i++) objs[i] = ideal_mem[i];
  double ideal = trial(nthreads, objs, (size_t)last, &sum);

  double total = 0, worst = 0;
  long worst_size = first, shared_sizes = 0;
  char per_size[8192];
  size_t off = 0;
  per_size[0] = 0;
  for (long k = first; k <= last; k++) {
    for (int i = 0; i < nthreads; i++) {
      objs[i] = malloc((size_t)k);
      if (!objs[i]) { fprintf(stderr, "malloc(%ld) failed\n", k); return 2; }
      memset(objs[i], 0, (size_t)k);
    }
    int shared = 0;
    for (int i = 0; i < nthreads && !shared; i++)
      for (int j = i + 1; j < nthreads && !shared; j++) {
        uintptr_t a0 = (uintptr_t)objs[i] / (uintptr_t)line, a1 = ((uintptr_t)objs[i] + (uintptr_t)k - 1) / (uintptr_t)line;
        uintptr_t b0 = (uintptr_t)objs[j] / (uintptr_t)line, b1 = ((uintptr_t)objs[j] + (uintptr_t)k - 1) / (uintptr_t)line;
        shared = !(a1 < b0 || b1 < a0);
      }
    shared_sizes += shared;
    double s = trial(nthreads, objs, (size_t)k, &sum);
    total += s;
    if (s > worst) { worst = s; worst_size = k; }
    off += (size_t)snprintf(per_size + off, sizeof per_size - off, "%s%ld:%.5f%s", off ? "," : "", k, s,
                            shared ? "*" : "");
    for (int i = 0; i < nthreads; i++) free(objs[i]);
  }
  for (int i = 0; i < nthreads; i++) objs[i] = ideal_mem[i];
  double ideal2 = trial(nthreads, objs, (size_t)last, &sum);
  if (ideal2 < ideal) ideal = ideal2;
  long nsizes = last - first + 1;
  printf("RESULT name=lb-falseshare threads=%d writes=%ld sizes=%ld-%ld seconds=%.6f ideal_seconds=%.6f "
         "slowdown=%.3f worst_size=%ld worst_slowdown=%.3f shared_sizes=%ld per_size=%s checksum=%llu\n",
         nthreads, nwrites, first, last, total, ideal * (double)nsizes, total / (ideal * (double)nsizes),
         worst_size, worst / ideal, shared_sizes, per_size, (unsigned long long)sum);
  return 0;
}
