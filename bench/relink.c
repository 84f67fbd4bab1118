/* relink: a linked structure dropped in one order and built again, then walked:
 * what a parser, a compiler or an analyser does when it frees one input's
 * token list or tree and builds the next one's (cppcheck does it for each
 * file; docs/benchmarks.md, Stop 102).
 *
 * Each of R rounds builds a list of N nodes of NODE bytes, each pointing to a
 * payload of PAYLOAD bytes allocated just after it, walks the list W times
 * (each step loads the node's link and its payload's first word), and then
 * frees every node and its payload in a random order (a Fisher-Yates shuffle
 * of the nodes, made before the frees). The first round's blocks come from
 * fresh memory; every later round's come from what the round before freed,
 * in whatever order the allocator hands them out again. The walk is a chain
 * of dependent loads, so it runs as fast as the blocks' order lets the
 * hardware fetch them: in address order the next node is usually in a line
 * or a page already on its way; in the order of the shuffled frees it is
 * often a cache miss and a TLB miss.  Reported:
 *   seconds        the walks of rounds 2..R (the blocks handed out again)
 *   first_seconds  the walks of round 1 (fresh memory)
 *   ns_per_node    seconds / ((R - 1) x W x N)
 *
 *   -n N     nodes (100000)                -s NODE  node bytes (112, at least 16)
 *   -p PAYLOAD  payload bytes (208, at least 8)
 *   -r R     rounds (4, at least 2)        -w W     walks per round (20, at least 1)
 *   -S SEED  random seed (1)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_common.h"

struct node {
  struct node *next;
  uint64_t *payload;
};

int main(int argc, char **argv) {
  long n = 100000, rounds = 4, walks = 20, node_arg = 112, payload_arg = 208;
  uint64_t seed = 1;
  int c;
  while ((c = getopt(argc, argv, "n:s:p:r:w:S:")) != -1) {
    switch (c) {
      case 'n': n = atol(optarg); break;
      case 's': node_arg = atol(optarg); break;
      case 'p': payload_arg = atol(optarg); break;
      case 'r': rounds = atol(optarg); break;
      case 'w': walks = atol(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      default:
        return usage(argv[0], "[-n nodes] [-s node_bytes] [-p payload_bytes] [-r rounds] [-w walks] [-S seed]");
    }
  }
  if (n < 1 || rounds < 2 || walks < 1 || node_arg < (long)sizeof(struct node) || payload_arg < (long)sizeof(uint64_t))
    return bad_arguments();
  const size_t node_size = (size_t)node_arg, payload_size = (size_t)payload_arg;

  struct node **order = malloc_or_die((size_t)n * sizeof *order);
  uint64_t rng = (seed + 1) * 0x9E3779B97F4A7C15ULL | 1;
  uint64_t sum = 0;
  double first = 0, later = 0;
  for (long r = 0; r < rounds; r++) {
    /* order[] holds the nodes in list order, for the shuffle below. */
    for (long i = 0; i < n; i++) {
      struct node *x = malloc_or_die(node_size);
      x->payload = malloc_or_die(payload_size);
      x->payload[0] = (uint64_t)i;
      x->next = NULL;
      if (i > 0) order[i - 1]->next = x;
      order[i] = x;
    }
    struct node *head = order[0];
    double t0 = now();
    for (long w = 0; w < walks; w++) {
      for (struct node *x = head; x; x = x->next) sum += x->payload[0];
      __asm__ volatile("" ::: "memory");  /* each walk loads the list again */
    }
    double t = now() - t0;
    if (r == 0) first = t;
    else later += t;
    for (long i = n - 1; i > 0; i--) {
      long j = (long)(rng_next(&rng) % (uint64_t)(i + 1));
      struct node *s = order[i];
      order[i] = order[j];
      order[j] = s;
    }
    for (long i = 0; i < n; i++) {
      free(order[i]->payload);
      free(order[i]);
    }
  }
  free(order);
  printf("RESULT name=relink nodes=%ld node_bytes=%zu payload_bytes=%zu rounds=%ld walks=%ld seconds=%.6f "
         "first_seconds=%.6f ns_per_node=%.2f checksum=%llu\n",
         n, node_size, payload_size, rounds, walks, later, first,
         later / ((double)(rounds - 1) * (double)walks * (double)n) * 1e9, (unsigned long long)sum);
  return 0;
}
