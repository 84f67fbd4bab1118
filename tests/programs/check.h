/* check.h: the CHECK of the test programs in this folder that run many
 * checks and report each failure (glibc_api.c, dlsym_libc.c). A failed check
 * prints its program, line and condition on stdout and sets g_failed, which
 * the program returns at its end. One translation unit a program. */
#ifndef FW_TEST_CHECK_H
#define FW_TEST_CHECK_H
#include <stdio.h>

static int g_failed;
#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      printf("%s: line %d: check failed: %s\n", FW_CHECK_PROGRAM, __LINE__, #cond); \
      g_failed = 1;                                                             \
    }                                                                           \
  } while (0)
#endif
