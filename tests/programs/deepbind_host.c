/* deepbind_host: dlopens NAME (a bare file name, found through this program's
 * RUNPATH, $ORIGIN/plugins) with RTLD_DEEPBIND, as PHP loads its extensions,
 * and checks that the library's malloc is the program's (EXPECT 1) or not
 * (EXPECT 0). When it is, blocks go back and forth: the host frees what the
 * library allocated and the library frees what the host allocated.
 * Exit 0 on success; 1 when the binding is not the one expected; 10 when the
 * library cannot be loaded (under a dlopen interposer that made itself the
 * caller, the RUNPATH would not be searched). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: deepbind_host NAME EXPECT\n");
    return 10;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND);
  if (h == NULL) {
    fprintf(stderr, "deepbind_host: %s\n", dlerror());
    return 10;
  }
  int (*malloc_is)(void *) = (int (*)(void *))dlsym(h, "plugin_malloc_is");
  void *(*swap)(void *, size_t) = (void *(*)(void *, size_t))dlsym(h, "plugin_swap");
  if (malloc_is == NULL || swap == NULL) {
    fprintf(stderr, "deepbind_host: %s\n", dlerror());
    return 10;
  }
  int got = malloc_is((void *)&malloc), want = atoi(argv[2]);
  if (got != want) {
    fprintf(stderr, "deepbind_host: the library's malloc is %s, expected %s\n", got ? "the program's" : "another",
            want ? "the program's" : "another");
    return 1;
  }
  if (!got) return 0; /* two allocators: blocks must not cross */
  for (size_t i = 0; i < 20000; i++) {
    size_t n = 1 + (i * 2654435761u) % 70000; /* small, medium and large blocks */
    char *mine = malloc(n);
    if (mine == NULL) return 1;
    memset(mine, 0xa5, n);
    char *theirs = swap(mine, n);
    if (theirs == NULL || theirs[0] != 0x5a || theirs[n - 1] != 0x5a) return 1;
    free(theirs);
  }
  return 0;
}
