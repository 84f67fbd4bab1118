// core/lab.h: local allocation buffers (scalloc §3.4): the thread cache.
//
// A LAB holds, per size class, one hot span, a list of its blocks to hand out
// (free[c]), and up to kKeptBytes of spans it filled before (kept spans,
// below; a CPU LAB keeps one a class). Its holder's frees of blocks of its hot
// span go onto free[c], so the block freed last is the next handed out; frees
// of blocks of its kept spans go onto each span's own list in its descriptor
// (own_head, span.h), as mimalloc's local free lists. One path with no search serves
// both: each owned span's descriptor names the list its frees go to (own_at,
// own_push). A kept span that becomes hot again brings its own list to free[c]
// (kept_switch).
// Only the LAB's holder touches free[], hot[] and kept[], with
// plain loads and stores; other threads reach its spans only through their
// anchors (remote free). A LAB is held by one thread at a time:
//   - bound to a thread: from the thread's first malloc/free until it exits;
//     at exit the LAB is parked with its hot and kept spans (below), or, when
//     no parking slot is free, its spans are released (they become FULL,
//     PARTIAL or FREE and other threads adopt them from the reusable stacks and
//     the pool) and the LAB returns to the idle stack;
//   - parked: held by no thread, waiting in a parking slot for the next thread
//     that binds a LAB, which takes it whole;
//   - transient: taken from the idle stack for one operation by a call that
//     cannot use its thread's LAB (see below), then returned with its hot spans.
//
// Reentrancy (async-signal safety). The thread's current LAB is lab_current(). Every
// malloc/free sets it to the BUSY placeholder while it works on the LAB
// and puts it back when done. A signal handler that interrupts it and calls
// malloc/free finds BUSY, whose lists are empty, so it falls into the slow
// path, which serves it from a transient LAB: the interrupted LAB is never
// touched twice at once. The same trick makes a thread's first call land in
// the slow path (EMPTY placeholder: bind a LAB) and calls after the thread's
// LAB was released at exit (DEAD placeholder: transient LABs). No call tests
// an "initialised?" flag on the fast path. In secure mode (secure_heap.h) the
// slot holds the SECURE placeholder between calls, so that every call takes the
// slow path, which finds the thread's LAB through its thread-exit registration.
// In per-CPU mode (percpu.h) it holds the CPU placeholder, whose slow paths go
// to the per-CPU paths: so the per-thread fast paths test no mode flag either.
//
// Invariants (lab_is_valid):
//   hot[kNoClass] == nullptr (span.h: the class of a span without small blocks)
//   hot[c] == nullptr  =>  free[c] == nullptr  (free[c]: lists[c].head)
//   hot[c] != nullptr  =>  hot[c] is HOT with owner == this LAB, class c and
//                          own_at == &free[c]; free[c] lists only blocks of
//                          hot[c] and, in a per-thread LAB for a class listed
//                          across its spans (lists_across_spans, below), of its
//                          live kept spans of class c; hot[c]'s own list is
//                          empty and its count 0 (every push onto free[c] is
//                          counted in lists[c].frees as it is made:
//                          own_count_after)
//   every span the LAB keeps has own_at == its own list's head, or, where
//   its class is listed across its spans, &kept_frees[c] (its frees kept
//   apart) or &free[c] (joined), and an own list (own_head, span.h) of
//   own_count of its blocks, which its holder pushes onto; kept_frees[c]
//   lists only blocks of live kept spans of class c, never of hot[c], as
//   many as its count says, and is empty in a class not listed across its
//   spans.
//   lab_allocs_of (lists[c].allocs + allocs_base) only grows, and
//   lists[c].frees too but where lab_return_kept_frees takes off it the
//   blocks it moves from free[c] to own lists (each counted there when
//   pushed: never below 0); in a thread's LAB (bound or parked) whose free[c]
//   is not empty, lists[c].allocs is in [-kTickAllocs, 0) (the decay's tick,
//   below: the slow path that filled free[c] re-armed it). They are
//   written by the
//   LAB's holder (relaxed), or, while the LAB is in a CPU's slot, by the
//   restartable sections of that CPU, whose one committing store writes the
//   count with the list head (percpu.h); never by both, since a LAB in a slot
//   has no holder. A thread that frees into another thread's span counts the
//   free in its own LAB; a free onto an own list is counted when the list is
//   taken (own_take), and a free onto a pending chain when the chain goes to
//   its span (chain_flush), so the LAB's frees of class c are lists[c].frees
//   plus the own counts of its spans of class c and kept_frees[c]'s count
//   (lab_frees_of) plus the blocks of its chains of class c
//   (lab_add_pending_frees).
//   kept_at(c, 0..kept_n[c]) are spans; those still kept (kept_live: HOT
//   with the kept bit, owner == this LAB, class c) are distinct and none of
//   them hot[c]; the others are stale entries of spans another thread's free
//   took (span.h, span_keep), which may name any span but none of the live
//   ones of class c, nor hot[c] unless bit c of hot_fresh is set (kept_set
//   drops them as it keeps a span that came back: lab.cpp); hot[c] has the
//   kept bit clear; kept_bytes is the sum of the entries' span_bytes over
//   all classes, kept_pooled <= kept_bytes, kept_bytes - kept_pooled <=
//   kKeptBytes, and kept_pooled == 0 in a LAB that may not take from the
//   kept pool (a CPU LAB); the LABs' kept_pooled add up to g_kept_pooled
//   while no thread keeps or drops a span; only per-thread and CPU LABs outside
//   secure mode keep spans (keeps_spans), every other LAB has kept_n[c] == 0,
//   and a CPU LAB's kept_n[c] <= kKeptSpansCpu (kept_spans_most); bit c
//   of kept_classes is set iff kept_n[c] > 0; kept_next <= kClassCount;
//   kept_look[c] < kKeptSpans.
//   pending_mask + 1 (the chain slots in use) is a power of two from
//   kPendingChains to kPendingMax, kPendingChains unless the LAB's chains
//   grow (grows_chains: a per-thread or CPU LAB outside secure mode); 0 in a
//   placeholder (its one slot, pending[0], stays empty);
//   for each pending chain ch: ch.span == nullptr  <=>  the chain is empty;
//   otherwise ch is in the slot of ch.span (pending_slot_in) below
//   pending_mask + 1, and head..tail holds pending_count(ch) = limit - room
//   >= 1 checked, canaried blocks of ch.span, which the span still counts as
//   in use; ch.spare is 0 or 1, 1 only in a per-thread LAB, and room >= spare;
//   pending[i].span is of class c  =>  bit i % 64 of pending_of_class[c] is
//   set; pending_bytes == the sum over chains of (limit - spare) * block size
//   <= pending_budget, which is kPendingBudget unless the LAB's chains grow
//   (grows_chains), and from kPendingBudget to kPendingBudgetMax.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/config.h"
#include "core/relaxed.h"
#include "core/size_class.h"
#include "core/secure.h"
#include "core/span.h"
#include "platform/thread_slot.h"

namespace fw {

// kLabCpu: percpu.h; kLabParked: a dead thread's LAB with its spans, waiting for the next thread (below).
enum LabKind : uint32_t { kLabIdle = 0, kLabThread = 1, kLabTransient = 2, kLabCpu = 3, kLabParked = 4 };

constexpr unsigned kLabQuarantine = 256;  // secure mode: freed blocks a thread holds back (secure_heap.h)
// ... and the most bytes they may hold, in blocks' sizes (secure_heap.h).
constexpr uint64_t kLabQuarantineBytes = 1u << 20;

// Parking. A thread that hands its blocks to a successor and exits (a server
// that replaces its workers; Larson) would otherwise release its spans at
// exit: they float, and the successor frees the blocks it was handed into
// spans it does not own, each run of frees a CAS, while it carves or adopts
// spans of its own. Instead the exiting thread's LAB, with its hot and kept
// spans (pending chains are given to their spans first), waits in one of
// min(CPUs, kMaxParked) parking slots, and the next thread to bind a LAB takes
// the LAB parked last, whole: its frees of the blocks it was handed are then
// owner frees on the fast path, and it allocates from the spans the dead
// thread left half used, as mimalloc's threads reclaim abandoned segments.
// Bound: a parked LAB not taken within kParkedNs is flushed by whichever
// thread next exits, takes spans from the span-pool (every
// kParkedCheckEvery acquisitions) or looks at the decay's tick (below), and
// fw_collect flushes every parked LAB; so parked LABs add
// at most min(CPUs, 64) LABs' worth of spans to the blowup bound's per-cache
// term, for at most kParkedNs past the next such event (docs/design.md).
// Threads do not park in per-CPU mode, where no thread binds a LAB.
constexpr unsigned kMaxParked = 64;
constexpr uint64_t kParkedNs = 100u * 1000 * 1000;  // 100 ms
constexpr uint64_t kParkedCheckEvery = 64;          // span-pool acquisitions between looks at the parked LABs

// Kept spans. When a LAB's hot span of class c has no block left
// to give, the LAB does not let it float (HOT -> FULL, after which even its own
// thread's frees into it are remote, through pending chains and a CAS per
// chain): it keeps owning it while its kept spans of all classes together stay
// within kKeptBytes (kept_has_room), or the kept pool (below) has room for it
// (kept_pool_take, lab.cpp). Its thread then frees blocks of a kept
// span with plain stores onto the span's own list, as into the hot span, and a
// later refill makes a kept span with free blocks the hot one again
// (kept_switch). A thread that allocates and frees its own blocks in random
// order (a server's sessions, Larson) thus keeps all its frees local while its
// live blocks fit in its hot spans, kKeptBytes and what the kept pool (below)
// gives it; past that, the exhausted hot span floats as before. The budget is
// the LAB's, not each class's: a thread whose heap lies in a few classes
// keeps it owned, where 1 MiB per class
// (until Stop 45) floated most of a 10 MB heap of 8-1000 B blocks
// (larson-bigheap; docs/benchmarks.md) while allowing 48 MiB over all
// classes. A kept span whose last block in use its own thread frees stays
// kept, all its blocks on its lists: the thread's next blocks of the class
// come off them with no carving (threadtest frees every block each round),
// unless the list's order is not the blocks' own, when the span is carved
// again from block 0 (kept_switch, list_in_address_order in lab.cpp).
// Kept spans with no block in use go back to the span-pool as the thread
// takes spans from the shared stacks (lab_refill), a few at each, the classes
// in turn (release_empty_kept), at the decay's tick (below: a thread that
// takes none), and at its exit or fw_collect. One whose last
// block in use another thread frees goes back at once, taken by that free
// (span.h, span_keep): its owner may allocate nothing more (a thread that
// handed its blocks to others and waits, a parked LAB), and would keep it
// otherwise; the owner's entry goes stale and is dropped (kept_live). Bound:
// a LAB keeps at most kKeptBytes besides its hot spans and what it took from
// the kept pool (below), which adds kKeptBytes to the blowup bound's
// per-cache term, and the pool its own (docs/design.md).
//
// A CPU LAB (percpu.h) keeps one span a class at most: the one it filled
// last. A CPU's cache serves every thread that runs there, and its threads
// move between CPUs, so the spans it fills are freed into from every CPU; what
// it keeps it hands out again only on its own CPU. With kKeptBytes a CPU LAB
// too, test_churn's producer-consumer case in per-CPU mode held 1.9 times its
// peak live bytes late in the run against 1.5-1.6 keeping none (medians of 5,
// docs/benchmarks.md Stops 73-74). One span a class is what the speed needs:
// the frees of the blocks that a CPU's threads took from the span before the
// hot one, which a CPU LAB that kept none sent through pending chains and
// remote lists, come back to the LAB as plain pushes (Larson's server with 2
// threads and FREEWAY_PERCPU=1: a sixth to a quarter faster, as with 2 spans
// a class or 16 MiB, at the same memory). It adds one span a class a CPU to
// the bound: as much again as the hot spans (docs/design.md).
//
// The kept pool. kKeptBytes is each per-thread LAB's own allowance; past it a
// LAB may keep more from a pool shared by the process (kept_pool_take,
// FREEWAY_KEPT_POOL): the allowances of the per-thread caches the default
// mode allows (max(2 CPUs, kPerCpuMinThreads) + 1, percpu.h) that no bound
// thread uses, (that many - threads bound) * kKeptBytes at the time of each
// take. A thread whose heap is bigger than kKeptBytes (a single-threaded
// program's 17 MB of 8-128 KiB buffers: larson-medium) then keeps it owned,
// its frees local, as tcmalloc's thread caches take unused room from a
// process-wide budget. Each LAB's pooled bytes (kept_pooled) are taken from
// the pool's count (g_kept_pooled) when it keeps past its allowance and go
// back as its kept spans are dropped. Bound: the pool adds at most
// (that many - 1) * kKeptBytes to the cache term, and none while the threads
// bound to LABs are as many as the caches the default mode allows
// (docs/design.md).
constexpr uint32_t kKeptBytes = 16u * 1024 * 1024;
// A LAB's own allowance in spans (every class's span is at most a vspan,
// size_class.h).
constexpr unsigned kKeptSpans = kKeptBytes / kVspanSize;
static_assert(kKeptSpans * kVspanSize == kKeptBytes, "the budget is whole spans");
// The most spans of one class a per-thread LAB can keep, with the pool's:
// 128 MiB of vspans.
constexpr unsigned kKeptEntries = 8 * kKeptSpans;
constexpr unsigned kKeptSpansCpu = 1;  // a CPU LAB's (above)
// A class's kept entries lie in groups of kKeptGroup (one cache line), group g
// of every class side by side (Lab::kept_at): a LAB whose classes keep a few
// spans each touches the first groups only, not a row of kKeptEntries entries
// (4 KiB) for every class it uses.
constexpr unsigned kKeptGroup = 8;
static_assert(kKeptEntries % kKeptGroup == 0 && kKeptEntries <= 65535, "kept_n and kept_look are 16 bits");
// Kept spans whose descriptors one kept_switch reads at most (it takes the
// first with a free block), and that one release_empty_kept looks at: with 16
// or fewer kept spans in a class, every one.
constexpr unsigned kKeptLook = 16;
// Lab::kept_pos once release_empty_kept looked at a class's last entry: past
// every class's entries.
constexpr uint32_t kKeptDone = 0xffffffffu;

// The class's list across its spans. A per-thread LAB's holder frees the
// blocks of its kept spans of a class whose spans hold at most
// kListAcrossBlocks blocks (1 KiB and up) onto free[c] too, as it frees those
// of its hot span, once it frees and allocates them in turn (a span kept
// keeps them apart first: below), so the next block of the class handed out
// is the one freed last, whatever its span, as a thread cache's list hands them out in
// tcmalloc. With a list per span, a class of few blocks a span (8-128 KiB
// blocks: 2 to 32) switched kept spans at most mallocs (kept_switch: two CASes, the
// first waiting for the store buffer to drain), each handing out a block
// that had waited in its span since its free, its line long out of the
// cache: larson-medium ran at a third of tcmalloc's speed, and now runs
// ahead of it (docs/benchmarks.md, Stops 83-85).
//
// A block on free[c] is in use as far as its span knows: neither its remote
// list nor its own list holds it. So a freer never finds a kept span empty
// while some of its blocks wait on free[c] (span_keep's rule stands), and a
// kept span comes out empty only once they went back to its own list. They
// go back (lab_return_kept_frees, one span lookup a block):
//   - at a look of release_empty_kept at a class the thread took no block
//     of since the last look (each span taken from the shared stacks looks
//     at the next class with kept spans), so that the spans of a class no
//     longer used go back to the span-pool within two looks, not one;
//   - before the LAB gives its kept spans back (thread exit, fw_collect,
//     lab_reclaim).
// Every block on free[c] lies in a span the LAB owns, hot or kept, so the
// bound's per-cache term is what it was (kept spans count in full).
//
// A span kept keeps its frees apart at first (Stop 104): its own_at names
// kept_frees[c], a list of the class's kept spans, not free[c]. So a
// structure the thread built and then drops whole waits there, and the
// refill that finds free[c] dry sees it (kept_frees_take, lab.cpp): when the
// list holds a span's worth, half of what the kept spans hold, and every
// block they have in use, they all start over (kept_restart_all: no block is
// read), and the structure built next comes off one span at a time, in
// address order (a structure dropped in part is taken whole onto free[c],
// as before). On one list with free[c] it came back in the order of its
// frees, scattered over every span of the class:
// bench/relink with 1 KiB nodes took 5.6 times mimalloc's time walking it,
// and now about mimalloc's (docs/benchmarks.md, Stop 104). Nothing on the
// fast path changes: the free pushes onto the list own_at names, either way.
// A list taken whole with a few blocks (kKeptReuseMost) is the mark of a
// thread that frees and allocates the class in turn (a free into a kept
// span, then a malloc that finds free[c] dry): the spans of those blocks
// join free[c] (own_at), so that their next frees are handed out at once
// with no slow path. Kept apart for good, each such malloc took the refill
// (1 KiB blocks replaced at random: 0.67 times the throughput).
//
// Smaller blocks keep a list per kept span, which a switch takes whole: with
// a span of more than 256 blocks a switch comes once in that many mallocs at
// most. (256 rather than 64, 4 KiB and up, gained 3-11% on larson-server,
// larson-bigheap and sizesweep's 256 B-1 KiB and 4-16 KiB ranges, and
// 7-14% on blocks of 1-4 KiB replaced at random, with no row slower.) Their
// lists across spans cost more than they gave: a structure
// dropped whole sat on free[c] until a look returned it, one miss a block
// (phases: twice as slow), and a bound on free[c] that sent the frees past it
// to their spans cost free's fast path four instructions (threadtest and
// bench/teardown 8-13% slower; docs/benchmarks.md, Stop 85). A CPU LAB keeps
// a list per span in every class: its threads move between CPUs, and it
// keeps one span a class.
constexpr uint32_t kListAcrossBlocks = 256;
FW_INLINE bool lists_across_spans(unsigned c) { return class_info(c).capacity <= kListAcrossBlocks; }

// A field of a LAB that only its holder writes and other threads read for
// figures (lab_frees_of, lab_pending_count): relaxed loads and stores, which
// compile to plain moves, so the holder's code reads as it would with a plain
// field.
template <typename T>
struct HolderField {
  std::atomic<T> v;
  operator T() const { return v.load(std::memory_order_relaxed); }
  T operator->() const
    requires std::is_pointer_v<T>
  {
    return *this;
  }
  HolderField& operator=(T x) {
    v.store(x, std::memory_order_relaxed);
    return *this;
  }
  HolderField& operator=(const HolderField& other) { return *this = T(other); }
  T operator++(int) {  // the holder's only: a load and a store
    T old = *this;
    *this = T(old + 1);
    return old;
  }
  T operator--() {
    T now = T(T(*this) - 1);
    *this = now;
    return now;
  }
  HolderField& operator+=(T x) { return *this = T(T(*this) + x); }
  HolderField& operator-=(T x) { return *this = T(T(*this) - x); }
};

// Blocks freed into one span this LAB does not own, not yet given to it:
// freeing into that span again is plain pointer work. A chain fills on the
// fast path, and goes to its span in one CAS when the next free into the span
// finds it full, which then starts the next chain (a per-thread LAB's chain
// has a spare room for that free, `spare`: its fast path stops at room 1, a
// CPU LAB's at 0); when a free into another span needs its slot; before the
// LAB takes a new span of that class (but for the longest such chain, whose
// span the LAB adopts instead if no LAB owns it, its blocks becoming the new
// hot span's: lab_refill); and when the LAB is flushed. A chain
// takes no more blocks than its span had in use when it started, and one that
// takes a span's last blocks has no spare room: the free that fills it goes to
// the slow path, which gives the chain back at once, and the span goes to the
// pool (a CPU LAB's such chain, which its fast path would fill to room 0 with
// no free to follow, takes all but the last block, whose free then finds it
// full and gives both). Each span descriptor has one slot (pending_slot_in: consecutive
// descriptors get consecutive slots), so a thread freeing its older blocks of
// many spans in random order (Larson's server, shbench) still batches its frees.
// A chain that fills before another span wants its slot is followed by a
// longer one: the next chain for that span takes twice as many blocks, as far
// as the budget has room left (pending_grown). So the frees a span keeps
// getting share a CAS among more of them (blocks bigger than a slot's share
// went one per chain, a chain start and a CAS each), while a chain that loses
// its slot is followed by one of the share; once grown chains hold the whole
// budget, a new chain that finds no room gives them all first, as any does.
//
// The slots grow with the spans the thread frees into. A LAB starts with
// kPendingChains of them; a thread that frees in random order into more
// floated spans than that (dropping a big structure: perl's `undef %h`,
// bench/teardown) would evict a chain of one block at nearly every free, a
// CAS each, and on x86 that CAS also waits for the free's own cache miss, so
// successive frees could not overlap their misses. So a per-thread or CPU LAB
// counts, over each window of as many chain starts as it has slots, the
// starts that evicted another span's chain with room left (conflicts), and
// the starts whose slot's partner with half the slots (slot i and
// i + slots/2) held a chain with room left (conflicts they would have been).
// Conflicts in more than a quarter of the window double its slots (up to
// kPendingMax, where they stay); otherwise partners in fewer than 1/32 halve
// them (down to kPendingChains): with half the slots, fewer than 1/32 of the
// starts would have conflicted, well below the quarter that doubles them
// again. Either way every chain goes to its span first. A chain holds
// pending_budget / slots bytes of blocks (at least one block; more after a
// chain for its span filled, above), and all of a LAB's chains at most
// pending_budget. Per-CPU mode's fast path (rseq_push_counted) reads the
// slot count inside its section: a CPU LAB's slots change only while a slow
// path holds it out of its slot.
//
// The budget grows with the heap. Each chain costs its thread one slow path
// and one CAS, so a thread that drops a heap of N bytes in random order pays
// up to N / (budget / slots) of them, and with a fixed budget the cost per
// free grows with the heap (bench/teardown: 4 million blocks in about 4,000
// spans leave 256 bytes per chain, 5 to 16 blocks). So at the end of each
// window a per-thread LAB sets its budget to its share of the heap:
// committed bytes / (kPendingShare * threads bound to LABs), at least
// kPendingBudget and at most kPendingBudgetMax; a CPU LAB, committed bytes /
// (kPendingShare * the CPUs possible, g_percpu.ncpu: its slots). All
// per-thread LABs' chains then hold at most L * kPendingBudget plus about
// 1/kPendingShare of the committed bytes, and so do the CPU LABs'
// (docs/design.md takes it as an extra fraction in the blowup bound). Other
// LABs keep kPendingBudget.
//
// The floor is what a thread's chains may hold in a heap too small for its
// share to reach it: a term every LAB adds to the bound whatever the heap,
// paid in full by each thread that frees blocks other threads allocated.
// It is 1 KiB a slot at kPendingChains slots: 64 blocks of 16 bytes, or one
// block of 1 KiB or more, a chain; a chain that keeps filling grows within
// it (pending_grown), so a steady stream of frees into one span still
// shares a CAS among up to 64 KiB of blocks. Until Stop 84 it was 1 MiB, 16
// KiB a slot: a producer with two to seven consumers (bench/prodcons, a
// heap of about 100 KB in use) then peaked at 8.5-10.5 MB resident, now
// 6.2-6.4, mimalloc 6.0-6.5: the producer carved on while its blocks waited
// in the consumers' chains. It ran no faster (docs/benchmarks.md, Stop 84).
// A block bigger than a LAB's whole budget (past 64 KiB, at the floor) would
// overrun it alone, so it takes no chain: it goes to its span at once, one
// CAS (lab_defer_free).
//
// A push writes head and room, in that order; the holder alone writes them.
// Statistics on other threads read span, room and limit for a figure
// (lab_pending_count, lab_add_pending_frees): those are HolderFields, whose
// relaxed stores compile to the plain moves, and free's fast path compares
// span and decrements room in place through core/relaxed.h. Per-CPU mode's fast
// path (platform/rseq.h, rseq_push_counted) commits both in one 16-byte store:
// head and the word that holds room are adjacent, and the store rewrites
// limit and spare with the values the section read.
struct PendingChain {
  HolderField<Span*> span;  // nullptr: the slot is empty; first: rseq_push_counted compares it
  void* head;               // the block freed last; nullptr when empty
  HolderField<uint16_t> room;   // frees the chain still takes (0 only in a CPU LAB, until
                                // its next free into the span gives it); first in its word
  HolderField<uint16_t> limit;  // its room when it started: the blocks it takes in all, plus spare
  uint16_t spare;  // 1: the free that finds room 1 starts the next chain (below), 0: it fills this one
  uint16_t unused;
  void* tail;
};
static_assert(sizeof(PendingChain) == 32, "a slot is half a cache line (Lab::pending is line-aligned)");
static_assert(offsetof(PendingChain, room) == offsetof(PendingChain, head) + 8,
              "head and room commit in one 16-byte store (rseq_push_counted)");
// A chain takes no more blocks than its span holds, and room counts them in 16 bits.
static_assert(kVspanSize / kMinAlign < 0xffff, "a chain's room fits in 16 bits");
constexpr unsigned kPendingChains = 64;   // slots a LAB starts with; pending_of_class is a 64-bit mask
constexpr unsigned kPendingMax = 4096;    // slots a LAB grows to (128 KiB of them, paged in as used)
constexpr uint32_t kPendingBudget = 64 * 1024;    // bytes a LAB's chains may hold, at least (above)
constexpr uint32_t kPendingShare = 16;            // per-thread LABs' chains: 1/16 of the committed bytes
// At most: every slot of a grown LAB holding a whole span's blocks (a chain
// takes no more than its span has in use, so a bigger budget buys nothing).
constexpr uint32_t kPendingBudgetMax = uint32_t(kPendingMax * kVspanSize);
static_assert(kClassCount <= 64, "kept_classes has a bit per class");
static_assert((kPendingMax & (kPendingMax - 1)) == 0 && kPendingMax % kPendingChains == 0, "slots double");
// Blocks a chain of blocks of bsize bytes takes when the LAB has `slots` slots
// (at least 1) and a budget of `budget` bytes: with kPendingBudget, 1 KiB of
// blocks with 64 slots, one block with 4096.
FW_INLINE uint32_t pending_limit(uint32_t bsize, uint32_t slots, uint32_t budget) {
  uint32_t bytes = budget / slots;
  return bsize >= bytes ? 1 : bytes / bsize;
}
// Blocks (of bsize bytes) a chain takes when the chain before it in its slot,
// for the same span, filled with `filled` blocks: twice as many, but no more
// than the budget has left once `bytes` are held, so that the LAB's chains stay
// within it. (The caller takes the share above when that is more.)
FW_INLINE uint32_t pending_grown(uint32_t filled, uint32_t bsize, uint32_t budget, uint32_t bytes) {
  const uint32_t left = budget > bytes ? (budget - bytes) / bsize : 0;
  return 2 * filled < left ? 2 * filled : left;
}
// The budget of a LAB whose chains grow, for a heap of `committed` bytes
// shared by `threads` threads bound to LABs, or by as many CPU LABs (above).
FW_INLINE uint32_t pending_share(uint64_t committed, uint64_t threads) {
  uint64_t b = committed / (uint64_t(kPendingShare) * (threads > 0 ? threads : 1));
  return b < kPendingBudget ? kPendingBudget : b > kPendingBudgetMax ? kPendingBudgetMax : uint32_t(b);
}
// Bytes chain ch may hold (its part of pending_bytes), of blocks of bsize bytes.
FW_INLINE uint32_t pending_bytes_of(const PendingChain& ch, uint32_t bsize) { return (ch.limit - ch.spare) * bsize; }
// Blocks chain ch holds.
FW_INLINE uint32_t pending_count(const PendingChain& ch) {
  return ch.span == nullptr ? 0 : uint32_t(ch.limit) - ch.room;
}

// One class's list of blocks to hand out (free[c] in the comments) and its
// counts, together in half a cache line: malloc's fast path pops the head
// and adds to allocs in the line it loaded the head from, and per-CPU mode's
// sections commit a count with the head in one 16-byte store, allocs and head
// for a pop, head and frees for a push (platform/rseq.h), where a count of
// its own took a second section each (Stop 69). Aligned to 32 bytes, so that
// neither pair crosses a line.
//
// allocs counts up to 0 from below (the decay's tick, below): the blocks
// handed out are allocs + allocs_base (lab_allocs_of). In a thread's LAB
// whose list is not empty, allocs is within [-kTickAllocs, 0) between its
// holder's calls (the invariants above).
struct alignas(32) ClassList {
  std::atomic<uint64_t> allocs;       // blocks handed out, less allocs_base (lab_count_alloc)
  void* head;                         // the list (a plain link in each block's first word)
  std::atomic<uint64_t> frees;        // frees counted so far (the invariants below)
  std::atomic<uint64_t> allocs_base;  // the holder's; other threads read it for figures
};
static_assert(offsetof(ClassList, allocs) == 0 && offsetof(ClassList, head) == 8 &&
                  offsetof(ClassList, frees) == offsetof(ClassList, head) + 8,
              "the sections' 16-byte commits: allocs then head, head then frees");

// The decay's tick. A thread that frees a heap it built and goes on with a
// small one (a server after a burst of requests, Redis after FLUSHALL) takes
// no span from the shared stacks, where its emptied kept spans go back
// (release_empty_kept), and no pool operation runs the decay: its fast path
// alone serves it, and the pages stayed resident for as long as the thread
// lived. So every kTickAllocs blocks of a class that a thread LAB hands out,
// malloc's fast path calls lab_tick: each class's allocs counts up to 0 from
// -kTickAllocs, and the add that reaches 0 sets the flag the fast path
// branches on (one instruction). lab_tick moves kTickAllocs into
// allocs_base and reads the coarse clock; once FREEWAY_DECAY_MS has passed
// since the end of its LAB's last look or its making (at least
// kTickLookMinMs), it flushes the parked LABs no thread took within
// kParkedNs (a worker that freed a heap and exited), gives back the kept
// spans with no block in use (release_idle_kept) and lets the span-pool run
// its decay pass (pool_tick), which gives back pages that waited the delay
// (counted from the look's end, they are a delay old at the next look). A
// kept span given back stays committed in the pool for the delay: a thread
// that needs it again soon takes it back with its pages. Slow paths count
// with lab_count_alloc, which re-arms a count that is out of range (a LAB
// that served a CPU, whose sections add with no test). Per-CPU mode's
// sections never tick: a CPU LAB keeps one span a class.
constexpr uint64_t kTickAllocs = 1024;
// The least time between two looks of a LAB's tick, whatever the delay (0
// included): a look reads every kept span's descriptor, up to a few thousand
// misses, which this keeps to about 1% of a thread's time at most.
constexpr uint64_t kTickLookMinMs = 10;

struct Lab {
  ClassList lists[kClassCount];  // first: the fast path indexes it from the LAB pointer
  HolderField<Span*> hot[kClassCount + 1];  // hot[kNoClass] stays null
  HolderField<uint32_t> pending_mask;  // slots in use - 1 (above); statistics read it (lab_pending_count)
  uint32_t pending_started;    // chains started in this window
  uint32_t pending_conflicts;  // of them, by evicting another span's chain with room left
  uint32_t pending_buddies;    // of them, with a chain with room left in the slot they would share with half the slots
  HolderField<uint32_t> pending_bytes;  // sum over chains of pending_bytes_of (below); read as pending_mask
  uint32_t pending_budget;     // bytes its chains may hold (above); kPendingBudget unless its chains grow
  uint32_t pending_offsets;    // pending_mask * sizeof(PendingChain): free's fast path (pending_chain_of)
  uint32_t kept_next;          // release_empty_kept's next class to visit, at most kClassCount
  uint32_t kept_pos;           // and where in that class's kept spans it goes on from; kKeptDone: the next class
  uint64_t kept_bytes;         // span bytes of the kept spans, all classes
  uint64_t kept_pooled;        // of them, taken from the kept pool (above): kept_bytes - kept_pooled <= kKeptBytes
  uint64_t pending_of_class[kClassCount];  // bit i % 64: pending[i] may hold blocks of that class
  HolderField<uint16_t> kept_n[kClassCount];     // kept spans of each class (kept_at)
  HolderField<uint16_t> kept_look[kClassCount];  // where kept_switch's next look starts
  uint64_t kept_classes;  // bit c: kept_n[c] > 0 (release_empty_kept visits only those classes)
  uint64_t tick_ms;       // os::now_ms_coarse() at the end of lab_tick's last look (the decay's tick, above)
  uint64_t tick_seen[kClassCount];  // lab_allocs_of each class at lab_tick's last look
  struct {
    uint64_t allocs, frees;
  } kept_seen[kClassCount];  // lists[c]'s counts at release_empty_kept's last look at class c
  // A class listed across its spans (above): the list its holder frees blocks
  // of its kept spans onto while they keep their frees apart (their own_at),
  // and its length, counted as an own list's is (own_count_after): the frees
  // count as the LAB's when the list is taken, or as their spans' when its
  // blocks go back to them.
  struct KeptFrees {
    void* head;
    std::atomic<uint64_t> count;
  } kept_frees[kClassCount];
  // Bit c: hot[c] came from the shared stacks or a chain's adoption and was
  // not kept since, so a stale entry of class c may name it (kept_set drops
  // them as it keeps it).
  uint64_t hot_fresh;
  // The holder's only: a LAB whose blocks its thread frees and that it may
  // take whole in place of this one once that LAB is parked
  // (lab_adopt_handed). nullptr for none; set at each bind, cleared as a LAB
  // parks or goes idle.
  Lab* handed;
  // The holder's only: the LAB whose thread this one's thread was named the
  // successor of at its bind (percpu.h, percpu_thread_bound), until this LAB
  // stops being its thread's (percpu_successor_set). nullptr for none.
  Lab* named;
  // Its thread's place in the order of binds (lab_bind_thread: 1 for the
  // first thread, counted by g_threads_created); a LAB a thread takes whole
  // (lab_adopt_handed) gets that thread's. A thread freeing into a span of a
  // parked LAB is its predecessor's successor only if it bound later
  // (parked_owner_seen). Written by the holder, read by other threads:
  // relaxed, a figure that only steers that choice. 0 for a LAB never bound.
  std::atomic<uint64_t> bind_no;
  std::atomic<uint32_t> kind;
  uint32_t id;
  std::atomic<uint64_t> parked_at;  // os::now_ns() when it was parked (kLabParked)
  std::atomic<uint32_t> idle_next;  // link in the idle stack
  // Whether its thread has a successor, for the mode switch's count
  // (percpu.h, percpu_thread_bound): the successor's LAB's id + 1, stored by
  // the successor's bind with a CAS from open; set open as a thread binds it
  // and closed as its thread exits or it goes idle (percpu_successor_set,
  // which keeps the count of namings).
  std::atomic<uint32_t> successor;
  std::atomic<Lab*> all_next;       // link in the list of every LAB ever made
  // After the fields every LAB uses: one that never grows touches only the
  // first kPendingChains slots (2 KiB) of these 128 KiB. Aligned to a cache
  // line, so that each slot lies in one (a free's push reads and writes its
  // span, head and room; per-CPU mode commits head and room in one store).
  alignas(64) PendingChain pending[kPendingMax];
  // The kept spans (above), kept_n[c] of class c, in groups (kKeptGroup): the
  // first two groups of every class (16 entries each) take 7 KiB, all 64
  // 224 KiB, paged in as used.
  HolderField<Span*> kept_groups[kKeptEntries / kKeptGroup][kClassCount][kKeptGroup];

  HolderField<Span*>& kept_at(unsigned c, unsigned i) { return kept_groups[i / kKeptGroup][c][i % kKeptGroup]; }
  const HolderField<Span*>& kept_at(unsigned c, unsigned i) const {
    return kept_groups[i / kKeptGroup][c][i % kKeptGroup];
  }
  // Entry i < kept_n[c] of class c, given e, entry i - 1: the next one within a group,
  // found again only past one. Loops over a class's entries step with it:
  // indexing each entry took seven more instructions a read (GCC 12).
  const HolderField<Span*>* kept_after(unsigned c, unsigned i, const HolderField<Span*>* e) const {
    return i % kKeptGroup != 0 ? e + 1 : &kept_at(c, i);
  }
  // Secure mode only (secure_heap.h), written by the holder alone: blocks its
  // thread freed that are not reusable yet, and the state of the generator
  // that picks their slots. Empty whenever the LAB is idle. Last, so that the
  // default mode never touches these pages. quarantine_bytes is the sum of
  // the block sizes of the blocks in quarantine[], at most
  // kLabQuarantineBytes whenever a free returns.
  uint64_t quarantine_rng;
  uint64_t quarantine_bytes;
  void* quarantine[kLabQuarantine];
};

// The most spans of one class lab may keep: kKeptSpansCpu for a CPU LAB,
// else kKeptEntries.
FW_INLINE unsigned kept_spans_most(const Lab* lab) {
  return lab->kind.load(std::memory_order_relaxed) == kLabCpu ? kKeptSpansCpu : kKeptEntries;
}
// Whether lab's hot span of class c came from outside it and was not kept
// since (Lab::hot_fresh): a stale entry of class c may name it.
FW_INLINE bool hot_is_fresh(const Lab* lab, unsigned c) { return ((lab->hot_fresh >> c) & 1) != 0; }
// Whether lab may keep one more span of class c within its own allowance
// (kept spans, above); past it, kept_pool_take (lab.cpp) may give room.
FW_INLINE bool kept_has_room(const Lab* lab, unsigned c) {
  return lab->kept_n[c] < kept_spans_most(lab) &&
         lab->kept_bytes - lab->kept_pooled + class_info(c).span_bytes <= kKeptBytes;
}

// Whether kept entry s of class c is still lab's kept span. Another thread's
// free that empties a kept span takes it to the pool (span.h, span_keep), and
// the entry stays until the holder drops it: at its next look at the entry,
// when it claims the span (span_unkeep fails), or when the span comes back to
// it and is kept again (kept_set, lab.cpp). Until then the
// entry counts in kept_n and kept_bytes, and its span's own count is not the
// LAB's frees (lab_frees_of): the freer counted them. The span may be anything
// by then, even another LAB's kept span of another class; the figures read
// here are racy hints only for the holder's slow paths, which claim first.
FW_INLINE bool kept_live(const Lab* lab, unsigned c, const Span* s) {
  return span_kept_by(s, Anchor::unpack(s->anchor.load(std::memory_order_acquire)), lab, c);
}
// The blocks on the own lists of lab's hot span and live kept spans of
// class c, and on its kept list (kept_frees[c]): frees of lab's not yet in
// lists[c].frees (lab_frees_of, and fw_check_heap's count of free blocks).
uint64_t lab_own_frees(const Lab* lab, unsigned c);

extern FW_HIDDEN Lab g_lab_empty;  // a thread that has not called freeway yet
extern FW_HIDDEN Lab g_lab_busy;   // the thread is inside malloc/free
extern FW_HIDDEN Lab g_lab_dead;   // the thread's LAB was released at thread exit
extern FW_HIDDEN Lab g_lab_secure; // secure mode: the thread's LAB is elsewhere, every call takes the slow path
extern FW_HIDDEN Lab g_lab_cpu;    // per-CPU mode: the thread's calls go to its CPU's LAB (percpu.h)

// Span d's pending chain slot is its key masked by the slot count - 1:
// consecutive descriptors get consecutive slots. The descriptors are one array
// of kVspansPerRegion (4,096 = kPendingMax) a region, so at the most slots
// descriptor i of every region has slot i: spans at the same places of two
// regions share slots (ThreadSanitizer's layout of a 128 MiB heap; a heap over
// 1 GiB). A key adding a step per region would end that, for 3.65 more
// instructions per free on the chain path (docs/benchmarks.md, Stop 31).
FW_INLINE uintptr_t pending_key(const Span* d) { return reinterpret_cast<uintptr_t>(d) / sizeof(Span); }
// Its slot in lab, whatever lab's slot count (0 in a placeholder).
FW_INLINE unsigned pending_slot_in(const Lab* lab, const Span* d) {
  return unsigned(pending_key(d)) & lab->pending_mask;
}
// The same slot for free's fast path, as a byte offset: a descriptor's
// address is its key times sizeof(Span), so the address divided by
// kSpanPerSlot is the key times a slot's size, and pending_offsets (the mask
// scaled the same way) keeps the slot's bits. One shift and one masking load
// give the chain's offset from lab->pending, which the fast path's loads and
// stores then use as an index.
constexpr uintptr_t kSpanPerSlot = sizeof(Span) / sizeof(PendingChain);
static_assert(sizeof(Span) == kSpanPerSlot * sizeof(PendingChain) && (kSpanPerSlot & (kSpanPerSlot - 1)) == 0,
              "a descriptor address / kSpanPerSlot is its key's slot offset (a shift)");
FW_INLINE PendingChain* pending_chain_of(Lab* lab, const Span* d) {
  const uintptr_t off = (reinterpret_cast<uintptr_t>(d) / kSpanPerSlot) & lab->pending_offsets;
  return reinterpret_cast<PendingChain*>(reinterpret_cast<char*>(lab->pending) + off);
}
// Sets lab's slot count (a power of two, lab.h), both of its forms.
FW_INLINE void set_pending_slots(Lab* lab, uint32_t slots) {
  lab->pending_mask = slots - 1;
  lab->pending_offsets = (slots - 1) * uint32_t(sizeof(PendingChain));
}

FW_INLINE bool is_placeholder(const Lab* lab) {
  return lab == &g_lab_empty || lab == &g_lab_busy || lab == &g_lab_dead || lab == &g_lab_secure || lab == &g_lab_cpu;
}

// The calling thread's LAB (or a placeholder), in the platform's thread slot
// (platform/thread_slot.h): one load or store with no call and no
// initialisation check (Linux: %fs-relative; Windows: four instructions
// through the TEB). Every thread starts with EMPTY.
using LabSlot = os::ThreadSlot<&g_lab_empty>;
FW_INLINE Lab* lab_current() { return LabSlot::get(); }
FW_INLINE void lab_set_current(Lab* lab) { LabSlot::set(lab); }
// The BUSY mark (reentrancy, above): marks the thread inside malloc/free
// before any LAB is touched, and returns what its slot held.
FW_INLINE Lab* lab_enter() {
  Lab* slot = lab_current();
  lab_set_current(&g_lab_busy);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // BUSY is set before the LAB is touched
  return slot;
}
// Ends it: puts `slot` back once the LAB is consistent.
FW_INLINE void lab_leave(Lab* slot) {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the LAB is consistent before BUSY is cleared
  lab_set_current(slot);
}

// Adds one to one of the LAB's own counters (frees; allocs through
// lab_count_alloc), which its holder writes (and, while the LAB is in a
// CPU's slot, that CPU's sections: above) and others read with relaxed loads
// (relaxed.h).
FW_INLINE void lab_count(std::atomic<uint64_t>& counter) { single_writer_add_one(counter); }

// lab's allocations and frees of class c: its holders' counts and per-CPU
// mode's fast paths' (figures: relaxed loads). The frees include the blocks on
// the own lists of the spans lab owns (own_take), read from its hot and kept
// arrays (HolderField): while the holder works, a span may be read twice or
// missed (a figure, like the others; descriptors are never unmapped). Exact
// while no thread allocates or frees (fw_check_heap).
// allocs_base is read first (acquire) and re-armed last (release,
// lab_arm_tick): a reader whose loads straddle a re-arm reads the new
// allocs with the old base, a count too low for that moment, never one too
// high that a peak (stats.h) would keep.
FW_INLINE uint64_t lab_allocs_of(const Lab* lab, unsigned c) {
  const uint64_t base = lab->lists[c].allocs_base.load(std::memory_order_acquire);
  return lab->lists[c].allocs.load(std::memory_order_relaxed) + base;
}
// Whether list l's count is armed: within [-kTickAllocs, 0), so that the fast
// path's add comes to 0 within kTickAllocs blocks (the invariant above,
// which lab_is_valid checks).
FW_INLINE bool tick_armed(const ClassList& l) {
  return l.allocs.load(std::memory_order_relaxed) + kTickAllocs < kTickAllocs;
}
// Moves class c's count into allocs_base so that allocs is -kTickAllocs
// (the decay's tick, above): the blocks handed out stay the same. The
// holder's, or a slow path's holding a CPU LAB out of its slot.
FW_INLINE void lab_arm_tick(Lab* lab, unsigned c) {
  ClassList& l = lab->lists[c];
  const uint64_t n = l.allocs.load(std::memory_order_relaxed) + kTickAllocs;
  l.allocs.store(uint64_t(0) - kTickAllocs, std::memory_order_relaxed);
  l.allocs_base.store(l.allocs_base.load(std::memory_order_relaxed) + n, std::memory_order_release);
}
// Counts a block of class c handed out by a slow path: re-armed when the
// count comes to 0 or was out of [-kTickAllocs, 0) (a LAB that served a CPU),
// so that the fast path's count reaches 0 again within kTickAllocs.
FW_INLINE void lab_count_alloc(Lab* lab, unsigned c) {
  ClassList& l = lab->lists[c];
  lab_count(l.allocs);
  if (FW_UNLIKELY(!tick_armed(l))) lab_arm_tick(lab, c);
}
// malloc's fast path's call when the count of list l (lab->lists[c]) came
// to 0 after handing out p: re-arms it and looks at the decay's clock
// (above). Entered with BUSY set; restores the slot; returns p.
FW_NOINLINE void* lab_tick(void* p, Lab* lab, ClassList* l);
// Not the blocks on lab's pending chains, which are frees too (counted when
// a chain goes to its span): lab_add_pending_frees adds them, all classes in
// one pass over the slots.
uint64_t lab_frees_of(const Lab* lab, unsigned c);
void lab_add_pending_frees(const Lab* lab, uint64_t frees[kClassCount]);

// Adds n to one of the LAB's own counters (single writer, as lab_count).
FW_INLINE void lab_count_n(std::atomic<uint64_t>& counter, uint64_t n) {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Takes the own list of span s, which lab owns and whose class is c, for
// lab's holder, leaving it empty; nullptr if it was empty. Its blocks count as
// lab's frees from here: free's fast path only adds to the span's own count
// (one add fewer per free, which in a loop whose loads miss is one instruction
// fewer between them; docs/design.md), and the list is counted as a whole
// when it is taken, to be handed out again or to go back with its span.
FW_INLINE void* own_take(Lab* lab, Span* s, size_t c) {
  void* head = own_head(s);
  if (head != nullptr) {
    lab_count_n(lab->lists[c].frees, own_count(s));
    own_set(s, nullptr, 0);
  }
  return head;
}

// Byte offset of class c's ClassList in a LAB: where per-CPU mode's sections
// (platform/rseq.h), given the LAB in a CPU's slot, find its list and counts.
FW_INLINE size_t lab_list_offset(unsigned c) { return offsetof(Lab, lists) + c * sizeof(ClassList); }

// own_at's value (span.h) for lab's hot span of class c: free[c], which
// holds only blocks of that span (one word, as the own list's head is).
FW_INLINE uintptr_t own_hot_at(const Lab* lab, size_t c) { return reinterpret_cast<uintptr_t>(&lab->lists[c].head); }
static_assert(sizeof(void*) == sizeof(uintptr_t) && sizeof(std::atomic<uint64_t>) == sizeof(uintptr_t),
              "own_at names a one-word list head either way");
// own_at's value for a kept span of lab's class c, listed across its spans,
// that keeps its frees apart: kept_frees[c].
FW_INLINE uintptr_t own_kept_at(const Lab* lab, size_t c) {
  return reinterpret_cast<uintptr_t>(&lab->kept_frees[c].head);
}
static_assert(offsetof(ClassList, frees) == offsetof(ClassList, head) + sizeof(void*) &&
                  offsetof(Span, own_frees) == offsetof(Span, large_size) + sizeof(void*) &&
                  offsetof(Lab::KeptFrees, count) == offsetof(Lab::KeptFrees, head) + sizeof(void*),
              "every list's count is the word after its head (own_count_after)");

// The owner pushes block p (checked and canaried) of owned span s onto the
// list own_at names: free[c] for its hot span, where it is the next block of
// its class handed out, while its line is still in the cache (as a thread
// cache's LIFO list gives it in tcmalloc or glibc); the span's own list for a
// kept span. Either way the count is the descriptor's, added to in place (one
// instruction on x86-64, relaxed.h). One path with no branch on which list:
// a branch on it went each way at random when frees hit the hot and the kept
// spans of a class in random order, and cost larson-bigheap a quarter of its
// throughput (docs/design.md, "Own lists"). Until Stop 65 the hot span's
// frees waited on its own list until free[c] ran dry; a program that frees a
// temporary between two long-lived blocks of its class then got the
// long-lived ones spread over more lines, in an order its walks over them
// missed on (prog-python's collector).
//
// The count is the word after the list's head, whichever list: free[c]'s is
// the LAB's frees[c] (ClassList), an own list's the descriptor's own_frees
// (span.h), as per-CPU mode's section counts (rseq_push_owned). So a free
// onto free[c] writes only the LAB's line, and an own count is always its
// list's length.
FW_INLINE std::atomic<uint64_t>& own_count_after(uintptr_t at) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(at + sizeof(void*));
}
FW_INLINE void own_prepend(uintptr_t at, void* p) {  // p already linked to at's head
  word_store_relaxed(at, p);
  single_writer_add_one_after(own_count_after(at), p);  // after p's link and canary (span.h, own_frees)
}
FW_INLINE void own_push(Span* s, void* p) {
  const uintptr_t at = s->own_at.load(std::memory_order_relaxed);
  block_link(p, word_load_relaxed(at));
  own_prepend(at, p);
}
// own_push for free's per-thread fast path (never in secure mode: block_link_fast).
FW_INLINE void own_push_fast(Span* s, void* p) {
  const uintptr_t at = s->own_at.load(std::memory_order_relaxed);
  block_link_fast(p, word_load_relaxed(at));
  own_prepend(at, p);
}

// A LAB bound to the calling thread (released at its exit); nullptr if no
// memory. handed_from: for a thread whose first call is a free, the owner of
// the freed block's span (nullptr for none, or for a first malloc). The LAB is
// handed_from if it is parked; else, for a first free, one from the idle
// stack, whose `handed` names handed_from while that LAB's thread is still
// bound (lab_adopt_handed may take it later); for a first malloc, the LAB
// parked last. It waits for no other thread.
Lab* lab_bind_thread(Lab* handed_from = nullptr);
// A slow path's last step when the thread's LAB has a `handed` LAB (above):
// returns the LAB the thread is bound to from now on, with which the caller
// restores its slot. If the handed LAB is parked and holds more spans than
// lab (hot and kept), the thread takes it whole and lab is flushed and made
// idle: a successor that bound before its predecessor exited goes on with the
// predecessor's cache, whose blocks it was handed, instead of draining it
// through the span-pool beside a cache of its own. If it is parked and holds
// no more, it is released (its spans to every thread, as before Stop 99).
// While its thread is bound, lab is kept and a later slow path looks again.
Lab* lab_adopt_handed(Lab* lab);
// Whether a slow path ending with `mine` (a LAB or a placeholder) has a
// handed LAB to look at (lab_adopt_handed).
FW_INLINE bool lab_has_handed(const Lab* mine) { return !is_placeholder(mine) && FW_UNLIKELY(mine->handed != nullptr); }
// A LAB for one operation; give it back with lab_put_transient.
Lab* lab_take_transient();
void lab_put_transient(Lab* lab);
// Per-CPU mode (percpu.h): a LAB from the idle stack (or a new one) for a CPU
// slot; nullptr if no memory. lab_retire releases its hot spans and pending
// chains and makes it idle.
Lab* lab_take_cpu();
void lab_retire(Lab* lab);
// Makes up to n new LABs idle (fewer if there is no memory). Per-CPU mode
// makes one per CPU when it starts: a CPU's slot is empty the first time a
// thread runs there, and a LAB made then needs a new mapping, which an
// address-space limit reached by then refuses, so that malloc failed with
// memory free in the heap.
void lab_make_idle(unsigned n);
// Releases every hot and kept span of lab and gives its pending frees to their
// span (its holder calls this).
void lab_flush(Lab* lab);
// When no span or run can be had (the address space or memory is used up:
// RLIMIT_AS, overcommit off), what the LABs hold may be what the allocation
// needs: hot spans of classes the thread no longer uses, kept spans it emptied
// (up to kKeptBytes of them), blocks in pending chains whose spans they would
// empty, blocks in secure mode's quarantine, and the same in parked LABs.
// lab_reclaim (lab's holder) frees lab's quarantine, releases lab as lab_flush
// does and collects the parked LABs, so that the emptied spans go
// to the span-pool, where a span of any class or a large block's run can take
// them; the caller then tries once more (lab_refill; large blocks through
// lab_collect_current(Collect::kAll) and percpu_reclaim, alloc.cpp). Other
// threads' LABs, and other CPUs', are theirs: their spans go back at their
// thread's exit or their own next failure.
void lab_reclaim(Lab* lab);
// fw_collect for the calling thread's LAB (per-thread mode): kKept gives its
// pending frees to their spans and releases its kept spans; kAll is
// lab_reclaim. Nothing in per-CPU mode, or inside a call on this thread (a
// signal handler's, or a secure-mode slow path's: the slot holds BUSY).
enum class Collect { kKept, kAll };
void lab_collect_current(Collect what);
// Gives the calling thread's kept spans that have no block in use to the
// span-pool, all at once (a big block's fresh pages: alloc.cpp, large_block), where the
// LAB would give them a few at each span it takes (release_empty_kept). The
// same cases do nothing as for lab_collect_current. Returns their bytes.
uint64_t lab_release_emptied_current();
// Frees checked block p of span s (not owned by lab) through lab's pending
// chain for s. A chain started for a span of a parked LAB releases that LAB
// (parked for a successor that bound another: lab_bind_thread).
void lab_defer_free(Lab* lab, Span* s, void* p);
// Gives every pending chain of lab to its span.
void lab_flush_pending(Lab* lab);
// The blocks of lab's kept spans of class c on free[c] and on its kept list
// (kept_frees[c]) go back to their spans' own lists (the class's list across
// its spans, above), its hot span's staying on free[c] in their order; a
// kept span whose blocks are all free then looks empty to its LAB's looks
// and to a freer (span.h, span_keep). Nothing in a LAB or class that lists
// its kept spans' frees by span. Its holder calls this.
void lab_return_kept_frees(Lab* lab, unsigned c);
// Flushes every parked LAB and makes it idle (fw_collect).
void lab_collect_parked();
// Parked LABs now (a figure).
uint32_t lab_parked_count();
// Blocks lab holds in pending chains (a figure; plain reads of the holder's fields).
uint32_t lab_pending_count(const Lab* lab);
// Allocation from lab for class c when free[c] is empty: collect remote frees,
// carve, switch to a kept span, or take a span: first one lab holds its
// longest pending chain of class c for, if no LAB owns it (its blocks freed
// last come first), else a reusable one or a fresh one. nullptr when out of
// memory.
void* lab_refill(Lab* lab, unsigned c);

// For a slow path entered with `slot` in the thread slot: the thread's LAB,
// bound now if the thread has none yet (EMPTY) or it is kept aside (SECURE),
// or `slot` itself (a placeholder) if none can be had. handed_from: as for
// lab_bind_thread.
Lab* lab_own(Lab* slot, Lab* handed_from = nullptr);
// What the thread slot gets back when a slow path that worked with `mine`
// leaves: in secure mode SECURE, never the LAB itself. The mode is tested
// inline, and secure mode's case is a call: as one out-of-line expression,
// GCC 12 made the five placeholder comparisons before the mode's (31
// instructions a call, on every slow free and malloc).
FW_NOINLINE Lab* lab_slot_after_secure(Lab* mine);
FW_INLINE Lab* lab_slot_after(Lab* mine) { return FW_LIKELY(!secure_mode()) ? mine : lab_slot_after_secure(mine); }

// The span of a block that was in a quarantine (secure mode); a block outside
// the heap there means the quarantine was overwritten: the process stops.
Span* quarantined_span(const void* p);

// Frees block p of small span d (checked and canaried already) for lab's
// holder: onto lab's list if lab owns d, else onto its pending chain.
void lab_free_block(Lab* lab, void* p, Span* d);
// Secure mode: frees every block lab holds in its quarantine (thread exit, fw_collect).
void lab_flush_quarantine(Lab* lab);

// Walk of every LAB ever made (for statistics); may see LABs being made.
Lab* lab_first();
uint64_t lab_threads_live();
uint64_t lab_threads_created();
// What the LABs hold: the bytes of the spans they own (span_hot_bytes) and the
// budgets their pending chains take (pending_bytes). Read without stopping them.
uint64_t lab_held_bytes();
// The kept pool (kept spans, above): the most bytes it may hold now (0 with
// FREEWAY_KEPT_POOL=0, or while the threads bound to LABs are as many as the
// per-thread caches the default mode allows), and the bytes the LABs took
// from it (exact while no thread keeps or drops a span).
uint64_t kept_pool_limit();
uint64_t kept_pool_taken();

bool lab_is_valid(const Lab* lab);

}  // namespace fw
