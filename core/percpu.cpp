// core/percpu.cpp: choosing the mode, and the slow paths of per-CPU mode (percpu.h).
#include "core/percpu.h"

#include "core/alloc.h"
#include "core/arena.h"
#include "core/free.h"
#include "core/lab.h"
#include "core/options.h"
#include "core/report.h"
#include "core/secure.h"
#include "platform/os.h"
#include "platform/rseq.h"

namespace fw {

constinit PercpuState g_percpu{};

namespace {

constexpr uint32_t kMaxCpus = 4096;

enum : int { kUndecided = 0, kDeciding = 1, kDecided = 2 };
constinit std::atomic<int> g_decision{kUndecided};
// FREEWAY_PERCPU=2 with rseq available: the tables are made and per-CPU mode
// starts when the threads bound to caches are more than twice the CPUs and
// their caches hold more than kPerThreadHeldMax.
constinit std::atomic<bool> g_armed{false};
// The default switches once the threads bound to caches are more than this:
// twice the CPUs, and at least kPerCpuMinThreads.
constinit uint32_t g_switch_threads = 0;
// The threads bound to caches were more than g_switch_threads when the last
// thread bound one, and none has exited since to bring them back below.
constinit std::atomic<bool> g_over{false};
// And at the bind before that: the threads are many (percpu_thread_bound).
constinit std::atomic<bool> g_many{false};
// The namings that stand (percpu_thread_bound): the LABs whose successor
// state names a successor's LAB, plus the ones a racing naming has reserved
// (name_successor). A figure for the decision: relaxed. Each decrement follows
// the increment it undoes: it is made by the thread whose acq_rel exchange or
// CAS took the state off a name, which the namer stored (release) after its
// increment.
constinit std::atomic<uint64_t> g_successors{0};

// The threads the switch counts: threads_live less the successors, and at
// least half of threads_live (successors that were at most half of the
// threads at their naming may be more after other threads exit).
uint64_t threads_counted(uint64_t threads_live) {
  const uint64_t s = g_successors.load(std::memory_order_relaxed);
  return threads_live - (s < threads_live / 2 ? s : threads_live / 2);
}

// Names lab's thread, just bound (one of threads_live), as the successor of
// from's thread, if that thread is live with none yet and the successors stay
// at most half of threads_live. from may have been taken by another thread
// since lab_bind_thread saw it bound: then that thread is named, until either
// exits (a figure, as above).
bool name_successor(Lab* lab, Lab* from, uint64_t threads_live) {
  uint64_t n = g_successors.load(std::memory_order_relaxed);
  do {
    if (2 * (n + 1) > threads_live) return false;
  } while (!g_successors.compare_exchange_weak(n, n + 1, std::memory_order_relaxed, std::memory_order_relaxed));
  uint32_t open = kSuccessorOpen;
  if (from->successor.compare_exchange_strong(open, lab->id + 1, std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
    lab->named = from;
    return true;
  }
  g_successors.fetch_sub(1, std::memory_order_relaxed);  // it has one, or has exited
  return false;
}

// Makes the CPUs' first LABs (lab.h: lab_make_idle), once, before per-CPU mode is on.
constinit std::atomic<bool> g_made_cpu_labs{false};
void make_cpu_labs() {
  if (!g_made_cpu_labs.exchange(true, std::memory_order_relaxed)) lab_make_idle(unsigned(os::cpu_count()));
}

// The threads are many and their caches hold more than kPerThreadHeldMax: per-CPU from now on.
void switch_if_held_much() {
  if (lab_held_bytes() <= kPerThreadHeldMax) return;
  make_cpu_labs();
  g_percpu.on.store(true, std::memory_order_release);
}

// The CPU's slot array; false if there is no memory for it.
bool make_tables(ptrdiff_t off) {
  size_t n = os::cpu_count_possible();
  if (n > kMaxCpus) n = kMaxCpus;
  void* slots = os::alloc_metadata(n * os::kRseqSlotBytes);  // a cache line a slot (platform/rseq.h)
  if (slots == nullptr) return false;
  g_percpu.rseq_off = off;
  g_percpu.ncpu = uint32_t(n);
  g_percpu.slots = static_cast<Lab**>(slots);
  return true;
}

FW_COLD void say(const char* what) {
  Line l;
  l.str("freeway: ").str(what).str("\n");
  l.write(2);
}

void decide() {
  // 0 per-thread, 1 per-CPU, 2 per-CPU past twice the CPUs (options.h keeps it in 0..2).
  int64_t want = option(Option::percpu);
  if (want == 0) return;
  const char* why = nullptr;
  ptrdiff_t off = 0;
#if defined(FW_TSAN)
  why = "per-CPU caches are off under ThreadSanitizer (it cannot see restartable sections)";
#else
  if (secure_mode())
    why = "per-CPU caches are off in secure mode (its quarantine is per thread)";
  else if (!os::rseq_offset(&off))
    why = "per-CPU caches need rseq registered by the C library (Linux x86-64, glibc 2.35+); using per-thread caches";
  else if (!make_tables(off))
    why = "no memory for the per-CPU tables; using per-thread caches";
#endif
  if (why != nullptr) {
    if (want == 1 || option(Option::verbose) > 0) say(why);
    return;
  }
  if (want == 1) {
    make_cpu_labs();
    g_percpu.on.store(true, std::memory_order_release);
  } else {
    g_switch_threads = percpu_switch_threads();
    g_armed.store(true, std::memory_order_release);
  }
}

// The LAB this call works on: the current CPU's (taken out of its slot), or an
// idle one when the slot is empty or the CPU has none. nullptr: no memory.
Lab* percpu_take() {
  if (Lab* lab = static_cast<Lab*>(os::rseq_take(g_percpu.rseq_off, reinterpret_cast<void**>(g_percpu.slots),
                                                  g_percpu.ncpu)))
    return lab;
  return lab_take_cpu();
}

// Gives lab back: into the slot of the CPU the thread runs on now if that slot
// is empty, else, with its hot spans released, to the idle stack. (Parked with
// its spans it would stay warm for the next slow path that finds a slot
// empty, but every preemption inside a slow path would then add a LAB's worth
// of hot spans for good: memory would follow preemptions, not CPUs.)
void percpu_put(Lab* lab) {
  if (os::rseq_put(g_percpu.rseq_off, reinterpret_cast<void**>(g_percpu.slots), g_percpu.ncpu, lab)) return;
  lab_retire(lab);
}

}  // namespace

bool percpu_start() {
  if (!arena_init()) return false;
  if (percpu_on()) return true;
  int expected = kUndecided;
  if (g_decision.compare_exchange_strong(expected, kDeciding, std::memory_order_acq_rel, std::memory_order_acquire)) {
    decide();
    g_decision.store(kDecided, std::memory_order_release);
  }
  // A thread racing the decider does not wait for it: this one call takes
  // the per-thread path, which is correct in either mode.
  return percpu_on();
}

void percpu_thread_bound(uint64_t threads_live, Lab* lab, Lab* from) {
  // g_switch_threads is read only after the acquire that publishes it.
  if (!g_armed.load(std::memory_order_acquire) || percpu_on()) return;
  if (from != nullptr && name_successor(lab, from, threads_live)) return;  // in its predecessor's place
  if (threads_counted(threads_live) <= g_switch_threads) return;
  // Over the limit at a second bind in a row: the threads are many, not just
  // a successor that started before its predecessor exited.
  // The flags are seq_cst (binds and exits only): an exit that found the
  // threads few may clear both between the exchange and the store of g_many,
  // so the flag is read again after it; in the one order of the four accesses,
  // a store of g_many after the exit's clears it comes after the exit's clear
  // of g_over, which the read then sees (or a later bind's set). The store
  // also publishes to percpu_caches_grew what the acquire of g_armed saw.
  if (!g_over.exchange(true, std::memory_order_seq_cst)) return;
  g_many.store(true, std::memory_order_seq_cst);
  if (!g_over.load(std::memory_order_seq_cst)) {
    g_many.store(false, std::memory_order_seq_cst);
    return;
  }
  switch_if_held_much();
}

void percpu_caches_grew() {
  // g_many is set only after percpu_thread_bound found g_armed, which stays
  // set: this load synchronizes with that store, so decide()'s tables are seen.
  if (!g_many.load(std::memory_order_seq_cst) || percpu_on()) return;
  switch_if_held_much();
}

void percpu_successor_set(Lab* lab, uint32_t to) {
  // As a successor: its predecessor counts again, unless that thread's exit
  // (or its LAB going idle) already ended the naming.
  if (Lab* from = lab->named) {
    lab->named = nullptr;
    uint32_t me = lab->id + 1;
    if (from->successor.compare_exchange_strong(me, kSuccessorOpen, std::memory_order_acq_rel,
                                                std::memory_order_relaxed))
      g_successors.fetch_sub(1, std::memory_order_relaxed);
  }
  // As a predecessor. Besides the holder's calls, only a namer's CAS (open to
  // a name) and its successor's CAS back (that name to open) change the state:
  // a load that reads `to` (open at a bind of a LAB never bound, closed at a
  // second close) needs no RMW, as nothing can have named the LAB.
  if (lab->successor.load(std::memory_order_relaxed) == to) return;
  const uint32_t was = lab->successor.exchange(to, std::memory_order_acq_rel);
  if (was != kSuccessorOpen && was != kSuccessorClosed) g_successors.fetch_sub(1, std::memory_order_relaxed);
}

void percpu_thread_unbound(uint64_t threads_live) {
  if (!g_armed.load(std::memory_order_acquire) || percpu_on()) return;
  if (threads_counted(threads_live) <= g_switch_threads) {
    g_over.store(false, std::memory_order_seq_cst);  // before g_many: percpu_thread_bound
    g_many.store(false, std::memory_order_seq_cst);
  }
}

void percpu_join() {
  Lab* mine = lab_current();
  if (mine == &g_lab_empty) return lab_set_current(&g_lab_cpu);
  if (FW_LIKELY(is_placeholder(mine))) return;
  lab_enter();
  lab_flush(mine);
  lab_leave(&g_lab_cpu);
}

const char* percpu_mode_name() { return percpu_on() ? "per-CPU" : "per-thread"; }

void* percpu_malloc_slow(unsigned c, size_t n) {
  (void)n;
  percpu_join();
  Lab* lab = percpu_take();
  void* p = lab != nullptr ? lab_refill(lab, c) : nullptr;
  if (lab != nullptr) percpu_put(lab);
  if (p == nullptr) alloc_out_of_memory(class_block_size(c));
  return p;
}

void percpu_free_slow(void* p, Span* d, bool checked) {
  if (p == nullptr) return;
  percpu_join();
  Lab* lab = nullptr;
  if (d != nullptr) {
    uint32_t state = Anchor::unpack(d->anchor.load(std::memory_order_acquire)).state;
    if (state == kHot || state == kFull || state == kPartial) lab = percpu_take();
  }
  // No LAB (not a small block, or no memory for one): the DEAD placeholder
  // frees a small block straight to its span.
  free_with(lab != nullptr ? lab : &g_lab_dead, p, d, checked);
  if (lab != nullptr) percpu_put(lab);
}

void percpu_collect() {
  if (!percpu_on()) return;
  os::Affinity saved;
  if (!os::affinity_get(&saved)) return;
  for (uint32_t k = 0; k < g_percpu.ncpu; k++) {
    if (!saved.has(k) || !os::affinity_set_one(k)) continue;
    // Now on CPU k (sched_setaffinity moves the caller before it returns),
    // unless the kernel moved it since: then this flushes another CPU's LAB,
    // which is as correct, and CPU k's stays as it is.
    Lab* lab = static_cast<Lab*>(os::rseq_take(g_percpu.rseq_off, reinterpret_cast<void**>(g_percpu.slots),
                                               g_percpu.ncpu));
    if (lab == nullptr) continue;
    lab_flush(lab);
    percpu_put(lab);
  }
  os::affinity_set(saved);
}

void percpu_reclaim() {
  if (!percpu_on()) return;
  Lab* lab =
      static_cast<Lab*>(os::rseq_take(g_percpu.rseq_off, reinterpret_cast<void**>(g_percpu.slots), g_percpu.ncpu));
  if (lab == nullptr) return;  // a slow path holds it (or the CPU has none): nothing to take
  lab_reclaim(lab);
  percpu_put(lab);
}

Lab* percpu_slot(uint32_t k) {
  if (!percpu_on() || k >= g_percpu.ncpu) return nullptr;
  void** slot = os::rseq_slot(reinterpret_cast<void**>(g_percpu.slots), k);
  return static_cast<Lab*>(__atomic_load_n(slot, __ATOMIC_RELAXED));
}

uint32_t percpu_cpus() { return percpu_on() ? g_percpu.ncpu : 0; }

}  // namespace fw
