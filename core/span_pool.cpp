// core/span_pool.cpp: the span-pool (see span_pool.h).
#include "core/span_pool.h"

#include <atomic>

#include "core/arena.h"
#include "core/options.h"
#include "core/report.h"
#include "core/tagged_stack.h"
#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {
namespace {

struct PoolLink {
  std::atomic<uint32_t>& operator()(uint32_t i) const { return span_at(i)->pool_next; }
};
using SpanStack = TaggedStack<PoolLink>;

constexpr unsigned kMaxPoolStacks = 64;
constexpr unsigned kTiers = 3;  // committed: 0, <= 64 KiB, more (up to a whole vspan)
constexpr uint32_t kExactRuns = 64;                  // run stacks for lengths 2..64
// 2^6 .. kVspansPerRegion vspans (a whole region is the longest run)
constexpr unsigned kLogRuns = unsigned(__builtin_ctz(kVspansPerRegion)) + 1;
static_assert(kVspansPerRegion > kExactRuns, "runs longer than kExactRuns go to g_log");
SpanStack g_single[kTiers][kMaxPoolStacks];
// Runs sit in two sets, by whether they hold pages: a take looks through the
// warm set (any pages committed) before the clean one (none), so that reuse
// faults in as little as it can and the pages kept for reuse are the ones
// reused, whatever their lengths (jemalloc, likewise, searches its dirty
// extents before the retained ones).
// And runs sit apart by the frontier whose region holds them (arena.h): runs
// of big blocks' regions are pieces of an area that big blocks reuse and grow,
// so single spans and short runs are split off them before fresh address
// space only where the vspan above is in use (free_above; pool_take_span,
// pool_take_run).
constexpr unsigned kRunSets = 2;  // 0: clean, 1: warm
SpanStack g_exact[kFrontiers][kRunSets][kExactRuns + 1];
SpanStack g_log[kFrontiers][kRunSets][kLogRuns];  // g_log[f][w][k]: runs of length in [2^k, 2^(k+1)), k >= 6
// The last large block's run given back on each CPU (span_pool.h: last-run
// slots), as its index + 1, or 0: FREE, with pages (at most kLastRunMax), and
// not counted in g_retained or g_pooled_spans until a merge, a purge pass or
// fw_collect sweeps it out (grab_last_runs),
// so that a give and a take through a slot touch no shared counter.
std::atomic<uint32_t> g_last_run[kMaxPoolStacks];
// Gives into each slot, counted (relaxed load and store: two threads on one
// CPU may lose a count) for kSlotGivesPerLook (span_pool.h).
std::atomic<uint32_t> g_slot_gives[kMaxPoolStacks];
// A block too big for a slot is one whose run comes from the big blocks'
// frontier: those are the runs that merge and grow in place.
static_assert((uint64_t(kBigRunVspans) << kVspanShift) == kLastRunMax, "big runs start where the slots stop");
// The run set a take looks through first: the warm one if the caller will use pages.
unsigned first_run_set(uint64_t want) { return want != 0 ? 1 : 0; }
std::atomic<unsigned> g_stack_count{0};
std::atomic<uint64_t> g_retained{0};
std::atomic<uint64_t> g_committed{0};
std::atomic<uint64_t> g_peak_committed{0};
std::atomic<int64_t> g_pooled_spans{0};
// Runs (two spans or more) of each frontier in the run stacks, counted before
// a push and after the pop that takes one (push_free, taken): never fewer
// than the stacks hold, so a take that reads 0 skips the scan of the frontier's
// 2 x (63 + 13) stacks, which read every stack when the pool held single
// spans only (about 3,000 instructions before each fresh span: 7% of
// sizesweep's 16-64 KiB phase, docs/benchmarks.md, Stop 60). Equal to what
// they hold while no take runs (pool_is_valid).
std::atomic<int64_t> g_pooled_runs[kFrontiers] = {};
std::atomic<uint64_t> g_given_spans{0};     // spans ever given back (a run counts each)
// g_given_spans when the pool was last merged for a take of each frontier's
// runs (arena.h): a merge for a short run, which takes nothing from the big
// blocks' area, does not use up a merge that a big block's take needs to grow.
std::atomic<uint64_t> g_coalesced_at[kFrontiers] = {};

// Commit policy (span_pool.h): what enters the pool keeps its pages, stamped
// with the time it came in (pool_stamp), unless the retained bytes would pass
// retain_bound(); a purge pass gives back the pages of whatever has waited
// longer than FREEWAY_DECAY_MS. Passes run from pool_give and pool_take_*, at
// most one every quarter of the delay (g_purged_at, claimed with a CAS).
std::atomic<uint64_t> g_purged_at{0};  // ms

// The pool's clock: coarse (a tick, 4-16 ms), as its ages are compared with
// delays of hundreds of ms, and it is read on every large take and give (three
// reads of now_ns were 44% of a 1 MiB malloc/free pair, 100 of 220 ns).
uint64_t now_ms() { return os::now_ms_coarse(); }
uint64_t decay_ms() { return uint64_t(option(Option::decay_ms)); }

// The pool's time stamp of a span or run head it holds: when it came in with
// its pages, in ms (wrapping at 2^32: ages are compared as differences). It
// lives in block_size, which only small spans use, and only while not FREE.
void set_pool_stamp(Span* s, uint64_t ms) { s->block_size.store(uint32_t(ms), std::memory_order_relaxed); }
// A stamp later than `now` (a span given back after the caller read the
// clock: a purge pass meets those in the stacks it reaches later) is age 0,
// not an age near 2^32; so is any age of 2^31 ms (24.8 days) or more.
uint64_t pool_age_ms(const Span* s, uint64_t now) {
  const uint32_t age = uint32_t(now) - s->block_size.load(std::memory_order_relaxed);
  return age > 0x7fffffffu ? 0 : age;
}

unsigned stack_count() {
  unsigned n = g_stack_count.load(std::memory_order_relaxed);
  if (n == 0) {
    int64_t o = option(Option::pool_stacks);
    n = o > 0 ? unsigned(o) : unsigned(os::cpu_count());
    if (n > kMaxPoolStacks) n = kMaxPoolStacks;
    if (n == 0) n = 1;
    g_stack_count.store(n, std::memory_order_relaxed);
  }
  return n;
}

// The calling CPU's single-span stacks and last-run slot.
unsigned home_stack() { return os::cpu_id() % stack_count(); }

unsigned floor_log2(uint32_t v) { return 31u - unsigned(__builtin_clz(v)); }

unsigned tier_of(uint64_t committed) {
  if (committed == 0) return 0;
  if (committed <= (64u << 10)) return 1;
  return 2;
}

void count_committed(int64_t delta) {
  uint64_t now = g_committed.fetch_add(uint64_t(delta), std::memory_order_relaxed) + uint64_t(delta);
  if (delta > 0) {
    uint64_t peak = g_peak_committed.load(std::memory_order_relaxed);
    while (now > peak && !g_peak_committed.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
}

// Gives back everything the span (or run head) has committed.
void decommit_span(Span* s) { span_trim(s, 0); }

// Pushes a FREE run (or single span) that is already accounted for: a single
// span onto `single` if given (a stack of its commit tier), else onto its
// tier's stack of the calling CPU.
void push_free(Span* head, uint32_t len, SpanStack* single = nullptr) {
  head->run_len.store(len, std::memory_order_relaxed);
  g_retained.fetch_add(head->committed.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_pooled_spans.fetch_add(len, std::memory_order_relaxed);
  uint32_t i = span_index(head);
  const uint64_t c = head->committed.load(std::memory_order_relaxed);
  if (len == 1) {
    (single != nullptr ? *single : g_single[tier_of(c)][home_stack()]).push(i);
    return;
  }
  const unsigned f = arena_frontier(i);
  g_pooled_runs[f].fetch_add(1, std::memory_order_relaxed);
  if (len <= kExactRuns)
    g_exact[f][c != 0][len].push(i);
  else
    g_log[f][c != 0][floor_log2(len)].push(i);
}

// Puts a large block's run, with pages, in the calling CPU's last-run slot;
// the run it displaces goes to the stacks. Returns whether this give is one
// in kSlotGivesPerLook into the slot, which looks at the decay's clock.
bool push_last(Span* head, uint32_t len) {
  head->run_len.store(len, std::memory_order_relaxed);
  const unsigned k = home_stack();
  const uint32_t old = g_last_run[k].exchange(span_index(head) + 1, std::memory_order_acq_rel);
  if (old != 0) {
    Span* o = span_at(old - 1);
    pool_give(o, o->run_len.load(std::memory_order_relaxed));  // stamped and within the bound
  }
  const uint32_t gives = g_slot_gives[k].load(std::memory_order_relaxed) + 1;
  g_slot_gives[k].store(gives, std::memory_order_relaxed);
  return gives % kSlotGivesPerLook == 0;
}

// Marks a popped span or run as taken out of the pool.
Span* taken(uint32_t index, uint32_t len) {
  Span* s = span_at(index);
  g_retained.fetch_sub(s->committed.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_pooled_spans.fetch_sub(len, std::memory_order_relaxed);
  if (len >= 2) g_pooled_runs[arena_frontier(index)].fetch_sub(1, std::memory_order_relaxed);
  return s;
}

// Whether frontier f's run stacks may hold a run (g_pooled_runs).
bool has_runs(unsigned f) { return g_pooled_runs[f].load(std::memory_order_relaxed) > 0; }

// The calling CPU's last-run slot's run if it is n spans long, taken out of
// the pool; nullptr otherwise. The slot is emptied only for a run that looked
// n long (a descriptor is always readable; the length is read again once the
// run is the caller's): a take of another length leaves it with no locked
// instruction. A run of another length found after all (another thread filled
// the slot in between) goes back to the slot, or to the stacks if the slot was
// filled again meanwhile.
Span* take_last(uint32_t n) {
  std::atomic<uint32_t>& slot = g_last_run[home_stack()];
  const uint32_t seen = slot.load(std::memory_order_relaxed);
  if (seen == 0 || span_at(seen - 1)->run_len.load(std::memory_order_relaxed) != n) return nullptr;
  const uint32_t v = slot.exchange(0, std::memory_order_acq_rel);
  if (v == 0) return nullptr;
  Span* s = span_at(v - 1);
  const uint32_t len = s->run_len.load(std::memory_order_relaxed);
  if (len == n) return s;
  uint32_t empty = 0;
  if (!slot.compare_exchange_strong(empty, v, std::memory_order_acq_rel, std::memory_order_relaxed)) pool_give(s, len);
  return nullptr;
}

// Pushes the spans of a held piece of length m past its first n back, with
// their share of its pages (a prefix of them, as the pages were of the piece)
// and its stamp; the piece's own `committed` is the caller's to cut.
void push_rest(Span* head, uint32_t m, uint32_t n) {
  Span* rest = span_at(span_index(head) + n);
  rest->cls.store(uint16_t(kNoClass), std::memory_order_release);  // its pages are a prefix
  rest->block_size.store(head->block_size.load(std::memory_order_relaxed), std::memory_order_relaxed);  // pool_stamp
  const uint64_t c = head->committed.load(std::memory_order_relaxed), kept = uint64_t(n) << kVspanShift;
  rest->committed.store(c > kept ? c - kept : 0, std::memory_order_relaxed);
  push_free(rest, m - n);
}

// Keeps the first n spans of a popped run of length m and pushes the rest back.
Span* split(uint32_t index, uint32_t m, uint32_t n) {
  Span* head = taken(index, m);
  if (m > n) {
    push_rest(head, m, n);
    const uint64_t c = head->committed.load(std::memory_order_relaxed), kept = uint64_t(n) << kVspanShift;
    head->committed.store(c > kept ? kept : c, std::memory_order_relaxed);
  }
  head->run_len.store(n, std::memory_order_relaxed);
  return head;
}

// Leftover of a closed region: a free run that was never committed.
void give_leftover(uint32_t index, uint32_t len) {
  while (len > 0) {
    uint32_t piece = len > (1u << (kLogRuns - 1)) ? (1u << (kLogRuns - 1)) : len;
    Span* s = span_at(index);
    s->committed.store(0, std::memory_order_relaxed);
    push_free(s, piece);
    index += piece;
    len -= piece;
  }
}

constexpr unsigned kAllFrontiers = (1u << kFrontiers) - 1;
// Calls visit on every stack of single spans from commit tier first_tier up,
// and of runs (only the warm ones if first_tier > 0) of the frontiers in the
// mask `frontiers` (bit f for frontier f).
template <class F>
void for_each_stack(unsigned first_tier, F visit, unsigned frontiers = kAllFrontiers) {
  for (unsigned t = first_tier; t < kTiers; t++)
    for (auto& st : g_single[t]) visit(st);
  for (unsigned f = 0; f < kFrontiers; f++) {
    if ((frontiers >> f & 1) == 0) continue;
    for (unsigned w = first_tier > 0 ? 1 : 0; w < kRunSets; w++) {
      for (auto& st : g_exact[f][w]) visit(st);
      for (auto& st : g_log[f][w]) visit(st);
    }
  }
}

// Puts held span i at the head of `chain`, publishing the new head if
// `publish`; returns it.
uint32_t link_held(uint32_t i, uint32_t chain, std::atomic<uint32_t>* publish) {
  span_at(i)->pool_next.store(chain, std::memory_order_relaxed);
  if (publish != nullptr) publish->store(i, std::memory_order_relaxed);
  return i;
}
// Pops every span and run of st, counts each as taken, and chains their heads
// through pool_next onto `chain` (they are the caller's alone until pushed
// again; other threads may pop and push meanwhile). Returns the chain's head.
uint32_t grab(SpanStack& st, uint32_t chain, std::atomic<uint32_t>* publish) {
  for (uint32_t i = st.pop(); i != kNoIndex; i = st.pop()) {
    taken(i, span_at(i)->run_len.load(std::memory_order_relaxed));
    chain = link_held(i, chain, publish);
  }
  return chain;
}

// Empties every last-run slot (a slot's run was never counted as pooled: it
// is stamped instead, its age in the pool starting now) onto `chain`, as grab does.
uint32_t grab_last_runs(uint32_t chain, std::atomic<uint32_t>* publish) {
  for (auto& slot : g_last_run) {  // warm runs only
    const uint32_t v = slot.load(std::memory_order_relaxed) != 0 ? slot.exchange(0, std::memory_order_acq_rel) : 0;
    if (v == 0) continue;  // not counted as pooled: nothing to count as taken
    set_pool_stamp(span_at(v - 1), now_ms());
    chain = link_held(v - 1, chain, publish);
  }
  return chain;
}

// Pops every free span and run from every stack (of single spans, from commit
// tier first_tier up; of runs, only warm ones if first_tier > 0, and only the
// frontiers in the mask `frontiers`) and every last-run slot into one chain
// (grab). Returns the chain's head.
uint32_t take_all(unsigned first_tier = 0, unsigned frontiers = kAllFrontiers) {
  uint32_t chain = grab_last_runs(kNoIndex, nullptr);
  for_each_stack(
      first_tier, [&chain](SpanStack& st) { chain = grab(st, chain, nullptr); }, frontiers);
  return chain;
}

// Gathers every free span and run from every stack and pushes them back as
// maximal contiguous runs, so that spans freed one by one can serve a long run
// instead of new address space. A merge for a single span or a short run (the
// spans' frontier, arena.h) leaves the big blocks' frontier's runs alone
// unless `force`: each is a big block's old run with its pages where that
// block had them, which the next block of its length takes as it is; joined,
// with the gaps between their pages committed, they served the next
// generation of big blocks at other offsets, which faulted in the gaps while
// the old pages beside them stayed (clamscan's buffers: peak RSS 86 -> 79 MiB,
// docs/design.md). Lock-free: each pop and push is; the rest is
// local work on spans this thread holds. A merged run's committed pages must
// be a prefix: it keeps those of its first piece, extended by each later piece
// that follows a fully committed part. A piece with pages after a gap keeps
// them too: the gap is committed (on Linux bookkeeping only: its pages stay
// unbacked until touched) when it is no bigger than those pages, else the run
// ends before the piece. With `force` (no address space is left
// for a new region) every piece joins and pages that are not a prefix are
// given back instead. If no stretch is n long, one that ends where a current
// region's fresh vspans start (if any; one per frontier, arena.h) grows to n
// over them (arena_extend): a heap's top. Returns true if a run of >= n spans exists
// afterwards.
// A gathered span's `offset` holds the gathering call's token, so two threads
// coalescing at the same time each see only the spans they gathered
// themselves, and a merge sees a neighbour as gathered only if it is. Tokens
// are odd: every real offset is a multiple of kMinAlign (a small span's is
// the low 32 bits of its block 0's address, a large block's its start in its
// run), and a FREE span keeps the offset of its last use. (With the top
// bit as the only mark, the 2^18-th merge and later could see an in-use small
// span as gathered where its block 0's address ended in that token.)
static_assert(kMinAlign % 2 == 0, "merge tokens are odd");
std::atomic<uint32_t> g_coalesce_calls{0};
bool coalesce(uint32_t n, bool force) {
  const uint32_t kGathered = 0x80000001u | (g_coalesce_calls.fetch_add(1, std::memory_order_relaxed) << 1);
  const unsigned frontiers = force || frontier_of(n) == kFrontierBigRuns ? kAllFrontiers : 1u << kFrontierSpans;
  uint32_t chain = take_all(0, frontiers);
  for (uint32_t h = chain; h != kNoIndex; h = span_at(h)->pool_next.load(std::memory_order_relaxed)) {
    uint32_t len = span_at(h)->run_len.load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < len; k++) span_at(h + k)->offset.store(kGathered, std::memory_order_relaxed);
  }
  auto gathered = [kGathered](uint32_t i) {
    return span_at(i)->offset.load(std::memory_order_relaxed) == kGathered;
  };
  uint32_t stretches = kNoIndex;
  const uint64_t now = now_ms();
  // Makes [first, first + len) one free run, its pages a prefix, with the
  // time stamp of the newest piece whose pages it keeps (the run's head may
  // have come in without pages, its stamp from an earlier use).
  auto settle = [&](uint32_t first, uint32_t len) {
    uint64_t prefix = 0;  // committed bytes from the run's base on, without a gap
    const uintptr_t base = span_base(span_at(first));
    uint64_t youngest = UINT64_MAX;  // the least age of a piece whose pages the run keeps
    auto keeps_pages_of = [&](const Span* piece) {
      const uint64_t age = pool_age_ms(piece, now);
      if (age < youngest) youngest = age;
    };
    for (uint32_t k = 0; k < len && len > 1; k++) {  // a single span keeps its pages
      Span* piece = span_at(first + k);
      piece->cls.store(uint16_t(kNoClass), std::memory_order_release);
      uint64_t c = piece->committed.load(std::memory_order_relaxed);
      const uint64_t at = uint64_t(k) << kVspanShift;
      if (c != 0 && k > 0 && prefix < at && !force) {
        // A gap before pages worth keeping (the cut below saw to that): commit it.
        if (os::commit(reinterpret_cast<void*>(base + prefix), at - prefix)) {
          count_committed(int64_t(at - prefix));
          telemetry_event(FWT_EV_COMMIT, first, base + prefix, at - prefix);
          prefix = at;
        }
      }
      if (k == 0) {
        prefix = c;
        if (c != 0) keeps_pages_of(piece);
      } else if (c != 0 && prefix == at) {
        prefix += c;  // everything before it is committed: its pages extend the prefix
        piece->committed.store(0, std::memory_order_relaxed);
        keeps_pages_of(piece);
      } else {
        decommit_span(piece);  // after a gap: not part of the prefix
      }
    }
    if (len > 1) span_at(first)->committed.store(prefix, std::memory_order_relaxed);
    if (len > 1 && youngest != UINT64_MAX) set_pool_stamp(span_at(first), now - youngest);
    span_at(first)->run_len.store(len, std::memory_order_relaxed);
    span_at(first)->large_size.store(stretches, std::memory_order_relaxed);
    stretches = first;
  };
  // Every stretch starts at some gathered head: find the starts, measure, unmark, cut.
  for (uint32_t h = chain; h != kNoIndex; h = span_at(h)->pool_next.load(std::memory_order_relaxed)) {
    if (!gathered(h) || (h % kVspansPerRegion != 0 && gathered(h - 1))) continue;
    uint32_t len = 0;
    while (len < kVspansPerRegion && (len == 0 || (h + len) % kVspansPerRegion != 0) && gathered(h + len)) len++;
    for (uint32_t k = 0; k < len; k++) span_at(h + k)->offset.store(0, std::memory_order_relaxed);
    uint32_t start = 0;
    uint64_t prefix = 0;  // as settle will count it, for [start, k)
    for (uint32_t k = 0; k < len && !force; k++) {
      Span* piece = span_at(h + k);
      uint64_t c = piece->committed.load(std::memory_order_relaxed);
      if (c == 0) continue;
      const uint64_t at = uint64_t(k - start) << kVspanShift;
      if (k > start && at - prefix > c) {
        settle(h + start, k - start);  // its pages would be lost in the run so far: cut before it
        start = k;
        prefix = 0;
      }
      prefix = (k == start ? 0 : uint64_t(k - start) << kVspanShift) + c;  // a gap before it is filled
    }
    if (start < len) settle(h + start, len - start);
  }
  auto next_stretch = [](uint32_t i) { return uint32_t(span_at(i)->large_size.load(std::memory_order_relaxed)); };
  bool found = false;
  for (uint32_t i = stretches; i != kNoIndex && !found; i = next_stretch(i))
    found = span_at(i)->run_len.load(std::memory_order_relaxed) >= n;
  // None long enough: a stretch that ends where a current region's fresh
  // vspans start (at most one per frontier) grows in place to n, as a heap's top
  // does, so that its pages serve the block instead of a fresh run's faults.
  for (uint32_t i = stretches; i != kNoIndex && !found; i = next_stretch(i)) {
    const uint32_t len = span_at(i)->run_len.load(std::memory_order_relaxed);
    if (arena_extend(i + len, n - len)) {
      span_at(i)->run_len.store(n, std::memory_order_relaxed);
      found = true;
    }
  }
  while (stretches != kNoIndex) {
    Span* s = span_at(stretches);
    stretches = next_stretch(stretches);
    push_free(s, s->run_len.load(std::memory_order_relaxed));
  }
  return found;
}

// Bytes the pool may keep committed: FREEWAY_RETAIN_MB, or as many as the
// heap has had committed in use (outside the pool) at its highest within the
// last FREEWAY_DECAY_MS, if that is more: a program that frees a generation of
// big blocks is about to allocate the next, so the bound must not fall with
// the frees. What is kept goes back after FREEWAY_DECAY_MS unused anyway; this
// bounds it meanwhile (so the pool holds at most about what the heap recently
// used). The high-water mark is sampled at each give (`now` in ms); a stale
// one is replaced by the current figure. Races between gives lose a sample at
// worst.
std::atomic<uint64_t> g_in_use_high{0};     // bytes
std::atomic<uint64_t> g_in_use_high_at{0};  // ms
uint64_t retain_bound(uint64_t now) {
  uint64_t base = uint64_t(option(Option::retain_mb)) << 20;
  uint64_t committed = g_committed.load(std::memory_order_relaxed), kept = g_retained.load(std::memory_order_relaxed);
  uint64_t in_use = committed > kept ? committed - kept : 0;
  uint64_t high = g_in_use_high.load(std::memory_order_relaxed);
  if (in_use >= high || now - g_in_use_high_at.load(std::memory_order_relaxed) > decay_ms()) {
    g_in_use_high.store(in_use, std::memory_order_relaxed);
    g_in_use_high_at.store(now, std::memory_order_relaxed);
    high = in_use;
  }
  return high > base ? high : base;
}

// The bound raised to a cycle's footprint. A program that runs the same cycle
// again and again (a buffer grown by realloc, then freed; a batch of blocks
// built and dropped) can touch more pages in a cycle than it ever has in use at
// once: the runs a growing buffer leaves behind hold more than its final size
// (grown to 16 MiB in 64 KiB steps, 35.8 MiB in all). Bounded by retain_bound()
// alone, the pool gave back, at each cycle's end, pages the next cycle faulted
// in again (3,700 faults a cycle there). So a give past that bound asks whether
// the bound's last pass was faulted back: if the heap has committed at least
// half of what that pass gave back since (g_committed rose from where the pass
// left it), within FREEWAY_DECAY_MS of it, the pages are a cycle's, and the
// bound becomes the heap's committed bytes now (its footprint), for
// FREEWAY_DECAY_MS after the last give that needed it. A footprint needs a
// pass that the program then faulted back; once it holds, it follows the
// committed bytes: the evidence shows partway through a cycle, whose rest
// commits more (and runs placed apart from the first cycle's commit more
// again), so a footprint fixed at the sample had a later give pass it and
// give back pages the next cycle faulted in again (24 MiB of the test's 64,
// in about one run in twelve). A program that frees a generation of blocks
// and allocates nothing shows no rise, and its pool is bounded as before; and
// what any cycle leaves unused for FREEWAY_DECAY_MS goes back with the decay
// all the same. The figures are samples (relaxed, unordered among gives): a
// lost one costs a pass at worst.
std::atomic<uint64_t> g_bound_gave{0};            // bytes the bound's last pass gave back, 0 once used
std::atomic<uint64_t> g_bound_gave_at{0};         // ms
std::atomic<uint64_t> g_committed_after_pass{0};  // g_committed when that pass ended
std::atomic<uint64_t> g_footprint{0};             // bytes
std::atomic<uint64_t> g_footprint_at{0};          // ms: the last give it held

// The bound for a give at `now` that takes the retained bytes to `kept`:
// retain_bound(), or the footprint of a cycle if that is more.
uint64_t give_bound(uint64_t now, uint64_t kept, uint64_t delay) {
  const uint64_t bound = retain_bound(now);
  if (kept <= bound) return bound;
  uint64_t footprint = 0;
  const uint64_t committed = g_committed.load(std::memory_order_relaxed);
  const uint64_t at = g_footprint_at.load(std::memory_order_relaxed);
  if (now - at <= delay) {
    footprint = g_footprint.load(std::memory_order_relaxed);
    if (kept <= footprint) {
      if (at != now) g_footprint_at.store(now, std::memory_order_relaxed);  // a store per clock tick at most
      return footprint;
    }
    if (footprint != 0 && kept <= committed) {  // the cycle committed more since the sample
      g_footprint.store(committed, std::memory_order_relaxed);
      g_footprint_at.store(now, std::memory_order_relaxed);
      return committed;
    }
  }
  const uint64_t gave = g_bound_gave.load(std::memory_order_relaxed);
  if (gave != 0 && now - g_bound_gave_at.load(std::memory_order_relaxed) <= delay &&
      committed >= g_committed_after_pass.load(std::memory_order_relaxed) + gave / 2 && kept <= committed) {
    g_bound_gave.store(0, std::memory_order_relaxed);
    g_footprint.store(committed, std::memory_order_relaxed);
    g_footprint_at.store(now, std::memory_order_relaxed);
    return committed;
  }
  return footprint > bound ? footprint : bound;
}

// One purge pass at a time (a pass that finds another running gives up).
std::atomic<bool> g_purging{false};
// The spans a pass holds (one stack's at a time) not yet pushed back, as a
// chain through pool_next (grab publishes each as it pops it; the push loop
// moves past a span before pushing it). A fork's child, where the pass's
// thread does not exist, pushes them back and clears g_purging
// (pool_after_fork_child); otherwise it would lose the spans the pass held and
// never purge again. At most the one span being moved is lost, as with a
// thread killed there.
std::atomic<uint32_t> g_purge_rest{kNoIndex};

// A purge pass's look at the spans and runs it popped off one stack (`chain`,
// through pool_next, published in g_purge_rest): `visit` sees each one with
// pages (and may give them back); then each goes back, one that kept its
// pages to the stack it came from (`from`, for a single span), so that a pass
// looks at no span twice (a run's stack follows from its length and pages:
// the same). g_purge_rest, published before each push, lets a fork's child
// push back what a pass held (pool_after_fork_child). The caller holds
// g_purging.
template <class Visit>
void visit_held(uint32_t chain, SpanStack* from, Visit& visit) {
  for (uint32_t i = chain; i != kNoIndex; i = span_at(i)->pool_next.load(std::memory_order_relaxed))
    if (span_at(i)->committed.load(std::memory_order_relaxed) != 0) visit(span_at(i));
  while (chain != kNoIndex) {
    Span* s = span_at(chain);
    chain = s->pool_next.load(std::memory_order_relaxed);
    g_purge_rest.store(chain, std::memory_order_relaxed);  // before s goes back: never pushed twice
    const bool kept = s->committed.load(std::memory_order_relaxed) != 0;
    push_free(s, s->run_len.load(std::memory_order_relaxed), kept ? from : nullptr);
  }
}

// Gives back what span or run head s (held) commits past its first `keep`
// bytes, taken off *need (down to 0) and added to *gave: the one count of
// purge's gives and of the pays for fresh pages.
void trim_counted(Span* s, uint64_t keep, uint64_t* need, uint64_t* gave) {
  const uint64_t c = s->committed.load(std::memory_order_relaxed);
  if (keep >= c) return;
  *need = *need > c - keep ? *need - (c - keep) : 0;
  *gave += c - keep;
  span_trim(s, keep);
}

// The last of the pages of span or run head s (held), up to *need bytes of
// them (a run's pages stay a prefix), given back and counted (trim_counted):
// what each pay for fresh pages takes from a run.
void trim_tail_counted(Span* s, uint64_t* need, uint64_t* gave) {
  const uint64_t c = s->committed.load(std::memory_order_relaxed);
  trim_counted(s, c > *need ? c - *need : 0, need, gave);
}

// Pages by age, in powers of two (ms): bucket b holds ages in [2^(b-1), 2^b).
constexpr unsigned kAgeBuckets = 33;
unsigned age_bucket(uint64_t age) { return age == 0 ? 0u : 32u - unsigned(__builtin_clz(uint32_t(age))); }
// The lowest bucket from which on the oldest buckets, taken whole, cover
// `need` bytes (the last of them in part): what goes back oldest first.
unsigned oldest_cut(const uint64_t (&in_bucket)[kAgeBuckets], uint64_t need) {
  unsigned cut = kAgeBuckets;
  for (uint64_t sum = 0; need > sum && cut > 0;) sum += in_bucket[--cut];
  return cut;
}

// Gives back the pages of every pooled span and run that came in with them
// `delay` ms or more before `now`, and the tails of younger runs (taper,
// below; `prev`: when the previous pass ran), and then, oldest first, of as
// many more as it takes to give back `need` bytes in all; returns the bytes it
// gave back.
// Pops what may hold pages (not tier 0) and pushes it back. The caller holds
// g_purging.
uint64_t purge(uint64_t now, uint64_t delay, uint64_t need, uint64_t prev) {
  uint64_t gave = 0;
  uint64_t in_bucket[kAgeBuckets] = {};
  // Gives back what s holds past its first `keep` bytes, counted.
  auto give_back = [&need, &gave](Span* s, uint64_t keep = 0) { trim_counted(s, keep, &need, &gave); };
  // One stack at a time: its spans are out of the pool only while this pass
  // looks at them, so other threads find the rest. (Holding the whole pool
  // while it gave back pages, a pass made every take meanwhile reserve and
  // commit fresh vspans: mimalloc's test-stress with 128 threads took 1,224
  // of its 3,739 fresh spans during passes, and its committed peak doubled.)
  // Each stack's spans are looked at and pushed back by visit_held; `done`
  // ends a pass early (before the next stack).
  auto pass = [](auto visit, auto done) {
    // tier 0 holds no pages; the last-run slots' runs last, so that the
    // stacks they go to are not looked at again
    for_each_stack(1, [&](SpanStack& st) {
      if (!done()) visit_held(grab(st, kNoIndex, &g_purge_rest), &st, visit);
    });
    if (!done()) visit_held(grab_last_runs(kNoIndex, &g_purge_rest), nullptr, visit);
  };
  // The tail of a run younger than the delay: it keeps (delay - age) / delay
  // of the pages it came in with, a share that falls as it waits (jemalloc's
  // decay is a curve of this kind). Its age at the previous pass (`prev`)
  // says what share it kept then, so the share of what it holds now follows
  // without a record of what it came in with. Single spans keep their pages
  // whole until the delay (their stacks are by pages: span_pool.h, tiers).
  const uint64_t since = now - prev;
  auto taper = [&give_back, delay, since](Span* s, uint64_t age) {
    if (s->run_len.load(std::memory_order_relaxed) < 2) return;
    const uint64_t c = s->committed.load(std::memory_order_relaxed);
    const uint64_t before = age > since ? age - since : 0;  // its age at the previous pass
    const double share = double(delay - age) / double(delay - before);
    const uint64_t page = os::page_size();
    give_back(s, (uint64_t(double(c) * share) + page - 1) / page * page);
  };
  // Everything that waited longer than the delay, the runs' tails, and the
  // ages of the rest.
  pass(
      [&](Span* s) {
        const uint64_t age = pool_age_ms(s, now);
        if (age >= delay) {
          give_back(s);
          return;
        }
        taper(s, age);
        in_bucket[age_bucket(age)] += s->committed.load(std::memory_order_relaxed);
      },
      [] { return false; });
  if (need == 0) return gave;
  // The oldest buckets whole while they do not cover `need`, then the next one
  // in part (a span given back since the first look is age 0, the youngest).
  const unsigned cut = oldest_cut(in_bucket, need);
  pass(
      [&](Span* s) {
        if (need > 0 && age_bucket(pool_age_ms(s, now)) >= cut) give_back(s);
      },
      [&need] { return need == 0; });
  return gave;
}

bool claim_purge() { return !g_purging.exchange(true, std::memory_order_acquire); }
void end_purge() { g_purging.store(false, std::memory_order_release); }

// A purge pass for a decay delay of `delay` (not 0) ms at time `now`, if
// none ran in the last quarter of it.
void maybe_purge_at(uint64_t now, uint64_t delay) {
  uint64_t at = g_purged_at.load(std::memory_order_relaxed);
  if (now - at < delay / 4 + 1 || !g_purged_at.compare_exchange_strong(at, now, std::memory_order_relaxed)) return;
  if (!claim_purge()) return;
  purge(now, delay, 0, at);
  end_purge();
}

// The same, reading the clock only when the pool keeps pages and decay is on.
void maybe_purge() {
  uint64_t delay = decay_ms();
  if (delay == 0 || g_retained.load(std::memory_order_relaxed) == 0) return;
  maybe_purge_at(now_ms(), delay);
}

Span* fresh(uint32_t n) {
  if (!arena_init()) return nullptr;
  uint32_t left = 0, left_len = 0;
  uint32_t i = arena_fresh_vspans(n, &left, &left_len);
  if (left_len) give_leftover(left, left_len);
  if (i == kNoIndex) return nullptr;
  Span* s = span_at(i);
  s->committed.store(0, std::memory_order_relaxed);
  s->run_len.store(n, std::memory_order_relaxed);
  return s;
}

}  // namespace

// Whether pooled run i is followed by free vspans in its region: pooled ones,
// with which a merge joins it, or fresh ones, over which it grows in place
// (arena_extend). A hint, read without holding the neighbour (relaxed: it
// orders nothing); the region's slice covers `end` unless `end` starts the next
// region.
static bool free_above(uint32_t i) {
  const uint32_t end = i + span_at(i)->run_len.load(std::memory_order_relaxed);
  return end % kVspansPerRegion != 0 &&
         Anchor::unpack(span_at(end)->anchor.load(std::memory_order_relaxed)).state == kFree;
}

// A pay for fresh pages (pool_pay_fresh, pool_pay_idle) runs as a purge pass
// does, holding its claim: it skips the work when another pass runs (a pass
// holds the stacks it looks at), when the pool holds no pages or decay is off,
// and while a cycle's footprint holds the bound (give_bound: the program has
// faulted back pages a pass gave back, so it reuses what it keeps). True
// when it holds the claim.
static bool claim_pay() {
  const uint64_t delay = decay_ms();
  if (g_retained.load(std::memory_order_relaxed) == 0 || delay == 0) return false;
  if (g_footprint.load(std::memory_order_relaxed) != 0 &&
      now_ms() - g_footprint_at.load(std::memory_order_relaxed) <= delay)
    return false;
  return claim_purge();
}

// The pays' look at big blocks' runs (pay_with_stranded, pay_with_idle_big):
// visit_held on the stacks of frontier f's warm runs longer than
// kBigRunVspans that may hold runs shorter than `below` (exact lengths from
// kBigRunVspans + 1, then power-of-two levels from 64, which may also hold
// longer ones), until done() before a stack. The caller holds g_purging.
static_assert(kBigRunVspans < kExactRuns, "the big runs' stacks: exact lengths past kBigRunVspans, then g_log");
template <class Visit, class Done>
static void visit_warm_big_runs(unsigned f, uint32_t below, Visit& visit, Done done) {
  for (uint32_t m = kBigRunVspans + 1; m <= kExactRuns && m < below && !done(); m++)
    visit_held(grab(g_exact[f][1][m], kNoIndex, &g_purge_rest), nullptr, visit);
  for (unsigned k = 6; k < kLogRuns && (1u << k) < below && !done(); k++)
    visit_held(grab(g_log[f][1][k], kNoIndex, &g_purge_rest), nullptr, visit);
}

// Stranded pages paid away and faulted back. A program that churns big
// blocks of random sizes at a steady footprint (mimalloc-bench's malloc-large:
// 20 live zeroed buffers of 5-25 MiB, one replaced at random) takes the runs
// it strands again for its next blocks no longer than they, and faults in
// again the pages a pay gave back: 272,000 page faults instead of 147,500, a
// tenth more time, for 5% less peak RSS (docs/benchmarks.md, Stop 105). So a
// pay marks each run it trims with the time (kPaidMark in large_size, which a
// pooled run's head uses otherwise only within a merge, as a stretch link; no
// stretch link, block size or own-list head has bit 63). A merge's link
// replaces the mark, and a refault then goes unseen: the pay goes on. A big
// take that commits pages in a run so marked, within FREEWAY_DECAY_MS of the
// pay, has faulted paid pages back: the program reuses what it strands, and
// pays with stranded runs wait until FREEWAY_DECAY_MS after the last such take. What it strands still goes back
// with the decay if no block takes it. This is the working-set rule of the
// bound's footprint (give_bound), applied to the pay's own gives: a program
// that strands a run and goes on to bigger blocks (the 40/50 MiB case, a
// 40/50/60 MiB cycle) shows no refault and keeps the pay. malloc-large took
// 166,000-176,000 faults and 0.86-0.93 of the time with it, four random live
// buffers of 5-60 MiB 0.86-0.92 of the time at the same peak RSS. The cost:
// an R script of growing vectors, sorts and matrix products, which faults
// paid pages back too, peaked at 491-504 MiB instead of 466-472 (518 without
// the pay, mimalloc 478; docs/benchmarks.md, Stop 106).
constexpr uint64_t kPaidMark = uint64_t(1) << 63;
static std::atomic<uint64_t> g_paid_refault_at{0};  // ms + 1 of the last refault; 0: none

// Whether pays with stranded runs wait (above) at `now`, noting a refault
// first if `head`, whose run has just committed fresh pages, was paid away
// lately.
static bool stranded_pays_wait(const Span* head, uint64_t now) {
  const uint64_t delay = decay_ms();
  const uint64_t mark = head->large_size.load(std::memory_order_relaxed);
  if ((mark & kPaidMark) != 0 && uint32_t(now) - uint32_t(mark) <= delay) {
    g_paid_refault_at.store(now + 1, std::memory_order_relaxed);
    return true;
  }
  const uint64_t at = g_paid_refault_at.load(std::memory_order_relaxed);
  return at != 0 && now + 1 - at <= delay;
}

// Stranded pages (span_pool.h, pool_pay_fresh): of the warm runs of a big
// block's length (more than kBigRunVspans) but shorter than n, in either
// frontier (a big block takes the spans' frontier's runs too when its own has
// none), those below a block in use (not free_above) give back the last of
// their pages (a run's pages stay a prefix), until `need` bytes are given back
// or none is left (claim_pay's cases do nothing), and are marked as paid
// (kPaidMark, above) at `now`. Returns the bytes given back.
static uint64_t pay_with_stranded(uint32_t n, uint64_t need, uint64_t now) {
  if (!claim_pay()) return 0;
  uint64_t gave = 0;
  const uint64_t mark = kPaidMark | uint32_t(now);
  auto visit = [n, mark, &need, &gave](Span* s) {
    if (need == 0 || s->run_len.load(std::memory_order_relaxed) >= n || free_above(span_index(s))) return;
    const uint64_t before = gave;
    trim_tail_counted(s, &need, &gave);
    if (gave != before) s->large_size.store(mark, std::memory_order_relaxed);
  };
  for (unsigned f = 0; f < kFrontiers && need > 0; f++)
    if (has_runs(f)) visit_warm_big_runs(f, n, visit, [&need] { return need == 0; });
  end_purge();
  return gave;
}

// Fresh pages of small spans and of blocks of kBigRunVspans or fewer taken
// since the last big block's take from the pool, that big blocks' runs have
// not paid for (pay_with_idle_big), in bytes. Such a take sets it to 0
// (pool_take_run; a big block grown in place, or a huge one, does not).
std::atomic<uint64_t> g_idle_pay_owed{0};
// What they pay at once, and what must be faulted in with no big block taken
// meanwhile before a big blocks' run counts as idle: as much as the largest
// block that is not a big one.
constexpr uint64_t kIdlePayQuantum = kLastRunMax;

// Idle pages (span_pool.h, pool_pay_fresh). Counted: every page a small span
// (span_make_hot) or a block of kBigRunVspans or fewer (large_alloc) commits
// past what its span or run held, fresh vspans' and pooled pieces' without
// pages alike. Big blocks' warm runs are what a small take does not use: it
// splits the spans' frontier's runs before fresh vspans, and big blocks' runs
// below a block in use, but not those with free vspans above, which small
// blocks do not cut up (pool_take_span). Once the count comes to
// kIdlePayQuantum with no big block taken meanwhile, those runs give back as
// many bytes, the last of their pages: the runs in the oldest age buckets (by
// powers of two, as purge's bound pass) first, in stack order within the last
// bucket it reaches. claim_pay's cases drop what is owed. Why a big take
// starts the count again: a program that takes big blocks as it goes reuses
// those runs (2,000 buffers of 5-25 MiB, each with small blocks allocated
// while it lived, faulted in twice the pages when its small spans paid at any
// time). Returns the bytes given back.
static uint64_t pay_with_idle_big(uint64_t bytes) {
  if (!has_runs(kFrontierBigRuns) || g_retained.load(std::memory_order_relaxed) == 0) return 0;
  if (g_idle_pay_owed.fetch_add(bytes, std::memory_order_relaxed) + bytes < kIdlePayQuantum) return 0;
  uint64_t need = g_idle_pay_owed.exchange(0, std::memory_order_relaxed);
  if (need == 0 || !claim_pay()) return 0;
  const uint64_t now = now_ms();
  constexpr uint32_t kAnyLength = UINT32_MAX;
  uint64_t in_bucket[kAgeBuckets] = {};
  auto weigh = [now, &in_bucket](Span* s) {
    in_bucket[age_bucket(pool_age_ms(s, now))] += s->committed.load(std::memory_order_relaxed);
  };
  visit_warm_big_runs(kFrontierBigRuns, kAnyLength, weigh, [] { return false; });
  const unsigned cut = oldest_cut(in_bucket, need);
  uint64_t gave = 0;
  auto pay = [now, cut, &need, &gave](Span* s) {
    if (need > 0 && age_bucket(pool_age_ms(s, now)) >= cut) trim_tail_counted(s, &need, &gave);
  };
  visit_warm_big_runs(kFrontierBigRuns, kAnyLength, pay, [&need] { return need == 0; });
  end_purge();
  return gave;
}

uint64_t pool_pay_fresh(const Span* head, uint32_t n, uint64_t bytes) {
  if (n <= kBigRunVspans) return pay_with_idle_big(bytes);
  const uint64_t now = now_ms();  // one clock read for the look and the marks
  return stranded_pays_wait(head, now) ? 0 : pay_with_stranded(n, bytes, now);
}

// Single spans' pages (whole: a single span's stack is by its pages,
// span_pool.h) and the tail pages of the spans' frontier's short runs, until
// `need` bytes are given back: pages no big block can take (span_pool.h,
// pool_pay_idle). claim_pay's cases do nothing. Returns the bytes given back.
// (Paying with the oldest pages of the whole pool instead, a purge pass asked
// for that many bytes, gave back big blocks' runs that the next blocks took
// again: four random live buffers of 5-60 MiB took 6.5 times as long, with
// 1.35 M page faults instead of 158,000; docs/benchmarks.md, Stop 96.)
uint64_t pool_pay_idle(uint64_t need) {
  if (need == 0 || !claim_pay()) return 0;
  uint64_t gave = 0;
  auto visit = [&need, &gave](Span* s) {
    if (need == 0 || arena_frontier(span_index(s)) != kFrontierSpans) return;
    if (s->run_len.load(std::memory_order_relaxed) == 1)
      trim_counted(s, 0, &need, &gave);  // whole
    else
      trim_tail_counted(s, &need, &gave);
  };
  for (unsigned t = kTiers - 1; t > 0 && need > 0; t--)
    for (unsigned i = 0; i < kMaxPoolStacks && need > 0; i++)
      visit_held(grab(g_single[t][i], kNoIndex, &g_purge_rest), &g_single[t][i], visit);
  for (uint32_t m = 2; m <= kBigRunVspans && need > 0 && has_runs(kFrontierSpans); m++)
    visit_held(grab(g_exact[kFrontierSpans][1][m], kNoIndex, &g_purge_rest), nullptr, visit);
  end_purge();
  return gave;
}

// Pops up to five runs off the top of st and keeps the one that scores
// highest (score(i) < 0: not wanted), stopping at the first whose score
// reaches `enough`; pushes the others back, still counted as pooled. Returns
// the one kept (now taken off the stack), or kNoIndex if none was wanted.
template <class Score>
static uint32_t pick_from_top(SpanStack& st, uint64_t enough, Score score) {
  uint32_t held[4], nheld = 0, best = kNoIndex;
  int64_t best_score = -1;
  while (nheld < 4) {
    uint32_t i = st.pop();
    if (i == kNoIndex) break;
    const int64_t sc = score(i);
    if (sc > best_score) {
      if (best != kNoIndex) held[nheld++] = best;
      best = i;
      best_score = sc;
    } else {
      held[nheld++] = i;
    }
    if (best_score >= 0 && uint64_t(best_score) >= enough) break;
  }
  while (nheld > 0) st.push(held[--nheld]);
  return best;
}

// Pops a run off st; with spare, not one with free vspans above it
// (free_above): of the top few, the first that has none, the others pushed
// back (pick_from_top); kNoIndex if none of them.
static uint32_t pop_run(SpanStack& st, bool spare) {
  if (!spare) return st.pop();
  return pick_from_top(st, 0, [](uint32_t i) { return free_above(i) ? int64_t(-1) : int64_t(0); });
}

// A single span split off a run of frontier f's regions, the shortest first (a
// warm one if pages are wanted), runs longer than kExactRuns included: a freed
// large block of more than 16 MiB, or a closed region's leftover, is free
// address space like any other. With spare, not off a run with free vspans
// above it (free_above). nullptr if f's stacks hold no such run.
static Span* split_span_off(unsigned f, uint64_t want, bool spare) {
  if (!has_runs(f)) return nullptr;
  for (unsigned k = 0; k < kRunSets; k++) {
    const unsigned w = k == 0 ? first_run_set(want) : 1 - first_run_set(want);
    for (uint32_t m = 2; m <= kExactRuns; m++) {
      uint32_t i = pop_run(g_exact[f][w][m], spare);
      if (i != kNoIndex) return split(i, m, 1);
    }
    for (unsigned level = 0; level < kLogRuns; level++) {
      uint32_t i = pop_run(g_log[f][w][level], spare);
      if (i != kNoIndex) return split(i, span_at(i)->run_len.load(std::memory_order_relaxed), 1);
    }
  }
  return nullptr;
}

// A single span from the pool's stacks of single spans, else split off a run,
// the spans' frontier's first, then a big blocks' run below a block in use
// (not free_above); nullptr if they hold none.
static Span* take_pooled_span(uint64_t want) {
  unsigned n = stack_count();
  unsigned home = home_stack();
  // The matching tier first, then clean spans, then the others from the
  // nearest: smaller ones commit more (free on Linux), bigger ones the caller trims.
  unsigned t = tier_of(want);
  static constexpr unsigned kOrder[kTiers][kTiers] = {{0, 1, 2}, {1, 0, 2}, {2, 0, 1}};
  for (unsigned tier : kOrder[t]) {
    for (unsigned k = 0; k < n; k++) {
      uint32_t i = g_single[tier][(home + k) % n].pop();
      if (i != kNoIndex) return taken(i, 1);
    }
  }
  // No single span: split one off a run.
  if (Span* s = split_span_off(kFrontierSpans, want, false)) return s;
  return split_span_off(kFrontierBigRuns, want, true);
}

Span* pool_take_span(uint64_t want) {
  maybe_purge();  // the decay's clock, as for a last-run give (give, below)
  // What the pool holds before fresh address space, except big blocks' runs
  // with free vspans above them; when there is no address space left (an
  // address-space limit), those too, then whatever is free merged, and look
  // again, as pool_take_run does.
  if (Span* s = take_pooled_span(want)) return s;
  if (Span* s = fresh(1)) return s;
  if (Span* s = split_span_off(kFrontierBigRuns, want, false)) return s;
  if (!coalesce(1, true)) return nullptr;
  if (Span* s = take_pooled_span(want)) return s;
  return split_span_off(kFrontierBigRuns, want, false);
}

// Takes popped run i for a take of n, keeping all of it when the rest is
// at most half of n (the next run class up: run classes are 1.33 to 1.5
// apart, large.cpp), else n, the rest split off and pushed back. Such a rest
// is shorter than any block of n's class or the one below it (from n = 3 on;
// at n = 2 it is one span, which a small span may use), so split off it
// waits in the pool until its neighbours come back and a merge joins them,
// and the blocks after it find neither the whole run nor a run of the rest's
// length, and take fresh vspans: `sizesweep -t 2 -x 20 -c 300` (1-4 MiB)
// faulted in 10-15% more pages than with whole runs kept. Kept whole, the rest
// is address space in the block's run (only the block's pages are committed,
// as for its run class), and the run goes back whole with it.
// Split all the same: a run whose pages the block would trim (reuse_trims:
// the rest takes its share of them to the pool instead of giving them back);
// under an address-space cap, as run classes do; a run longer than a large
// block's longest, so that no large block has room past kLargeMax to grow
// into in place (large_resize_in_place); and a run of the other kind
// (frontier_of: a block that would not come from the big blocks' area does
// not take a big block's run length).
static Span* take_whole_or_split(uint32_t i, uint32_t n, uint64_t want) {
  const Span* s = span_at(i);
  const uint32_t m = s->run_len.load(std::memory_order_relaxed);
  const bool whole = m - n <= n / 2 && m <= kLargeMaxVspans && frontier_of(m) == frontier_of(n) &&
                     !reuse_trims(s->committed.load(std::memory_order_relaxed), want) && !arena_capped();
  return split(i, m, whole ? m : n);
}

// A run of at least n >= 2 spans from frontier f's run set w, whole or split
// to n (take_whole_or_split); nullptr if none.
static Span* take_run_from(unsigned f, unsigned w, uint32_t n, uint64_t want, bool spare = false) {
  if (!has_runs(f)) return nullptr;
  auto spared = [spare](uint32_t i) { return spare && free_above(i); };
  if (n <= kExactRuns) {
    for (uint32_t m = n; m <= kExactRuns; m++) {
      // Of the top few runs of this length, the one with `want` bytes
      // committed (no page faults ahead) and the fewest more, which leaves
      // the runs with more pages to bigger blocks; else the one with the
      // most. One within 64 KiB of `want` ends the look.
      constexpr int64_t kCovers = int64_t(1) << 60;
      uint32_t best = pick_from_top(g_exact[f][w][m], uint64_t(kCovers - (64 << 10)), [want, spared](uint32_t i) {
        if (spared(i)) return int64_t(-1);
        const uint64_t c = span_at(i)->committed.load(std::memory_order_relaxed);
        return c >= want ? kCovers - int64_t(c - want) : int64_t(c);
      });
      if (best != kNoIndex) return take_whole_or_split(best, n, want);
    }
  }
  // Runs in g_log[k] are at least 2^k long: every run there fits from the
  // first k with 2^k >= n on. The level below holds runs of [2^k', 2^(k'+1))
  // with 2^k' < n, of which some may fit (run classes make 1.5 x 2^k' common):
  // look at its top few first.
  unsigned first = n <= 64 ? 6 : floor_log2(n - 1) + 1;
  if (n > 64 && floor_log2(n) < first) {
    uint32_t found = pick_from_top(g_log[f][w][floor_log2(n)], 1, [n, spared](uint32_t i) {
      return span_at(i)->run_len.load(std::memory_order_relaxed) >= n && !spared(i) ? int64_t(1) : int64_t(-1);
    });
    if (found != kNoIndex) return take_whole_or_split(found, n, want);
  }
  for (unsigned k = first; k < kLogRuns; k++) {
    uint32_t i = pop_run(g_log[f][w][k], spare);
    if (i != kNoIndex) return take_whole_or_split(i, n, want);
  }
  return nullptr;
}

// take_run_from for a take of n from run set w, over what it uses before
// fresh address space: a big block's (n > kBigRunVspans) own frontier's runs,
// then the other's; a shorter run's own, then the big blocks' frontier's that
// lie below a block in use, so that it does not cut up a run that big blocks
// can still merge or grow (free_above; arena.h, Frontiers).
static Span* take_run_near(unsigned w, uint32_t n, uint64_t want) {
  const unsigned f = frontier_of(n);
  if (Span* s = take_run_from(f, w, n, want)) return s;
  return take_run_from(1 - f, w, n, want, f == kFrontierSpans);
}

// Whether a take of n spans that found no run with pages should merge the
// pool first (coalesce reads every pooled span): if anything was given back
// since the last merge, and either as many spans as it wants were (free
// address space to join), or the pool's pages could cover it and are more
// than the spans a merge reads (a run that grows to n around them saves a
// page fault for each of its pages, where a merge costs a few loads and
// stores per pooled span).
static bool merge_worth_it(uint32_t n, uint64_t want, uint64_t given, uint64_t at) {
  if (given == at) return false;
  const uint64_t spans = pool_span_count();
  if (given - at >= n && spans >= n) return true;
  const uint64_t kept = g_retained.load(std::memory_order_relaxed);
  return spans <= (kept < want ? kept : want) / os::page_size();
}

Span* pool_take_run(uint32_t n, uint64_t want) {
  if (Span* s = take_last(n)) return s;
  if (n == 1) return pool_take_span(want);
  // A big take: big blocks' runs are in use, not idle (pay_with_idle_big).
  if (n > kBigRunVspans && g_idle_pay_owed.load(std::memory_order_relaxed) != 0)
    g_idle_pay_owed.store(0, std::memory_order_relaxed);
  maybe_purge();
  // Warm runs first when pages are wanted: a longer run with pages is split
  // before a clean one that fits is faulted in, and before either, the free
  // spans are merged if merge_worth_it (never twice for the same gives and
  // the same frontier):
  // pieces with pages side by side make a run with pages, and one that ends at
  // a region's fresh vspans grows to n.
  const unsigned first = first_run_set(want);
  if (Span* s = take_run_near(first, n, want)) return s;
  uint64_t given = g_given_spans.load(std::memory_order_relaxed);
  std::atomic<uint64_t>& merged_at = g_coalesced_at[frontier_of(n)];
  uint64_t at = merged_at.load(std::memory_order_relaxed);
  if (merge_worth_it(n, want, given, at) && merged_at.compare_exchange_strong(at, given, std::memory_order_relaxed) && coalesce(n, false)) {
    if (Span* s = take_run_near(first, n, want)) return s;
  }
  if (Span* s = take_run_near(1 - first, n, want)) return s;
  if (Span* s = fresh(n)) return s;
  // No address space left for a new region: the big blocks' area too, then
  // whatever is free merged, pages or not, and look again.
  for (unsigned round = 0; round < 2; round++) {
    if (round == 1 && !coalesce(n, true)) return nullptr;
    for (unsigned f = 0; f < kFrontiers; f++)
      for (unsigned w : {first, 1 - first})
        if (Span* s = take_run_from(f, w, n, want)) return s;
  }
  return nullptr;
}

uint32_t pool_take_after(uint32_t end, uint32_t least, uint32_t most, uint64_t* pages) {
  const uint32_t region_end = (end / kVspansPerRegion + 1) * kVspansPerRegion;
  if (end % kVspansPerRegion == 0 || least == 0 || most < least || end + least > region_end) return 0;
  if (most > region_end - end) most = region_end - end;
  // Every pooled piece, its head marked with this call's token (as coalesce
  // marks what it gathered: odd, never a real offset, and no other call's).
  const uint32_t token = 0x80000001u | (g_coalesce_calls.fetch_add(1, std::memory_order_relaxed) << 1);
  const uint32_t chain = take_all();
  for (uint32_t h = chain; h != kNoIndex; h = span_at(h)->pool_next.load(std::memory_order_relaxed))
    span_at(h)->offset.store(token, std::memory_order_relaxed);
  auto ours = [token](uint32_t i) { return span_at(i)->offset.load(std::memory_order_relaxed) == token; };
  // The pieces that follow one another from `end` on.
  uint32_t got = 0;
  while (got < most && ours(end + got)) got += span_at(end + got)->run_len.load(std::memory_order_relaxed);
  const uint32_t take = got < least ? 0 : (got < most ? got : most);
  uint64_t prefix = 0;  // committed bytes from end's base on, without a gap
  bool whole = true;    // every piece so far committed to its end
  for (uint32_t k = 0; k < take;) {
    Span* piece = span_at(end + k);
    const uint32_t len = piece->run_len.load(std::memory_order_relaxed);
    const uint64_t c = piece->committed.load(std::memory_order_relaxed);
    const uint32_t in = len < take - k ? len : take - k;  // of it, taken
    const uint64_t in_bytes = uint64_t(in) << kVspanShift;
    if (in < len) push_rest(piece, len, in);  // the last piece goes on past what is taken
    const uint64_t mine = c < in_bytes ? c : in_bytes;  // its pages within the taken part
    piece->committed.store(0, std::memory_order_relaxed);
    if (whole) {
      prefix += mine;
      whole = mine == in_bytes;
    } else if (mine != 0) {
      // After a gap: not part of the prefix the block's run keeps.
      const uintptr_t at = span_base(piece);
      os::decommit(reinterpret_cast<void*>(at), mine);
      telemetry_event(FWT_EV_DECOMMIT, end + k, at, mine);
      count_committed(-int64_t(mine));
    }
    piece->offset.store(0, std::memory_order_relaxed);
    k += in;
  }
  // The rest goes back as it was (coalesce would merge it; this call only takes).
  for (uint32_t h = chain; h != kNoIndex;) {
    Span* s = span_at(h);
    h = s->pool_next.load(std::memory_order_relaxed);  // push_free overwrites it
    const uint32_t i = span_index(s);
    if (i >= end && i < end + take) continue;
    s->offset.store(0, std::memory_order_relaxed);
    push_free(s, s->run_len.load(std::memory_order_relaxed));
  }
  *pages = prefix;
  return take;
}

// pool_give, and for a large block's run (large) with pages, at most
// kLastRunMax of them, the calling CPU's last-run slot.
static void give(Span* head, uint32_t len, bool large) {
  uint64_t c = head->committed.load(std::memory_order_relaxed);
  const uint64_t delay = decay_ms();
  if (large && c != 0 && c <= kLastRunMax && delay != 0) {
    // No stamp and no bound here, but now and then the decay's clock: a
    // program that goes on churning such blocks after freeing bigger ones
    // kept those pages until its next bigger give or take (clamscan, for
    // seconds past the delay).
    if (push_last(head, len)) maybe_purge();
    return;
  }
  g_given_spans.fetch_add(len, std::memory_order_relaxed);
  if (c > 0 && delay == 0) decommit_span(head);
  if (c == 0 || delay == 0) {
    push_free(head, len);
    return;
  }
  // Kept, newest of all. Past the bound, what waited longest goes back first,
  // down to three quarters of the bound (so that passes are not run at every
  // give); if another pass is running, this one goes back instead.
  const uint64_t now = now_ms();
  set_pool_stamp(head, now);
  const uint64_t kept = g_retained.load(std::memory_order_relaxed) + c, bound = give_bound(now, kept, delay);
  const bool over = kept > bound;
  if (over && !claim_purge()) {
    decommit_span(head);
    push_free(head, len);
    return;
  }
  push_free(head, len);
  if (over) {
    const uint64_t prev = g_purged_at.exchange(now, std::memory_order_relaxed);  // this is a pass too
    g_bound_gave.store(purge(now, delay, kept - bound / 4 * 3, prev), std::memory_order_relaxed);
    g_bound_gave_at.store(now, std::memory_order_relaxed);
    g_committed_after_pass.store(g_committed.load(std::memory_order_relaxed), std::memory_order_relaxed);
    end_purge();
    return;
  }
  maybe_purge_at(now, delay);  // the pool keeps pages now (head's), and delay > 0
}

void pool_give(Span* head, uint32_t len) { give(head, len, false); }
void pool_give_large(Span* head, uint32_t len) { give(head, len, true); }

void span_trim(Span* s, uint64_t bytes) {
  uint64_t c = s->committed.load(std::memory_order_relaxed);
  if (c <= bytes) return;
  uintptr_t at = span_base(s) + bytes;
  os::decommit(reinterpret_cast<void*>(at), c - bytes);
  telemetry_event(FWT_EV_DECOMMIT, span_index(s), at, c - bytes);
  s->committed.store(bytes, std::memory_order_relaxed);
  count_committed(-int64_t(c - bytes));
}

bool span_commit(Span* s, uint64_t bytes) {
  uint64_t c = s->committed.load(std::memory_order_relaxed);
  if (c >= bytes) return true;
  uintptr_t at = span_base(s) + c;
  if (!os::commit(reinterpret_cast<void*>(at), bytes - c)) return false;
  telemetry_event(FWT_EV_COMMIT, span_index(s), at, bytes - c);
  s->committed.store(bytes, std::memory_order_relaxed);
  count_committed(int64_t(bytes - c));
  return true;
}

void span_set_use(Span* s, unsigned cls) { s->cls.store(uint16_t(cls), std::memory_order_release); }

void span_forget_committed(Span* s) {
  uint64_t c = s->committed.exchange(0, std::memory_order_relaxed);
  count_committed(-int64_t(c));
}

void pool_after_fork_child() {
  if (!g_purging.load(std::memory_order_relaxed)) return;
  for (uint32_t i = g_purge_rest.load(std::memory_order_relaxed); i != kNoIndex;) {
    Span* s = span_at(i);
    i = s->pool_next.load(std::memory_order_relaxed);  // push_free overwrites it
    push_free(s, s->run_len.load(std::memory_order_relaxed));
  }
  g_purge_rest.store(kNoIndex, std::memory_order_relaxed);
  g_purging.store(false, std::memory_order_relaxed);
}

void pool_tick() { maybe_purge(); }

uint64_t pool_collect() {
  // A program that asks for its memory back asks for the bound too: the
  // footprint of its last cycle no longer holds pages.
  g_footprint.store(0, std::memory_order_relaxed);
  g_bound_gave.store(0, std::memory_order_relaxed);
  g_paid_refault_at.store(0, std::memory_order_relaxed);  // and pays start over
  // Take everything, decommit, push back (push_free overwrites pool_next, so
  // read the next link first).
  uint64_t gave = 0;
  for (uint32_t i = take_all(); i != kNoIndex;) {
    Span* s = span_at(i);
    i = s->pool_next.load(std::memory_order_relaxed);
    gave += s->committed.load(std::memory_order_relaxed);
    if ((s->large_size.load(std::memory_order_relaxed) & kPaidMark) != 0)
      s->large_size.store(0, std::memory_order_relaxed);  // its pages go now, not by a pay
    decommit_span(s);
    push_free(s, s->run_len.load(std::memory_order_relaxed));
  }
  return gave;
}

uint64_t pool_retained_bytes() { return g_retained.load(std::memory_order_relaxed); }
uint64_t committed_bytes() { return g_committed.load(std::memory_order_relaxed); }
uint64_t peak_committed_bytes() { return g_peak_committed.load(std::memory_order_relaxed); }
uint64_t pool_span_count() {
  int64_t n = g_pooled_spans.load(std::memory_order_relaxed);
  return n < 0 ? 0 : uint64_t(n);
}

bool pool_is_valid() {
  bool ok = true;
  uint64_t retained = 0;
  int64_t runs[kFrontiers] = {};
  auto walk = [&](const SpanStack& st, uint32_t min_len, uint32_t max_len, int warm = -1, int frontier = -1) {
    uint32_t i = st.peek();
    uint32_t steps = 0;
    while (i != kNoIndex && steps++ < (1u << 22)) {
      const Span* s = span_at(i);
      if (frontier >= 0) runs[frontier]++;
      Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_acquire));
      uint32_t len = s->run_len.load(std::memory_order_relaxed);
      if (a.state != kFree) ok = report_invariant("pool: pooled span not FREE", i);
      if (len < min_len || len > max_len) ok = report_invariant("pool: run in the wrong stack", i);
      const uint64_t c = s->committed.load(std::memory_order_relaxed);
      if (warm >= 0 && (c != 0) != (warm != 0)) ok = report_invariant("pool: run in the wrong commit set", i);
      if (frontier >= 0 && int(arena_frontier(i)) != frontier) ok = report_invariant("pool: run in another frontier's set", i);
      retained += c;
      i = s->pool_next.load(std::memory_order_relaxed) - 1;
    }
  };
  for (const auto& slot : g_last_run) {
    const uint32_t v = slot.load(std::memory_order_relaxed);
    if (v == 0) continue;
    const Span* s = span_at(v - 1);
    const uint64_t c = s->committed.load(std::memory_order_relaxed);
    if (Anchor::unpack(s->anchor.load(std::memory_order_acquire)).state != kFree || c == 0 || c > kLastRunMax ||
        s->run_len.load(std::memory_order_relaxed) == 0)
      ok = report_invariant("pool: last-run slot holds a run not FREE, without pages or over kLastRunMax, or of no length",
                            v - 1);
  }
  for (auto& tier : g_single)
    for (auto& st : tier) walk(st, 1, 1);
  for (unsigned f = 0; f < kFrontiers; f++) {
    for (int w = 0; w < int(kRunSets); w++) {
      for (uint32_t m = 2; m <= kExactRuns; m++) walk(g_exact[f][w][m], m, m, w, int(f));
      for (unsigned k = 6; k < kLogRuns; k++) walk(g_log[f][w][k], 1u << k, (2u << k) - 1, w, int(f));
    }
  }
  if (retained != g_retained.load(std::memory_order_relaxed))
    ok = report_invariant("pool: retained bytes differ from the sum over pooled spans", retained);
  for (unsigned f = 0; f < kFrontiers; f++)
    if (runs[f] != g_pooled_runs[f].load(std::memory_order_relaxed))
      ok = report_invariant("pool: a frontier's count of pooled runs differs from its run stacks", uint64_t(runs[f]));
  return ok;
}

}  // namespace fw
