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
SpanStack g_exact[kExactRuns + 1];
SpanStack g_log[kLogRuns];                           // g_log[k]: runs of length in [2^k, 2^(k+1)), k >= 6
std::atomic<unsigned> g_stack_count{0};
std::atomic<uint64_t> g_retained{0};
std::atomic<uint64_t> g_committed{0};
std::atomic<uint64_t> g_peak_committed{0};
std::atomic<int64_t> g_pooled_spans{0};
std::atomic<uint64_t> g_given_spans{0};     // spans ever given back (a run counts each)
std::atomic<uint64_t> g_coalesced_at{0};    // g_given_spans when the pool was last merged

// The retain budget follows demand. It starts at FREEWAY_RETAIN_MB. Pages the
// pool gave back for want of budget (the shortfall) that the program then
// needs again within the same period, as fresh commits, raise the budget by
// that much: a workload that frees and reallocates a big working set in
// cycles stops faulting it in each cycle. Every kDecayNs the part above the
// base halves and the shortfall is forgotten, so the budget falls back when
// the demand stops.
constexpr uint64_t kDecayNs = 1000000000;  // 1 s
std::atomic<uint64_t> g_budget{0};         // 0 until first use: the base
std::atomic<uint64_t> g_shortfall{0};
std::atomic<uint64_t> g_decayed_at{0};

uint64_t base_budget() { return uint64_t(option(Option::retain_mb)) << 20; }

// The budget now, for a base of `base` bytes (base_budget()).
uint64_t budget_now(uint64_t base) {
  uint64_t b = g_budget.load(std::memory_order_relaxed);
  if (b < base) b = base;
  uint64_t now = os::now_ns(), at = g_decayed_at.load(std::memory_order_relaxed);
  if (now - at > kDecayNs && g_decayed_at.compare_exchange_strong(at, now, std::memory_order_relaxed)) {
    uint64_t periods = (now - at) / kDecayNs;  // halve once per second gone by
    b = base + (periods >= 64 ? 0 : (b - base) >> periods);
    g_budget.store(b, std::memory_order_relaxed);
    g_shortfall.store(0, std::memory_order_relaxed);
  }
  return b;
}

// n fresh bytes are about to be committed (page faults ahead): if the pool
// gave pages back for want of budget in this period, that was premature.
void note_demand(uint64_t n) {
  uint64_t s = g_shortfall.load(std::memory_order_relaxed);
  while (s != 0) {
    uint64_t take = n < s ? n : s;
    if (g_shortfall.compare_exchange_weak(s, s - take, std::memory_order_relaxed)) {
      uint64_t b = g_budget.load(std::memory_order_relaxed);
      uint64_t base = base_budget();
      g_budget.store((b < base ? base : b) + take, std::memory_order_relaxed);  // a racing add may be lost: a hint
      return;
    }
  }
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

// Pushes a FREE run (or single span) that is already accounted for.
void push_free(Span* head, uint32_t len) {
  head->run_len.store(len, std::memory_order_relaxed);
  g_retained.fetch_add(head->committed.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_pooled_spans.fetch_add(len, std::memory_order_relaxed);
  uint32_t i = span_index(head);
  if (len == 1)
    g_single[tier_of(head->committed.load(std::memory_order_relaxed))][os::cpu_id() % stack_count()].push(i);
  else if (len <= kExactRuns)
    g_exact[len].push(i);
  else
    g_log[floor_log2(len)].push(i);
}

// Marks a popped span or run as taken out of the pool.
Span* taken(uint32_t index, uint32_t len) {
  Span* s = span_at(index);
  g_retained.fetch_sub(s->committed.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_pooled_spans.fetch_sub(len, std::memory_order_relaxed);
  return s;
}

// Keeps the first n spans of a popped run of length m and pushes the rest back.
Span* split(uint32_t index, uint32_t m, uint32_t n) {
  Span* head = taken(index, m);
  if (m > n) {
    Span* rest = span_at(index + n);
    rest->cls.store(uint16_t(kNoClass), std::memory_order_relaxed);  // its pages are a prefix
    uint64_t c = head->committed.load(std::memory_order_relaxed);
    uint64_t kept = uint64_t(n) << kVspanShift;
    rest->committed.store(c > kept ? c - kept : 0, std::memory_order_relaxed);
    head->committed.store(c > kept ? kept : c, std::memory_order_relaxed);
    push_free(rest, m - n);
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

// Pops every free span and run from every stack, counts it as taken, and
// chains the heads through pool_next (they are the caller's alone until pushed
// again; other threads may pop and push meanwhile). Returns the chain's head.
uint32_t take_all() {
  uint32_t chain = kNoIndex;
  auto grab = [&](SpanStack& st) {
    for (uint32_t i = st.pop(); i != kNoIndex; i = st.pop()) {
      taken(i, span_at(i)->run_len.load(std::memory_order_relaxed));
      span_at(i)->pool_next.store(chain, std::memory_order_relaxed);
      chain = i;
    }
  };
  for (auto& tier : g_single)
    for (auto& st : tier) grab(st);
  for (auto& st : g_exact) grab(st);
  for (auto& st : g_log) grab(st);
  return chain;
}

// Gathers every free span and run from every stack and pushes them back as
// maximal contiguous runs, so that spans freed one by one can serve a long run
// instead of new address space. Lock-free: each pop and push is; the rest is
// local work on spans this thread holds. A merged run keeps the committed
// prefix of its first piece, extended by each later piece that follows a
// fully committed part; the pages of a piece after a gap are decommitted
// (they would not be a prefix). Returns true if a run of >= n spans exists afterwards.
// A gathered span's `offset` holds the gathering call's token (top bit set;
// real offsets of large blocks are below 2^31), so two threads coalescing at
// the same time each see only the spans they gathered themselves.
std::atomic<uint32_t> g_coalesce_calls{0};
bool coalesce(uint32_t n) {
  const uint32_t kGathered = 0x80000000u | (g_coalesce_calls.fetch_add(1, std::memory_order_relaxed) & 0x7fffffffu);
  uint32_t chain = take_all();
  for (uint32_t h = chain; h != kNoIndex; h = span_at(h)->pool_next.load(std::memory_order_relaxed)) {
    uint32_t len = span_at(h)->run_len.load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < len; k++) span_at(h + k)->offset.store(kGathered, std::memory_order_relaxed);
  }
  auto gathered = [kGathered](uint32_t i) {
    return span_at(i)->offset.load(std::memory_order_relaxed) == kGathered;
  };
  // Every stretch starts at some gathered head: find the starts, measure, unmark.
  uint32_t stretches = kNoIndex;
  for (uint32_t h = chain; h != kNoIndex; h = span_at(h)->pool_next.load(std::memory_order_relaxed)) {
    if (!gathered(h) || (h % kVspansPerRegion != 0 && gathered(h - 1))) continue;
    uint32_t len = 0;
    while (len < kVspansPerRegion && (len == 0 || (h + len) % kVspansPerRegion != 0) && gathered(h + len)) len++;
    uint64_t prefix = 0;  // committed bytes from the stretch's base on, without a gap
    for (uint32_t k = 0; k < len; k++) {
      Span* piece = span_at(h + k);
      piece->offset.store(0, std::memory_order_relaxed);
      if (len == 1) break;  // a single span keeps its pages (and its colour)
      if (span_window(piece) != 0) decommit_span(piece);  // pages at a colour are no prefix
      piece->cls.store(uint16_t(kNoClass), std::memory_order_relaxed);
      uint64_t c = piece->committed.load(std::memory_order_relaxed);
      if (k == 0) {
        prefix = c;
      } else if (c != 0 && prefix == uint64_t(k) << kVspanShift) {
        prefix += c;  // everything before it is committed: its pages extend the prefix
        piece->committed.store(0, std::memory_order_relaxed);
      } else {
        decommit_span(piece);  // after a gap: not part of the prefix
      }
    }
    if (len > 1) span_at(h)->committed.store(prefix, std::memory_order_relaxed);
    span_at(h)->run_len.store(len, std::memory_order_relaxed);
    span_at(h)->large_size.store(stretches, std::memory_order_relaxed);
    stretches = h;
  }
  bool found = false;
  while (stretches != kNoIndex) {
    Span* s = span_at(stretches);
    stretches = uint32_t(s->large_size.load(std::memory_order_relaxed));
    uint32_t len = s->run_len.load(std::memory_order_relaxed);
    found |= len >= n;
    push_free(s, len);
  }
  return found;
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

Span* pool_take_span(uint64_t want) {
  unsigned n = stack_count();
  unsigned home = os::cpu_id() % n;
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
  // No single span: split one off a run before reserving fresh address space.
  for (uint32_t m = 2; m <= kExactRuns; m++) {
    uint32_t i = g_exact[m].pop();
    if (i != kNoIndex) return split(i, m, 1);
  }
  return fresh(1);
}

// A pooled run of at least n >= 2 spans, split to n; nullptr if none.
static Span* take_pooled_run(uint32_t n) {
  if (n <= kExactRuns) {
    for (uint32_t m = n; m <= kExactRuns; m++) {
      uint32_t i = g_exact[m].pop();
      if (i != kNoIndex) return split(i, m, n);
    }
  }
  // Runs in g_log[k] are at least 2^k long: start at the first k with 2^k >= n.
  for (unsigned k = n <= 64 ? 6 : floor_log2(n - 1) + 1; k < kLogRuns; k++) {
    uint32_t i = g_log[k].pop();
    if (i != kNoIndex) return split(i, span_at(i)->run_len.load(std::memory_order_relaxed), n);
  }
  return nullptr;
}

Span* pool_take_run(uint32_t n, uint64_t want) {
  if (n == 1) return pool_take_span(want);
  if (Span* s = take_pooled_run(n)) return s;
  // Before taking new address space, merge the free spans if at least n have
  // been given back since the last merge (so merging never repeats for nothing).
  uint64_t given = g_given_spans.load(std::memory_order_relaxed);
  uint64_t at = g_coalesced_at.load(std::memory_order_relaxed);
  if (given - at >= n && pool_span_count() >= n && g_coalesced_at.compare_exchange_strong(at, given)) {
    if (coalesce(n))
      if (Span* s = take_pooled_run(n)) return s;
  }
  if (Span* s = fresh(n)) return s;
  // No address space left for a new region: merge whatever is free and look again.
  if (!coalesce(n)) return nullptr;
  return take_pooled_run(n);
}

void pool_give(Span* head, uint32_t len) {
  g_given_spans.fetch_add(len, std::memory_order_relaxed);
  uint64_t c = head->committed.load(std::memory_order_relaxed);
  const uint64_t base = base_budget();
  uint64_t budget = budget_now(base);
  uint64_t big = uint64_t(option(Option::decommit_kb)) << 10;
  // A big run is kept only when demand has raised the budget above its base.
  if (c > 0 && (g_retained.load(std::memory_order_relaxed) + c > budget || (c > big && budget <= base))) {
    decommit_span(head);
    g_shortfall.fetch_add(c, std::memory_order_relaxed);
  }
  push_free(head, len);
}

void span_trim(Span* s, uint64_t bytes) {
  uint64_t c = s->committed.load(std::memory_order_relaxed);
  if (c <= bytes) return;
  uintptr_t at = span_base(s) + span_window(s) + bytes;
  os::decommit(reinterpret_cast<void*>(at), c - bytes);
  telemetry_event(FWT_EV_DECOMMIT, span_index(s), at, c - bytes);
  s->committed.store(bytes, std::memory_order_relaxed);
  count_committed(-int64_t(c - bytes));
}

bool span_commit(Span* s, uint64_t bytes) {
  uint64_t c = s->committed.load(std::memory_order_relaxed);
  if (c >= bytes) return true;
  uintptr_t at = span_base(s) + span_window(s) + c;
  if (!os::commit(reinterpret_cast<void*>(at), bytes - c)) return false;
  note_demand(bytes - c);
  telemetry_event(FWT_EV_COMMIT, span_index(s), at, bytes - c);
  s->committed.store(bytes, std::memory_order_relaxed);
  count_committed(int64_t(bytes - c));
  return true;
}

void span_set_use(Span* s, unsigned cls) {
  if (span_colour(s, cls) != span_window(s)) decommit_span(s);
  s->cls.store(uint16_t(cls), std::memory_order_relaxed);
}

void span_forget_committed(Span* s) {
  uint64_t c = s->committed.exchange(0, std::memory_order_relaxed);
  count_committed(-int64_t(c));
}

void pool_collect() {
  // Take everything, decommit, push back (push_free overwrites pool_next, so
  // read the next link first).
  for (uint32_t i = take_all(); i != kNoIndex;) {
    Span* s = span_at(i);
    i = s->pool_next.load(std::memory_order_relaxed);
    decommit_span(s);
    push_free(s, s->run_len.load(std::memory_order_relaxed));
  }
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
  auto walk = [&](const SpanStack& st, uint32_t min_len, uint32_t max_len) {
    uint32_t i = st.peek();
    uint32_t steps = 0;
    while (i != kNoIndex && steps++ < (1u << 22)) {
      const Span* s = span_at(i);
      Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_acquire));
      uint32_t len = s->run_len.load(std::memory_order_relaxed);
      if (a.state != kFree) ok = report_invariant("pool: pooled span not FREE", i);
      if (len < min_len || len > max_len) ok = report_invariant("pool: run in the wrong stack", i);
      retained += s->committed.load(std::memory_order_relaxed);
      i = s->pool_next.load(std::memory_order_relaxed) - 1;
    }
  };
  for (auto& tier : g_single)
    for (auto& st : tier) walk(st, 1, 1);
  for (uint32_t m = 2; m <= kExactRuns; m++) walk(g_exact[m], m, m);
  for (unsigned k = 6; k < kLogRuns; k++) walk(g_log[k], 1u << k, (2u << k) - 1);
  if (retained != g_retained.load(std::memory_order_relaxed))
    ok = report_invariant("pool: retained bytes differ from the sum over pooled spans", retained);
  return ok;
}

}  // namespace fw
