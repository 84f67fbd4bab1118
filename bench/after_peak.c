/* after_peak: the memory a program keeps resident after it frees a big heap
 * and goes on running with a small one: a server after a burst of requests or
 * a cache flush, an interpreter after a phase, a tool that drops its input's
 * structure and carries on.  Peak RSS does not show it; the resident set
 * afterwards does, for as long as the program runs.
 *
 * The program builds a heap of N blocks of random sizes in [MIN, MAX], writing
 * every byte, frees all of it in random order (who builds and who frees, by
 * -k), then runs a small working set for D seconds: 1,000 live blocks of
 * 16-512 B, replaced at random, 1,000 replacements and then a 1 ms sleep, over
 * and over.  That keeps the allocator's fast paths in use, as a program that
 * goes on working does, without a new peak.
 *
 *   -k own      main builds the heap and frees it
 *   -k worker   a worker thread builds the heap, frees it and exits
 *   -k handoff  a worker thread builds the heap and exits; main frees it
 *   -n N blocks (1000000)   -m MIN smallest size (16)   -M MAX largest (512)
 *   -d D seconds of the small working set (3)           -S SEED (1)
 *
 * RESULT: rss_end_kb (the resident set at the end: the figure), rss_peak_kb
 * (after the build), rss_freed_kb (just after the frees), seconds (the build
 * and the frees, not the working set's fixed time), ops (replacements in the
 * working-set phase) and a checksum of what was read back (the heap's first
 * bytes, plus any working-set block whose first byte changed while it lived). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

enum kind { OWN, WORKER, HANDOFF };
static const char* const kKindNames[] = {"own", "worker", "handoff"};

static enum kind kind = OWN;
static long nblocks = 1000000;
static size_t min_size = 16, max_size = 512;
static double seconds_small = 3;
static uint64_t seed = 1;

static unsigned char** heap;
static long rss_peak;
static uint64_t checksum;

static void build(void) {
  uint64_t rng = (seed * 0x9E3779B97F4A7C15ULL) | 1;
  for (long i = 0; i < nblocks; i++) {
    size_t sz = min_size + (size_t)(rng_next(&rng) % (max_size - min_size + 1));
    heap[i] = malloc_or_die(sz);
    memset(heap[i], (int)(i & 0xff), sz);
  }
  rss_peak = rss_kb();
}

/* Frees the heap in an order unrelated to the build's, reading each block's
 * first byte first, as a program reads an object it drops. */
static void free_all(void) {
  uint64_t rng = ((seed + 7) * 0xBF58476D1CE4E5B9ULL) | 1;
  for (long i = nblocks - 1; i > 0; i--) {
    long j = (long)(rng_next(&rng) % (uint64_t)(i + 1));
    unsigned char* t = heap[i];
    heap[i] = heap[j];
    heap[j] = t;
  }
  for (long i = 0; i < nblocks; i++) {
    checksum += heap[i][0];
    free(heap[i]);
  }
}

static void* worker(void* arg) {
  (void)arg;
  build();
  if (kind == WORKER) free_all();
  return NULL;
}

/* The small working set: returns the replacements made in `secs`, and the
 * resident set at their end (in *rss_end), while the set is still live. */
static long small_working_set(double secs, long* rss_end) {
  enum { kLive = 1000 };
  unsigned char* live[kLive] = {0};
  uint64_t rng = ((seed + 13) * 0x94D049BB133111EBULL) | 1;
  long ops = 0;
  double t0 = now();
  while (now() - t0 < secs) {
    for (int k = 0; k < 1000; k++, ops++) {
      uint64_t r = rng_next(&rng);
      int j = (int)(r % kLive);
      if (live[j] && live[j][0] != (unsigned char)(uintptr_t)live[j]) checksum++;
      free(live[j]);
      size_t sz = 16 + (size_t)((r >> 32) % 497);
      live[j] = malloc_or_die(sz);
      live[j][0] = (unsigned char)(uintptr_t)live[j];
    }
    sleep_seconds(0.001);
  }
  *rss_end = rss_kb();
  for (int j = 0; j < kLive; j++) free(live[j]);
  return ops;
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "k:n:m:M:d:S:")) != -1) {
    switch (c) {
      case 'k':
        if (strcmp(optarg, "own") == 0) kind = OWN;
        else if (strcmp(optarg, "worker") == 0) kind = WORKER;
        else if (strcmp(optarg, "handoff") == 0) kind = HANDOFF;
        else return bad_arguments();
        break;
      case 'n': nblocks = atol(optarg); break;
      case 'm': min_size = (size_t)atol(optarg); break;
      case 'M': max_size = (size_t)atol(optarg); break;
      case 'd': seconds_small = atof(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default: return usage(argv[0], "[-k own|worker|handoff] [-n blocks] [-m min] [-M max] [-d seconds] [-S seed]");
    }
  }
  if (nblocks < 1 || min_size < 1 || max_size < min_size || !(seconds_small >= 0)) return bad_arguments();

  heap = malloc_or_die((size_t)nblocks * sizeof *heap);
  double t0 = now();
  if (kind == OWN) {
    build();
    free_all();
  } else {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 2;
    }
    pthread_join(t, NULL);
    if (kind == HANDOFF) free_all();
  }
  double secs = now() - t0;
  free(heap);
  long rss_freed = rss_kb();
  long rss_end = 0;
  long ops = small_working_set(seconds_small, &rss_end);
  printf("RESULT name=after_peak kind=%s blocks=%ld min=%zu max=%zu small_seconds=%.3f seconds=%.6f "
         "rss_peak_kb=%ld rss_freed_kb=%ld rss_end_kb=%ld ops=%ld checksum=%llu\n",
         kKindNames[kind], nblocks, min_size, max_size, seconds_small, secs, rss_peak, rss_freed, rss_end,
         ops, (unsigned long long)checksum);
  return 0;
}
