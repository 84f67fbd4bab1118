/* freeway.h: the public C API of the freeway memory allocator.
 *
 * Linking libfreeway (shared or static) replaces the malloc family and C++
 * new/delete; the fw_* functions below are the same allocator under its own
 * names, for programs that want to call it explicitly or read its statistics.
 * Every function here is lock-free. Error reporting follows C and POSIX.
 */
#ifndef FREEWAY_H
#define FREEWAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FW_API __declspec(dllexport)
#else
#define FW_API __attribute__((visibility("default")))
#endif

#define FREEWAY_VERSION_MAJOR 0
#define FREEWAY_VERSION_MINOR 1

/* Allocation. fw_malloc(0) returns a unique pointer. All blocks are aligned to
 * at least 16 bytes. Failure returns NULL and sets errno to ENOMEM. */
FW_API void* fw_malloc(size_t size);
FW_API void* fw_calloc(size_t count, size_t size);
FW_API void* fw_realloc(void* p, size_t size);
FW_API void* fw_reallocarray(void* p, size_t count, size_t size);
FW_API void fw_free(void* p);
/* Frees p, which the caller says was allocated with this size (and alignment). */
FW_API void fw_free_sized(void* p, size_t size);
FW_API void fw_free_aligned_sized(void* p, size_t alignment, size_t size);

/* Aligned allocation. alignment must be a power of two (EINVAL otherwise);
 * alignments up to at least 8 MiB are supported. */
FW_API void* fw_malloc_aligned(size_t alignment, size_t size);
FW_API int fw_posix_memalign(void** out, size_t alignment, size_t size);
FW_API void* fw_aligned_alloc(size_t alignment, size_t size);
FW_API void* fw_memalign(size_t alignment, size_t size);
FW_API void* fw_valloc(size_t size);
FW_API void* fw_pvalloc(size_t size);

/* Bytes usable in the block at p (at least the size asked for); 0 for NULL. */
FW_API size_t fw_usable_size(const void* p);

/* Nonzero when p lies in memory freeway manages (an O(1) address check). */
FW_API int fw_owns(const void* p);

/* Gives free memory back to the operating system now, after the calling
   thread's cache gives back the spans it keeps (in secure mode, after freeing
   the blocks the calling thread still holds in its quarantine; with per-CPU
   caches, after emptying each CPU's cache, which briefly runs the calling
   thread on each CPU it may use). */
FW_API void fw_collect(void);

/* 1 when the caches are per CPU (Linux rseq; FREEWAY_PERCPU), 0 when they are
   per thread, now. FREEWAY_PERCPU=1 or 0 fixes the mode at the first
   allocation (or at this call, if it comes first); with the default, 2, the
   process starts per thread and may switch to per CPU later, so a later call
   can answer 1 where an earlier one answered 0. */
FW_API int fw_caches_per_cpu(void);

#define FW_SIZE_CLASS_MAX 64

typedef struct fw_class_stats {
  uint64_t block_size;  /* bytes per block of this class */
  uint64_t allocs;      /* blocks allocated since start */
  uint64_t frees;       /* blocks freed since start */
  uint64_t live;        /* allocs - frees: blocks in use now */
  uint64_t spans;       /* spans of this class in use (hot, full or partial) */
} fw_class_stats;

typedef struct fw_stats_t {
  uint64_t live_bytes;       /* bytes in blocks handed out and not freed (block sizes) */
  uint64_t peak_live_bytes;  /* highest live_bytes observed (see docs/stats.md) */
  uint64_t reserved_bytes;   /* virtual address space reserved from the OS */
  uint64_t committed_bytes;  /* memory committed from the OS and not given back */
  uint64_t peak_committed_bytes;
  uint64_t large_live_bytes; /* part of live_bytes in large and huge objects */
  uint64_t large_allocs, large_frees;
  uint64_t spans_hot, spans_full, spans_partial, spans_pooled, spans_large;
  uint64_t threads_live;     /* thread caches bound to a running thread */
  uint64_t threads_created;  /* thread caches ever bound to a thread */
  uint32_t class_count;      /* entries used in classes[] */
  fw_class_stats classes[FW_SIZE_CLASS_MAX];
} fw_stats_t;

/* Fills *out with a snapshot. Figures from other threads are read without
 * stopping them, so a snapshot taken while they run is approximate. */
FW_API void fw_stats(fw_stats_t* out);

/* Writes a readable summary of fw_stats to the file descriptor fd. */
FW_API void fw_stats_print(int fd);

/* Live telemetry for freeway-inspect (freeway_telemetry.h, docs/telemetry.md).
 * fw_telemetry_start() publishes the heap's state in a shared-memory segment,
 * /dev/shm/freeway.<pid> (mode 0600), refreshed FREEWAY_TELEMETRY_HZ times a
 * second by a background thread, until fw_telemetry_stop() or exit (which
 * remove it). FREEWAY_TELEMETRY=1 starts it when the library loads. Returns 0
 * when publishing (or already publishing), -1 with errno set otherwise (the
 * program carries on without telemetry). After fork() the child does not
 * publish until it calls fw_telemetry_start() itself. */
FW_API int fw_telemetry_start(void);
FW_API void fw_telemetry_stop(void);
/* Nonzero while this process publishes. */
FW_API int fw_telemetry_active(void);

/* Walks every internal structure and checks its invariants. Returns 0 when all
 * hold, or the number of structures (a thread cache, a span, the span-pool, a
 * size class's count...) found broken, each violation described on stderr.
 * Meant for tests and debugging: call it while no other thread allocates or
 * frees (its figures are exact only then). */
FW_API int fw_check_heap(void);

#ifdef __cplusplus
}
#endif
#endif /* FREEWAY_H */
