/* calls: the malloc family's calls besides malloc and free, each in the loop a
 * program runs it in, next to the same loop through malloc and free.
 *
 * Kinds (-k):
 *   replace  N slots of live blocks; each call frees a random slot's block
 *            (reading its first byte first) and mallocs a new one of a random
 *            size in [MIN, MAX] in 16-byte steps (writing its first 16
 *            bytes): a heap whose blocks are replaced at random, as a cache
 *            or a server's session table churns.
 *   aligned  the same through aligned_alloc(A, size), posix_memalign when A
 *            is not a multiple of every size (C11 wants size a multiple of
 *            A): SIMD buffers, over-aligned C++ types (aligned new), a
 *            page-aligned I/O buffer.
 *   realloc  strings grown a byte at a time, a realloc for each byte, from 1
 *            byte to a random length in [MIN, MAX]; each string then
 *            replaces a random slot's: a string builder or a read buffer
 *            that grows as input comes.
 * What differs between allocators is the path these calls take before a
 * block is handed out or kept: a size's class for an alignment, a realloc
 * that keeps the block, and what they check on the way.  Reported:
 *   seconds       the calls
 *   ns_per_call   seconds / calls (one malloc and one free count as one call)
 *
 *   -k KIND  replace, aligned or realloc (replace)
 *   -i I     calls (10000000)           -n N    slots (4096)
 *   -m MIN   smallest size (16)         -M MAX  largest size (512)
 *   -a A     alignment, a power of two (64)
 *   -S SEED  random seed (1)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"

static void *aligned_block(size_t a, size_t n) {
  if (n % a == 0) return aligned_alloc(a, n);
  void *p = NULL;
  return posix_memalign(&p, a, n) == 0 ? p : NULL;
}

int main(int argc, char **argv) {
  const char *kind = "replace";
  long calls = 10000000, slots = 4096;
  size_t min_size = 16, max_size = 512, align = 64;
  uint64_t seed = 1;
  int c;
  while ((c = getopt(argc, argv, "k:i:n:m:M:a:S:")) != -1) {
    switch (c) {
      case 'k': kind = optarg; break;
      case 'i': calls = atol(optarg); break;
      case 'n': slots = atol(optarg); break;
      case 'm': min_size = (size_t)atol(optarg); break;
      case 'M': max_size = (size_t)atol(optarg); break;
      case 'a': align = (size_t)atol(optarg); break;
      case 'S': seed = (uint64_t)atoll(optarg); break;
      default:
        return usage(argv[0], "[-k replace|aligned|realloc] [-i calls] [-n slots] [-m min] [-M max] [-a align] "
                              "[-S seed]");
    }
  }
  const int k_replace = strcmp(kind, "replace") == 0, k_aligned = strcmp(kind, "aligned") == 0,
            k_realloc = strcmp(kind, "realloc") == 0;
  if (!(k_replace || k_aligned || k_realloc) || calls < 1 || slots < 1 || min_size < 1 || max_size < min_size ||
      align < sizeof(void *) || (align & (align - 1)) != 0)
    return bad_arguments();
  unsigned char **slot = calloc((size_t)slots, sizeof *slot);
  if (!slot) return bad_arguments();
  uint64_t rng = (seed + 1) * 0x9E3779B97F4A7C15ULL | 1, sum = 0;
  const size_t steps = (max_size - min_size) / 16 + 1;
  long done = 0;
  double t0 = now();
  if (k_realloc) {
    while (done < calls) {
      const size_t len = min_size + (size_t)(rng_next(&rng) % (max_size - min_size + 1));
      unsigned char *s = NULL;
      for (size_t n = 1; n <= len && done < calls; n++, done++) {
        unsigned char *t = realloc(s, n);
        if (!t) { fprintf(stderr, "realloc(%zu) failed\n", n); return 2; }
        s = t;
        s[n - 1] = (unsigned char)n;
      }
      const long k = (long)(rng_next(&rng) % (uint64_t)slots);
      if (slot[k]) sum += slot[k][0];
      free(slot[k]);
      slot[k] = s;
    }
  } else {
    for (; done < calls; done++) {
      const long k = (long)(rng_next(&rng) % (uint64_t)slots);
      const size_t n = min_size + 16 * (size_t)(rng_next(&rng) % steps);
      if (slot[k]) sum += slot[k][0];
      free(slot[k]);
      unsigned char *p = k_aligned ? aligned_block(align, n) : malloc(n);
      if (!p || (k_aligned && ((uintptr_t)p & (align - 1)) != 0)) {
        fprintf(stderr, "%s(%zu) failed or misaligned: %p\n", kind, n, (void *)p);
        return 2;
      }
      memset(p, (int)(done & 0x7f), n < 16 ? n : 16);
      slot[k] = p;
    }
  }
  double t = now() - t0;
  for (long k = 0; k < slots; k++) free(slot[k]);
  free(slot);
  printf("RESULT name=calls kind=%s calls=%ld slots=%ld min=%zu max=%zu align=%zu seconds=%.6f ns_per_call=%.2f "
         "checksum=%llu\n",
         kind, calls, slots, min_size, max_size, align, t, t / (double)calls * 1e9, (unsigned long long)sum);
  return 0;
}
