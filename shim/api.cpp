// shim/api.cpp: the fw_* public API (freeway.h), each a forward into the core.
#include <cerrno>

#include "core/alloc.h"
#include "core/free.h"
#include "core/options.h"
#include "core/percpu.h"
#include "core/span_pool.h"
#include "core/secure_heap.h"
#include "core/stats.h"
#include "core/telemetry.h"
#include "freeway.h"
#include "platform/os.h"

namespace fw {
int check_heap();
}

namespace {
size_t page() { return fw::os::page_size(); }
}  // namespace

extern "C" {

FW_API void* fw_malloc(size_t size) { return fw::alloc_small(size); }
FW_API void* fw_calloc(size_t count, size_t size) { return fw::fw_alloc_zeroed(count, size); }
FW_API void* fw_realloc(void* p, size_t size) { return fw::fw_realloc_impl(p, size); }
FW_API void fw_free(void* p) { fw::free_block(p); }
// The size is checked against the block (core/size_class.h, sized_free_fits).
FW_API void fw_free_sized(void* p, size_t size) { fw::free_block_sized(p, size, false); }
FW_API void fw_free_aligned_sized(void* p, size_t alignment, size_t size) {
  fw::free_block_sized(p, size, alignment > 16);
}
FW_API size_t fw_usable_size(const void* p) { return fw::fw_usable(p); }
FW_API int fw_owns(const void* p) { return fw::arena_owns(p) || fw::zero_owns(p); }
FW_API void fw_collect(void) {
  fw::quarantine_flush();
  fw::lab_collect_current(fw::Collect::kKept);
  fw::lab_collect_parked();
  fw::percpu_collect();
  fw::pool_collect();
}
FW_API int fw_caches_per_cpu(void) { return fw::percpu_start() ? 1 : 0; }
FW_API void fw_stats(fw_stats_t* out) { fw::stats_fill(out); }
FW_API void fw_stats_print(int fd) { fw::stats_print(fd); }
FW_API int fw_check_heap(void) { return fw::check_heap(); }
FW_API int fw_telemetry_start(void) { return fw::telemetry_start(); }
FW_API void fw_telemetry_stop(void) { fw::telemetry_stop(); }
FW_API int fw_telemetry_active(void) { return fw::telemetry_active() ? 1 : 0; }

FW_API void* fw_reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return fw::fw_realloc_impl(p, total);
}

FW_API void* fw_malloc_aligned(size_t alignment, size_t size) {
  if (!fw::is_pow2(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return fw::fw_alloc_aligned(alignment, size);
}

FW_API int fw_posix_memalign(void** out, size_t alignment, size_t size) {
  if (!fw::is_pow2(alignment) || alignment < sizeof(void*)) return EINVAL;
  void* p = fw::fw_alloc_aligned(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

// C11/C17: alignment must be a valid (power of two) alignment; glibc does not
// require size to be a multiple of it, and neither does freeway.
FW_API void* fw_aligned_alloc(size_t alignment, size_t size) { return fw_malloc_aligned(alignment, size); }
// glibc's memalign rounds an alignment that is not a power of two up to one;
// only an alignment above the largest power of two (2^63) is invalid (EINVAL).
// Any valid alignment that cannot be had is ENOMEM, as for aligned_alloc.
FW_API void* fw_memalign(size_t alignment, size_t size) {
  if (alignment > ~(~size_t(0) >> 1)) {
    errno = EINVAL;
    return nullptr;
  }
  size_t a = 1;
  while (a < alignment) a <<= 1;
  return fw::fw_alloc_aligned(a, size);
}
FW_API void* fw_valloc(size_t size) { return fw::fw_alloc_aligned(page(), size); }

FW_API void* fw_pvalloc(size_t size) {
  size_t rounded = (size + page() - 1) & ~(page() - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return fw::fw_alloc_aligned(page(), rounded == 0 ? page() : rounded);
}

}  // extern "C"

namespace {
// FREEWAY_VERBOSE=1: the options at load, a statistics summary at exit.
// FREEWAY_TELEMETRY=1: publishing starts at load.
__attribute__((constructor)) void freeway_load() {
  if (fw::option(fw::Option::verbose) > 0) fw::options_print(2);
  fw::os::at_fork_child(&fw::pool_after_fork_child);
  fw::telemetry_start_from_options();
}
__attribute__((destructor)) void freeway_unload() {
  if (fw::option(fw::Option::verbose) > 0) fw::stats_print(2);
}
}  // namespace
