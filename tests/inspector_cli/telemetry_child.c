/* telemetry_child: a program that knows nothing of freeway. The end-to-end
 * test runs it under LD_PRELOAD=libfreeway.so with FREEWAY_TELEMETRY=1 and
 * compares what freeway-inspect reads from outside with fw_stats() taken
 * inside (found with dlsym, as any preloaded program would).
 *
 * It builds a heap (small blocks of many classes, some large blocks), frees
 * every other block, then reads commands on stdin, one per line:
 *   stats   quiesce, call fw_stats, print "stats live=.. committed=.. ..."
 *   grow    allocate and touch 64 MiB more in 64 KiB blocks, print "grown"
 *   orphan  go on reading commands in a new thread and end the main thread
 *           (pthread_exit): the process runs on with a zombie thread-group
 *           leader, print "orphaned" from the new thread
 *   exit    free everything and exit 0 (end of input too)
 * One thread at a time reads commands: when it prints stats nothing else
 * allocates, so the next published snapshot must carry the same figures. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "freeway.h"

#define SMALL 60000
#define LARGE 40
#define GROW (64 * 1024 * 1024 / (64 * 1024))

static void* small[SMALL];
static void* large[LARGE];
static void* grown[GROW];

static void (*stats)(fw_stats_t*);
static int orphaned;
static void* serve(void* unused);

int main(void) {
  stats = (void (*)(fw_stats_t*))dlsym(RTLD_DEFAULT, "fw_stats");
  if (!stats) {
    fprintf(stderr, "telemetry_child: fw_stats not found (run under LD_PRELOAD=libfreeway.so)\n");
    return 3;
  }
  uint32_t x = 12345;
  for (int i = 0; i < SMALL; i++) {
    x = x * 1103515245u + 12345u;
    size_t n = 8 + (x >> 8) % 2040;
    small[i] = malloc(n);
    memset(small[i], 1, n);
  }
  for (int i = 0; i < LARGE; i++) {
    size_t n = (size_t)(64 + 37 * i) * 1024;
    large[i] = malloc(n);
    memset(large[i], 2, n);
  }
  for (int i = 0; i < SMALL; i += 2) {
    free(small[i]);
    small[i] = NULL;
  }
  for (int i = 0; i < LARGE; i += 3) {
    free(large[i]);
    large[i] = NULL;
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  serve(NULL);
  return 0;
}

/* Reads commands until "exit" or the end of input, then frees everything and
 * exits the process with 0. */
static void* serve(void* unused) {
  (void)unused;
  if (orphaned) {
    printf("orphaned\n");
    fflush(stdout);
  }
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (!strncmp(line, "stats", 5)) {
      fw_stats_t s;
      stats(&s);
      printf("stats live=%llu committed=%llu reserved=%llu peak_live=%llu peak_committed=%llu hot=%llu full=%llu "
             "partial=%llu pooled=%llu large=%llu threads=%llu\n",
             (unsigned long long)s.live_bytes, (unsigned long long)s.committed_bytes,
             (unsigned long long)s.reserved_bytes, (unsigned long long)s.peak_live_bytes,
             (unsigned long long)s.peak_committed_bytes, (unsigned long long)s.spans_hot,
             (unsigned long long)s.spans_full, (unsigned long long)s.spans_partial,
             (unsigned long long)s.spans_pooled, (unsigned long long)s.spans_large,
             (unsigned long long)s.threads_live);
    } else if (!strncmp(line, "grow", 4)) {
      for (int i = 0; i < GROW; i++) {
        if (!grown[i]) {
          grown[i] = malloc(64 * 1024);
          memset(grown[i], 3, 64 * 1024);
        }
      }
      printf("grown\n");
    } else if (!strncmp(line, "orphan", 6) && !orphaned) {
      pthread_t t;
      orphaned = 1;
      if (pthread_create(&t, NULL, serve, NULL) != 0) {
        printf("pthread_create failed\n");
        fflush(stdout);
        exit(3);
      }
      pthread_exit(NULL);
    } else if (!strncmp(line, "exit", 4)) {
      break;
    } else {
      printf("unknown command\n");
    }
    fflush(stdout);
  }
  for (int i = 0; i < SMALL; i++) free(small[i]);
  for (int i = 0; i < LARGE; i++) free(large[i]);
  for (int i = 0; i < GROW; i++) free(grown[i]);
  exit(0);
}
