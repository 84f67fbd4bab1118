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
void mark(unsigned stack) { g_marked.fetch_or(uint64_t(1) << stack, std::memory_order_release); }

}  // namespace

void reusable_push(Span* s, unsigned cls) {
  s->reuse_cls.store(uint16_t(cls), std::memory_order_relaxed);
  g_reusable[cls].push(span_index(s));
  // A pusher late after its decision (preempted after the CAS that made s
  // PARTIAL, or a mover after its check) may push s after it was recycled
  // into another class and went PARTIAL there, whose note read an older
  // reuse_cls. A store-buffering pair with reusable_note_linked's fence:
  // either the note reads this push's reuse_cls, or this load reads the
  // class s has now, and the stack is marked either way. One fence per push,
  // which only a span's change to PARTIAL makes.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const unsigned now = s->cls.load(std::memory_order_relaxed);
  if (now != cls && now < kClassCount) mark(cls);
}

void reusable_note_linked(const Span* s, unsigned cls) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // reusable_push
  // The stack s was last pushed on; a popper may have moved s since, and
  // then the mark is at most a sweep that moves nothing.
  const unsigned in = s->reuse_cls.load(std::memory_order_relaxed);
  if (in != cls && in < kClassCount) mark(in);
}

bool reusable_sweep() {
  uint64_t marked = g_marked.load(std::memory_order_relaxed);
  bool any = false;
  for (; marked != 0; marked &= marked - 1) {
    const unsigned a = unsigned(__builtin_ctzll(marked));
    // One stack's mark at a time: a thread stopped mid-sweep loses only the
    // mark of the stack it holds. acquire and the fence: the pops below see
    // every push whose pusher or note set the mark.
    const uint64_t bit = uint64_t(1) << a;
    if ((g_marked.fetch_and(~bit, std::memory_order_acquire) & bit) == 0) continue;  // another sweep took it
    std::atomic_thread_fence(std::memory_order_seq_cst);
    any = true;
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
