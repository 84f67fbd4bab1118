/* freeway_telemetry.h: the shared-memory telemetry format of the freeway allocator.
 *
 * A process running freeway with FREEWAY_TELEMETRY=1 (or after fw_telemetry_start())
 * publishes its heap's state in one segment, /dev/shm/freeway.<pid> (mode 0600).
 * A reader (freeway-inspect) maps it read-only and derives every figure from it.
 * This header is the whole contract between the two: it includes nothing but
 * <stdint.h>, and every record's size is pinned below. docs/telemetry.md
 * documents every field and the reader's rules.
 *
 * Layout: one fwt_header at offset 0, then tables at the offsets the header
 * gives, each `capacity` records of the size the header gives:
 *   process  1 fwt_process          \
 *   classes  fwt_class[class_capacity]   | the snapshot: written together by the
 *   regions  fwt_region[region_capacity] | publisher under header.snapshot_seq
 *   spans    fwt_span[span_capacity]     | (a sequence lock: odd while it writes)
 *   labs     fwt_lab[lab_capacity]      /
 *   events   fwt_event[event_capacity]  a ring written by the allocator's slow paths
 *
 * Versioning: a reader accepts a segment whose version_major equals its own.
 * A minor version only appends fields at the end of records (record sizes grow);
 * readers use the sizes from the header to step through tables, so an older
 * reader still reads a newer minor. Offsets and sizes are in bytes.
 *
 * Fields written while readers read (snapshot_seq, event_next, event_dropped,
 * fwt_event.seq) are accessed with atomic loads and stores (acquire/release as
 * docs/telemetry.md says); all other fields are plain data guarded by them. */
#ifndef FREEWAY_TELEMETRY_H
#define FREEWAY_TELEMETRY_H

#include <stdint.h>

#define FWT_MAGIC 0x4d454c4554574600ull /* bytes "\0FWTELEM" read as little-endian u64 */
#define FWT_VERSION_MAJOR 1
#define FWT_VERSION_MINOR 4  /* 1: FWT_LAB_CPU and fwt_lab.cpu_slot (was padding); 2: fwt_span.own_free;
                                3: FWT_LAB_PARKED; 4: fwt_span.colour (was reserved) */
#define FWT_PATH_PREFIX "/dev/shm/freeway." /* + decimal pid */
#define FWT_EXE_MAX 256

/* Span states as published. 0..6 are the allocator's own states (core/span.h);
 * UNUSED marks virtual spans of an arena region never handed out. */
enum fwt_span_state {
  FWT_SPAN_FREE = 0,       /* in the span-pool (may keep pages committed) */
  FWT_SPAN_HOT = 1,        /* owned by a thread cache, which allocates from it */
  FWT_SPAN_FULL = 2,       /* floating: few free blocks, no owner */
  FWT_SPAN_PARTIAL = 3,    /* reusable: enough free blocks, waiting for a cache */
  FWT_SPAN_LARGE = 4,      /* head of a run holding one large block */
  FWT_SPAN_LARGE_TAIL = 5, /* other spans of that run */
  FWT_SPAN_HUGE = 6,       /* head of a huge block's own region */
  FWT_SPAN_UNUSED = 7,     /* never handed out (address space only) */
  FWT_SPAN_STATE_COUNT = 8
};

enum fwt_span_flags {
  FWT_SPAN_LINKED = 1,   /* on a reusable stack (anchor bit "linked") */
  FWT_SPAN_GUARD = 2,    /* has a guard page (secure mode) */
  FWT_SPAN_UNSTABLE = 4  /* kept changing while the publisher read it: fields may mix two moments */
};

enum fwt_region_kind { FWT_REGION_UNUSED = 0, FWT_REGION_ARENA = 1, FWT_REGION_HUGE = 2 };
/* CPU: a cache of per-CPU mode (core/percpu.h), in a CPU's slot or held by a slow path.
   PARKED (1.3): a dead thread's cache, kept with its spans for the next thread (core/lab.h). */
enum fwt_lab_kind { FWT_LAB_IDLE = 0, FWT_LAB_THREAD = 1, FWT_LAB_TRANSIENT = 2, FWT_LAB_CPU = 3, FWT_LAB_PARKED = 4 };

enum fwt_event_kind {
  FWT_EV_NONE = 0,
  FWT_EV_TELEMETRY_START = 1, /* addr: 0; size: segment bytes */
  FWT_EV_REGION_RESERVE = 2,  /* arg: region id; addr: base of what was reserved (a region grows in place: later events of the same id follow its end); size: bytes */
  FWT_EV_REGION_RELEASE = 3,  /* arg: region id; addr: base; size: bytes */
  FWT_EV_COMMIT = 4,          /* arg: span index; addr; size: bytes committed */
  FWT_EV_DECOMMIT = 5,        /* arg: span index; addr; size: bytes decommitted */
  FWT_EV_THREAD_START = 6,    /* arg: LAB id; addr: thread handle (pthread_self) */
  FWT_EV_THREAD_EXIT = 7,     /* arg: LAB id */
  FWT_EV_BAD_FREE = 8,        /* addr: the pointer; the process is stopping */
  FWT_EV_OUT_OF_MEMORY = 9,   /* size: bytes asked for */
  FWT_EV_KIND_COUNT = 10
};

typedef struct fwt_header {
  uint64_t magic;          /* FWT_MAGIC */
  uint16_t version_major;  /* FWT_VERSION_MAJOR */
  uint16_t version_minor;  /* FWT_VERSION_MINOR */
  uint32_t header_size;    /* sizeof(fwt_header) of the writer */
  uint64_t segment_size;   /* bytes of the whole segment (the file's size) */

  uint32_t process_size, class_size, region_size, span_size, lab_size, event_size;
  uint32_t class_capacity, region_capacity, span_capacity, lab_capacity, event_capacity;
  uint32_t vspans_per_region; /* spans[r * vspans_per_region + v] is vspan v of region r */
  uint32_t vspan_shift;       /* log2 of a virtual span's bytes (18: 256 KiB) */
  uint32_t page_size;
  uint64_t process_offset, classes_offset, regions_offset, spans_offset, labs_offset, events_offset;

  uint64_t pid;
  uint64_t process_start_ticks; /* field 22 of /proc/<pid>/stat: tells a recycled pid apart */
  char exe[FWT_EXE_MAX];        /* argv[0] of the process, NUL-terminated */
  uint64_t hz;                  /* snapshots the publisher aims to write per second */

  uint64_t snapshot_seq;  /* atomic: odd while a snapshot is being written; +2 per snapshot */
  uint64_t event_next;    /* atomic: sequence number the next event will take */
  uint64_t event_dropped; /* atomic: events a writer could not record (slot still being written) */
  uint64_t publisher_state; /* atomic: 1 running, 2 stopped (the process called fw_telemetry_stop) */
  uint64_t reserved[8];
} fwt_header;

/* Process-wide figures of one snapshot (the scalars of fw_stats_t, and more). */
typedef struct fwt_process {
  uint64_t time_ns;        /* monotonic clock when this snapshot was taken */
  uint64_t start_ns;       /* monotonic clock when publishing started */
  uint64_t snapshots;      /* snapshots written so far, this one included */
  uint64_t publish_ns;     /* how long writing the previous snapshot took */
  uint64_t live_bytes, peak_live_bytes, reserved_bytes, committed_bytes, peak_committed_bytes;
  uint64_t large_live_bytes, large_allocs, large_frees;
  uint64_t spans_hot, spans_full, spans_partial, spans_pooled, spans_large;
  uint64_t threads_live, threads_created;
  uint64_t rss_bytes;           /* resident set of the process (/proc/self/statm) */
  uint64_t retained_bytes;      /* committed bytes of empty spans kept in the pool */
  uint64_t metadata_bytes;      /* committed bytes of the descriptor table */
  uint32_t class_count, region_count, span_count, lab_count; /* records valid in this snapshot */
  uint32_t reuse_percent;       /* FREEWAY_REUSE_PERCENT */
  uint32_t secure;              /* FREEWAY_SECURE */
} fwt_process;

typedef struct fwt_class {
  uint32_t block_size;      /* bytes per block */
  uint32_t span_bytes;      /* bytes one span of the class commits */
  uint32_t capacity;        /* blocks per span */
  uint32_t reuse_threshold; /* free blocks that make a full span reusable */
  uint64_t allocs, frees;   /* blocks allocated and freed since start */
  uint64_t live;            /* allocs - frees (clamped at 0) */
} fwt_class;

typedef struct fwt_region {
  uint64_t base, size;  /* address range reserved */
  uint32_t kind;        /* fwt_region_kind */
  uint32_t next_vspan;  /* arena: vspans handed out so far (the rest are UNUSED) */
} fwt_region;

typedef struct fwt_span {
  uint8_t state;          /* fwt_span_state */
  uint8_t flags;          /* fwt_span_flags */
  uint16_t cls;           /* size class of a small span */
  uint32_t owner;         /* LAB id + 1 of a HOT span's owner; 0 = none */
  uint32_t carved;        /* blocks ever handed out of the span (small) */
  uint32_t remote_count;  /* blocks on the span's free list (anchor count) */
  uint32_t capacity;      /* blocks the span holds (small) */
  uint32_t run_len;       /* LARGE: vspans in the run; LARGE_TAIL: index of the head */
  uint64_t committed;     /* bytes committed from the span's base (run head: whole run) */
  uint64_t large_size;    /* LARGE/HUGE head: usable bytes of the block */
  uint32_t own_free;      /* since 1.2: HOT span: blocks on its owner's list in the descriptor (the span's
                             own list, core/lab.h: a per-CPU cache's frees into a span it keeps, and the
                             blocks a per-thread cache's class list gave back to its kept spans; its
                             other frees go onto its cache's class list, whose blocks count as in use
                             here, and a hot span's own list is empty); a reader of 1.0/1.1 records
                             sees 0 */
  uint32_t colour;        /* since 1.4 (was reserved, 0): HOT, FULL or PARTIAL span: bytes from its base to
                             its block 0, its cache colour (core/size_class.h); 0 otherwise */
} fwt_span;

typedef struct fwt_lab {
  uint32_t id;
  uint32_t kind;          /* fwt_lab_kind */
  uint64_t allocs, frees; /* blocks this cache allocated / freed, all classes; a CPU cache
                             in a slot also counts that CPU's fast paths (percpu.h) */
  uint32_t pending;       /* frees waiting in the cache's pending chain */
  uint32_t cpu_slot;      /* since 1.1: CPU cache in CPU k's slot: k + 1; otherwise 0 (was padding) */
} fwt_lab;

typedef struct fwt_event {
  uint64_t seq;     /* atomic: 2n+2 once event n is complete here; odd while written */
  uint64_t time_ns; /* monotonic clock */
  uint32_t kind;    /* fwt_event_kind */
  uint32_t arg;
  uint64_t addr;
  uint64_t size;
} fwt_event;

#if defined(__cplusplus)
#define FWT_STATIC_ASSERT static_assert
#else
#define FWT_STATIC_ASSERT _Static_assert
#endif
FWT_STATIC_ASSERT(sizeof(fwt_header) == 504, "fwt_header layout is part of the format");
FWT_STATIC_ASSERT(sizeof(fwt_process) == 200, "fwt_process layout is part of the format");
FWT_STATIC_ASSERT(sizeof(fwt_class) == 40, "fwt_class layout is part of the format");
FWT_STATIC_ASSERT(sizeof(fwt_region) == 24, "fwt_region layout is part of the format");
FWT_STATIC_ASSERT(sizeof(fwt_span) == 48, "fwt_span layout is part of the format");
#define FWT_SPAN_SIZE_1_0 40 /* fwt_span before 1.2: readers accept it and read own_free as 0 */
FWT_STATIC_ASSERT(sizeof(fwt_lab) == 32, "fwt_lab layout is part of the format");
FWT_STATIC_ASSERT(sizeof(fwt_event) == 40, "fwt_event layout is part of the format");

#endif /* FREEWAY_TELEMETRY_H */
