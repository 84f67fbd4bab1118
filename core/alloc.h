// core/alloc.h: malloc's fast path, and the allocation entry points of the core.
//
// The fast path (alloc_small) is what almost every malloc runs:
//   size test; class table load (the class's list word, list_word); load
//   the thread slot; store BUSY to it; load free[c]; test; load next (plain:
//   block_next_fast); store free[c]; prefetch next; clear the block's free
//   canary; bump allocs[c] (in free[c]'s line: lab.h ClassList) and branch
//   to the decay's tick when it comes to 0 (lab.h, lab_tick); store the LAB
//   back.
// 22 instructions on x86-64 for malloc(n <= 1024) up to the return (GCC 12,
// objdump; docs/design.md; 21 before the tick's branch, Stop 108). The
// thread's frees into its hot span of the class
// are on free[c] already (lab.h own_push): when free[c] is empty, the slow
// path refills it. (Until Stop 65 those frees waited on the span's own list,
// which a branch of 14 more instructions here moved to free[c].) The slow
// paths are in alloc.cpp and never inlined. Per-CPU mode tests no flag here:
// its threads' slots hold the CPU placeholder, whose empty lists lead to
// malloc_slow, which goes on to the per-CPU path (percpu.h).
#pragma once
#include <atomic>
#include <cstddef>

#include "core/config.h"
#include "core/lab.h"
#include "core/secure.h"
#include "core/size_class.h"

namespace fw {

// Slow paths. Both are entered with lab_current() == BUSY and restore it.
// n is the size asked for (secure mode keeps it in the block, secure_heap.h).
// n comes first and the class's list word (list_word) is a size_t: malloc's
// argument stays in its register and the word in the one the fast path
// indexed with, so the fast path copies nothing for the call.
FW_NOINLINE void* malloc_slow(size_t n, Lab* lab, size_t w);  // w: list_word(c), below
// malloc_slow past its first test (the CPU placeholder goes to per-CPU mode's
// path): a function of its own, so that the per-CPU calls that pass through
// malloc_slow save no registers on the way.
FW_NOINLINE void* malloc_slow_thread(size_t n, Lab* lab, unsigned c);
FW_NOINLINE void* malloc_medium_or_large(size_t n);
// No memory for a block of n bytes: errno, and an event for the inspector.
FW_COLD void alloc_out_of_memory(size_t n);

// Per-CPU mode (percpu.h): a pop from the current CPU's LAB, counted, in one
// restartable section (os::rseq_pop_counted). Reached from
// malloc_slow, by a jump; defined once, in alloc.cpp, for its rseq descriptor
// (free.h).
FW_NOINLINE void* alloc_class_percpu(unsigned c, size_t n);

// The fast path finds class c's list (lab.h ClassList) at word w = 4c of the
// LAB: one `lea` with x86-64's largest scale (8), where the class itself
// took a move, a shift and an add, and a move of the block into the return
// register (24 instructions to the return instead of 21, Stop 69). Sizes up
// to kSmallTableMax map to w with one table load (kListWordOfSmall), as they
// map to the class (size_class.h).
constexpr size_t kListWords = sizeof(ClassList) / sizeof(uint64_t);
FW_INLINE size_t list_word(unsigned c) { return c * kListWords; }
FW_INLINE unsigned list_class(size_t w) { return unsigned(w / kListWords); }
FW_INLINE ClassList& lab_list_at(Lab* lab, size_t w) {
  return *reinterpret_cast<ClassList*>(reinterpret_cast<char*>(lab->lists) + w * sizeof(uint64_t));
}
struct ListWordTable {
  uint8_t of[kSmallTableMax / 16 + 1];
};
constexpr ListWordTable make_list_words() {
  ListWordTable t{};
  for (unsigned i = 0; i <= kSmallTableMax / 16; i++) t.of[i] = uint8_t(kClassTables.small[i] * kListWords);
  return t;
}
inline constexpr ListWordTable kListWordOfSmall = make_list_words();
static_assert(kClassCount * kListWords <= 255, "a list word fits the table's bytes");
static_assert(offsetof(Lab, lists) == 0 && sizeof(ClassList) == kListWords * sizeof(uint64_t),
              "list words count from the LAB's start");

// A block of the class whose list word is w (list_word) for a request of n
// bytes. An empty list goes to Slow by a jump: malloc_slow, or a caller's
// function around it (operator new's tests the result there, shim/new.cpp, so
// that its fast path, like malloc's, keeps nothing across a call).
template <void* (*Slow)(size_t, Lab*, size_t) = malloc_slow>
FW_INLINE void* alloc_at(size_t w, size_t n) {
  Lab* lab = lab_enter();
  ClassList& l = lab_list_at(lab, w);
  void* p = l.head;
  if (FW_UNLIKELY(p == nullptr)) return Slow(n, lab, w);
  void* next = block_next_fast(p);
  l.head = next;
  // The next malloc of class c reads next's link: a list of blocks freed long
  // ago is cold, and its pops would each wait for a miss in turn.
  __builtin_prefetch(next, 1);
  // Counted up to 0 from below: the add that reaches it calls for the
  // decay's look (lab.h, the decay's tick), by a jump.
  const bool tick = single_writer_add_one_is_zero(l.allocs);
#if FREEWAY_HARDENING
  clear_canary(p);
#endif
  if (FW_UNLIKELY(tick)) return lab_tick(p, lab, &l);
  lab_leave(lab);
  return p;
}
// A block of class c for a request of n bytes.
FW_INLINE void* alloc_class(unsigned c, size_t n) { return alloc_at(list_word(c), n); }

// malloc's fast path for any size: Slow and Big (malloc_slow and
// malloc_medium_or_large, or a caller's functions around them) are reached by
// jumps.
template <void* (*Slow)(size_t, Lab*, size_t) = malloc_slow, void* (*Big)(size_t) = malloc_medium_or_large>
FW_INLINE void* alloc_small(size_t n) {
  if (FW_LIKELY(n <= kSmallTableMax)) return alloc_at<Slow>(kListWordOfSmall.of[(n + 15) >> 4], n);
  return Big(n);
}

// The rest of the malloc family (alloc.cpp). They set errno on failure.
void* fw_alloc_zeroed(size_t count, size_t n); // calloc
void* fw_alloc_aligned(size_t align, size_t n);// align: a power of two (checked by callers)
void* fw_realloc_impl(void* p, size_t n);
size_t fw_usable(const void* p);
// The start of the freeway block that p points into (p itself for a block's
// start), or nullptr if no freeway block holds p. It does not tell whether the
// block is in use: callers that accept interior pointers (the CRT's
// _aligned_offset_ forms, shim/windows) check a tag of their own in the block.
void* fw_block_start(const void* p);

}  // namespace fw
