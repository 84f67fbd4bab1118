/* A universal-CRT program (linked with ucrt.specs: ucrtbase.dll, not
 * msvcrt.dll) that also loads msvcrt.dll indirectly: advapi32 imports it.
 * Injected, freeway must set the errno this program reads, ucrtbase's, when
 * an allocation fails. Prints the same lines plainly and injected; stderr
 * says, when injected, which heap served a block (freeway's or not). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

int main(void) {
  char user[256];
  DWORD n = sizeof user;
  GetUserNameA(user, &n); /* advapi32: msvcrt.dll comes in with it */
  if (GetModuleHandleW(L"msvcrt.dll") == NULL || GetModuleHandleW(L"ucrtbase.dll") == NULL) {
    printf("setup: msvcrt.dll and ucrtbase.dll are not both loaded\n");
    return 3;
  }
  volatile size_t too_big = SIZE_MAX - 4096;
  errno = 0;
  void* p = malloc(too_big);
  printf("malloc(SIZE_MAX - 4096): %s, errno %s\n", p ? "a block" : "NULL", errno == ENOMEM ? "ENOMEM" : "not ENOMEM");
  errno = 0;
  p = _aligned_malloc(100, 48);
  printf("_aligned_malloc(100, 48): %s, errno %s\n", p ? "a block" : "NULL", errno == EINVAL ? "EINVAL" : "not EINVAL");
  void* q = malloc(100);
  HMODULE fw = GetModuleHandleW(L"freeway.dll");
  if (fw != NULL) { /* injected: say whose block it is (stderr stays empty in the plain run) */
    int (*owns)(const void*) = (int (*)(const void*))GetProcAddress(fw, "fw_owns");
    fprintf(stderr, "ucrtbase.dll malloc: %s\n", owns != NULL && owns(q) ? "freeway" : "not freeway");
  }
  free(q);
  return 0;
}
