/* cache_mode.c: prints which caches freeway chose (core/percpu.h) after a
   little multithreaded work (CACHE_MODE_THREADS threads at once, 8 if unset),
   and whether the C library registered rseq for this thread. Run preloaded by tests/scripts/cache_mode.sh; freeway's
   API is found with dlsym, so the program runs without freeway too ("mode: none"). CACHE_MODE_HANDOFF=G: the threads
   hand off G times: each starts a successor when its work is done, waits until every thread of the next generation has
   made its first call, and exits, so that at each hand-off main, the old
   generation and the new one are alive at once (1 + 2 x CACHE_MODE_THREADS).
   CACHE_MODE_SIZE=N: every block is N bytes (one size class), instead of
   8 to 2,007 bytes (about 40 classes): the threads' caches then hold one span
   each.
   CACHE_MODE_FIRST=free: a thread's first call frees a block another thread
   allocated, instead of mallocing one: with CACHE_MODE_HANDOFF, its
   predecessor's (a hand-off); else main's, allocated before it started the
   threads (a creator's argument).
   CACHE_MODE_HELPER=1 (threads at once): after its first call each thread
   starts a helper thread whose first call frees a block the thread
   allocated, and joins it, before it works.
   CACHE_MODE_CHAIN=1: instead, thread i's first call frees a block that
   thread i - 1 (main for the first) allocated and then started it with;
   every thread stays alive until all have done their work. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_barrier_t g_all_bound;  /* CACHE_MODE_THREADS at once: all bind before any works */
static pthread_barrier_t g_all_done;   /* and all work before any exits (their caches at once) */
static size_t g_size;                  /* CACHE_MODE_SIZE, 0 if unset */
static int g_free_first;               /* CACHE_MODE_FIRST=free */
static int g_threads, g_generations;

/* A thread's first call: frees `block` (another thread's) if given, else
   mallocs and frees one of its own. */
static void first_call(void* block) {
  if (block != NULL) {
    free(block);
  } else {
    free(malloc(16));
  }
}

static void* work(void* arg) {
  unsigned seed = (unsigned)(size_t)arg;
  void* keep[256] = {0};
  for (int i = 0; i < 100000; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 8) % 256;
    free(keep[k]);
    size_t n = g_size != 0 ? g_size : 8 + (seed >> 16) % 2000;
    keep[k] = malloc(n);
    if (keep[k] == NULL) return (void*)1;
    memset(keep[k], (int)k, n);
  }
  for (int k = 0; k < 256; k++) free(keep[k]);
  return NULL;
}

static void* g_arg[64]; /* CACHE_MODE_FIRST=free: main's block for thread i */
static int g_helper;    /* CACHE_MODE_HELPER=1 */

static void* helper(void* block) {
  free(block);
  return NULL;
}

/* Starts a helper that frees a block of this thread's, and waits for it. */
static void run_helper(void) {
  void* block = malloc(48);
  pthread_t h;
  if (block == NULL || pthread_create(&h, NULL, helper, block) != 0) {
    fprintf(stderr, "cache_mode: could not start a helper\n");
    exit(1); /* the others wait at the barrier for this thread */
  }
  pthread_join(h, NULL);
}

/* One of CACHE_MODE_THREADS threads alive at once: its first call binds its
   cache, then it waits for the others before working, and after. */
static void* at_once(void* arg) {
  size_t i = (size_t)arg - 1;
  first_call(g_arg[i]);
  if (g_helper) run_helper();
  pthread_barrier_wait(&g_all_bound);
  void* r = work(arg);
  pthread_barrier_wait(&g_all_done);
  return r;
}

/* CACHE_MODE_CHAIN: thread i frees its creator's block, starts thread i + 1
   with a block of its own, then works with the others. */
static pthread_t g_chain[64];
static void* g_chain_block[64];
static void* chain(void* arg) {
  size_t i = (size_t)arg;
  first_call(g_chain_block[i]);
  if (i + 1 < (size_t)g_threads) {
    g_chain_block[i + 1] = malloc(24);
    if (g_chain_block[i + 1] == NULL || pthread_create(&g_chain[i + 1], NULL, chain, (void*)(i + 1)) != 0) {
      fprintf(stderr, "cache_mode: thread %zu of the chain could not start the next\n", i);
      exit(1); /* the others wait at the barrier for it */
    }
  }
  pthread_barrier_wait(&g_all_bound);
  void* r = work((void*)(i + 1));
  pthread_barrier_wait(&g_all_done);
  return r;
}

static pthread_t g_thread[256][64];       // [generation][slot], written by the creator before
                                          // the created thread reads it (through g_created)
static _Atomic int g_created[256][64];
static _Atomic int g_started[256];        // threads of generation g that made their first call
static _Atomic int g_failed;
static void* g_left[256][64];  // CACHE_MODE_FIRST=free: a block generation g's thread left for its successor

static void* handoff(void* arg) {
  size_t slot = (size_t)arg & 0xff, gen = (size_t)arg >> 8;
  first_call(g_free_first && gen > 0 ? g_left[gen - 1][slot] : NULL);  // binds this thread's cache
  atomic_fetch_add(&g_started[gen], 1);
  struct timespec ms = {0, 1000000};
  if (gen > 0) {
    /* Wait until the predecessor has exited, so that only two generations
       are ever alive at once. */
    while (!atomic_load(&g_created[gen][slot])) nanosleep(&ms, NULL);
    pthread_join(g_thread[gen - 1][slot], NULL);
  }
  if (work((void*)(slot + 1)) != NULL) atomic_store(&g_failed, 1);
  if (gen + 1 == (size_t)g_generations) return NULL;
  if (g_free_first && (g_left[gen][slot] = malloc(40)) == NULL) {
    atomic_store(&g_failed, 1);
    return NULL;
  }
  if (pthread_create(&g_thread[gen + 1][slot], NULL, handoff, (void*)(slot | (gen + 1) << 8)) != 0) {
    atomic_store(&g_failed, 1);
    return NULL;
  }
  atomic_store(&g_created[gen + 1][slot], 1);
  while (atomic_load(&g_started[gen + 1]) < g_threads) nanosleep(&ms, NULL);
  return NULL;
}

int main(void) {
  pthread_t t[64];
  const char* env = getenv("CACHE_MODE_THREADS");
  int n = env != NULL ? atoi(env) : 8;
  if (n < 1 || n > 64) n = 8;
  const char* hand = getenv("CACHE_MODE_HANDOFF");
  const char* size = getenv("CACHE_MODE_SIZE");
  g_size = size != NULL ? (size_t)atol(size) : 0;
  if (g_size > 2000) g_size = 0;
  const char* first = getenv("CACHE_MODE_FIRST");
  g_free_first = first != NULL && strcmp(first, "free") == 0;
  const char* help = getenv("CACHE_MODE_HELPER");
  g_helper = help != NULL && strcmp(help, "1") == 0;
  const char* ch = getenv("CACHE_MODE_CHAIN");
  const int chained = ch != NULL && strcmp(ch, "1") == 0;
  g_threads = n;
  g_generations = hand != NULL ? atoi(hand) + 1 : 1;
  if (g_generations < 1 || g_generations > 256) g_generations = 1;
  int bad = 0;
  if (g_generations > 1) {
    /* Each generation joins the one before; main joins the last. */
    int last = g_generations - 1;
    for (int i = 0; i < n; i++) pthread_create(&g_thread[0][i], NULL, handoff, (void*)(size_t)i);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < n; i++) {
      while (!atomic_load(&g_created[last][i]) && !atomic_load(&g_failed)) nanosleep(&ms, NULL);
      if (atomic_load(&g_created[last][i])) pthread_join(g_thread[last][i], NULL);
    }
    bad = atomic_load(&g_failed);
  } else if (chained) {
    pthread_barrier_init(&g_all_bound, NULL, (unsigned)n);
    pthread_barrier_init(&g_all_done, NULL, (unsigned)n);
    g_chain_block[0] = malloc(24);
    if (g_chain_block[0] == NULL || pthread_create(&g_chain[0], NULL, chain, (void*)0) != 0) return 1;
    /* Thread 0 returns after the barrier every thread of the chain passed,
       so each g_chain[i] is written by then. */
    for (int i = 0; i < n; i++) {
      void* r;
      pthread_join(g_chain[i], &r);
      bad |= r != NULL;
    }
  } else {
    pthread_barrier_init(&g_all_bound, NULL, (unsigned)n);
    pthread_barrier_init(&g_all_done, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) g_arg[i] = g_free_first ? malloc(32) : NULL;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, at_once, (void*)(size_t)(i + 1));
    for (int i = 0; i < n; i++) {
      void* r;
      pthread_join(t[i], &r);
      bad |= r != NULL;
    }
  }
  int (*per_cpu)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fw_caches_per_cpu");
  int (*check)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fw_check_heap");
  const unsigned* rseq_size = (const unsigned*)dlsym(RTLD_DEFAULT, "__rseq_size");
  printf("mode: %s\n", per_cpu == NULL ? "none" : per_cpu() ? "per-cpu" : "per-thread");
  printf("rseq: %s\n", rseq_size != NULL && *rseq_size > 0 ? "registered" : "not registered");
  printf("heap: %s\n", bad ? "allocation failed" : check != NULL && check() != 0 ? "invariants broken" : "ok");
  return 0;
}
