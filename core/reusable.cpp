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

}  // namespace

void reusable_push(Span* s, unsigned cls) { g_reusable[cls].push(span_index(s)); }

Span* reusable_pop(unsigned cls) {
  uint32_t i = g_reusable[cls].pop();
  return i == kNoIndex ? nullptr : span_at(i);
}

}  // namespace fw
