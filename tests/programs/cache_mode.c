/* cache_mode.c: prints which caches freeway chose (core/percpu.h) after a
   little multithreaded work (CACHE_MODE_THREADS threads at once, 8 if unset),
   and whether the C library registered rseq for this thread. Run preloaded by tests/scripts/cache_mode.sh; freeway's API is
   found with dlsym, so the program runs without freeway too ("mode: none"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* work(void* arg) {
  unsigned seed = (unsigned)(size_t)arg;
  void* keep[256] = {0};
  for (int i = 0; i < 100000; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 8) % 256;
    free(keep[k]);
    size_t n = 8 + (seed >> 16) % 2000;
    keep[k] = malloc(n);
    if (keep[k] == NULL) return (void*)1;
    memset(keep[k], (int)k, n);
  }
  for (int k = 0; k < 256; k++) free(keep[k]);
  return NULL;
}

int main(void) {
  pthread_t t[64];
  const char* env = getenv("CACHE_MODE_THREADS");
  int n = env != NULL ? atoi(env) : 8;
  if (n < 1 || n > 64) n = 8;
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, work, (void*)(size_t)(i + 1));
  int bad = 0;
  for (int i = 0; i < n; i++) {
    void* r;
    pthread_join(t[i], &r);
    bad |= r != NULL;
  }
  int (*per_cpu)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fw_caches_per_cpu");
  int (*check)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fw_check_heap");
  const unsigned* rseq_size = (const unsigned*)dlsym(RTLD_DEFAULT, "__rseq_size");
  printf("mode: %s\n", per_cpu == NULL ? "none" : per_cpu() ? "per-cpu" : "per-thread");
  printf("rseq: %s\n", rseq_size != NULL && *rseq_size > 0 ? "registered" : "not registered");
  printf("heap: %s\n", bad ? "allocation failed" : check != NULL && check() != 0 ? "invariants broken" : "ok");
  return 0;
}
