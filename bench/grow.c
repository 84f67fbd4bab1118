/* grow: buffers grown by realloc, as a vector, a string builder or a read
 * buffer grows.
 *
 * Each of R rounds doubles one buffer by realloc from START to TOP bytes,
 * writing every new byte at each size, then frees it; between rounds the
 * program allocates a 100 KiB block and keeps it, as other work would (so a
 * later round does not start where the first did).  What differs between
 * allocators is what realloc does with a block it cannot grow where it is:
 * copy it into a new block whose pages fault in, or avoid the copy (grow in
 * place, or move the pages, as glibc's mremap does), and whether a later
 * round finds the pages an earlier one left.  One round shows the first; many
 * rounds the second.  Reported:
 *   seconds        all rounds
 *   first_seconds  the first round (nothing to reuse yet)
 *
 *   -r R     rounds (1)
 *   -s START first size in bytes (1048576)
 *   -M TOP   last size in bytes (268435456)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

int main(int argc, char **argv) {
  long rounds = 1;
  size_t start = (size_t)1 << 20, top = (size_t)256 << 20;
  int c;
  while ((c = getopt(argc, argv, "r:s:M:")) != -1) {
    switch (c) {
      case 'r': rounds = atol(optarg); break;
      case 's': start = (size_t)atol(optarg); break;
      case 'M': top = (size_t)atol(optarg); break;
      default: return usage(argv[0], "[-r rounds] [-s first size] [-M last size]");
    }
  }
  if (rounds < 1 || start < 1 || top < start) return bad_arguments();
  void **kept = malloc_or_die((size_t)rounds * sizeof *kept);
  uint64_t sum = 0;
  double t0 = now(), first = 0;
  for (long r = 0; r < rounds; r++) {
    size_t n = start;
    unsigned char *p = malloc_or_die(n);
    memset(p, 1, n);
    while (n < top) {
      size_t m = 2 * n < top ? 2 * n : top;
      unsigned char *q = realloc(p, m);
      if (!q) { fprintf(stderr, "realloc(%zu) failed\n", m); return 2; }
      p = q;
      memset(p + n, (int)(r & 0x7f) + 2, m - n);
      n = m;
    }
    sum += p[0] + p[n / 2] + p[n - 1];
    free(p);
    kept[r] = malloc_or_die(100 << 10);
    memset(kept[r], 3, 100 << 10);
    if (r == 0) first = now() - t0;
  }
  double t = now() - t0;
  for (long r = 0; r < rounds; r++) free(kept[r]);
  free(kept);
  printf("RESULT name=grow rounds=%ld start=%zu top=%zu seconds=%.6f first_seconds=%.6f checksum=%llu\n", rounds,
         start, top, t, first, (unsigned long long)sum);
  return 0;
}
