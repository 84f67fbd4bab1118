/* producer-consumer: Michael 2004 §4.1 ("lock-free Producer-consumer").
 *
 * A database of 1M random items is built first (untimed).  Thread 0 is the
 * producer, threads 1..T-1 are consumers.  For each task the producer picks
 * a random set of 10..20 database indexes, allocates a block of matching
 * size (40..80 bytes) to hold them, allocates a task structure (32 bytes)
 * and a queue node (16 bytes), and enqueues the task in a lock-free FIFO
 * queue (Michael & Scott, with hazard pointers guarding dequeued nodes).
 * A consumer dequeues a task, allocates a histogram (1 malloc), fills it
 * from the database entries the task names, does local work proportional to
 * WORK, and frees the index block, the task, the histogram and the queue
 * node (4 frees, the node once no hazard pointer protects it).  When more
 * than 1000 tasks are queued the producer helps by processing one itself.
 * Nearly every block is freed by a thread other than the one that
 * allocated it.  Reports tasks completed per second over D seconds, and
 * ops_per_sec = 8 allocator calls per task (3+1 mallocs, 4 frees).
 *
 *   -t T   threads: 1 producer + T-1 consumers (1)
 *   -d D   seconds (2)           -w WORK local work per task (500)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define DB_ITEMS (1 << 20)
#define HIST_BINS 16
#define HELP_THRESHOLD 1000
#define MAX_THREADS 1024
#define RETIRE_SCAN 64

static uint32_t *db;
static int work = 500;
static int nthreads = 1;
static atomic_int stop_flag;

struct task {             /* 32 bytes */
  uint32_t *idx;
  uint32_t n;
  uint32_t producer_seq;
  uint64_t seed;
  uint64_t spare;
};
struct node {             /* 16 bytes */
  _Atomic(struct node *) next;
  struct task *task;
};
_Static_assert(sizeof(struct task) == 32, "task is 32 bytes");
_Static_assert(sizeof(struct node) == 16, "node is 16 bytes");

/* Michael-Scott queue; head and tail on their own cache lines. */
static struct { _Alignas(64) _Atomic(struct node *) head; } qh;
static struct { _Alignas(64) _Atomic(struct node *) tail; } qt;
static struct { _Alignas(64) atomic_long enq; } cnt_enq;
static struct { _Alignas(64) atomic_long deq; } cnt_deq;

/* Hazard pointers: two per thread. */
struct hp_rec { _Alignas(64) _Atomic(struct node *) hp[2]; };
static struct hp_rec hps[MAX_THREADS];

struct worker {
  pthread_t tid;
  int id;
  uint64_t tasks, sum;
  uint64_t mallocs, frees;
  struct node *retired[RETIRE_SCAN * 4];
  int nretired;
  char pad[64];
};

static void *xmalloc(size_t n, struct worker *w) {
  void *p = malloc_or_die(n);
  w->mallocs++;
  return p;
}
static void xfree(void *p, struct worker *w) { free(p); w->frees++; }

static void scan_retired(struct worker *w) {
  struct node *hazard[2 * MAX_THREADS];
  int nh = 0;
  for (int i = 0; i < nthreads; i++)
    for (int k = 0; k < 2; k++) {
      struct node *h = atomic_load(&hps[i].hp[k]);
      if (h) hazard[nh++] = h;
    }
  int keep = 0;
  for (int i = 0; i < w->nretired; i++) {
    struct node *n = w->retired[i];
    int busy = 0;
    for (int k = 0; k < nh && !busy; k++) busy = (hazard[k] == n);
    if (busy) w->retired[keep++] = n;
    else xfree(n, w);
  }
  w->nretired = keep;
}

static void retire(struct node *n, struct worker *w) {
  w->retired[w->nretired++] = n;
  if (w->nretired >= RETIRE_SCAN) scan_retired(w);
  if (w->nretired >= RETIRE_SCAN * 4 - 1) { fprintf(stderr, "retire list overflow\n"); exit(2); }
}

static void enqueue(struct task *t, struct worker *w) {
  struct node *n = xmalloc(sizeof *n, w);
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  n->task = t;
  _Atomic(struct node *) *hp = &hps[w->id].hp[0];
  for (;;) {
    struct node *tail = atomic_load(&qt.tail);
    atomic_store(hp, tail);
    if (atomic_load(&qt.tail) != tail) continue;
    struct node *next = atomic_load(&tail->next);
    if (atomic_load(&qt.tail) != tail) continue;
    if (next) { atomic_compare_exchange_strong(&qt.tail, &tail, next); continue; }
    struct node *expected = NULL;
    if (atomic_compare_exchange_strong(&tail->next, &expected, n)) {
      atomic_compare_exchange_strong(&qt.tail, &tail, n);
      break;
    }
  }
  atomic_store(hp, NULL);
  atomic_fetch_add_explicit(&cnt_enq.enq, 1, memory_order_relaxed);
}

static struct task *dequeue(struct worker *w) {
  _Atomic(struct node *) *hp0 = &hps[w->id].hp[0], *hp1 = &hps[w->id].hp[1];
  struct task *t;
  struct node *head;
  for (;;) {
    head = atomic_load(&qh.head);
    atomic_store(hp0, head);
    if (atomic_load(&qh.head) != head) continue;
    struct node *tail = atomic_load(&qt.tail);
    struct node *next = atomic_load(&head->next);
    atomic_store(hp1, next);
    if (atomic_load(&qh.head) != head) continue;
    if (!next) { atomic_store(hp0, NULL); atomic_store(hp1, NULL); return NULL; }
    if (head == tail) { atomic_compare_exchange_strong(&qt.tail, &tail, next); continue; }
    t = next->task;
    if (atomic_compare_exchange_strong(&qh.head, &head, next)) break;
  }
  atomic_store(hp0, NULL);
  atomic_store(hp1, NULL);
  atomic_fetch_add_explicit(&cnt_deq.deq, 1, memory_order_relaxed);
  retire(head, w);  /* the old dummy node */
  return t;
}

static void process(struct task *t, struct worker *w) {
  uint32_t *hist = xmalloc(HIST_BINS * sizeof *hist, w);
  memset(hist, 0, HIST_BINS * sizeof *hist);
  for (uint32_t i = 0; i < t->n; i++) hist[db[t->idx[i]] % HIST_BINS]++;
  volatile uint64_t x = t->seed;
  for (int i = 0; i < work; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  uint64_t s = x;
  for (int i = 0; i < HIST_BINS; i++) s += (uint64_t)hist[i] * (uint64_t)(i + 1);
  w->sum += s;
  xfree(t->idx, w);
  xfree(t, w);
  xfree(hist, w);
  w->tasks++;
}

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(w->id + 7) | 1;
  gate_wait();
  if (w->id == 0) {  /* producer */
    uint32_t seq = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
      uint32_t n = 10 + (uint32_t)(rng_next(&rng) % 11);
      uint32_t *idx = xmalloc(n * sizeof *idx, w);
      for (uint32_t i = 0; i < n; i++) idx[i] = (uint32_t)(rng_next(&rng) % DB_ITEMS);
      struct task *t = xmalloc(sizeof *t, w);
      t->idx = idx;
      t->n = n;
      t->producer_seq = seq++;
      t->seed = rng_next(&rng);
      t->spare = 0;
      enqueue(t, w);
      long queued = atomic_load_explicit(&cnt_enq.enq, memory_order_relaxed) -
                    atomic_load_explicit(&cnt_deq.deq, memory_order_relaxed);
      if (queued > HELP_THRESHOLD) {
        struct task *h = dequeue(w);
        if (h) process(h, w);
      }
    }
  } else {  /* consumer */
    int idle = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
      struct task *t = dequeue(w);
      if (t) { process(t, w); idle = 0; continue; }
      if (++idle > 64) { sched_yield(); idle = 0; }
      else __builtin_ia32_pause();
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  int c;
  double duration = 2.0;
  while ((c = getopt(argc, argv, "t:d:w:")) != -1) {
    switch (c) {
      case 't': nthreads = atoi(optarg); break;
      case 'd': duration = atof(optarg); break;
      case 'w': work = atoi(optarg); break;
      default:
        return usage(argv[0], "[-t threads] [-d seconds] [-w work]");
    }
  }
  if (nthreads < 1 || nthreads > MAX_THREADS || duration <= 0 || work < 0) return bad_arguments();
  db = malloc(DB_ITEMS * sizeof *db);
  if (!db) { fprintf(stderr, "out of memory\n"); return 2; }
  uint64_t rng = 12345;
  for (long i = 0; i < DB_ITEMS; i++) db[i] = (uint32_t)rng_next(&rng);
  struct node *dummy = malloc(sizeof *dummy);
  atomic_store(&dummy->next, NULL);
  dummy->task = NULL;
  atomic_store(&qh.head, dummy);
  atomic_store(&qt.tail, dummy);

  struct worker *w = calloc((size_t)nthreads, sizeof *w);
  for (int i = 0; i < nthreads; i++) {
    w[i].id = i;
    if (pthread_create(&w[i].tid, NULL, run, &w[i])) { perror("pthread_create"); return 2; }
  }
  double t0 = gate_release(nthreads);
  sleep_seconds(duration);
  double t1 = now();
  atomic_store(&stop_flag, 1);
  uint64_t tasks = 0, sum = 0, mallocs = 0, frees = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    tasks += w[i].tasks;
    sum += w[i].sum;
  }
  /* Untimed clean-up: all threads are gone, so nothing is hazardous. */
  long left = 0;
  struct task *t;
  while ((t = dequeue(&w[0])) != NULL) { free(t->idx); free(t); left++; }
  for (int i = 0; i < nthreads; i++) {
    for (int k = 0; k < w[i].nretired; k++) { free(w[i].retired[k]); w[i].frees++; }
    mallocs += w[i].mallocs;
    frees += w[i].frees;
  }
  free(atomic_load(&qh.head));
  free(db);
  double secs = t1 - t0;
  printf("RESULT name=prodcons threads=%d work=%d seconds=%.6f tasks_per_sec=%.0f ops_per_sec=%.0f "
         "tasks=%llu left_in_queue=%ld mallocs=%llu frees=%llu checksum=%llu\n",
         nthreads, work, secs, (double)tasks / secs, 8.0 * (double)tasks / secs,
         (unsigned long long)tasks, left, (unsigned long long)mallocs, (unsigned long long)frees,
         (unsigned long long)sum);
  free(w);
  return 0;
}
