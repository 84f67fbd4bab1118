// core/options.h: every run-time option of freeway, in one table.
//
// Each row: name, default, least and greatest value, meaning. The environment
// variable is FREEWAY_<NAME> (upper case). Options are read once, lazily, with
// getenv and a hand-written number parser, so reading them never allocates. A
// value that is not a whole number in its range is ignored with one line on
// stderr, and the default is used. FREEWAY_VERBOSE=1 prints them
// all at start and a statistics summary at exit. docs/tuning.md explains each.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/config.h"

namespace fw {

#define FW_OPTIONS(X)                                                                                                 \
  X(verbose, 0, 0, 1, "1: print the options at start and a statistics summary at exit")                               \
  X(retain_mb, 32, 0, 1 << 20,                                                                                        \
    "MiB of freed spans and runs kept committed for reuse (or the most the heap had in use within FREEWAY_DECAY_MS, " \
    "or a cycle's footprint once it faults back what this bound gave back, if more)")                                 \
  X(decay_ms, 1000, 0, 0x7fffffff,                                                                                    \
    "freed spans and runs kept committed give their pages back after this many ms unused (a thread's emptied "        \
    "cached spans go to them as often, at least 10 ms apart); 0: at once")                                            \
  X(reuse_percent, 25, 1, 100, "a full span becomes reusable when this percent of its blocks are free (Hoard f)")     \
  X(kept_pool, 1, 0, 1,                                                                                               \
    "1: a thread keeps owning spans it filled past its 16 MiB as long as the per-thread caches the default mode "     \
    "allows (max(2 x CPUs, 16) + 1) leave theirs unused; 0: 16 MiB a thread")                                         \
  X(pool_stacks, 0, 0, 64, "stacks in the span-pool; 0 = one per CPU (at most 64)")                                   \
  X(peak_sample, 64, 0, 1 << 30, "sample live bytes for the peak figure every this many span acquisitions")           \
  X(secure, 0, 0, 1, "1: tail canaries, free fill and quarantine (secure_heap.h), encoded free lists, guard pages")   \
  X(telemetry, 0, 0, 1, "1: publish the heap's state for freeway-inspect in /dev/shm/freeway.<pid>")                  \
  X(percpu, 2, 0, 2,                                                                                                  \
    "caches per CPU through rseq (Linux x86-64): 0 per-thread, 1 per-CPU (warns if it cannot), 2 per-CPU once "       \
    "threads are more than twice the CPUs and 16 and their caches hold more than 32 MiB")                             \
  X(telemetry_hz, 20, 1, 1000, "telemetry snapshots per second")                                                      \
  X(deepbind, 0, 0, 1,                                                                                                \
    "1: libfreeway.so's dlopen keeps RTLD_DEEPBIND (such a library's malloc and free are then the C library's); "     \
    "0: it drops the flag")                                                                                           \
  X(libc_dlsym, 0, 0, 1,                                                                                              \
    "1: libfreeway.so's dlsym through a handle may return the C library's own malloc, free...; 0: it returns the "    \
    "process's")

enum class Option : unsigned {
#define FW_OPTION_ENUM(name, def, least, most, doc) name,
  FW_OPTIONS(FW_OPTION_ENUM)
#undef FW_OPTION_ENUM
  count
};

namespace detail {
// Written once by whichever thread reads the environment first (options.cpp);
// racing readers compute the same values, so relaxed order is enough for them.
extern FW_HIDDEN std::atomic<int64_t> g_option_values[unsigned(Option::count)];
extern FW_HIDDEN std::atomic<bool> g_options_loaded;
FW_NOINLINE void load_options();
}  // namespace detail

// Value of an option (reads the environment on first use). Inline: the
// span-pool reads three of them on each large block's malloc and free, where
// a call cost 10 instructions each.
FW_INLINE int64_t option(Option o) {
  if (FW_UNLIKELY(!detail::g_options_loaded.load(std::memory_order_acquire))) detail::load_options();
  return detail::g_option_values[unsigned(o)].load(std::memory_order_relaxed);
}
// Prints every option with its value and meaning to fd.
void options_print(int fd);

}  // namespace fw
