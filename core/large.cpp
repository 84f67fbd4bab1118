// core/large.cpp: large runs and huge regions (see large.h).
#include "core/large.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/arena.h"
#include "core/report.h"
#include "core/secure.h"
#include "core/span_pool.h"
#include "platform/os.h"

namespace fw {
namespace {

// Statistics (large_stats). The vspans of live runs are not counted here:
// statistics find them in their states, LARGE and LARGE_TAIL, as they walk
// the descriptors (stats_fill), which spares a large block's malloc and its
// free a locked add each.
std::atomic<uint64_t> g_live_bytes{0}, g_allocs{0}, g_frees{0};

// Sets s's state to `state` if the state it finds is in `from` (bit 1 << state
// set) and returns the state it found. A CAS loop that keeps `linked` as it
// finds it, because a reusable stack's popper may clear that bit at any moment
// (docs/design.md): only the state decides.
uint32_t change_state(Span* s, uint32_t state, uint32_t from) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (((from >> a.state) & 1) == 0) return a.state;
    if (s->anchor.compare_exchange_weak(w, Anchor{0, 0, state, a.linked, a.tag + 1}.pack(),
                                        std::memory_order_acq_rel, std::memory_order_acquire))
      return a.state;
  }
}

// Sets the state of a descriptor the caller holds exclusively (a run it took
// from the pool, or one whose head's free it won). Linked in no reusable stack,
// no other thread writes its anchor: a stack's popper writes only anchors
// that are linked (to clear the bit), and only a small span that goes PARTIAL
// becomes linked (span.cpp, settle). So a store does it, not a CAS: a 1 MiB
// block's malloc sets four and its free three, of the 22 locked instructions
// such a pair made (~3 ns each here). Still linked from an earlier life as a
// small span: the CAS loop, which keeps what the popper writes.
void set_state(Span* s, uint32_t state) {
  const Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_acquire));
  if (a.linked) {
    change_state(s, state, ~0u);
    return;
  }
  s->anchor.store(Anchor{0, 0, state, false, a.tag + 1}.pack(), std::memory_order_release);
}

// Zeroes what of [p, p+size) may hold old data: on an OS whose decommitted
// pages read as zero, only the part inside what was committed before.
void zero_block(void* p, size_t size, uintptr_t base, uint64_t committed_before) {
  size_t dirty = size;
  if (os::features().decommit_zeroes) {
    uintptr_t start = reinterpret_cast<uintptr_t>(p) - base;
    dirty = committed_before > start ? size_t(committed_before - start) : 0;
    if (dirty > size) dirty = size;
  }
  if (dirty) std::memset(p, 0, dirty);
}

// Guard pages of the vspans of a run, in secure mode: none inside the block,
// and one right after it when the run has room.
FW_NOINLINE void place_secure_guard(Span* head, uint32_t n, uint64_t bytes) {
  uint32_t hi = span_index(head);
  uint64_t guard_vspan = bytes >> kVspanShift;
  uint32_t page_in_vspan = uint32_t((bytes & (kVspanSize - 1)) / os::page_size()) + 1;
  for (uint32_t i = 0; i < n; i++) span_set_guard(span_at(hi + i), i == guard_vspan ? page_in_vspan : 0);
}

// Guard pages exist only in secure mode, which is fixed per process: the test
// stays inline, since a call that only returned cost a large block's malloc
// 20 instructions of saved registers.
FW_INLINE void place_guard(Span* head, uint32_t n, uint64_t bytes) {
  if (FW_UNLIKELY(secure_mode())) place_secure_guard(head, n, bytes);
}

// The region is reserved at the block's alignment, so the block starts at the
// region's base (offset 0) whatever the alignment; and `room` bytes long if
// that is more than size and can be had (large_alloc), so that realloc grows
// the block in place (large_resize_in_place).
void* huge_alloc(size_t size, size_t align, bool zero, size_t room) {
  uint32_t r = room > size && !arena_capped() ? arena_huge_reserve(room, align) : kNoIndex;
  if (r == kNoIndex) r = arena_huge_reserve(size, align);
  if (r == kNoIndex) return nullptr;
  Span* head = span_at(r * kVspansPerRegion);
  uintptr_t base = g_regions[r].base.load(std::memory_order_relaxed);
  uintptr_t p = base;
  uint64_t bytes = round_up(p - base + size, os::page_size());
  span_set_use(head, kNoClass);
  if (!span_commit(head, bytes)) {
    arena_huge_release(r);
    return nullptr;
  }
  (void)zero;  // a fresh region reads as zeros
  head->offset.store(uint32_t(p - base), std::memory_order_relaxed);
  head->large_size.store(bytes - (p - base), std::memory_order_relaxed);
  head->run_len.store(uint32_t(bytes >> kVspanShift), std::memory_order_relaxed);
  set_state(head, kHuge);
  g_live_bytes.fetch_add(bytes - (p - base), std::memory_order_relaxed);
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<void*>(p);
}

}  // namespace

// Run classes (large.h): the run length a block of `need` vspans takes. Up to 4 vspans
// exactly; above, two classes per doubling, 2^k and 1.5 * 2^k. Runs of the
// lengths blocks come and go in are then reused whole by the next block of a
// similar size, instead of each length being its own (the pool keeps exact
// lengths up to 64): fewer splits, merges and pages given back and faulted
// in again. sizesweep's 1-4 MiB phase (2 threads, 2 cores) took 117,000-
// 125,000 minor faults with exact lengths, 87,000-97,000 with these classes
// (95,000-118,000 with four classes per doubling). The cost is address space
// only (up to half as much again; committed pages follow the block). So under
// an address-space cap (RLIMIT_AS), where address space is the memory a program
// budgets (sort sizes its buffer from the cap), large_alloc takes exact
// lengths; and when a class's run cannot be had, the exact length. The cap is
// the one the arena saw when it last reserved (arena_capped): reading it on
// every call, one getrlimit, was 60% of a 2 MiB block freed and taken again.
uint32_t run_class(uint32_t need) {
  if (need <= 4) return need;
  uint32_t step = 1u << (30u - unsigned(__builtin_clz(need)));  // half the power of two below need
  return (need + step - 1) & ~(step - 1);
}

// The run a block of `need` vspans takes: its run class, or the exact length
// under an address-space cap (arena_capped), where rounding up would spend
// address space the program may not have.
static uint32_t run_length(uint32_t need) { return need > 4 && !arena_capped() ? run_class(need) : need; }

// Marks vspans [from, to) of head's run as its tails.
static void set_tails(Span* head, uint32_t from, uint32_t to) {
  const uint32_t hi = span_index(head);
  for (uint32_t i = from; i < to; i++) {
    Span* t = span_at(hi + i);
    t->run_len.store(hi, std::memory_order_relaxed);
    set_state(t, kLargeTail);
  }
}

// head's run, len vspans long, now holds n: the new vspans are its tails.
static void run_grew(Span* head, uint32_t len, uint32_t n) {
  set_tails(head, len, n);
  head->run_len.store(n, std::memory_order_relaxed);
}

void* large_alloc(size_t size, size_t align, bool zero, size_t room, uint64_t* unpaid) {
  if (unpaid != nullptr) *unpaid = 0;
  if (align < kMinAlign) align = kMinAlign;
  if (size == 0) size = 1;  // a unique block, as for malloc(0)
  size_t total = size + large_align_extra(align);
  if (total < size || size > kLargeRequestMax || align > kLargeRequestMax || room > kLargeRequestMax) return nullptr;
  if (!arena_init()) return nullptr;  // this may be the process's first allocation
  if (!large_in_run(size, align)) return huge_alloc(size, align, zero, room);
  uint32_t need = uint32_t((total + kVspanSize - 1) >> kVspanShift);
  uint32_t n = run_length(need);
  Span* head = pool_take_run(n, round_up(total, os::page_size()));
  if (head == nullptr && n > need) head = pool_take_run(n = need, round_up(total, os::page_size()));
  if (head == nullptr) return nullptr;
  n = head->run_len.load(std::memory_order_relaxed);  // a pooled run may be longer (pool_take_run)
  span_set_use(head, kNoClass);  // a single span may have held small blocks
  uintptr_t base = span_base(head);
  uintptr_t p = round_up(base, align);
  uint64_t before = head->committed.load(std::memory_order_relaxed);
  uint64_t bytes = round_up(p - base + size, os::page_size());
  // A run reused for a much smaller block gives back what the bigger one left
  // committed (reuse_trims).
  if (reuse_trims(before, bytes)) {
    span_trim(head, bytes);
    before = bytes;
  }
  if (!span_commit(head, bytes)) {
    pool_give(head, n);
    return nullptr;
  }
  if (bytes > before) {
    const uint64_t paid = pool_pay_fresh(head, n, bytes - before);
    if (unpaid != nullptr && n > kBigRunVspans) *unpaid = bytes - before - paid;
  }
  head->offset.store(uint32_t(p - base), std::memory_order_relaxed);
  head->large_size.store(bytes - (p - base), std::memory_order_relaxed);
  head->run_len.store(n, std::memory_order_relaxed);
  set_tails(head, 1, n);
  place_guard(head, n, bytes);
  set_state(head, kLarge);
  if (zero) zero_block(reinterpret_cast<void*>(p), kCallocZeroesUsable ? size_t(bytes - (p - base)) : size, base, before);
  g_live_bytes.fetch_add(bytes - (p - base), std::memory_order_relaxed);
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<void*>(p);
}

// The head of the large or huge object p points into; nullptr if none. A
// huge object's head is the first descriptor of its region's slice (the only
// one it marks), so a pointer past its first vspan finds it there: each 1 GiB
// slot of a huge region maps to that slice (region_publish), and p's
// descriptor lies in it.
static Span* head_of(const void* p, const Span* d) {
  Anchor a = Anchor::unpack(d->anchor.load(std::memory_order_acquire));
  if (a.state == kLargeTail) return span_at(d->run_len.load(std::memory_order_relaxed));
  if (a.state == kLarge || a.state == kHuge) return const_cast<Span*>(d);
  if (a.state != kFree) return nullptr;
  Span* first = span_at(span_index(d) / kVspansPerRegion * kVspansPerRegion);
  if (Anchor::unpack(first->anchor.load(std::memory_order_acquire)).state == kHuge) return first;
  return nullptr;
}

void large_free(void* p, Span* d) {
  Span* head = head_of(p, d);
  if (head == nullptr) report_misuse("free of a pointer freeway did not hand out (or double free):", p);
  uintptr_t base = span_base(head);
  if (reinterpret_cast<uintptr_t>(p) != base + head->offset.load(std::memory_order_relaxed))
    report_misuse("free of a pointer inside a large block (not its start):", p);
  // The head may still be linked in a reusable stack from an earlier life,
  // whose popper may clear `linked` between a load and a CAS (change_state
  // retries then). Only a state that is no longer LARGE or HUGE (another free
  // won) is a double free.
  const uint32_t state = change_state(head, kFree, (1u << kLarge) | (1u << kHuge));
  if (state != kLarge && state != kHuge) report_misuse("double free of a large block:", p);
  uint64_t usable = head->large_size.load(std::memory_order_relaxed);
  g_live_bytes.fetch_sub(usable, std::memory_order_relaxed);
  g_frees.fetch_add(1, std::memory_order_relaxed);
  if (state == kHuge) {
    span_forget_committed(head);
    arena_huge_release(span_index(head) / kVspansPerRegion);
    return;
  }
  uint32_t n = head->run_len.load(std::memory_order_relaxed);
  uint32_t hi = span_index(head);
  for (uint32_t i = 1; i < n; i++) set_state(span_at(hi + i), kFree);
  pool_give_large(head, n);
}

size_t large_usable_size(const void* p, const Span* d) {
  Span* head = head_of(p, d);
  // Only the block's start has a size: realloc and sized free take 0 for a
  // pointer inside the block as the misuse it is.
  if (head == nullptr) return 0;
  if (reinterpret_cast<uintptr_t>(p) != span_base(head) + head->offset.load(std::memory_order_relaxed)) return 0;
  return size_t(head->large_size.load(std::memory_order_relaxed));
}

void* large_block_start(const void* p, const Span* d) {
  Span* head = head_of(p, d);
  if (head == nullptr) return nullptr;
  uintptr_t start = span_base(head) + head->offset.load(std::memory_order_relaxed);
  uintptr_t q = reinterpret_cast<uintptr_t>(p);
  if (q < start || q - start >= head->large_size.load(std::memory_order_relaxed)) return nullptr;
  return reinterpret_cast<void*>(start);
}

// Grows the run of large block `head` (held by the caller: it is the block's
// realloc) to hold `total` bytes from its base, over the never-used vspans
// that follow it, when the run ends where a current region's fresh vspans
// start (arena_extend): a block at the heap's top grows in place as glibc's
// top chunk does, instead of a copy into a run whose pages all fault in. To
// the run class of the new length, as large_alloc would take, else to the
// exact length. False, changing nothing, when another block was carved after
// it, the region cannot grow, or the run would pass its frontier's kind. The
// caller extends only when the pool keeps fewer pages than the grown block
// (pool_retained_bytes): else a run with pages may hold it, and a copy into
// pages that are there is cheaper than faulting in fresh ones while those
// wait in the pool (a buffer grown to 64 MiB and freed, 20 times: 25% slower
// when every round extended; docs/design.md, Large and huge objects).
static bool extend_run(Span* head, uint64_t total) {
  const uint32_t len = head->run_len.load(std::memory_order_relaxed);
  const uint32_t need = uint32_t((total + kVspanSize - 1) >> kVspanShift);
  if (need <= len) return false;
  const uint32_t hi = span_index(head);
  uint32_t n = run_length(need);
  // Only within its frontier's kind of runs (arena.h, Frontiers): a run of
  // the spans' frontier grown past kBigRunVspans would leave, once freed, a
  // big block's run among small spans, which split it. It moves to the big
  // blocks' frontier once, and grows there.
  if (frontier_of(need) != arena_frontier(hi)) return false;
  if (frontier_of(n) != arena_frontier(hi)) n = need;
  if (!arena_extend(hi + len, n - len)) {
    if (n == need || !arena_extend(hi + len, need - len)) return false;
    n = need;
  }
  // Never handed out before, so no other thread reads or writes them.
  run_grew(head, len, n);
  return true;
}

// Grows head's run of a large block in place over the free spans in the pool
// that follow it (pool_take_after), to `total` bytes from its base: the
// run class of that length if as much lies free there, else the exact length,
// within its frontier's kind of runs as extend_run. So a buffer that grows
// where an earlier one was freed (a vector's or a read buffer's growth, round
// after round) takes that buffer's pages instead of a copy into other pages,
// as a heap's free next chunk serves a growing block. Only when the pages a
// growth adds outnumber the spans in the pool, which the take gathers: below
// that a copy costs less. False, changing nothing but committing the rest of
// the run, when the spans there are not free.
static bool extend_run_over_pool(Span* head, uint64_t total) {
  const uint32_t len = head->run_len.load(std::memory_order_relaxed);
  const uint32_t need = uint32_t((total + kVspanSize - 1) >> kVspanShift);
  if (need <= len) return false;
  const uint32_t hi = span_index(head), end = hi + len;
  if (frontier_of(need) != arena_frontier(hi) || end % kVspansPerRegion == 0) return false;
  // At the heap's top (vspans never handed out) nothing is pooled, and the
  // descriptor may never have been written: reading it would map the zero
  // page, which the store that initialises it then faults out again.
  if (end % kVspansPerRegion >= arena_vspans_used(end / kVspansPerRegion)) return false;
  // A hint, read without holding the neighbour: the take settles it.
  if (Anchor::unpack(span_at(end)->anchor.load(std::memory_order_relaxed)).state != kFree) return false;
  const uint64_t adds = total - (uint64_t(len) << kVspanShift);
  if (pool_span_count() > adds / os::page_size()) return false;
  uint32_t want = run_length(need);
  if (frontier_of(want) != arena_frontier(hi)) want = need;
  // The run's own pages first, so that the pieces' pages extend a prefix.
  if (!span_commit(head, uint64_t(len) << kVspanShift)) return false;
  uint64_t pages = 0;
  const uint32_t got = pool_take_after(end, need - len, want - len, &pages);
  if (got == 0) return false;
  head->committed.store((uint64_t(len) << kVspanShift) + pages, std::memory_order_relaxed);
  run_grew(head, len, len + got);
  return true;
}

bool large_resize_in_place(void* p, Span* d, size_t size) {
  Span* head = head_of(p, d);
  if (head == nullptr) return false;
  const uint32_t state = Anchor::unpack(head->anchor.load(std::memory_order_acquire)).state;
  if (state != kLarge && state != kHuge) return false;
  const bool huge = state == kHuge;
  uint64_t offset = head->offset.load(std::memory_order_relaxed);
  // A huge block's room is its region's; a large block's, its run's, which
  // grows at the heap's top (extend_run).
  auto room_now = [&] {
    return (huge ? g_regions[span_index(head) / kVspansPerRegion].size.load(std::memory_order_relaxed)
                 : uint64_t(head->run_len.load(std::memory_order_relaxed)) << kVspanShift) -
           offset;
  };
  uint64_t room = room_now();
  uint64_t old = head->large_size.load(std::memory_order_relaxed);
  if (size <= (huge ? kLargeMax : kSmallMax)) return false;
  if (size > room && !huge && offset + size <= kLargeMax &&
      (extend_run_over_pool(head, offset + size) ||
       (pool_retained_bytes() < offset + size && extend_run(head, offset + size))))
    room = room_now();
  if (size > room) return false;
  uint64_t bytes = round_up(offset + size, os::page_size());
  // Shrinking below half the run would strand address space and commit: move instead.
  if (bytes - offset < room / 2 && size < old) return false;
  if (!span_commit(head, bytes)) return false;
  uint64_t usable = bytes - offset;
  if (usable > old && !huge) place_guard(head, head->run_len.load(std::memory_order_relaxed), bytes);
  if (usable < old) usable = old;  // committed pages stay usable
  head->large_size.store(usable, std::memory_order_relaxed);
  if (huge) head->run_len.store(uint32_t((offset + usable) >> kVspanShift), std::memory_order_relaxed);
  g_live_bytes.fetch_add(usable - old, std::memory_order_relaxed);
  return true;
}

size_t large_move_pages(void* q, void* p, const Span* d, size_t bytes) {
  Span* from = head_of(p, d);
  const Span* to = span_of(q);
  if (from == nullptr || to == nullptr) return 0;
  const uint32_t state = Anchor::unpack(from->anchor.load(std::memory_order_acquire)).state;
  if ((state != kHuge && state != kLarge) || Anchor::unpack(to->anchor.load(std::memory_order_acquire)).state != kHuge)
    return 0;
  // Secure mode's guard page after a large block splits its mapping anyway;
  // a copy keeps that mode's layout as it is.
  if (state == kLarge && secure_mode()) return 0;
  // A huge block starts at its region's base (huge_alloc); a large one at its
  // run's base or at an alignment above kVspanSize: all page-aligned.
  const uint64_t most = std::min(from->large_size.load(std::memory_order_relaxed),
                                 to->large_size.load(std::memory_order_relaxed));
  const size_t want = size_t(std::min<uint64_t>(bytes, most));
  const size_t whole = want & ~(os::page_size() - 1);
  if (whole == 0 || reinterpret_cast<uintptr_t>(p) != span_base(from) + from->offset.load(std::memory_order_relaxed) ||
      reinterpret_cast<uintptr_t>(q) != span_base(to))
    return 0;
  if (!os::move_pages(p, q, whole)) return 0;
  std::memcpy(static_cast<char*>(q) + whole, static_cast<const char*>(p) + whole, want - whole);
  // A large block's run is going back to the pool: what it still has of its
  // pages (the last partial page, pages past the block) is given back too, so
  // that the pool does not take the run for one with pages (a move leaves
  // its range reading as zeros, a hole that the committed prefix cannot
  // describe). A huge block's region is released whole when it is freed.
  if (state == kLarge) span_trim(from, 0);
  return want;
}

LargeStats large_stats() {
  return LargeStats{g_live_bytes.load(std::memory_order_relaxed), g_allocs.load(std::memory_order_relaxed),
                    g_frees.load(std::memory_order_relaxed)};
}

uint64_t large_live_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }

}  // namespace fw
