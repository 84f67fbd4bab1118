/* tests/windows/programs/inject_c.c: a plain C program linked against
 * msvcrt.dll (mingw's default), knowing nothing of freeway. Run with and
 * without freeway-inject.exe, its stdout must be the same. When freeway.dll is
 * in the process it also says on stderr which blocks freeway served, asking
 * the DLL's fw_owns.
 *   inject_c [wait]   wait: print "ready", then wait for a line on stdin
 *                      (the test injects with --pid meanwhile) */
#include <direct.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

typedef int (*OwnsFn)(const void*);

static void report(const char* what, const void* p) {
  HMODULE fw = GetModuleHandleW(L"freeway.dll");
  if (fw == NULL) return;
  OwnsFn owns = (OwnsFn)(void*)GetProcAddress(fw, "fw_owns");
  fprintf(stderr, "%s: %s\n", what, owns != NULL && owns(p) ? "freeway" : "not freeway");
}

int main(int argc, char** argv) {
  /* Blocks allocated before freeway (with "wait": before the --pid injection). */
  char* early[100];
  for (int i = 0; i < 100; i++) {
    early[i] = (char*)malloc(16 + i * 8);
    memset(early[i], i, 16 + i * 8);
  }
  char* early_dup = _strdup("allocated early");
  if (argc > 1 && strcmp(argv[1], "wait") == 0) {
    char line[16];
    printf("ready\n");
    fflush(stdout);
    if (fgets(line, sizeof line, stdin) == NULL) return 3;
  }
  /* After: the CRT's own internal allocations go through the patched entries. */
  char* dup = _strdup("hello from _strdup");
  report("_strdup", dup);
  char* cwd = _getcwd(NULL, 0);
  report("_getcwd", cwd);
  char* m = (char*)malloc(1000);
  report("malloc", m);
  void* a = _aligned_malloc(100, 256);
  report("_aligned_malloc", a);
  FILE* f = fopen("inject_c_test.txt", "w+");
  if (f == NULL) return 4;
  fputs("a line through stdio\n", f);
  fflush(f);
  rewind(f);
  char buf[64] = "";
  fgets(buf, sizeof buf, f);
  fclose(f);
  remove("inject_c_test.txt");
  printf("%s", buf);
  printf("%s\n", dup);
  /* The early blocks: contents intact, freed, reallocated, sized by _msize. */
  int ok = 1;
  for (int i = 0; i < 100; i++)
    for (int j = 0; j < 16 + i * 8; j++) ok &= early[i][j] == (char)i;
  printf("early blocks intact: %s\n", ok ? "yes" : "no");
  printf("early _msize >= 16: %s\n", _msize(early[0]) >= 16 ? "yes" : "no");
  early[1] = (char*)realloc(early[1], 5000);
  printf("early realloc kept: %s\n", early[1][20] == 1 ? "yes" : "no");
  report("early block after realloc", early[1]);
  report("early block", early[2]);
  for (int i = 0; i < 100; i++) free(early[i]);
  printf("%s\n", early_dup);
  free(early_dup);
  free(dup);
  free(cwd);
  free(m);
  _aligned_free(a);
  /* Out of memory: NULL, and ENOMEM in the errno this program reads. */
  errno = 0;
  volatile size_t too_big = (size_t)-4096;
  void* huge = malloc(too_big);
  printf("huge malloc: %s, errno ENOMEM: %s\n", huge ? "not null" : "null", errno == ENOMEM ? "yes" : "no");
  long total = 0;
  for (int i = 0; i < 100000; i++) {
    char* p = (char*)malloc((size_t)(i % 300) + 1);
    p[0] = (char)i;
    total += p[0] & 1;
    free(p);
  }
  printf("churn %ld\n", total);
  return 0;
}
