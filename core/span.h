// core/span.h: the span descriptor and its anchor word.
//
// A span is one virtual span (kVspanSize of address space) with a descriptor in
// the arena's descriptor table. A small span carves span_bytes of its virtual
// span, from its base on, into blocks of one size class.
// A run of virtual spans holds one large object: the first descriptor is the
// run's head, the others are tails.
//
// The anchor (Michael §3.2.1) is the one word that is changed by compare-and-
// swap only. It packs the span's remote free list and its state:
//
//   bits  0..16  head    block index + 1 of the first block on the remote free
//                        list (block i is at base + i*16); 0 = empty list
//   bits 17..33  count   blocks on the remote free list
//   bits 34..36  state   see SpanState
//   bit  37      linked  the span's reuse_next link is in use in some reusable stack
//   bit  38      kept    HOT, and kept by its owner (lab.h): not its hot span, and
//                        not being worked on by its owner's slow path
//   bits 39..63  tag     incremented on every state change and every change of
//                        kept (ABA protection)
//
// Life cycle of a small span (scalloc §3.4 = Michael §3.2.2):
//   FREE -> HOT      popped from the span-pool (or fresh) by a thread cache (LAB)
//   HOT -> HOT       remote free pushes onto the list; the owner takes the list
//   HOT -> FULL      the owner has no block left to give: it lets the span float
//   FULL -> PARTIAL  a free makes >= reuse_percent of the blocks free: the freer
//                    pushes it on the class's reusable stack (unless linked)
//   PARTIAL -> HOT   a LAB pops it from the reusable stack and takes its list
//   FULL/PARTIAL -> HOT  a LAB that needs a span of its class adopts one it
//                    holds a pending chain for (span_claim_floating); a PARTIAL
//                    one stays linked in its stack until popped (lazy removal)
//   FULL/PARTIAL -> FREE  the free of the last block in use: the freer pushes
//                    the span to the span-pool at once (a PARTIAL span then stays
//                    linked in its reusable stack until popped: lazy removal)
//   HOT -> FULL/PARTIAL/FREE  a thread exits: its LAB releases every hot span
//   HOT, kept -> FREE  another thread's free of the last block in use of a span
//                    its owner keeps, counting the owner's own list (span_keep
//                    below): the freer gives it to the pool, the owner is left
//                    with a stale entry, which it drops (lab.cpp, kept_live)
//
// Who writes which field (all fields are atomics so that racing reads are
// defined; the orders are named at every use):
//   anchor      any thread, CAS only.
//   owner       the LAB that claims the span (after its claim CAS), and that LAB
//               again just before its release CAS. Read by the free fast path,
//               which only compares it with its own LAB.
//   cls, block_size, block_mul, capacity, run_len, offset, large_size (large heads)
//               the thread that holds the span exclusively (just popped it from
//               the pool or a run cache), before publishing it with a CAS.
//               cls stays when the span is freed (kNoClass for run pieces).
//   offset      small span: the low 32 bits of block 0's address (the
//               vspan's base plus its colour), which the block check subtracts from a
//               pointer's low bits as they are (secure.h); large head: where
//               the block starts, from base.
//   carved      the owning LAB while HOT; stable in every other state.
//   own_at      the owning LAB, when the span becomes its hot or a kept span.
//   guard_page  whoever holds the vspan exclusively (it describes the vspan's
//               page protection, whatever the vspan is used for).
//   committed   the exclusive holder (pool pop/push, run alloc/free).
//   pool_next, reuse_next  the stacks (tagged_stack.h).
//   reuse_cls   the thread that pushes the span on a reusable stack, before the push.
//   large_size  a large or huge head's usable bytes; while a small span is
//               HOT, the head of its owner-side free list (own_head); while
//               a run head is pooled, the holder's: a merge's stretch link,
//               or the time a pay gave its pages back with bit 63 set
//               (span_pool.cpp, kPaidMark).
//   own_frees   the owning LAB while HOT (own_count: its own list's length, 0
//               while it is its LAB's hot span); stale in other states.
//               Its add is ordered after the pushed block's link and canary
//               (own_prepend, lab.h), so that a freer that takes a kept span
//               counting it finds no write of the owner's still to come.
// Equations (span_is_valid):
//   state in {FULL, PARTIAL}: count <= carved <= capacity, list has count blocks
//   state FULL:    count + (capacity - carved) <  reuse threshold
//   state PARTIAL: count < carved (else it would be FREE)
//   kept:          state HOT
//   colour + capacity * block_size <= committed <= kVspanSize,
//   offset == low 32 bits of base + colour, the colour 0 or span_colour,
//   block_mul == block_mul_of(cls) (small spans: free's fast path checks a
//   block with the descriptor's copy, without loading the class)
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "core/size_class.h"

namespace fw {

struct Lab;

enum SpanState : uint32_t {
  kFree = 0,       // in the span-pool or a run cache, or never used
  kHot = 1,        // owned by a LAB, which allocates from it
  kFull = 2,       // floating: no owner, few free blocks, in no list
  kPartial = 3,    // reusable: no owner, in (or on its way to) a reusable stack
  kLarge = 4,      // head of a large run in use
  kLargeTail = 5,  // other vspans of a large run in use; run_len = index of head
  kHuge = 6,       // head of a huge region in use
};


struct Anchor {
  uint32_t head;   // block index + 1, 0 = empty
  uint32_t count;
  uint32_t state;
  bool linked;
  uint32_t tag;
  bool kept = false;  // only with state kHot (span_keep)

  static constexpr unsigned kCountShift = 17, kStateShift = 34, kLinkedShift = 37, kKeptShift = 38, kTagShift = 39;
  static constexpr uint64_t kField17 = (uint64_t(1) << 17) - 1;
  static constexpr uint32_t kTagMask = (uint32_t(1) << (64 - kTagShift)) - 1;

  static Anchor unpack(uint64_t w) {
    return Anchor{uint32_t(w & kField17),           uint32_t((w >> kCountShift) & kField17),
                  uint32_t((w >> kStateShift) & 7), bool((w >> kLinkedShift) & 1),
                  uint32_t(w >> kTagShift),         bool((w >> kKeptShift) & 1)};
  }
  uint64_t pack() const {
    return uint64_t(head) | (uint64_t(count) << kCountShift) | (uint64_t(state) << kStateShift) |
           (uint64_t(linked) << kLinkedShift) | (uint64_t(kept) << kKeptShift) |
           (uint64_t(tag & kTagMask) << kTagShift);
  }
};

// Two cache lines, so that the fields every free reads do not share a line
// with those that frees write. The first holds what is written when a span
// is claimed or carved (the owner, the class, the block geometry, `carved`),
// which every free reads (the owner test, the block test). The second holds
// what frees write: the anchor (a remote free's chain, CAS), the owner's
// own list (head in large_size, count in own_frees, on every owned free) and
// the reusable stack's link. With one line, a thread freeing blocks of a span
// another thread owns missed on the descriptor whenever the owner had freed
// into the span since (prodcons: 8.7% of the samples in free, most on the
// descriptor's first load, 4.5% with two lines; with the own list on the
// first line the gain was gone: docs/benchmarks.md, Stop 55).
struct alignas(128) Span {
  std::atomic<Lab*> owner;
  // Changed only while the span is FREE, with a release store, after the
  // anchor went FREE (a new tag): a reader holding an older anchor word that
  // loads cls with acquire and finds the anchor unchanged has the class that
  // word's span had (span_claim_reusable).
  std::atomic<uint16_t> cls;
  std::atomic<uint16_t> guard_page;  // page index + 1 of this vspan's guard page (secure mode); 0 = none
  std::atomic<uint32_t> block_size;
  std::atomic<uint32_t> capacity;
  std::atomic<uint32_t> carved;
  // offset, then block_mul, in one aligned 8-byte word: free's block check
  // reads both with one load (relaxed.h, pair_relaxed; free.h).
  std::atomic<uint32_t> offset;
  std::atomic<uint32_t> block_mul;  // small span: its class's block check multiplier (secure.h)
  std::atomic<uint64_t> committed;
  std::atomic<uint32_t> run_len;
  // While the span is HOT: the list its owner's frees of its blocks go onto
  // (own_push, lab.h): the owner LAB's free[cls] while the span is that LAB's
  // hot span of its class; while the LAB keeps it, the LAB's kept_frees[cls]
  // or free[cls] in a per-thread LAB's class listed across its spans (lab.h,
  // "The class's list across its spans"), else its own list's head
  // (large_size). So the owner's free reaches any of them with one load and
  // no branch on which.
  // Written by the owner only, set whenever the span becomes hot or kept;
  // stale in every other state, where no owner's free reads it.
  std::atomic<uintptr_t> own_at;
  // The sizes a sized free of one of its blocks may pass (size_class.h,
  // sized_free_fits), for an allocation without extra alignment: from
  // sized_lo to sized_lo + sized_width, side by side so that free's fast path
  // reads both with one load from this line, where it found the owner (a
  // table indexed by the class was a chain of three: the class, then two
  // entries). Set with the class (span_make_hot) from kSizedRanges
  // (size_class.h; tests/test_span.cpp checks the result against the rule for
  // every class); stale in every other state, where no fast-path free reads it.
  std::atomic<uint32_t> sized_lo;
  std::atomic<uint32_t> sized_width;
  // The second line: written by frees.
  alignas(64) std::atomic<uint64_t> anchor;
  std::atomic<uint32_t> pool_next;
  std::atomic<uint32_t> reuse_next;
  std::atomic<uint64_t> large_size;
  std::atomic<uint64_t> own_frees;  // own_count (below): 64 bits, a hot span's count never wraps
  // The class of the reusable stack the span was last pushed on (or is about
  // to be), written by its pusher before the push (reusable_push): while
  // `linked`, the stack it is in unless a popper holds it.
  std::atomic<uint16_t> reuse_cls;
};
static_assert(sizeof(Span) == 128, "a span descriptor is two cache lines");
// log2 of a descriptor's size: a descriptor's offset in its slice is its
// vspan's index shifted by this much (span_in_slice).
constexpr unsigned kSpanShift = 7;
static_assert(sizeof(Span) == size_t(1) << kSpanShift, "kSpanShift is log2(sizeof(Span))");
static_assert(offsetof(Span, anchor) == 64, "the fields frees write start the second line");
static_assert(offsetof(Span, sized_lo) % 8 == 0 && offsetof(Span, sized_width) == offsetof(Span, sized_lo) + 4,
              "sized_lo and sized_width share one 8-byte word, sized_lo in its low half (pair_relaxed)");
static_assert(offsetof(Span, offset) % 8 == 0 && offsetof(Span, block_mul) == offsetof(Span, offset) + 4,
              "offset and block_mul share one 8-byte word, offset in its low half (pair_relaxed)");

// The class of a descriptor not used for small blocks: a large or huge block,
// or a piece of a free run.
constexpr unsigned kNoClass = kClassCount;

// A span's committed bytes start at its vspan's base, and a small span's
// blocks at its base plus its colour (size_class.h): 0 for a class with one
// colour and in secure mode, else span_colour. (Until Stop 52 a small span
// smaller than its vspan started at a colour of 64 KiB steps within it; every
// class's span fills its vspan now: docs/design.md.) span_colour and
// span_blocks are in arena.h, with the descriptor's index.

// Block index (the anchor's unit) <-> address, for a span whose block 0 is at base.
FW_INLINE uint32_t block_index(uintptr_t base, const void* p) {
  return uint32_t((reinterpret_cast<uintptr_t>(p) - base) >> 4) + 1;
}
FW_INLINE void* block_at(uintptr_t base, uint32_t index) {
  return index == 0 ? nullptr : reinterpret_cast<void*>(base + (uintptr_t(index - 1) << 4));
}

// The owner-side list of a span its LAB keeps (lab.h): a CPU LAB's frees of
// a kept span's blocks go onto it, and a per-thread LAB's kept spans get
// back onto it the blocks of theirs that leave free[c] or the LAB's kept
// list (lab_return_kept_frees, lab.cpp); kept_switch moves it to the LAB's
// free[c] when the span is hot again. It lives in the descriptor: the head in `large_size` (which
// large and huge blocks and pooled run heads use otherwise; links are encoded as in free[c], secure.h), the
// count in `own_frees`, the word after the head as free[c]'s count is
// (own_count_after, lab.h). While the span is its LAB's hot span the list is
// empty and the count 0, its owner's frees going onto free[c] (own_at) and
// counted in the LAB's frees[c]. Written by the owner only (relaxed loads and
// stores); the count is read by statistics, fw_check_heap, telemetry and a
// freer of a kept span (span_free_list).
FW_INLINE void* own_head(const Span* s) {
  return reinterpret_cast<void*>(uintptr_t(s->large_size.load(std::memory_order_relaxed)));
}
FW_INLINE uint64_t own_count(const Span* s) { return s->own_frees.load(std::memory_order_relaxed); }
// Another thread's read of a kept span's own count (span_free_list): acquire,
// with the owner's add ordered after the pushed block's stores (own_prepend).
FW_INLINE uint64_t own_count_acquire(const Span* s) { return s->own_frees.load(std::memory_order_acquire); }
FW_INLINE void own_set(Span* s, void* head, uint64_t count) {
  s->large_size.store(reinterpret_cast<uintptr_t>(head), std::memory_order_relaxed);
  s->own_frees.store(count, std::memory_order_relaxed);
}
// own_at's value for a kept span: its own list's head.
FW_INLINE uintptr_t own_list_at(const Span* s) { return reinterpret_cast<uintptr_t>(&s->large_size); }
// Taking the list counts its blocks as frees: own_take, lab.h.
// Free blocks a non-hot span needs before it is reusable.
uint32_t reuse_threshold(uint32_t capacity);

// --- The transitions of a small span. "Owner" means the LAB holding it HOT. ---

// FREE -> HOT: a span just taken from the pool becomes lab's span of class cls.
// False if its memory could not be committed (the span is then given back).
bool span_make_hot(Span* s, unsigned cls, Lab* lab);
// The committed bytes of the spans that are HOT (owned by a LAB, hot or kept),
// as of the last transitions to and from HOT: what the caches hold in spans.
uint64_t span_hot_bytes();

// PARTIAL -> HOT for a span just popped from reusable stack cls. On success
// returns true and sets *list to its free list (may be empty: carve). On false
// the span was not claimable (it was dropped from the stack, or moved to the
// stack of its current class). With no lab (a sweep, reusable.h) nothing is
// claimed: a PARTIAL span of class cls goes back on cls's stack.
bool span_claim_reusable(Span* s, unsigned cls, Lab* lab, void** list);

// FULL or PARTIAL -> HOT for a span lab holds a pending chain for (so it has
// blocks in use and keeps its class): lab adopts the span it is freeing into
// (lab.cpp, adopt_or_give_chains). On success sets *list to its remote free list
// (may be empty). A PARTIAL span stays linked in its reusable stack, whose
// popper drops it (lazy removal, reusable.h). False if the span is HOT (another
// LAB owns it).
bool span_claim_floating(Span* s, Lab* lab, void** list);

// Owner: takes every block on the remote free list; nullptr if none.
void* span_collect(Span* s);

// A carve's batch (span_carve_take, span.cpp): blocks smaller than a page
// fill at most kCarveMaxBytes; bigger ones, whose carve touches only their
// first page, come one in a span's first batch, then kCarvePages at a time
// (always one in secure mode, which fills them).
constexpr uint32_t kCarveMaxBytes = 16 * 1024;
constexpr uint32_t kCarvePages = 4;

// Owner: carves the next batch of blocks never handed out and hands out its
// first: it comes back in use (no link, its canary word clear), and *rest gets
// the batch's other blocks as a free list (nullptr if the batch was one block).
// nullptr (and *rest nullptr) if every block is carved.
void* span_carve_take(Span* s, void** rest);
// Owner: whether s has blocks never carved (span_carve_take's first test,
// inline for lab_refill, whose hot span has usually been carved whole when it
// runs out: the call cost 31 instructions to find nothing).
FW_INLINE bool span_has_uncarved(const Span* s) {
  return s->carved.load(std::memory_order_relaxed) < s->capacity.load(std::memory_order_relaxed);
}

// Owner: s, a kept span claimed back (span_unkeep) to become its hot span,
// or still kept with its LAB's other kept spans of the class when every
// block they have in use waits on its LAB's kept list (kept_restart_all,
// lab.cpp), whose every carved block is free and whose own list the owner
// has taken (and drops), is carved again from block 0: its next blocks come
// in address order, as from a span fresh from the pool, not in the order of the frees
// that emptied it. The blocks past carved keep their canaries, so a late
// double free of one is reported as a free of a block not handed out
// (span_check_free).
void span_restart(Span* s);

// Owner: HOT -> FULL for a span with no free block left. False when remote
// frees arrived meanwhile (collect them instead).
bool span_float(Span* s, Lab* lab);

// Kept spans (lab.h). Owner: marks its HOT span s kept (the anchor's kept bit),
// once s is no longer its hot span and its own list is where its frees go.
// From then on, a remote free that finds every carved block free (on the
// remote list, the freed chain and the own list, own_count) takes s to the
// pool itself (span_free_list): its owner may be a thread that allocates
// nothing more, or a parked LAB, and would keep an empty span for good. No
// fence is needed with the owner's pushes: a push is of a block in use, so
// while every block is free none is under way, and any later one would be a
// double free.
void span_keep(Span* s);
// Whether s, whose anchor word reads a, is lab's kept span of class cls (the
// rule span_unkeep claims by and lab.h's kept_live reads entries by).
FW_INLINE bool span_kept_by(const Span* s, const Anchor& a, const Lab* lab, unsigned cls) {
  return a.state == kHot && a.kept && s->owner.load(std::memory_order_relaxed) == lab &&
         s->cls.load(std::memory_order_relaxed) == cls;
}
// Owner: claims kept span s of class cls back before working on its lists
// (switching it hot, releasing it, flushing), clearing the bit. False if s is
// no longer lab's kept span of that class (a freer took it: the entry is
// stale, drop it).
bool span_unkeep(Span* s, const Lab* lab, unsigned cls);

// Owner: gives the span up with `local` (its owner-side free list): it becomes
// FULL, PARTIAL or FREE by its free count (thread exit, cache flush).
void span_release(Span* s, void* local);
// The same for a `local` list known to hold m blocks: a span that becomes FREE
// is released without walking the list.
void span_release_counted(Span* s, void* local, uint32_t m);

// Any thread but the owner: frees block p of small span s.
void span_free_remote(Span* s, void* p);

// Any thread but the owner: frees n checked blocks of span s at once, chained
// from head to tail through their links (one CAS for the whole chain).
void span_free_list(Span* s, void* head, void* tail, uint32_t n);

// Stops the process with a message unless p is the start of a carved block of
// s that is not free already (secure.h).
void span_check_free(const Span* s, const void* p);

// Secure mode: makes the vspan's guard page the one at page index `page` (0 =
// none), changing protections only where they differ. The caller holds s.
// A guard is placed only within the guard budget (below) and when the OS
// protects the page; guard_page records what is in place, so s may end with
// none where one was asked for.
void span_set_guard(Span* s, uint32_t page);

// Guard budget. On Linux reserved memory is one read-write mapping, and each
// guard page splits it: up to two more mappings toward the process's limit
// (os::map_count_limit, vm.max_map_count: 65530 by default), which the
// program's own mappings share (thread stacks, dlopen, mapped files). A
// secure-mode heap of a few GiB would take them all, and the program's mmap
// and pthread_create would fail. So guards are placed while fewer than a
// quarter of the limit are in place (half its mappings); past that, a span
// or large run that has no guard gets none, which one line on stderr says
// the first time. A span keeps its guard through the pool and its reuse (the
// place is given back only where the guard moves). No limit (Windows): no
// budget.
// Guard pages in place now.
uint64_t span_guards();
// The budget: the most guard pages in place at once; 0 = no budget.
uint64_t span_guard_budget();
// Sets the budget (tests: a small one to reach; 0 = none).
void span_set_guard_budget(uint64_t budget);

// Checks the equations above for one span; reports and returns false if broken.
bool span_is_valid(const Span* s);
// Whether p is the start of a carved block of small span s (the checks'
// test of a list's links: span_is_valid, lab_is_valid).
bool span_holds_carved(const Span* s, const void* p);

}  // namespace fw
