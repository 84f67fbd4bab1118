// platform/os.h: the one contract between freeway's core and an operating system.
//
// core/ includes this header and no OS header. Each OS implements every function
// here in platform/<os>/ (POSIX: os_posix.cpp; Windows: see docs/porting.md).
// Rules every implementation keeps:
//  - no function allocates with malloc or takes a lock the allocator could need;
//  - every function may be called from a signal handler (they are thin wrappers
//    over system calls), except os_on_thread_exit_init;
//  - failures return a null/false result and never abort.
// Memory follows the reserve/commit model of both mmap and VirtualAlloc:
// reserve takes address space only; commit makes pages usable; decommit gives the
// physical pages back while keeping the range reserved; release ends it all.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fw::os {

// Optional abilities an OS may have; the core tests these flags instead of #ifdefs.
struct Features {
  bool commit_is_noop;      // reserved memory is usable as is; commit costs nothing (Linux overcommit)
  bool decommit_zeroes;     // pages read as zero after decommit (MADV_DONTNEED, MEM_DECOMMIT)
  bool has_cpu_id;          // os_cpu_id returns the running CPU rather than 0
};
const Features& features();

size_t page_size();
size_t cpu_count();

// Reserves size bytes of address space aligned to align (a power of two, at least
// the page size). Returns nullptr on failure (for example under RLIMIT_AS).
void* reserve_aligned(size_t size, size_t align);
// Gives a whole reservation back. p and size must be exactly what reserve returned.
void release(void* p, size_t size);
// Makes [p, p+size) readable and writable. Page-aligned arguments.
bool commit(void* p, size_t size);
// Returns the physical pages of [p, p+size) to the OS; the range stays reserved
// and may be committed again. Page-aligned arguments.
bool decommit(void* p, size_t size);
// Makes [p, p+size) inaccessible (guard pages) or accessible again.
bool protect(void* p, size_t size, bool accessible);

// Small zero-filled mappings for the allocator's own metadata (never freed).
void* alloc_metadata(size_t size);

// The CPU the calling thread runs on now (a hint; it can change at once).
unsigned cpu_id();
// 64 random bits from the OS (getrandom), or from time and addresses if that fails.
uint64_t random_u64();
// Monotonic time in nanoseconds.
uint64_t now_ns();

// Thread exit: fn(arg) runs when a thread that called thread_exit_register exits.
// init creates the mechanism once (lock-free; safe to race); register binds arg
// to the calling thread.
bool thread_exit_init(void (*fn)(void*));
bool thread_exit_register(void* arg);
// The arg registered by the calling thread, or nullptr.
void* thread_exit_registered();

// Writes bytes to stderr with one system call, without allocating.
void write_stderr(const char* s, size_t n);
void write_fd(int fd, const char* s, size_t n);
// Stops the process now (after a report of heap corruption).
[[noreturn]] void abort_process();
// Reads an environment variable without allocating; nullptr if unset.
const char* getenv(const char* name);
// errno of the calling thread.
void set_errno_nomem();
void set_errno_inval();

}  // namespace fw::os
