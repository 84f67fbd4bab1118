// shim/glibc.cpp: the rest of glibc's allocator interface, answered by freeway
// (Linux with glibc; libfreeway.so and libfreeway.a).
//
// glibc exports more than the malloc family: malloc_trim, mallinfo2,
// mallinfo, mallopt, malloc_stats, malloc_info, and the __libc_ names of its
// own functions. Without them here:
// - a program that calls them gets glibc's heap, which holds nothing: under
//   LD_PRELOAD mallinfo2 reported 0 bytes in use and malloc_trim released
//   nothing (tmux and clangd call malloc_trim; LLVM's tools, systemd and e2fsck
//   read mallinfo2);
// - a block from __libc_malloc was glibc's, so free() reported it as a bad
//   pointer, and __libc_free of a freeway block crashed in glibc;
// - a program linked with libfreeway.a and -static that names any of them
//   did not link: the name brings in libc.a's malloc.o, whose malloc and free
//   clash with freeway's ("multiple definition of `malloc'").
// So each is defined here. override.cpp refers to this file's anchor and this
// file to override.cpp's, so that a static link takes both or neither.
//
// The figures (docs/stats.md gives fw_stats's):
//   uordblks  live_bytes - large_live_bytes: small blocks in use
//   hblks     large_allocs - large_frees: large and huge blocks in use
//   hblkhd    large_live_bytes
//   arena     committed_bytes - hblkhd, at least uordblks
//   fordblks  arena - uordblks: committed and not in a block in use
// so, as under glibc, uordblks + fordblks = arena and uordblks + hblkhd are the
// bytes in use. ordblks, smblks, fsmblks, usmblks and keepcost count glibc's
// chunks and bins, which freeway has no equivalent of: 0.
#if defined(__linux__)
#include <features.h>
#endif
#if defined(__GLIBC__)
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>

#include "core/config.h"
#include "core/lab.h"
#include "core/options.h"
#include "core/report.h"
#include "core/span_pool.h"
#include "core/stats.h"
#include "freeway.h"

#define FW_GLIBC_API extern "C" __attribute__((visibility("default"), used))

// glibc's layouts (malloc.h, which is not included: it declares these
// functions with exception specifications and deprecation marks).
struct mallinfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct mallinfo {
  int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};

namespace {

// The figures glibc's fields need that fw_stats_t does not hold as such
// (the formulas above).
struct Derived {
  uint64_t in_use_small, large_count, arena, free_in_arena;
};

Derived derive(const fw_stats_t& s) {
  Derived d{};
  // The two counts are read apart: a free between them can make frees the larger.
  d.large_count = s.large_allocs > s.large_frees ? s.large_allocs - s.large_frees : 0;
  d.in_use_small = s.live_bytes > s.large_live_bytes ? s.live_bytes - s.large_live_bytes : 0;
  const uint64_t small_committed = s.committed_bytes > s.large_live_bytes ? s.committed_bytes - s.large_live_bytes : 0;
  d.arena = small_committed > d.in_use_small ? small_committed : d.in_use_small;
  d.free_in_arena = d.arena - d.in_use_small;
  return d;
}

// glibc's mallinfo wraps fields above INT_MAX; these stop there.
int clamp_int(uint64_t v) { return v > uint64_t(INT_MAX) ? INT_MAX : int(v); }

fw::Line& signed_dec(fw::Line& l, int v) {
  if (v < 0) return l.str("-").dec(uint64_t(-int64_t(v)));
  return l.dec(uint64_t(v));
}

}  // namespace

extern "C" {

// One anchor each way with override.cpp (see above).
extern int freeway_override_anchor;
__attribute__((used)) static int* const g_pull_override = &freeway_override_anchor;
__attribute__((visibility("default"))) int freeway_glibc_anchor = 1;

// Gives free memory back to the OS now: fw_collect without two of its steps.
// It does not empty per-CPU caches (fw_collect runs the caller on each CPU in
// turn for that: half a second with 8 busy threads on 2 CPUs, more on a big
// machine, for a call programs make periodically; those caches hold at most
// two spans a class a CPU), and it does not empty the caller's quarantine in
// secure mode (a library's trim does not shorten use-after-free detection).
// pad, the bytes glibc leaves at its heap's top, has no meaning here. 1 when
// some memory was given back: by the pool's pass (counted there, so other
// threads' commits meanwhile cannot hide it), or by the caches' spans on
// their way to the pool (with FREEWAY_DECAY_MS=0 the pool gives them back as
// they come in).
FW_GLIBC_API int malloc_trim(size_t pad) {
  const uint64_t before = fw::committed_bytes();
  fw::lab_collect_current(fw::Collect::kKept);
  fw::lab_collect_parked();
  const uint64_t gave = fw::pool_collect();
  return gave > 0 || fw::committed_bytes() < before ? 1 : 0;
}

FW_GLIBC_API struct mallinfo2 mallinfo2(void) {
  fw_stats_t s;
  fw_stats(&s);
  const Derived d = derive(s);
  struct mallinfo2 out {};
  out.arena = d.arena;
  out.hblks = d.large_count;
  out.hblkhd = s.large_live_bytes;
  out.uordblks = d.in_use_small;
  out.fordblks = d.free_in_arena;
  return out;
}

FW_GLIBC_API struct mallinfo mallinfo(void) {
  const struct mallinfo2 w = mallinfo2();
  struct mallinfo out {};
  out.arena = clamp_int(w.arena);
  out.hblks = clamp_int(w.hblks);
  out.hblkhd = clamp_int(w.hblkhd);
  out.uordblks = clamp_int(w.uordblks);
  out.fordblks = clamp_int(w.fordblks);
  return out;
}

// glibc's tuning parameters (M_MMAP_THRESHOLD, M_ARENA_MAX...) have no effect
// on freeway, whose options are FREEWAY_<NAME> (docs/tuning.md). Accepted (1,
// as glibc answers for a value it takes), so that a program that stops when
// mallopt fails still runs; FREEWAY_VERBOSE=1 names each ignored call.
FW_GLIBC_API int mallopt(int param, int value) {
  if (fw::option(fw::Option::verbose) > 0) {
    fw::Line l;
    signed_dec(l.str("freeway: mallopt("), param).str(", ");
    signed_dec(l, value).str(") has no effect: freeway's options are FREEWAY_<NAME> (docs/tuning.md)\n").write(2);
  }
  return 1;
}

// glibc prints its arenas to stderr; this prints fw_stats.
FW_GLIBC_API void malloc_stats(void) { fw_stats_print(2); }

// glibc's XML shape (version 1) for the totals tools read, then every figure
// of fw_stats_t by name. options must be 0, as glibc asks (EINVAL otherwise).
FW_GLIBC_API int malloc_info(int options, FILE* fp) {
  if (options != 0) return EINVAL;
  fw_stats_t s;
  fw_stats(&s);
  const Derived d = derive(s);
  const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  fprintf(fp, "<malloc version=\"1\" allocator=\"freeway\">\n");
  fprintf(fp, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n");
  fprintf(fp, "<total type=\"rest\" count=\"0\" size=\"%llu\"/>\n", u(d.free_in_arena));
  fprintf(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", u(d.large_count), u(s.large_live_bytes));
  // As glibc's: "current" and "aspace" without the large blocks, which "mmap" counts.
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", u(d.arena));
  fprintf(fp, "<system type=\"max\" size=\"%llu\"/>\n", u(s.peak_committed_bytes));
  fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", u(s.reserved_bytes));
  fprintf(fp, "<aspace type=\"mprotect\" size=\"%llu\"/>\n", u(d.arena));
#define FW_STAT_XML(field, doc) fprintf(fp, "<stat name=\"%s\" value=\"%llu\"/>\n", #field, u(s.field));
  FW_STAT_FIELDS(FW_STAT_XML)
#undef FW_STAT_XML
  fprintf(fp, "</malloc>\n");
  return 0;
}

// glibc's own names for its functions. A program or library that calls them
// (a debugging wrapper, a profiler's heap tracer) gets freeway's blocks, which
// free() takes, and frees them with freeway.
FW_GLIBC_API void* __libc_malloc(size_t n) { return fw_malloc(n); }
FW_GLIBC_API void __libc_free(void* p) { fw_free(p); }
FW_GLIBC_API void* __libc_calloc(size_t c, size_t n) { return fw_calloc(c, n); }
FW_GLIBC_API void* __libc_realloc(void* p, size_t n) { return fw_realloc(p, n); }
FW_GLIBC_API void* __libc_memalign(size_t a, size_t n) { return fw_memalign(a, n); }
FW_GLIBC_API void* __libc_valloc(size_t n) { return fw_valloc(n); }
FW_GLIBC_API void* __libc_pvalloc(size_t n) { return fw_pvalloc(n); }
FW_GLIBC_API int __posix_memalign(void** out, size_t a, size_t n) { return fw_posix_memalign(out, a, n); }
FW_GLIBC_API struct mallinfo __libc_mallinfo(void) { return mallinfo(); }
FW_GLIBC_API struct mallinfo2 __libc_mallinfo2(void) { return mallinfo2(); }
FW_GLIBC_API int __libc_mallopt(int param, int value) { return mallopt(param, value); }

}  // extern "C"
#endif  // __GLIBC__
