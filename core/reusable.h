// core/reusable.h: the reusable spans of each size class.
//
// A span whose free blocks reach the reuse threshold (Hoard's emptiness
// fraction f; FREEWAY_REUSE_PERCENT) is pushed on its class's lock-free stack,
// and a thread that needs a span for that class pops from here before it takes
// a fresh one from the span-pool, so a class's partly-empty spans are always
// refilled before its footprint grows (the blowup bound in docs/design.md).
//
// The stacks link spans through reuse_next. A span is pushed only by the
// thread whose CAS set its anchor's `linked` bit, and `linked` is cleared only
// by the thread that popped it, so a span is in at most one stack. Removal is
// lazy: a span that became FREE (or was recycled into another class) while
// linked stays in the stack until popped; the popper then drops it or moves it
// to the stack of its current class (span_claim_reusable).
#pragma once
#include <cstdint>

#include "core/size_class.h"
#include "core/span.h"

namespace fw {

void reusable_push(Span* s, unsigned cls);
Span* reusable_pop(unsigned cls);

}  // namespace fw
