/* first_call.c: the first call into the allocator, made in awkward places.
 *
 * Built once per mode (-DFC_MODE_<name>), not linked to freeway, and run by
 * tests/scripts/run_first_call.sh twice: plainly (glibc's malloc) and under
 * LD_PRELOAD=libfreeway.so. Both runs must exit 0 and print the expected lines;
 * only the last line, "allocator: ...", tells the two apart.
 *
 *   preinit       first malloc from the program's .preinit_array, which runs
 *                 before every library constructor, freeway's own included
 *   constructor   first malloc of the program inside __attribute__((constructor))
 *                 (libfreeway.so needs libstdc++, whose initializer may have
 *                 allocated already), and allocation in a destructor after
 *                 main returned
 *   dlsym         first allocation of the process inside dlsym (a failed
 *                 lookup makes glibc malloc its error state), called from
 *                 .preinit_array; dlsym(RTLD_NEXT, "malloc") in a constructor;
 *                 then dlopen/dlsym/dlclose of libm
 *   free_first    first call is free(NULL), before any malloc; also a
 *                 thread's first call
 *   calloc_first  first call is calloc (must be zeroed)
 *   aligned_first first call is aligned_alloc with a 4 MiB alignment
 *   huge_first    first call is a 300 MiB malloc
 * (the *_first modes make their first call from .preinit_array: the first
 * call of the whole process)
 *   thread_free   threads whose first action is to free (or realloc) a block
 *                 the main thread allocated
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Keeps the compiler from removing or folding allocations. */
static void escape(void* p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static int failures = 0;
#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                      \
    }                                                                  \
  } while (0)

__attribute__((unused)) static int all_zero(const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0) return 0;
  return 1;
}

/* Prints whether freeway serves this process: fw_owns is looked up at run
 * time (the program is not linked to freeway) and asked about a new block. */
static void print_allocator(void) {
  int (*owns)(const void*) = (int (*)(const void*))dlsym(RTLD_DEFAULT, "fw_owns");
  int (*check)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "fw_check_heap");
  if (owns == NULL || check == NULL) {
    printf("allocator: other\n");
    return;
  }
  void* p = malloc(100);
  escape(p);
  int o = owns(p);
  free(p);
  printf("allocator: freeway owns=%d check_heap=%d\n", o, check());
}

/* A function in .preinit_array: the dynamic loader runs it before the
 * constructors of every shared library, so under LD_PRELOAD it calls freeway
 * before freeway's (and libstdc++'s) initializers have run. */
#define FC_PREINIT(fn) \
  __attribute__((section(".preinit_array"), used)) static void (*fn##_entry)(int, char**, char**) = fn

#if defined(FC_MODE_preinit)
static char* g_pre;
static unsigned char* g_pre_zero;
static void* g_pre_big;
static void preinit(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  g_pre = (char*)malloc(40); /* the process's first allocator call */
  if (g_pre) strcpy(g_pre, "allocated before any constructor");
  g_pre_zero = (unsigned char*)calloc(100, 10);
  void* r = realloc(NULL, 50);
  r = realloc(r, 5000);
  free(r);
  free(NULL);
  g_pre_big = malloc(5 << 20);
}
FC_PREINIT(preinit);
int main(void) {
  EXPECT(g_pre != NULL);
  EXPECT(g_pre_zero != NULL && all_zero(g_pre_zero, 1000));
  EXPECT(g_pre_big != NULL);
  if (g_pre_big) memset(g_pre_big, 1, 5 << 20);
  printf("preinit: %s\n", g_pre ? g_pre : "(null)");
  free(g_pre);
  free(g_pre_zero);
  free(g_pre_big);
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_constructor)
static char* g_early;
static void* g_early_big;
__attribute__((constructor(101))) static void early(void) {
  g_early = (char*)malloc(64); /* the process's first malloc */
  if (g_early) strcpy(g_early, "allocated in a constructor");
  g_early_big = malloc(3 << 20);
  if (g_early_big) memset(g_early_big, 0x5a, 3 << 20);
}
__attribute__((destructor)) static void late(void) {
  /* After main returned: allocate, use and free again. */
  char* p = (char*)malloc(1000);
  EXPECT(p != NULL);
  if (p) {
    memset(p, 1, 1000);
    free(p);
  }
  free(g_early_big);
  printf("destructor: allocated and freed after main\n");
  fflush(stdout);
  if (failures) _exit(1);
}
int main(void) {
  EXPECT(g_early != NULL);
  EXPECT(g_early_big != NULL);
  printf("constructor: %s\n", g_early ? g_early : "(null)");
  free(g_early);
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_dlsym)
static void* g_sym = (void*)1;
static const char* g_err;
static char g_err_copy[256];
static void* (*g_next_malloc)(size_t);
static void preinit(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  /* The first allocation of the process happens inside these calls. */
  g_sym = dlsym(RTLD_DEFAULT, "freeway_test_no_such_symbol");
  g_err = dlerror();
  if (g_err) snprintf(g_err_copy, sizeof g_err_copy, "%s", g_err);
}
FC_PREINIT(preinit);
__attribute__((constructor(101))) static void early(void) {
  g_next_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
}
int main(void) {
  EXPECT(g_sym == NULL);
  EXPECT(g_err != NULL);
  EXPECT(strstr(g_err_copy, "freeway_test_no_such_symbol") != NULL);
  printf("dlsym of a missing symbol: NULL, dlerror names it: %s\n",
         strstr(g_err_copy, "freeway_test_no_such_symbol") ? "yes" : "no");
  EXPECT(g_next_malloc != NULL);
  if (g_next_malloc) {
    /* RTLD_NEXT from the program: the malloc the process uses (freeway's
     * under LD_PRELOAD); its block is freed with free. */
    void* p = g_next_malloc(500);
    EXPECT(p != NULL);
    memset(p, 3, 500);
    free(p);
  }
  printf("dlsym(RTLD_NEXT, \"malloc\") works\n");
  /* dlopen allocates the link map, dlclose frees it. */
  for (int i = 0; i < 3; i++) {
    void* h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    EXPECT(h != NULL);
    if (!h) break;
    double (*c)(double) = (double (*)(double))dlsym(h, "cos");
    EXPECT(c != NULL);
    if (c && i == 0) printf("cos(0) via dlopen = %.1f\n", c(0.0));
    dlclose(h);
  }
  /* A second failed lookup reuses and frees the dlerror state. */
  EXPECT(dlsym(RTLD_DEFAULT, "freeway_test_no_such_symbol_2") == NULL);
  EXPECT(dlerror() != NULL);
  EXPECT(dlerror() == NULL);
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_free_first)
static int g_done;
static void early(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  free(NULL); /* the process's first allocator call */
  free(NULL);
  void* p = malloc(10);
  escape(p);
  free(p);
  g_done = 1;
}
FC_PREINIT(early);
static void* thread_main(void* arg) {
  (void)arg;
  free(NULL); /* this thread's first call */
  void* p = malloc(100);
  escape(p);
  free(p);
  return NULL;
}
int main(void) {
  EXPECT(g_done);
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, thread_main, NULL) == 0);
  pthread_join(t, NULL);
  printf("free(NULL) before any malloc: fine\n");
  printf("free(NULL) as a thread's first call: fine\n");
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_calloc_first)
static unsigned char* g_small;
static unsigned char* g_large;
static void early(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  g_small = (unsigned char*)calloc(1000, 8); /* the process's first allocator call */
  g_large = (unsigned char*)calloc(1, 3 << 20);
}
FC_PREINIT(early);
int main(void) {
  EXPECT(g_small != NULL && all_zero(g_small, 8000));
  EXPECT(g_large != NULL && all_zero(g_large, 3 << 20));
  printf("calloc as first call: zeroed %s\n", g_small && all_zero(g_small, 8000) ? "yes" : "no");
  if (g_small) memset(g_small, 0xff, 8000);
  free(g_small);
  unsigned char* again = (unsigned char*)calloc(8000, 1);
  EXPECT(again != NULL && all_zero(again, 8000));
  free(again);
  free(g_large);
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_aligned_first)
static void* g_block;
static void early(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  g_block = aligned_alloc((size_t)4 << 20, 100); /* the process's first allocator call */
}
FC_PREINIT(early);
int main(void) {
  EXPECT(g_block != NULL);
  EXPECT(((uintptr_t)g_block & (((uintptr_t)4 << 20) - 1)) == 0);
  if (g_block) memset(g_block, 7, 100);
  free(g_block);
  void* q = NULL;
  EXPECT(posix_memalign(&q, 64, 1000) == 0);
  free(q);
  printf("aligned_alloc(4 MiB, 100) as first call: aligned\n");
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_huge_first)
static unsigned char* g_huge;
static void early(int argc, char** argv, char** envp) {
  (void)argc, (void)argv, (void)envp;
  g_huge = (unsigned char*)malloc((size_t)300 << 20); /* the process's first allocator call */
}
FC_PREINIT(early);
int main(void) {
  EXPECT(g_huge != NULL);
  if (g_huge) {
    memset(g_huge, 0x42, (size_t)300 << 20);
    EXPECT(g_huge[((size_t)300 << 20) - 1] == 0x42);
  }
  free(g_huge);
  void* p = malloc(16);
  EXPECT(p != NULL);
  free(p);
  printf("malloc(300 MiB) as first call: usable\n");
  print_allocator();
  return failures ? 1 : 0;
}

#elif defined(FC_MODE_thread_free)
#define NTHREADS 16
static void* g_blocks[NTHREADS];
static void* g_grow[NTHREADS];
static pthread_barrier_t g_start;

/* First action: free a block the main thread allocated. */
static void* free_first(void* arg) {
  size_t i = (size_t)arg;
  pthread_barrier_wait(&g_start); /* all threads make their first call together */
  free(g_blocks[i]);
  void* p = malloc(64 + i);
  EXPECT(p != NULL);
  memset(p, (int)i, 64 + i);
  free(p);
  return NULL;
}
/* First action: realloc a block the main thread allocated. */
static void* realloc_first(void* arg) {
  size_t i = (size_t)arg;
  unsigned char* p = (unsigned char*)realloc(g_grow[i], 100000);
  EXPECT(p != NULL);
  if (p) {
    for (size_t k = 0; k < 200; k++) EXPECT(p[k] == (unsigned char)(i + k));
  }
  return p; /* freed by the main thread */
}
/* First and only action: free, then the thread exits. */
static void* free_only(void* arg) {
  free(arg);
  return NULL;
}

int main(void) {
  pthread_t t[NTHREADS];
  for (size_t i = 0; i < NTHREADS; i++) {
    g_blocks[i] = malloc(i % 2 ? 48 : (size_t)200000); /* small and large */
    memset(g_blocks[i], 1, 48);
    g_grow[i] = malloc(200);
    for (size_t k = 0; k < 200; k++) ((unsigned char*)g_grow[i])[k] = (unsigned char)(i + k);
  }
  pthread_barrier_init(&g_start, NULL, NTHREADS);
  for (size_t i = 0; i < NTHREADS; i++) EXPECT(pthread_create(&t[i], NULL, free_first, (void*)i) == 0);
  for (size_t i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&g_start);
  printf("%d threads freed the main thread's blocks as their first call\n", NTHREADS);

  for (size_t i = 0; i < NTHREADS; i++) EXPECT(pthread_create(&t[i], NULL, realloc_first, (void*)i) == 0);
  for (size_t i = 0; i < NTHREADS; i++) {
    void* r = NULL;
    pthread_join(t[i], &r);
    free(r); /* allocated by a thread that has exited */
  }
  printf("%d threads realloc'ed the main thread's blocks as their first call\n", NTHREADS);

  for (int round = 0; round < 50; round++) {
    void* p = malloc((size_t)(round * 97 % 5000 + 1));
    EXPECT(pthread_create(&t[0], NULL, free_only, p) == 0);
    pthread_join(t[0], NULL);
  }
  printf("50 short threads did nothing but free one block\n");
  print_allocator();
  return failures ? 1 : 0;
}

#else
#error "build with -DFC_MODE_<mode>"
#endif
