// core/percpu.h: per-CPU caches (Dice and Garthwaite's MP-RCS, through Linux rseq).
//
// In per-CPU mode the caches are LABs (lab.h) that belong to CPUs, not to
// threads. Slot k of the slot array holds the LAB of CPU k, or null while a
// slow path has it out. Any thread running on CPU k uses that LAB:
//   - malloc's fast path pops its free[c] list; free's fast path pushes a
//     block of a span the LAB owns onto it, or a block of a span the LAB has a
//     pending chain for onto that chain; each is one restartable section
//     (platform/rseq.h) that ends in one committing store;
//   - a slow path takes the LAB out of the slot (a section that stores null),
//     works on it with plain loads and stores as the LAB's only holder (refill,
//     pending chains, a span's release: lab.cpp, unchanged), and puts it back
//     into the slot of the CPU it runs on then, if that slot is empty; if not,
//     the LAB is flushed and goes to the idle stack. A slow path that finds its
//     slot empty takes an idle LAB (or a new one).
// So a span still has one owner at a time (Hoard's rule: a CPU's LAB owns it
// the way a thread's LAB does in per-thread mode), and a block of another LAB's
// span goes to it through that span's anchor, one CAS per pending chain.
//
// Invariants:
//   - a LAB is in at most one slot, and a LAB in slot k is written only by
//     sections running on CPU k (the fast paths and take), never by a holder
//     (statistics, telemetry and fw_check_heap read its counts and lists as
//     figures, from any CPU);
//   - a LAB out of every slot has at most one holder (the thread whose take or
//     lab_take handed it out), which alone touches its lists;
//   - a fast path's section counts its pop or push in the LAB it works on,
//     in the class's allocs or frees, which its committing store writes with
//     the list's head (lab.h ClassList, platform/rseq.h); the slow paths count
//     as the LAB's holder, in the same words. A free onto a pending chain is
//     not counted by its section: the holder that gives the chain to its span
//     counts its blocks (chain_flush, lab.h). Until Stop 69 each count was a
//     section of its own after the operation's, an add into per-CPU counters
//     (a third of per-CPU free's samples in bench/mmicro -t 1, docs/benchmarks.md).
// Nothing is bound to a thread: thread exit releases nothing, a thread that
// migrates just uses another CPU's LAB, and a thread frozen or killed inside a
// section has been moved out of it by the kernel. Only a thread stopped for
// good inside a slow path strands something: the one LAB it holds.
//
// The mode (FREEWAY_PERCPU) is chosen at the first malloc (percpu_start).
// Per-CPU mode needs rseq registered (os::rseq_offset) and secure mode off
// (its quarantine is per thread, and only secure mode encodes list links, so
// the sections link blocks plainly); otherwise, and on Windows, freeway keeps
// per-thread LABs. 1: per-CPU from the start. 2 (the default): per-thread
// while the threads bound to LABs, a successor counted in its live
// predecessor's place, are at most twice the CPUs and at most
// kPerCpuMinThreads, where the per-thread fast path is the cheaper one (no
// restartable section; a thread frees its older blocks into spans its own cache
// keeps, up to kKeptBytes, where a CPU's cache, shared by the threads that run
// there, keeps one span a class)
// and its caches are few; per-CPU once there are more at two binds in a row
// (percpu_thread_bound) and the caches hold more than kPerThreadHeldMax
// (percpu_caches_grew), where per-thread caches would multiply memory with
// threads; many threads whose caches hold little stay per-thread.
// The switch happens once and is never undone: LABs bound before it stay
// registered with their threads (their exit makes them idle), and each such
// thread gives its LAB's spans back at its next slow path, which is its first
// per-CPU call (percpu_join). 0: per-thread.
//
// The fast paths test no flag. A thread that goes per-CPU gets the CPU
// placeholder in its thread slot (lab.h): its lists are empty and it owns no
// span and no chain, so the per-thread fast paths send every call to their
// slow paths, which go on to the per-CPU paths (alloc_class_percpu,
// free_percpu). Per-thread calls save the flag's load and test; a per-CPU call
// pays a slot load, the BUSY mark and a few tests before its section.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "core/lab.h"
#include "core/size_class.h"
#include "platform/os.h"
#include "platform/rseq.h"

namespace fw {

struct Lab;

struct alignas(64) PercpuState {
  std::atomic<bool> on;  // set once (release) after the fields below
  ptrdiff_t rseq_off;    // the thread pointer to rseq area offset (os::rseq_offset)
  uint32_t ncpu;         // slots
  Lab** slots;           // CPU k's at byte k * os::kRseqSlotBytes (os::rseq_slot): a cache line each
};
extern FW_HIDDEN PercpuState g_percpu;

FW_INLINE bool percpu_on() { return g_percpu.on.load(std::memory_order_acquire); }

// Decides the mode if no call has yet (arena_init included) and says whether
// it is per-CPU. false if the arena cannot be made.
bool percpu_start();
// The default mode stays per-thread up to this many threads even on few CPUs:
// so many per-thread caches hold a few MiB (about 120 KiB each for a thread
// that used 21 classes, bench/idle_threads), which is not worth the per-CPU
// fast paths' sections and their cost to threads that free their own
// older blocks (Larson's server with 4 threads on 2 CPUs: 132 M operations
// per second per thread, 36 M per CPU).
constexpr uint32_t kPerCpuMinThreads = 16;
// The threads the default mode serves from per-thread caches at most: twice
// the CPUs and at least kPerCpuMinThreads (one more thread switches it to
// per-CPU caches). The kept pool (lab.h) counts their caches' allowances.
FW_INLINE uint32_t percpu_switch_threads() {
  const uint32_t twice = 2 * uint32_t(os::cpu_count());
  return twice > kPerCpuMinThreads ? twice : kPerCpuMinThreads;
}

// Whether a call that found `slot` (not CPU) in its thread slot goes to the
// per-CPU paths: a thread's first call (EMPTY) in per-CPU mode, the mode
// decided here if no call has yet; once the mode is per-CPU, a call of a
// thread bound to a LAB before the switch, or after its exit (DEAD). Not
// BUSY (a signal handler inside malloc or free: a transient LAB serves it in
// either mode) nor SECURE (secure mode is per-thread).
FW_INLINE bool percpu_serves(const Lab* slot) {
  if (slot == &g_lab_empty) return percpu_start();
  return percpu_on() && slot != &g_lab_busy && slot != &g_lab_secure;  // the flag first: it is off per-thread
}
// The calling thread's calls go to the per-CPU paths from now on: its slot
// gets CPU. A LAB it was bound to before the default mode switched gives its
// spans back first, so that they do not wait for the thread's exit; the LAB
// stays registered for that exit, which makes it idle. Called with the slot
// restored (not BUSY); leaves DEAD as it is.
void percpu_join();

// A thread was just bound to LAB lab, making threads_live of them (per-thread
// mode); `from` is the LAB of a live thread that the new thread's first call
// freed a block of (lab_bind_thread), else nullptr. With FREEWAY_PERCPU=2, the
// threads are many when the threads counted are more than twice the CPUs and
// kPerCpuMinThreads at this bind and were already at the last bind that
// named no successor, with no exit in between that brought them back
// (percpu_thread_unbound); switches to per-CPU mode if they are many and their
// caches hold more than kPerThreadHeldMax (then or later: percpu_caches_grew).
// The threads counted are threads_live less the successors, and at least half
// of threads_live. A successor is a thread whose first call frees a block of a
// live thread that has none yet: a hand-off (Larson's server, a pool that
// replaces its workers), whose predecessor exits soon after, and which
// multiplies no cache meanwhile. It stands in for its predecessor until either
// of the two exits or stops holding its LAB (percpu_successor_set), and is
// named only while the successors are at most half of threads_live. So the
// per-thread caches are at most twice the threads counted, which are at most
// the limit, and a chain of threads each started by the one before, all alive,
// counts half of them. A thread whose first call frees its creator's argument
// is a successor: a creator that lives on has one at a time, and its other
// workers count. (Until Stop 100 the two binds in a row were the only
// allowance, for one hand-off at a time: a Larson server of 16 threads on 2
// CPUs overlaps several, as each successor binds 1-10 ms before its
// predecessor exits, and went per-CPU at 0.8 times the speed; docs/benchmarks.md.)
void percpu_thread_bound(uint64_t threads_live, Lab* lab, Lab* from);
// Lab::successor: the LAB's thread is live and has no successor (kSuccessorOpen,
// also a LAB never bound), its thread has exited or it is idle
// (kSuccessorClosed), after which no successor is named for it; any other value
// is the id + 1 of the successor's LAB (named).
constexpr uint32_t kSuccessorOpen = 0;
constexpr uint32_t kSuccessorClosed = ~uint32_t(0);
static_assert(kMaxLabs < kSuccessorClosed, "a LAB's id + 1 is neither open nor closed");
// lab starts being its thread's (a bind or an adoption: `to` kSuccessorOpen) or
// stops (its thread exits, or it goes idle: kSuccessorClosed). A naming it
// was part of ends, as the predecessor's LAB or as the successor's
// (Lab::named), and that successor or predecessor counts as a thread again.
void percpu_successor_set(Lab* lab, uint32_t to);
// A LAB just took a span or budget for a pending chain: switches now if the
// threads are many (two binds in a row, above) and the caches hold too much
// (below).
void percpu_caches_grew();
// Past the thread limit the switch waits until the LABs hold more than this
// (lab_held_bytes: their spans and chain budgets). Many threads with small
// caches (a pool of workers that each use a few size classes) keep the
// per-thread fast paths, which are the cheaper ones; caches that multiply
// memory with threads still go per-CPU. 32 MiB is what the span-pool keeps
// for reuse by default (FREEWAY_RETAIN_MB): as much again may be held for
// speed by caches. (On 2 CPUs, the most held while the threads were many:
// bench/mmicro -t 256, 64-byte blocks, 5.6 MiB; larson -t 32, 19 MiB;
// idle_threads -t 64, 21 classes a thread, 35 MiB at the 18th thread, which
// switched.)
constexpr uint64_t kPerThreadHeldMax = uint64_t(32) << 20;
// A thread's LAB was released at its exit, leaving threads_live bound.
void percpu_thread_unbound(uint64_t threads_live);
// The mode's name for reports: "per-CPU" or "per-thread".
const char* percpu_mode_name();

// Slow paths of per-CPU mode (entered with the slot restored).
FW_NOINLINE void* percpu_malloc_slow(unsigned c, size_t n);
// checked: p was checked and its free canary set already.
FW_NOINLINE void percpu_free_slow(void* p, struct Span* d, bool checked);
// fw_collect in per-CPU mode: the calling thread visits each CPU it may run
// on and releases that CPU's LAB's hot spans and pending chains (the LAB stays
// in its slot, empty), so that empty spans can go back to the OS. The thread's
// affinity is restored afterwards. A CPU whose slot is empty at the visit (a
// slow path has its LAB) is skipped.
void percpu_collect();
// A large block could not be had in per-CPU mode: lab_reclaim (lab.h) on the
// LAB in the calling thread's CPU's slot, if there is one, before the caller
// tries once more. Nothing in per-thread mode.
void percpu_reclaim();

// The LAB in CPU k's slot now (a racy figure for telemetry), nullptr if none.
Lab* percpu_slot(uint32_t k);
uint32_t percpu_cpus();

}  // namespace fw
