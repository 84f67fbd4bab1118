/* heap_bugs.c: one heap bug per run, for comparing what allocators catch.
 *
 *   heap_bugs BUG SIZE
 *
 * Commits the bug named BUG on a block of SIZE bytes, then goes on as a buggy
 * program would (frees, allocates more) and exits 0. An allocator catches the
 * bug when the process stops abnormally instead (a report and SIGABRT, or a
 * fault on a guard page). tools/heap-bugs runs every bug at several sizes
 * under each allocator and counts. "reuse" is a property, not a crash: it
 * exits 1 when the block just freed is the next one malloc hands out.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* volatile sink;
static char g_static[64];

/* Keeps the compiler from seeing through the bug. */
static void* launder(void* p) {
  sink = p;
  return sink;
}

/* What a program does after the bug: more frees and allocations of the size. */
static void go_on(size_t n) {
  for (int i = 0; i < 2000; i++) {
    void* q = malloc(n);
    if (q) memset(q, 1, n < 64 ? n : 64);
    free(q);
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BUG SIZE\n", argv[0]);
    return 2;
  }
  const char* bug = argv[1];
  size_t n = strtoull(argv[2], NULL, 10);
  char* p = launder(malloc(n));
  if (p == NULL) return 3;
  memset(p, 'a', n);
  char* src = malloc(n + (1u << 20) + 64);
  if (src == NULL) return 3;
  memset(src, 'b', n + (1u << 20) + 64);

  if (!strcmp(bug, "overflow-1")) {
    p[n] = 'x';
  } else if (!strcmp(bug, "overflow-1-nul")) {
    p[n] = 0;
  } else if (!strcmp(bug, "overflow-32")) {
    for (int i = 0; i < 32; i++) p[n + i] = 'x';
  } else if (!strcmp(bug, "memcpy-overflow-1")) {
    memcpy(launder(p), src, n + 1);
  } else if (!strcmp(bug, "memcpy-overflow-32")) {
    memcpy(launder(p), src, n + 32);
  } else if (!strcmp(bug, "memcpy-overflow-1m")) {
    memcpy(launder(p), src, n + (1u << 20));
  } else if (!strcmp(bug, "underflow-1")) {
    p[-1] = 'x';
  } else if (!strcmp(bug, "underflow-32")) {
    for (int i = 1; i <= 32; i++) p[-i] = 'x';
  } else if (!strcmp(bug, "write-after-free")) {
    free(p);
    p[n / 2] = 'x';
    if (n > 16) p[n - 1] = 'x';
    go_on(n);
    return 0;
  } else if (!strcmp(bug, "double-free")) {
    free(p);
    free(launder(p));
  } else if (!strcmp(bug, "double-free-between")) {
    char* q = malloc(n);
    free(p);
    free(q);
    free(launder(p));
  } else if (!strcmp(bug, "free-interior")) {
    free(launder(p + 16));
  } else if (!strcmp(bug, "free-stack")) {
    char local[64];
    free(launder(local));
  } else if (!strcmp(bug, "free-static")) {
    free(launder(g_static));
  } else if (!strcmp(bug, "realloc-freed")) {
    free(p);
    p = realloc(launder(p), n * 2);
  } else if (!strcmp(bug, "zero-size-write")) {
    char* z = launder(malloc(0));
    if (z) z[0] = 'x', z[7] = 'x';
    free(z);
  } else if (!strcmp(bug, "zero-size-read")) {
    char* z = launder(malloc(0));
    if (z) sink = (void*)(uintptr_t)(z[0] + z[7]);
    free(z);
  } else if (!strcmp(bug, "reuse")) {
    free(p);
    char* q = malloc(n);
    return q == p ? 1 : 0;
  } else {
    fprintf(stderr, "heap_bugs: unknown bug %s\n", bug);
    return 2;
  }
  free(p);
  go_on(n);
  return 0;
}
