// core/reusable.h: the reusable spans of each size class.
//
// A span whose free blocks reach the reuse threshold (Hoard's emptiness
// fraction f; FREEWAY_REUSE_PERCENT) is pushed on its class's lock-free stack,
// and a thread that needs a span for that class pops from here before it takes
// a fresh one from the span-pool, so a class's partly-empty spans are always
// refilled before its footprint grows (the blowup bound in docs/design.md).
//
// The stacks link spans through reuse_next. A span is pushed only by the
// thread whose CAS set its anchor's `linked` bit, or again by the thread that
// popped it (a move or a sweep, below), and `linked` is cleared only by the
// thread that popped it, so a span is in at most one stack. Removal is
// lazy: a span that became FREE (or was recycled into another class) while
// linked stays in the stack until popped; the popper then drops it or moves it
// to the stack of its current class (span_claim_reusable).
//
// A span recycled into class b while still linked in class a's stack, that
// becomes PARTIAL, is in no stack b's takers look at: until a taker of class
// a popped it, b's takers took fresh spans from the pool while it sat half
// empty (with a program done with class a, for as long as it lived: the
// blowup bound broken). So such a span marks a's stack (reusable_note_linked;
// a push that comes late, after the span changed class, marks it too), and a
// taker that finds its own stack empty sweeps the marked stacks before it
// goes to the pool (reusable_sweep): it pops every entry of each and sorts
// them as a popper does, which moves the span to b's stack. Other spans of a
// are pushed back. While a sweep holds a stack's entries, the takers of every
// class with spans among them may take from the pool instead, and a thread
// stopped mid-sweep strands them (docs/design.md).
#pragma once
#include <cstdint>

#include "core/size_class.h"
#include "core/span.h"

namespace fw {

void reusable_push(Span* s, unsigned cls);
Span* reusable_pop(unsigned cls);
// s, of class cls, became PARTIAL while linked: if the stack it is linked in
// is another class's, marks that stack for a sweep.
void reusable_note_linked(const Span* s, unsigned cls);
// Sorts the entries of every marked stack (above); returns whether any stack
// was marked, so that a taker whose stack was empty looks again.
bool reusable_sweep();

}  // namespace fw
