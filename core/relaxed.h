// core/relaxed.h: relaxed atomic accesses in one instruction each, for the fast paths.
//
// GCC and Clang never fold an atomic load into the instruction that uses it:
// `d->carved.load(relaxed) > x` is a load into a register and then a compare,
// and a single writer's `c.store(c.load(relaxed) + 1, relaxed)` is a load, an
// add and a store. On x86-64 an aligned load or store of up to 8 bytes is
// atomic, and an instruction with a memory operand reads (and writes) it
// once, so `cmp mem, reg` and `add $1, mem` have the relaxed accesses'
// meaning in one instruction, and one 8-byte load reads two 32-bit fields
// side by side (pair_relaxed). In a loop that waits on cache misses (the
// program's loads of the blocks it frees), every instruction of the fast
// paths takes room in the window that lets misses overlap, and every load
// most of all (docs/design.md, "Fast paths").
//
// Each helper writes the instruction out (the asm reads or writes the atomic
// object through an "m" operand, so the compiler neither moves it across
// other accesses to that object nor drops it); elsewhere, and under
// ThreadSanitizer (which must see every atomic access), the plain relaxed
// operations. The compares and the subtract are not volatile: the compiler
// may reuse one's result where it sees no store to the object in between, so
// they are for single reads on a path (as the fast paths make), never for a
// loop that waits for another thread's store.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/config.h"

#if defined(__x86_64__) && !defined(FW_TSAN) && defined(__GCC_ASM_FLAG_OUTPUTS__)
#define FW_FOLD_RELAXED 1
#else
#define FW_FOLD_RELAXED 0
#endif

namespace fw {

// Adds one to a counter that only one thread writes (a LAB's holder, an owned
// span's owner) and others read with relaxed loads: no locked read-modify-write
// is needed with a single writer.
template <typename T>
FW_INLINE void single_writer_add_one(std::atomic<T>& counter) {
  static_assert(sizeof(std::atomic<T>) == sizeof(T) && (sizeof(T) == 4 || sizeof(T) == 8), "plain counter");
#if FW_FOLD_RELAXED
  if constexpr (sizeof(T) == 8)
    asm volatile("addq $1, %0" : "+m"(counter));
  else
    asm volatile("addl $1, %0" : "+m"(counter));
#else
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
#endif
}

// single_writer_add_one ordered after the caller's stores to the 16 bytes at
// p (a freed block's link and canary): another thread that reads the count
// with acquire and finds the add sees them, and no store to p comes after
// (a kept span's own count, span.h: its freer may take the span and give it
// to the pool). On x86-64 stores stay in program order, so the asm only has
// to follow them: it names those bytes as an input. Elsewhere a release store.
template <typename T>
FW_INLINE void single_writer_add_one_after(std::atomic<T>& counter, const void* p) {
  static_assert(sizeof(std::atomic<T>) == sizeof(T) && sizeof(T) == 8, "plain 64-bit counter");
#if FW_FOLD_RELAXED
  asm volatile("addq $1, %0" : "+m"(counter) : "m"(*static_cast<const char(*)[16]>(p)));
#else
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_release);
#endif
}
// single_writer_add_one for a 64-bit counter, true when it is 0 after: `addq
// $1, mem` and the zero flag (a LAB's allocation count, which counts up to 0
// from below to call for the decay's look: lab.h, lab_tick).
FW_INLINE bool single_writer_add_one_is_zero(std::atomic<uint64_t>& counter) {
#if FW_FOLD_RELAXED
  bool zero;
  asm volatile("addq $1, %0" : "+m"(counter), "=@ccz"(zero));
  return zero;
#else
  const uint64_t now = counter.load(std::memory_order_relaxed) + 1;
  counter.store(now, std::memory_order_relaxed);
  return now == 0;
#endif
}
// Subtracts one from a 16-bit counter that only one thread writes (a pending
// chain's room, lab.h) and others read with relaxed loads; true when it is 0
// after: `subw $1, mem` and the zero flag.
FW_INLINE bool single_writer_sub_one_is_zero(std::atomic<uint16_t>& counter) {
#if FW_FOLD_RELAXED
  bool zero;
  asm volatile("subw $1, %0" : "+m"(counter), "=@ccz"(zero));
  return zero;
#else
  const uint16_t now = uint16_t(counter.load(std::memory_order_relaxed) - 1);
  counter.store(now, std::memory_order_relaxed);
  return now == 0;
#endif
}

// x < m, m loaded relaxed (unsigned compare).
FW_INLINE bool below_relaxed(uint32_t x, const std::atomic<uint32_t>& m) {
#if FW_FOLD_RELAXED
  bool below;
  asm("cmpl %2, %1" : "=@ccb"(below) : "r"(x), "m"(m));
  return below;
#else
  return x < m.load(std::memory_order_relaxed);
#endif
}

// lo | hi << 32 for two 32-bit fields side by side in one aligned 8-byte
// word (lo in its low half, little-endian), each loaded relaxed: one 8-byte
// load, which reads the two as one access (so it sees each field's old or
// new value, as two relaxed loads do). Where the misses of a program's loop
// overlap (bench/teardown), the time of free follows its loads more than its
// instructions: the block check's offset and multiplier read with one load
// instead of two took up to 4% off, with two instructions more
// (docs/design.md, Fast paths).
FW_INLINE uint64_t pair_relaxed(const std::atomic<uint32_t>& lo, const std::atomic<uint32_t>& hi) {
#if FW_FOLD_RELAXED
  using Word = uint64_t __attribute__((may_alias));
  (void)hi;  // the upper half of the word the asm reads (the callers' static_assert)
  uint64_t w;
  asm("movq %1, %0" : "=r"(w) : "m"(*reinterpret_cast<const Word*>(&lo)));
  return w;
#else
  return lo.load(std::memory_order_relaxed) | uint64_t(hi.load(std::memory_order_relaxed)) << 32;
#endif
}

// A list head reached through an address held in memory (a span's own_at,
// span.h): either a LAB's free[c] (an atomic pointer) or a descriptor's
// large_size (an atomic 64-bit word), read and written relaxed as one word.
// may_alias: the same code reads both objects through it.
using AnyWord = uintptr_t __attribute__((may_alias));
FW_INLINE void* word_load_relaxed(uintptr_t at) {
  return reinterpret_cast<void*>(__atomic_load_n(reinterpret_cast<AnyWord*>(at), __ATOMIC_RELAXED));
}
FW_INLINE void word_store_relaxed(uintptr_t at, const void* v) {
  __atomic_store_n(reinterpret_cast<AnyWord*>(at), reinterpret_cast<uintptr_t>(v), __ATOMIC_RELAXED);
}

// m == v, m loaded relaxed.
template <typename T>
FW_INLINE bool equal_relaxed(const std::atomic<T*>& m, const T* v) {
#if FW_FOLD_RELAXED
  bool equal;
  asm("cmpq %2, %1" : "=@cce"(equal) : "r"(v), "m"(m));
  return equal;
#else
  return m.load(std::memory_order_relaxed) == v;
#endif
}

}  // namespace fw
