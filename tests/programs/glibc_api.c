/* glibc_api: glibc's allocator interface beyond the malloc family
 * (shim/glibc.cpp): the __libc_ names, mallinfo2 and mallinfo, malloc_trim,
 * mallopt, malloc_info and malloc_stats.
 *
 *   glibc_api glibc     what glibc itself does, and freeway must do too
 *   glibc_api freeway   the same, with freeway answering: every block is
 *                       freeway's (fw_owns), mallinfo2's bytes in use are
 *                       fw_stats's live bytes, malloc_trim gives memory back
 *
 * Built two ways: not linked to freeway (run plain and under LD_PRELOAD; the
 * fw_ functions are found with dlsym), and with -DGA_STATIC, linked -static
 * with libfreeway.a, which is the link this file's names used to break.
 * Exit 0 when every check holds, 1 otherwise (each failure on stdout). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "freeway.h"

#ifndef GA_STATIC
#include <dlfcn.h>
#endif

void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
struct mallinfo __libc_mallinfo(void);
int __libc_mallopt(int, int);
/* Two names libc.so.6 does not export (libc.a's malloc.o defines them):
 * freeway's only, so looked up in freeway mode. */
int __posix_memalign(void**, size_t, size_t);
struct mallinfo2 __libc_mallinfo2(void);
#ifdef GA_STATIC
#define FREEWAY_ONLY(name) ((void*)&name)
#else
#define FREEWAY_ONLY(name) dlsym(RTLD_DEFAULT, #name)
#endif

#define FW_CHECK_PROGRAM "glibc_api"
#include "check.h"

static int (*p_fw_owns)(const void*);
static void (*p_fw_stats)(fw_stats_t*);

static size_t rss_bytes(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == NULL) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static size_t in_use(struct mallinfo2 m) { return m.uordblks + m.hblkhd; }

/* The __libc_ names: their blocks and malloc's are one heap's. */
static void libc_names(int freeway) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* a = __libc_malloc(100);
  CHECK(a != NULL);
  memset(a, 1, 100);
  char* b = malloc(200);
  CHECK(b != NULL);
  char* c = __libc_calloc(10, 100);
  CHECK(c != NULL);
  for (int i = 0; c && i < 1000; i++) CHECK(c[i] == 0);
  char* r = __libc_malloc(10);
  memcpy(r, "freeway!!", 10);
  r = __libc_realloc(r, 5000);
  CHECK(r != NULL && memcmp(r, "freeway!!", 10) == 0);
  void* m = __libc_memalign(4096, 100);
  CHECK(m != NULL && ((uintptr_t)m & 4095) == 0);
  void* v = __libc_valloc(10);
  CHECK(v != NULL && ((uintptr_t)v & (page - 1)) == 0);
  void* pv = __libc_pvalloc(10);
  CHECK(pv != NULL && ((uintptr_t)pv & (page - 1)) == 0 && malloc_usable_size(pv) >= page);
  if (freeway) {
    int (*pm_fn)(void**, size_t, size_t) = (int (*)(void**, size_t, size_t))FREEWAY_ONLY(__posix_memalign);
    void* pm = NULL;
    CHECK(pm_fn != NULL && pm_fn(&pm, 256, 300) == 0 && pm != NULL && ((uintptr_t)pm & 255) == 0);
    CHECK(p_fw_owns(a) && p_fw_owns(b) && p_fw_owns(c) && p_fw_owns(r));
    CHECK(p_fw_owns(m) && p_fw_owns(v) && p_fw_owns(pv) && p_fw_owns(pm));
    free(pm);
  }
  free(a);        /* __libc_malloc's block to free */
  __libc_free(b); /* malloc's block to __libc_free */
  __libc_free(c);
  free(r);
  __libc_free(m);
  free(v);
  free(pv);
}

enum { kBlocks = 40000, kBlock = 1000, kBig = 16 << 20 };

/* mallinfo2 and mallinfo follow what is allocated; malloc_trim gives it back. */
static void info_and_trim(int freeway) {
  static char* blocks[kBlocks];
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < kBlocks; i++) {
    blocks[i] = malloc(kBlock);
    memset(blocks[i], 2, kBlock);
  }
  char* big = malloc(kBig);
  memset(big, 3, kBig);
  const size_t rss_peak = rss_bytes();

  fw_stats_t s;
  if (freeway) p_fw_stats(&s);
  struct mallinfo2 full = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo narrow = mallinfo(); /* deprecated, still exported and used */
#pragma GCC diagnostic pop
  CHECK(in_use(full) >= in_use(before) + (size_t)kBlocks * kBlock + kBig);
  CHECK(full.arena == full.uordblks + full.fordblks);
  CHECK(full.hblks >= 1 && full.hblkhd >= (size_t)kBig);
  CHECK(narrow.uordblks == (int)full.uordblks && narrow.hblkhd == (int)full.hblkhd);
  CHECK(narrow.arena == (int)full.arena);
  if (freeway) {
    /* glibc's own names give the same, and the chunk counts are 0. */
    struct mallinfo2 (*info2)(void) = (struct mallinfo2(*)(void))FREEWAY_ONLY(__libc_mallinfo2);
    CHECK(info2 != NULL);
    if (info2 != NULL) CHECK(info2().uordblks == full.uordblks);
    CHECK(__libc_mallinfo().uordblks == narrow.uordblks);
    CHECK(full.ordblks == 0 && full.smblks == 0 && full.fsmblks == 0 && full.usmblks == 0 && full.keepcost == 0);
    CHECK(in_use(full) == s.live_bytes);
    CHECK(full.hblkhd == s.large_live_bytes);
    CHECK(full.arena + full.hblkhd == s.committed_bytes);
  }

  for (int i = 0; i < kBlocks; i++) free(blocks[i]);
  free(big);
  struct mallinfo2 freed = mallinfo2();
  CHECK(in_use(full) - in_use(freed) >= (size_t)kBlocks * kBlock + kBig);

  uint64_t committed_before = 0;
  if (freeway) {
    p_fw_stats(&s);
    committed_before = s.committed_bytes;
  }
  const int trimmed = malloc_trim(0);
  CHECK(trimmed == 0 || trimmed == 1);
  if (freeway) {
    /* 1 exactly when committed memory fell (one thread: nothing else commits
     * meanwhile). What is left committed: the caches' hot spans and the
     * blocks still in use, within a few MiB. A trim right after one finds
     * nothing more to give back. */
    p_fw_stats(&s);
    CHECK(trimmed == (s.committed_bytes < committed_before));
    CHECK(s.committed_bytes <= s.live_bytes + (4u << 20));
    CHECK(malloc_trim(0) == 0);
  }
  const size_t rss_trimmed = rss_bytes();
  CHECK(rss_trimmed + (32u << 20) <= rss_peak);
  if (g_failed)
    printf("glibc_api: in use %zu -> %zu -> %zu, RSS %zu -> %zu (trim %d)\n", in_use(before), in_use(full),
           in_use(freed), rss_peak, rss_trimmed, trimmed);
}

static char* read_all(FILE* f) {
  static char text[1 << 16];
  size_t n = 0;
  rewind(f);
  n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  return text;
}

static void reports(int freeway) {
  CHECK(mallopt(M_ARENA_MAX, 4) == 1);
  CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
  CHECK(__libc_mallopt(M_ARENA_MAX, 8) == 1);

  FILE* f = tmpfile();
  CHECK(f != NULL);
  if (f == NULL) return;
  CHECK(malloc_info(1, f) == EINVAL);
  CHECK(malloc_info(0, f) == 0);
  fflush(f);
  const char* xml = read_all(f);
  CHECK(strncmp(xml, "<malloc version=\"1\"", 19) == 0);
  CHECK(strlen(xml) > 10 && strcmp(xml + strlen(xml) - 10, "</malloc>\n") == 0);
  if (freeway) CHECK(strstr(xml, "allocator=\"freeway\"") && strstr(xml, "<stat name=\"live_bytes\" value=\""));
  fclose(f);

  /* malloc_stats writes to stderr: catch it in a file. */
  f = tmpfile();
  CHECK(f != NULL);
  if (f == NULL) return;
  fflush(stderr);
  const int saved = dup(2);
  dup2(fileno(f), 2);
  malloc_stats();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const char* text = read_all(f);
  CHECK(strlen(text) > 0);
  if (freeway) CHECK(strstr(text, "freeway statistics") != NULL);
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "glibc") != 0 && strcmp(argv[1], "freeway") != 0)) {
    fprintf(stderr, "usage: %s glibc|freeway\n", argv[0]);
    return 2;
  }
  const int freeway = strcmp(argv[1], "freeway") == 0;
  if (freeway) {
#ifdef GA_STATIC
    p_fw_owns = fw_owns;
    p_fw_stats = fw_stats;
#else
    p_fw_owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "fw_owns");
    p_fw_stats = (void (*)(fw_stats_t*))dlsym(RTLD_DEFAULT, "fw_stats");
    if (p_fw_owns == NULL || p_fw_stats == NULL) {
      printf("glibc_api: freeway is not loaded (no fw_owns or fw_stats)\n");
      return 1;
    }
#endif
  }
  if (!freeway) {
    /* glibc's defaults, whatever GLIBC_TUNABLES or MALLOC_*_ say: the big
     * block is mmapped (hblks), and a free heap's top is given back. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TOP_PAD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  }
  libc_names(freeway);
  info_and_trim(freeway);
  reports(freeway);
  if (!g_failed) printf("glibc_api %s: all checks passed\n", argv[1]);
  return g_failed;
}
