/* consumer.c: a C program built against an installed freeway (install test,
 * tests/scripts/install_test.sh), once with pkg-config and libfreeway.so and
 * once statically with libfreeway.a. It proves that its malloc is freeway's:
 * a block from malloc must be one freeway owns. It prints where fw_owns came
 * from, so the script can check that the installed library was used. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <freeway.h>

int main(void) {
  void* p = malloc(100);
  void* q = calloc(10, 1000);
  void* r = realloc(NULL, 5 << 20);
  int owns = fw_owns(p) && fw_owns(q) && fw_owns(r);
  printf("fw_owns(malloc(100)) = %d\n", fw_owns(p));
  printf("calloc and realloc blocks owned too = %d\n", owns);
  memset(r, 1, 5 << 20);
  free(p);
  free(q);
  free(r);
  printf("fw_check_heap() = %d\n", fw_check_heap());
  Dl_info info;
  if (dladdr((void*)&fw_owns, &info) && info.dli_fname) printf("fw_owns from: %s\n", info.dli_fname);
  return owns ? 0 : 1;
}
