// core/reusable.cpp: per-class reusable stacks (see reusable.h).
#include "core/reusable.h"

#include "core/arena.h"
#include "core/tagged_stack.h"

namespace fw {
namespace {

struct ReuseLink {
  std::atomic<uint32_t>& operator()(uint32_t i) const { return span_at(i)->reuse_next; }
};
TaggedStack<ReuseLink> g_reusable[kClassCount];
static_assert(kClassCount <= 64, "one bit per class in g_marked");
// Bit c: stack c may hold a PARTIAL span of another class (reusable.h).
std::atomic<uint64_t> g_marked{0};

}  // namespace

void reusable_push(Span* s, unsigned cls) {
  s->reuse_cls.store(uint16_t(cls), std::memory_order_relaxed);  // published by the push (release)
  g_reusable[cls].push(span_index(s));
}

void reusable_note_linked(const Span* s, unsigned cls) {
  // Read after the span went PARTIAL: a popper may have moved it meanwhile,
  // and then a mark is at most a sweep that finds nothing to move.
  const unsigned in = s->reuse_cls.load(std::memory_order_relaxed);
  if (in != cls && in < kClassCount) g_marked.fetch_or(uint64_t(1) << in, std::memory_order_relaxed);
}

bool reusable_sweep() {
  if (g_marked.load(std::memory_order_relaxed) == 0) return false;
  uint64_t marked = g_marked.exchange(0, std::memory_order_relaxed);
  const bool any = marked != 0;
  for (; marked != 0; marked &= marked - 1) {
    const unsigned a = unsigned(__builtin_ctzll(marked));
    // Every entry first (a span pushed back while popping would be popped
    // again), chained through reuse_next, which a popped span leaves free.
    uint32_t chain = kNoIndex;
    for (uint32_t i = g_reusable[a].pop(); i != kNoIndex; i = g_reusable[a].pop()) {
      span_at(i)->reuse_next.store(chain, std::memory_order_relaxed);
      chain = i;
    }
    // Pushed back in the order they were popped in reverse: the stack's order.
    while (chain != kNoIndex) {
      Span* s = span_at(chain);
      chain = s->reuse_next.load(std::memory_order_relaxed);
      span_claim_reusable(s, a, nullptr, nullptr);
    }
  }
  return any;
}

Span* reusable_pop(unsigned cls) {
  uint32_t i = g_reusable[cls].pop();
  return i == kNoIndex ? nullptr : span_at(i);
}

}  // namespace fw
