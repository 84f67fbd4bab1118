// platform/rseq.h: per-CPU operations made safe by restartable sequences
// (Linux rseq; Dice and Garthwaite's MP-RCS).
//
// Each operation below is one restartable critical section over an array of
// per-CPU slots, indexed by the CPU the thread runs on. The kernel aborts the
// section if the thread is preempted, migrated or signalled between its first
// instruction and its committing store (the last instruction); the abort
// handler starts it again from the top. Any two sections that name the same
// CPU's slot therefore run one after the other, never interleaved: no lock and
// no atomic read-modify-write is needed. An operation also fails (returns the
// "no" answer) when the CPU number is not below `ncpu`: rseq is not registered
// for this thread (cpu_id is -1 or -2, which compare as huge), or the slot
// array is smaller than the CPU count.
//
// What the kernel needs, for every section (see the kernel's uapi linux/rseq.h):
//  - a `struct rseq_cs` descriptor, 32-byte aligned: version 0, flags 0,
//    start_ip (label 1), post_commit_offset (label 2 - label 1: the committing
//    store is the last instruction before 2), abort_ip (label 4). They are kept
//    in the `__rseq_cs` section, as librseq does, so a debugger can find them;
//  - its address stored in the thread's rseq area (rseq_cs field, offset 8)
//    before the section starts. The kernel clears that field lazily when it
//    finds the thread outside the section, so nothing clears it here;
//  - the 4 bytes before abort_ip equal to the signature glibc registered the
//    area with (RSEQ_SIG, 0x53053053 on x86): they are the last 4 bytes of a
//    `ud1` instruction, so the signature decodes as an instruction that traps
//    if ever executed, and the abort code sits out of line in `__rseq_failure`.
// The thread's rseq area is at the thread pointer (%fs base) + `off`, glibc's
// __rseq_offset (os::rseq_offset); in it cpu_id is at offset 4.
//
// Only Linux x86-64 has these sections (os::rseq_offset says whether they can
// run); elsewhere the functions are never called and answer "no".
#pragma once
#include <cstddef>
#include <cstdint>

namespace fw::os {

// Bytes from one CPU's slot to the next in a slot array (FW_RSEQ_CPU's shift):
// one cache line each. An array for n CPUs takes n * kRseqSlotBytes.
constexpr size_t kRseqSlotBytes = 64;
static_assert(kRseqSlotBytes == size_t(1) << 6, "FW_RSEQ_CPU shifts the CPU number by 6");
// CPU k's slot in such an array.
inline void** rseq_slot(void** slots, uint32_t k) {
  return reinterpret_cast<void**>(reinterpret_cast<char*>(slots) + size_t(k) * kRseqSlotBytes);
}

#if defined(__linux__) && defined(__x86_64__) && !defined(FW_NO_RSEQ)
#define FW_HAS_RSEQ 1

// The descriptor of the section that starts at local label 1, commits just
// before label 2 and aborts to label 4; then the store of its address into the
// thread's rseq area (through scratch register `tmp`), then label 1.
#define FW_RSEQ_START(tmp)                                   \
  ".pushsection __rseq_cs, \"aw\"\n\t"                      \
  ".balign 32\n"                                             \
  "3:\n\t"                                                   \
  ".long 0x0, 0x0\n\t"                                       \
  ".quad 1f, (2f - 1f), 4f\n\t"                              \
  ".popsection\n\t"                                          \
  "leaq 3b(%%rip), " tmp "\n\t"                              \
  "movq " tmp ", %%fs:8(%[off])\n"                           \
  "1:\n\t"

// Label 2, and the abort handler: the signature, then a jump to the C label
// `abort`, which starts the section again.
#define FW_RSEQ_END                                           \
  "2:\n\t"                                                   \
  ".pushsection __rseq_failure, \"ax\"\n\t"                 \
  ".byte 0x0f, 0xb9, 0x3d\n\t"                               \
  ".long 0x53053053\n"                                       \
  "4:\n\t"                                                   \
  "jmp %l[abort]\n\t"                                        \
  ".popsection\n\t"

// The start of every section body: the CPU number, with a jump to C label
// `fail` if it is not below operand ncpu (cpu_id is -1 or -2 when rseq is not
// registered: huge, unsigned), then its slot's byte offset in the slot array
// into operand k: each slot has a cache line of its own (kRseqSlotBytes), so a
// slow path on one CPU that takes or puts back its LAB (a store to its slot)
// does not take the line every other CPU's fast paths load their slot from.
// With 8-byte slots on 2 cores, the load of the slot was a quarter of the
// samples of per-CPU free and a sixth of malloc's in Larson's server with 32
// threads, whose frees start pending chains on a slow path (docs/benchmarks.md,
// Stop 67).
#define FW_RSEQ_CPU(fail)                                     \
  "movl %%fs:4(%[off]), %k[k]\n\t"                          \
  "cmpl %[ncpu], %k[k]\n\t"                                 \
  "jae %l[" fail "]\n\t"                                    \
  "shlq $6, %[k]\n\t"

// The same, then that CPU's slot into operand base, and a jump to `fail` if
// the slot is empty.
#define FW_RSEQ_SLOT(fail)                                    \
  FW_RSEQ_CPU(fail)                                          \
  "movq (%[slots], %[k]), %[base]\n\t"                      \
  "testq %[base], %[base]\n\t"                              \
  "jz %l[" fail "]\n\t"

// The current CPU's slot (rseq_slot) holds a pointer to an array; at byte
// offset `at` of it are three words: a count of pops, a list head, a count of
// pushes (core/lab.h ClassList). Each node's first word is the next node's
// address (plain: the lists these sections work on are never encoded,
// core/percpu.h). The count and the head change together, in one 16-byte
// store that is the section's commit: a section is aborted only between
// instructions, so a pop or push is counted once, with no section of its
// own. The store is SSE2's `movdqu` (every x86-64 has it); the pair does not
// cross a cache line (the caller's layout). x86 writes each aligned 8-byte
// word of it whole in practice (the manual promises only that a wider store
// may be several accesses), so a relaxed load of either word from another CPU
// (the counts, read as figures) sees its old or its new value.
//
// Pops the first node of that list and adds one to the pop count. nullptr if
// the CPU is out of range, its slot is empty or the list is empty.
__attribute__((always_inline)) inline void* rseq_pop_counted(ptrdiff_t off, void* const* slots, uint32_t ncpu,
                                                             size_t at) {
  typedef long long pair __attribute__((vector_size(16)));
  uintptr_t node, base, next, k;
  pair lo, hi;
retry:
  asm volatile goto(FW_RSEQ_START("%[node]")
           FW_RSEQ_SLOT("none")                          // this CPU's array
           "movq 8(%[base], %[at]), %[node]\n\t"       // the list's head
           "testq %[node], %[node]\n\t"
           "jz %l[none]\n\t"
           "movq (%[node]), %[next]\n\t"
           "movq %[next], %[hi]\n\t"
           "movq (%[base], %[at]), %[next]\n\t"        // the pop count
           "addq $1, %[next]\n\t"
           "movq %[next], %[lo]\n\t"
           "punpcklqdq %[hi], %[lo]\n\t"               // count + 1, then the next node
           "movdqu %[lo], (%[base], %[at])\n\t"        // commit
           FW_RSEQ_END
           : [node] "=&r"(node), [base] "=&r"(base), [next] "=&r"(next), [k] "=&r"(k), [lo] "=&x"(lo),
             [hi] "=&x"(hi)
           : [off] "r"(off), [ncpu] "r"(ncpu), [slots] "r"(slots), [at] "r"(at)
           : "memory", "cc"
           : none, abort);
  if (node == 0) __builtin_unreachable();  // the section left through `none` then
  return reinterpret_cast<void*>(node);
none:
  return nullptr;
abort:
  goto retry;
}

// Pushes `node` on the counted list at address *list_at (a list head, then its
// push count: core/lab.h ClassList's head and frees, or a span's own list and
// own count, core/span.h), adding one to the count, if the word at `owner` is
// this CPU's array. Both words are read inside the section: they change only
// while the array is out of every slot (core/percpu.h), or, for a span the
// array keeps, when another CPU's free empties it, which cannot be while node
// is in use (core/free.cpp). false, with nothing
// changed, if the CPU is out of range, its slot is empty or *owner differs.
__attribute__((always_inline)) inline bool rseq_push_owned(ptrdiff_t off, void* const* slots, uint32_t ncpu,
                                                           const void* owner, const void* list_at, void* node) {
  typedef long long pair __attribute__((vector_size(16)));
  uintptr_t base, word, at, k;
  pair lo, hi;
retry:
  asm volatile goto(FW_RSEQ_START("%[word]")
           FW_RSEQ_SLOT("no")
           "cmpq %[base], (%[owner])\n\t"
           "jne %l[no]\n\t"
           "movq (%[list_at]), %[at]\n\t"             // the list
           "movq (%[at]), %[word]\n\t"
           "movq %[word], (%[node])\n\t"               // node's link (node is the caller's alone)
           "movq 8(%[at]), %[word]\n\t"                // the push count
           "addq $1, %[word]\n\t"
           "movq %[word], %[hi]\n\t"
           "movq %[node], %[lo]\n\t"
           "punpcklqdq %[hi], %[lo]\n\t"               // node, then count + 1
           "movdqu %[lo], (%[at])\n\t"                 // commit
           FW_RSEQ_END
           : [base] "=&r"(base), [word] "=&r"(word), [at] "=&r"(at), [k] "=&r"(k), [lo] "=&x"(lo), [hi] "=&x"(hi)
           : [off] "r"(off), [ncpu] "r"(ncpu), [slots] "r"(slots), [owner] "r"(owner), [list_at] "r"(list_at),
             [node] "r"(node)
           : "memory", "cc"
           : no, abort);
  return true;
no:
  return false;
abort:
  goto retry;
}

// A counted list in a table of 32-byte slots at byte offset `table` of the
// current CPU's array, whose 32-bit word at byte offset `mask` is the number
// of slots in use - 1 (a power of two - 1): the list is slot key & mask. A
// slot holds a tag word, the head, then a word whose low 16 bits are the room
// (core/lab.h PendingChain). If the tag is `tag` and room is not 0, links
// `node` in front (its first word: the old head) and stores head = node and
// room - 1 with one 16-byte store, the commit, which rewrites the rest of the
// room's word as it read it. false, with nothing changed, otherwise (CPU out
// of range, slot empty, another tag, no room).
__attribute__((always_inline)) inline bool rseq_push_counted(ptrdiff_t off, void* const* slots, uint32_t ncpu,
                                                             size_t mask, size_t table, uintptr_t key,
                                                             const void* tag, void* node) {
  typedef long long pair __attribute__((vector_size(16)));
  uintptr_t base, word, head, k;
  pair lo, hi;
retry:
  asm volatile goto(FW_RSEQ_START("%[word]")
           FW_RSEQ_SLOT("no")
           "movl (%[base], %[mask]), %k[k]\n\t"         // slots in use - 1
           "andl %k[key], %k[k]\n\t"
           "shlq $5, %[k]\n\t"
           "addq %[table], %[k]\n\t"                    // the slot's offset in the array
           "cmpq %[tag], (%[base], %[k])\n\t"
           "jne %l[no]\n\t"
           "movq 16(%[base], %[k]), %[word]\n\t"
           "testw %w[word], %w[word]\n\t"               // room
           "jz %l[no]\n\t"
           "subq $1, %[word]\n\t"                       // room - 1, the rest of the word unchanged
           "movq 8(%[base], %[k]), %[head]\n\t"
           "movq %[head], (%[node])\n\t"               // node's link (node is the caller's alone)
           "movq %[node], %[lo]\n\t"
           "movq %[word], %[hi]\n\t"
           "punpcklqdq %[hi], %[lo]\n\t"              // node, then the room's word
           "movdqu %[lo], 8(%[base], %[k])\n\t"       // commit
           FW_RSEQ_END
           : [base] "=&r"(base), [word] "=&r"(word), [head] "=&r"(head), [k] "=&r"(k), [lo] "=&x"(lo),
             [hi] "=&x"(hi)
           : [off] "r"(off), [ncpu] "r"(ncpu), [slots] "r"(slots), [mask] "r"(mask), [table] "r"(table),
             [key] "r"(key), [tag] "r"(tag), [node] "r"(node)
           : "memory", "cc"
           : no, abort);
  return true;
no:
  return false;
abort:
  goto retry;
}

// Takes the current CPU's slot: returns what it held and leaves it null.
// nullptr if the CPU is out of range or the slot was empty.
__attribute__((always_inline)) inline void* rseq_take(ptrdiff_t off, void** slots, uint32_t ncpu) {
  uintptr_t k, base;
retry:
  asm volatile goto(FW_RSEQ_START("%[base]")
           FW_RSEQ_SLOT("none")
           "movq $0, (%[slots], %[k])\n\t"               // commit
           FW_RSEQ_END
           : [k] "=&r"(k), [base] "=&r"(base)
           : [off] "r"(off), [ncpu] "r"(ncpu), [slots] "r"(slots)
           : "memory", "cc"
           : none, abort);
  return reinterpret_cast<void*>(base);
none:
  return nullptr;
abort:
  goto retry;
}

// Puts v into the current CPU's slot if that slot is empty. false if it is
// not, or the CPU is out of range.
__attribute__((always_inline)) inline bool rseq_put(ptrdiff_t off, void** slots, uint32_t ncpu, void* v) {
  uintptr_t k;
retry:
  asm volatile goto(FW_RSEQ_START("%[k]")
           FW_RSEQ_CPU("no")
           "cmpq $0, (%[slots], %[k])\n\t"
           "jne %l[no]\n\t"
           "movq %[v], (%[slots], %[k])\n\t"             // commit
           FW_RSEQ_END
           : [k] "=&r"(k)
           : [off] "r"(off), [ncpu] "r"(ncpu), [slots] "r"(slots), [v] "r"(v)
           : "memory", "cc"
           : no, abort);
  return true;
no:
  return false;
abort:
  goto retry;
}

#undef FW_RSEQ_START
#undef FW_RSEQ_CPU
#undef FW_RSEQ_SLOT
#undef FW_RSEQ_END

#else
#define FW_HAS_RSEQ 0
inline void* rseq_pop_counted(ptrdiff_t, void* const*, uint32_t, size_t) { return nullptr; }
inline bool rseq_push_counted(ptrdiff_t, void* const*, uint32_t, size_t, size_t, uintptr_t, const void*, void*) {
  return false;
}
inline bool rseq_push_owned(ptrdiff_t, void* const*, uint32_t, const void*, const void*, void*) { return false; }
inline void* rseq_take(ptrdiff_t, void**, uint32_t) { return nullptr; }
inline bool rseq_put(ptrdiff_t, void**, uint32_t, void*) { return false; }
#endif

}  // namespace fw::os
