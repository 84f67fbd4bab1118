/* dlsym_libc: lookups through a handle of the C library (shim/dlsym.cpp), as
 * Python's ctypes.CDLL("libc.so.6") makes them.
 *
 *   dlsym_libc process  through the handle, the allocator functions are the
 *                       process's (those RTLD_DEFAULT finds), so a block of
 *                       the C library's strdup (the process's malloc) goes to
 *                       the handle's free, and the handle's malloc to free
 *   dlsym_libc own      the C library's own functions, which differ from the
 *                       process's (run under LD_PRELOAD with FREEWAY_LIBC_DLSYM=1)
 *   dlsym_libc names N...  of the names given (every function the preloaded
 *                       library defines), each that the C library's handle
 *                       finds is the process's: a name the allocator gains
 *                       but shim/dlsym.cpp's list lacks fails here. dlopen and
 *                       dlsym are left out: the preloaded library defines
 *                       them for other reasons, and through the handle they
 *                       stay the C library's.
 *
 * Both modes also check that other names are the C library's, that a failed
 * lookup still fails with a dlerror() message, and that a successful one
 * leaves none. Exit 0 when every check holds, 1 otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FW_CHECK_PROGRAM "dlsym_libc"
#include "check.h"

typedef void* (*MallocFn)(size_t);
typedef void (*FreeFn)(void*);
typedef char* (*StrdupFn)(const char*);
typedef int (*TrimFn)(size_t);

/* The names mode (above): how many of them libc.so.6's handle finds, each
 * checked. */
static int check_names(void* libc, int count, char** names) {
  int found = 0;
  for (int i = 0; i < count; i++) {
    if (strcmp(names[i], "dlopen") == 0 || strcmp(names[i], "dlsym") == 0) continue;
    void* through_handle = dlsym(libc, names[i]);
    if (through_handle == NULL) continue; /* not the C library's: freeway's API, C++ operators */
    found++;
    if (through_handle != dlsym(RTLD_DEFAULT, names[i])) {
      printf("dlsym_libc: %s through libc.so.6's handle is the C library's own\n", names[i]);
      g_failed = 1;
    }
  }
  return found;
}

int main(int argc, char** argv) {
  const int names = argc >= 2 && strcmp(argv[1], "names") == 0;
  if (!names && (argc != 2 || (strcmp(argv[1], "process") != 0 && strcmp(argv[1], "own") != 0))) {
    fprintf(stderr, "usage: %s process|own|names NAME...\n", argv[0]);
    return 2;
  }
  const int process = strcmp(argv[1], "process") == 0;
  void* libc = dlopen("libc.so.6", RTLD_LAZY);
  if (libc == NULL) {
    printf("dlsym_libc: dlopen(libc.so.6): %s\n", dlerror());
    return 1;
  }
  if (names) {
    /* At least malloc and free: a list that lost them checks nothing. */
    const int found = check_names(libc, argc - 2, argv + 2);
    CHECK(found >= 2);
    if (!g_failed) printf("dlsym_libc names: %d names of the C library's checked\n", found);
    return g_failed;
  }
  /* glibc's aligned_alloc, memalign and __libc_memalign are one function:
   * each name must come back as its own. */
  static const char* const kAllocNames[] = {"malloc",
                                            "free",
                                            "calloc",
                                            "realloc",
                                            "posix_memalign",
                                            "aligned_alloc",
                                            "memalign",
                                            "__libc_memalign",
                                            "__libc_malloc",
                                            "__libc_free",
                                            "malloc_usable_size",
                                            "malloc_trim"};
  int differ = 0;
  for (unsigned i = 0; i < sizeof kAllocNames / sizeof kAllocNames[0]; i++) {
    dlerror();
    void* through_handle = dlsym(libc, kAllocNames[i]);
    CHECK(through_handle != NULL && dlerror() == NULL);
    void* global = dlsym(RTLD_DEFAULT, kAllocNames[i]);
    if (process) CHECK(through_handle == global);
    if (through_handle != global) differ = 1;
  }
  /* A name the allocator does not replace is the C library's own. */
  void* own_strdup = dlsym(libc, "strdup");
  CHECK(own_strdup != NULL && own_strdup == dlsym(RTLD_DEFAULT, "strdup"));
  /* A lookup that fails still fails, with a message. */
  dlerror();
  CHECK(dlsym(libc, "no_such_function_in_libc") == NULL);
  const char* err = dlerror();
  CHECK(err != NULL);

  if (process) {
    /* The crossings that crashed: the C library's strdup allocates with the
     * process's malloc, and the handle's free must take the block. */
    StrdupFn dup = (StrdupFn)own_strdup;
    FreeFn handle_free = (FreeFn)dlsym(libc, "free");
    MallocFn handle_malloc = (MallocFn)dlsym(libc, "malloc");
    for (int i = 0; i < 20000; i++) {
      char text[64];
      snprintf(text, sizeof text, "block %d", i);
      char* s = dup(text);
      CHECK(s != NULL && strcmp(s, text) == 0);
      handle_free(s);
      void* p = handle_malloc((size_t)(i % 5000) + 1);
      CHECK(p != NULL);
      free(p);
      if (g_failed) break;
    }
    /* memalign takes an alignment that is not a power of two (glibc rounds
     * it up); aligned_alloc's would not. */
    typedef void* (*MemalignFn)(size_t, size_t);
    for (int k = 0; k < 2; k++) {
      MemalignFn ma = (MemalignFn)dlsym(libc, k == 0 ? "memalign" : "__libc_memalign");
      void* m = ma(24, 100);
      CHECK(m != NULL && ((uintptr_t)m & 31) == 0);
      free(m);
    }
    /* The C library of another namespace (dlmopen) keeps its own malloc and
     * free: its strdup allocates with them. */
    void* other = dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_LAZY);
    if (other == NULL) {
      printf("dlsym_libc: dlmopen(LM_ID_NEWLM, libc.so.6) failed (%s): that case not checked\n", dlerror());
    } else {
      StrdupFn other_dup = (StrdupFn)dlsym(other, "strdup");
      FreeFn other_free = (FreeFn)dlsym(other, "free");
      CHECK(other_dup != NULL && other_free != NULL && other_free != handle_free);
      for (int i = 0; other_dup && other_free && i < 1000; i++) other_free(other_dup("another namespace"));
    }
    TrimFn trim = (TrimFn)dlsym(libc, "malloc_trim");
    const int r = trim(0);
    CHECK(r == 0 || r == 1);
  } else {
    /* The C library's own, not the preloaded allocator's: blocks are not
     * crossed then. */
    CHECK(differ);
  }
  dlclose(libc);
  if (!g_failed) printf("dlsym_libc %s: all checks passed\n", argv[1]);
  return g_failed;
}
