/* latency: nanoseconds per operation, single-threaded and cross-thread.
 * Michael 2004 §4.2.1 compares contention-free malloc/free latency; like
 * Michael, the program first starts (and joins) a do-nothing thread so that
 * allocators with a "never spawned a thread" fast path are measured in
 * their multithreaded mode.
 *
 * 1. For each size in the list (16,64,256,1024,4096,65536,1048576 by
 *    default): one thread does malloc/free pairs (writing the first and last
 *    byte) for about D milliseconds; reports ns per pair as ns_<size>.
 * 2. Remote free: thread A allocates a batch of B blocks of RS bytes and
 *    hands it to thread B, which frees the whole batch while the clock runs;
 *    repeated for about D ms; reports ns per free as ns_remote_free.
 *    The same batch procedure on one thread gives ns_local_free (free of
 *    blocks the freeing thread allocated itself) for comparison.
 *
 *   -d D   milliseconds per measurement (200; a warm-up of D/4 precedes
 *          each size)
 *   -z LIST comma-separated sizes        -b B  batch size (1000)
 *   -r RS  block size for the batch tests (64)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static double window = 0.2;
static long batch = 1000;
static size_t rsize = 64;
static uint64_t sink;

static void *nothing(void *arg) { return arg; }

static double pair_latency(size_t size, double win) {
  uint64_t sum = 0, pairs = 0;
  const long chunk = size >= 65536 ? 16 : 1024;
  double t0 = now(), t;
  do {
    for (long i = 0; i < chunk; i++) {
      unsigned char *p = malloc_or_die(size);
      p[0] = (unsigned char)i;
      p[size - 1] = (unsigned char)pairs;
      sum += p[0] + p[size - 1];
      free(p);
    }
    pairs += (uint64_t)chunk;
    t = now();
  } while (t - t0 < win);
  sink += sum;
  return (t - t0) * 1e9 / (double)pairs;
}

/* Batch hand-off between two threads: 1 = batch ready for the freer,
 * 0 = freer done, 2 = stop. */
static atomic_int handoff;
static unsigned char **shared_batch;
static double remote_ns_total;
static uint64_t remote_frees;

static void spin_until(int want) {
  int spins = 0;
  while (atomic_load_explicit(&handoff, memory_order_acquire) != want) {
    if (atomic_load_explicit(&handoff, memory_order_acquire) == 2) return;
    if (++spins > 1000) { sched_yield(); spins = 0; } else __builtin_ia32_pause();
  }
}

static void *freer(void *arg) {
  (void)arg;
  for (;;) {
    spin_until(1);
    if (atomic_load(&handoff) == 2) break;
    double t0 = now();
    for (long i = 0; i < batch; i++) free(shared_batch[i]);
    remote_ns_total += (now() - t0) * 1e9;
    remote_frees += (uint64_t)batch;
    atomic_store_explicit(&handoff, 0, memory_order_release);
  }
  return NULL;
}

static void fill_batch(unsigned char **b) {
  for (long i = 0; i < batch; i++) {
    b[i] = malloc_or_die(rsize);
    b[i][0] = (unsigned char)i;
    b[i][rsize - 1] = (unsigned char)i;
  }
}

int main(int argc, char **argv) {
  char sizes_arg[512] = "16,64,256,1024,4096,65536,1048576";
  int c;
  while ((c = getopt(argc, argv, "d:z:b:r:")) != -1) {
    switch (c) {
      case 'd': window = atof(optarg) / 1000.0; break;
      case 'z': snprintf(sizes_arg, sizeof sizes_arg, "%s", optarg); break;
      case 'b': batch = atol(optarg); break;
      case 'r': rsize = (size_t)atol(optarg); break;
      default:
        return usage(argv[0], "[-d ms] [-z sizes] [-b batch] [-r batch_block_size]");
    }
  }
  if (window <= 0 || batch < 1 || rsize < 1) return bad_arguments();
  pthread_t tid;
  pthread_create(&tid, NULL, nothing, NULL);
  pthread_join(tid, NULL);

  double tstart = now();
  char out[2048];
  size_t off = 0;
  char *save = NULL;
  for (char *tok = strtok_r(sizes_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t sz = (size_t)atoll(tok);
    if (sz < 1) continue;
    pair_latency(sz, window / 4);  /* warm-up */
    double ns = pair_latency(sz, window);
    off += (size_t)snprintf(out + off, sizeof out - off, " ns_%zu=%.2f", sz, ns);
  }

  /* Local batch free, for comparison. */
  unsigned char **b = malloc((size_t)batch * sizeof *b);
  double local_ns = 0;
  uint64_t local_frees = 0;
  double t0 = now();
  while (now() - t0 < window) {
    fill_batch(b);
    double s = now();
    for (long i = 0; i < batch; i++) free(b[i]);
    local_ns += (now() - s) * 1e9;
    local_frees += (uint64_t)batch;
  }

  /* Remote batch free. */
  shared_batch = b;
  pthread_create(&tid, NULL, freer, NULL);
  t0 = now();
  while (now() - t0 < window) {
    fill_batch(b);
    atomic_store_explicit(&handoff, 1, memory_order_release);
    spin_until(0);
  }
  atomic_store(&handoff, 2);
  pthread_join(tid, NULL);
  free(b);
  printf("RESULT name=latency threads=1%s ns_local_free=%.2f ns_remote_free=%.2f seconds=%.6f checksum=%llu\n",
         out, local_ns / (double)local_frees, remote_ns_total / (double)remote_frees, now() - tstart,
         (unsigned long long)sink);
  return 0;
}
