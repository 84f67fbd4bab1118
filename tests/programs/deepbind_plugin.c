/* deepbind_plugin: loaded by deepbind_host with RTLD_DEEPBIND. Its malloc and
 * free are bound in its own lookup scope first: the C library's, unless the
 * preloaded allocator's dlopen dropped the flag (shim/deepbind.cpp). */
#include <stdlib.h>
#include <string.h>

/* 1 if this library's malloc is m, the host's. (Not dlsym(RTLD_DEFAULT): from
 * a deep-bound library that searches the library's own scope first too.) */
int plugin_malloc_is(void *m) { return (void *)&malloc == m; }

/* Frees a block the host allocated and returns one of n bytes for the host
 * to free: blocks cross the library boundary both ways, as PHP's do. */
void *plugin_swap(void *from_host, size_t n) {
  free(from_host);
  char *p = malloc(n);
  if (p != NULL) memset(p, 0x5a, n);
  return p;
}
