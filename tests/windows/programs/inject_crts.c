/* tests/windows/programs/inject_crts.c: a program that also uses the
 * universal CRT (ucrtbase.dll) and loads a Visual Studio CRT (msvcr120.dll)
 * while it runs. Through each it allocates, copies a string with that CRT's
 * own _strdup, reallocates and frees. With freeway.dll in the process it says
 * on stderr which blocks freeway served. */
#include <stdio.h>
#include <string.h>
#include <windows.h>

typedef void* (*MallocFn)(size_t);
typedef void (*FreeFn)(void*);
typedef void* (*ReallocFn)(void*, size_t);
typedef char* (*StrdupFn)(const char*);

static void report(const char* crt, const char* what, const void* p) {
  HMODULE fw = GetModuleHandleW(L"freeway.dll");
  if (fw == NULL) return;
  int (*owns)(const void*) = (int (*)(const void*))(void*)GetProcAddress(fw, "fw_owns");
  fprintf(stderr, "%s %s: %s\n", crt, what, owns != NULL && owns(p) ? "freeway" : "not freeway");
}

static int use(const wchar_t* dll, const char* name) {
  HMODULE m = LoadLibraryW(dll);
  if (m == NULL) {
    printf("%s: not available\n", name);
    return 1;
  }
  MallocFn my_malloc = (MallocFn)(void*)GetProcAddress(m, "malloc");
  FreeFn my_free = (FreeFn)(void*)GetProcAddress(m, "free");
  ReallocFn my_realloc = (ReallocFn)(void*)GetProcAddress(m, "realloc");
  StrdupFn my_strdup = (StrdupFn)(void*)GetProcAddress(m, "_strdup");
  char* p = (char*)my_malloc(100);
  strcpy(p, "through ");
  report(name, "malloc", p);
  char* d = my_strdup(name);
  report(name, "_strdup", d);
  p = (char*)my_realloc(p, 10000);
  strcat(p, d);
  printf("%s\n", p);
  my_free(d);
  my_free(p);
  return 0;
}

int main(void) {
  int bad = use(L"ucrtbase.dll", "ucrtbase.dll");
  bad += use(L"msvcr120.dll", "msvcr120.dll");
  return bad;
}
