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
  bool reserve_extends;     // a reservation made right after another one (reserve_at) acts as one
                            // range with it: commit, decommit and protect may cross the seam
                            // (mmap: yes; VirtualAlloc: no, each call is its own allocation)
};
const Features& features();

size_t page_size();
// CPUs online, as read at the first call (the callers size tables with it
// once each; on Linux a read costs three system calls).
size_t cpu_count();

// Reserves size bytes of address space aligned to align (a power of two, at least
// the page size). Returns nullptr on failure (for example under RLIMIT_AS).
void* reserve_aligned(size_t size, size_t align);
// Reserves exactly [addr, addr+size) if none of it is mapped (addr aligned to
// 64 KiB, size a multiple of it). Never moves or replaces a mapping: on failure
// nothing changed, and the answer says whether some of the range is in use
// (another address may work) or the OS refused (RLIMIT_AS, out of memory).
enum class Reserve { kDone, kTaken, kRefused };
Reserve reserve_at(void* addr, size_t size);
// Gives a whole reservation back. p and size must be exactly what reserve returned.
void release(void* p, size_t size);
// Makes [p, p+size) readable and writable. Page-aligned arguments.
bool commit(void* p, size_t size);
// Returns the physical pages of [p, p+size) to the OS; the range stays reserved
// and may be committed again. Page-aligned arguments.
bool decommit(void* p, size_t size);
// Makes [p, p+size) inaccessible (guard pages) or accessible again.
bool protect(void* p, size_t size, bool accessible);
// Moves the physical pages of [from, from+size) to [to, to+size) without
// copying their bytes, where the OS can: both ranges committed, in different
// reservations, page-aligned. Then [to, to+size) holds what [from, from+size)
// held, and [from, from+size) stays reserved and committed and reads as zero
// (its pages went with the move); neither reservation changes otherwise, so
// release() of each stays exact. false: nothing changed, and the caller
// copies. Linux 5.7 and later: mremap(MREMAP_DONTUNMAP), which moves page
// table entries; other systems (Windows has no such call): false.
bool move_pages(void* from, void* to, size_t size);
// The most memory mappings the OS lets one process have, which an inaccessible
// page inside an accessible mapping counts against (it splits the mapping:
// up to two more); 0 when the OS has no such limit or cannot say. Linux:
// vm.max_map_count (/proc/sys/vm/max_map_count); Windows: 0.
size_t map_count_limit();

// Small zero-filled mappings for the allocator's own metadata (never freed).
void* alloc_metadata(size_t size);

// The CPU the calling thread runs on now (a hint; it can change at once).
unsigned cpu_id();
// Restartable sequences (platform/rseq.h): true if the C library registered an
// rseq area for the calling thread that the sections can use, with *offset its
// place relative to the thread pointer. Linux x86-64 with glibc 2.35+ only;
// false elsewhere, and when registration is off (GLIBC_TUNABLES
// glibc.pthread.rseq=0, an old kernel, seccomp, another registration).
bool rseq_offset(ptrdiff_t* offset);
// How many CPUs the OS may ever report (possible, not online: the bound of cpu_id()).
size_t cpu_count_possible();
// The calling thread's CPU affinity (fw_collect visits each CPU's cache in
// per-CPU mode: core/percpu.cpp). Up to 1024 CPUs. Linux: sched_getaffinity and
// sched_setaffinity; elsewhere they fail (false). Not for malloc/free paths.
struct Affinity {
  uint64_t words[16];
  bool has(unsigned k) const { return k < 1024 && (words[k / 64] >> (k % 64)) & 1; }
};
bool affinity_get(Affinity* a);
bool affinity_set(const Affinity& a);
// Moves the calling thread onto CPU k alone; false if it may not run there.
bool affinity_set_one(unsigned k);
// 64 random bits from the OS (getrandom), or from time and addresses if that fails.
uint64_t random_u64();
// Monotonic time in nanoseconds.
uint64_t now_ns();
// Monotonic time in milliseconds from the OS's cheap, coarse clock: it moves in
// steps of its tick (4 ms on Linux at HZ=250, 10-16 ms on Windows) and costs a
// third of now_ns (10 ns against 30 on the KVM guest of docs/benchmarks.md). For
// ages counted in hundreds of ms (the pool's decay), read once per span or run
// given back committed, and on a take while the pool keeps pages. Not comparable
// with now_ns.
uint64_t now_ms_coarse();

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
// --- Telemetry (core/telemetry.cpp); none of these is called on a malloc/free path. ---
// Creates the named shared segment `name` (POSIX: /dev/shm/<name>, mode 0600,
// O_CREAT|O_EXCL|O_NOFOLLOW, so an existing entry is never written through; a
// stale entry of ours is unlinked once and creation retried), sizes it to size
// bytes (sparse) and maps it read-write and shared. nullptr on failure, with
// *why a short reason.
void* shared_create(const char* name, size_t size, const char** why);
// Removes the name (the mapping stays valid for late writers).
void shared_unlink(const char* name);
// Gives the segment's pages back where the OS can while it stays mapped
// (POSIX: they read as zero after); the mapping stays valid. On Windows a view
// of a section cannot: its pages stay until the process exits.
void shared_discard(void* p, size_t size);
// In a forked child: replaces the inherited shared mapping by private zeroed
// memory at the same address, so the child never writes into its parent's segment.
void shared_detach(void* p, size_t size);
// Starts a thread that runs fn(arg) with every signal blocked; false on failure.
bool thread_start(void (*fn)(void*), void* arg, uintptr_t* handle);
void thread_join(uintptr_t handle);
// An opaque handle of the calling thread (pthread_self); no system call.
uintptr_t thread_self();
void sleep_ns(uint64_t ns);
uint64_t process_id();
// A memory barrier run by every other thread of the process on the caller's
// behalf (an asymmetric fence: they execute no fence of their own). When it
// returns true, each thread that was running has executed a full barrier since
// the call began, and one that was not will pass one before it runs again: the
// caller then sees every store another thread made before that barrier, and
// every load the other thread makes after it sees the caller's stores made
// before the call. Linux x86-64: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
// registered at the first call (Linux 4.14 and later); Windows:
// FlushProcessWriteBuffers, refused under wine (a stub there). false if the OS
// offers none: the caller must do without. A system call that interrupts every
// CPU running the process (here, 2 cores: 0.12 us alone, 2.7 us with another
// thread running): for rare work, the kept-span hand-shake's thief
// (docs/design.md, not built yet).
bool process_barrier();
// Reads the word at addr of this process's memory into *out, and never faults:
// false where the OS cannot read it (Linux: addr not mapped readable; Windows:
// not committed) or refuses the read (a seccomp filter on Linux). Memory the
// program gave back may still read, as anything: wine reads a released page as
// zeros. Linux: process_vm_readv on the process itself; Windows:
// ReadProcessMemory on GetCurrentProcess(). For a word another thread may unmap
// meanwhile, such as its thread-local slot once it has exited, where any value
// read is a hint (the kept-span hand-shake, docs/design.md). errno and
// GetLastError are kept.
bool read_word_nofault(const void* addr, uintptr_t* out);
// Resident set size of this process in bytes (0 if unknown).
uint64_t resident_bytes();
// Whether the process's address space is capped (RLIMIT_AS on POSIX; never on
// Windows). One system call; it may change at any time, so ask when it matters.
bool address_space_limited();
// Whether address space reserved (reserve_aligned, reserve_at) and never
// committed is charged against a limit on committed memory. Linux: only under
// strict overcommit (vm.overcommit_memory 2, which ignores MAP_NORESERVE), read
// once (/proc/sys/vm/overcommit_memory; unreadable counts as charged); Windows:
// never (MEM_RESERVE commits nothing).
bool reserve_is_charged();
// When the process started, in the OS's own units (Linux: field 22 of
// /proc/self/stat), so that a reader can tell a recycled pid apart; 0 if unknown.
uint64_t process_start_ticks();
// The program's name (argv[0]) into buf, NUL-terminated (empty if unknown).
void program_name(char* buf, size_t size);
// fn runs in the child after fork() (before fork returns there).
bool at_fork_child(void (*fn)());
// fn runs at normal process exit.
bool at_exit(void (*fn)());

// errno of the calling thread.
void set_errno_nomem();
void set_errno_inval();

}  // namespace fw::os
