/* Helpers shared by the benchmark programs in bench/.
 *
 * Header-only, C only: static inline functions and file-scope statics, so
 * every program still builds as one standalone C file that uses only the
 * standard malloc API, libc and pthread (never freeway), and runs unchanged
 * under LD_PRELOAD of any allocator.  Each program defines _GNU_SOURCE
 * before its includes and includes this header after them. */
#ifndef FREEWAY_BENCH_COMMON_H
#define FREEWAY_BENCH_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Monotonic clock, in seconds. */
static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps for the given number of seconds, resuming after signals. */
static inline void sleep_seconds(double secs) {
  struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

/* xorshift64* step (Vigna); the state must not be 0. */
static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* Start gate (Dice & Garthwaite 2002 §4.1): workers wait until main has
 * taken the start time, so no work happens outside the timed interval.
 * A program that runs several sets of threads resets gate_ready and
 * gate_open to 0 before starting each set. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_ready, gate_open;

static inline void gate_wait(void) {
  pthread_mutex_lock(&gate_mu);
  gate_ready++;
  pthread_cond_broadcast(&gate_cv);
  while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
  pthread_mutex_unlock(&gate_mu);
}

/* Waits until nthreads workers are at the gate, takes the start time,
 * opens the gate and returns the start time. */
static inline double gate_release(int nthreads) {
  pthread_mutex_lock(&gate_mu);
  while (gate_ready < nthreads) pthread_cond_wait(&gate_cv, &gate_mu);
  double t0 = now();
  gate_open = 1;
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_mu);
  return t0;
}

/* malloc that ends the program (status 2) when it fails. */
static inline void *malloc_or_die(size_t size) {
  void *p = malloc(size);
  if (!p) { fprintf(stderr, "malloc(%zu) failed\n", size); exit(2); }
  return p;
}

/* Prints "usage: PROGRAM OPTIONS"; main returns its value (1). */
static inline int usage(const char *argv0, const char *options) {
  fprintf(stderr, "usage: %s %s\n", argv0, options);
  return 1;
}

/* The process's resident set now, in KiB (/proc/self/statm; 0 if unreadable). */
static inline long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, res = 0;
  if (f == NULL) return 0;
  if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
  fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Reports invalid options; main returns its value (1). */
static inline int bad_arguments(void) {
  fprintf(stderr, "bad arguments\n");
  return 1;
}

#endif
