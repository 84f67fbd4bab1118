// core/secure_heap.h: the block format and quarantine of FREEWAY_SECURE=1.
//
// secure.h's checks are always on. Secure mode adds, for every small block:
//  - Tail canary. A block holds its requested size n, encoded in its last 4
//    bytes (n XOR a mask made from a secret key and the block's address), and a
//    canary byte in every byte from n up to those 4 bytes. Free (and realloc,
//    sized free, usable size) check both, so a write past the requested size,
//    by one byte or more, is reported: "freeway: heap overflow past the N bytes
//    of 0x...". Blocks come from the class of n + kSecureTail, so there is
//    always at least one canary byte.
//  - Free fill. While a block is free, every byte after its first 16 (the
//    free-list link and the free canary, secure.h) holds a fill byte: free and
//    carving write it, and malloc checks it before handing the block out, so a
//    write after free is reported at the next malloc of that block: "freeway:
//    write after free 0x...". While it is in the quarantine, its first word
//    holds the fill too and its second the free canary, and both are checked
//    with the rest when it leaves, so a write into any byte of a small block
//    during its quarantine is caught.
//  - Quarantine. Free puts the block in a random slot of the freeing thread's
//    quarantine (kLabQuarantine slots in its LAB, lab.h) and really frees the
//    block it displaces, so a freed block is reused only after a random number
//    of that thread's later frees (about kLabQuarantine on average), never by
//    the next malloc, and which address comes back is not predictable. The
//    blocks a quarantine holds add up to kLabQuarantineBytes (1 MiB) at most:
//    past it, free really frees blocks of other random slots too, until they
//    fit. So blocks of up to 4 KiB wait about kLabQuarantine frees, bigger
//    ones fewer, and a thread holds at most 1 MiB back (with 256 slots alone,
//    up to 32 MiB of 128 KiB blocks: 40 threads freeing 48 KiB blocks held
//    286 MiB, docs/benchmarks.md, Stop 93). Being
//    per thread, it adds no shared write to free: the displaced block is
//    usually the thread's own, freed locally. A double free of a quarantined
//    block is still caught (its free canary is set). A thread's quarantine is
//    emptied when it exits and by fw_collect on that thread; frees with no
//    thread cache (in a signal handler that interrupted malloc, or during
//    thread exit) skip the quarantine.
//  - Zero-size blocks. malloc(0) returns a unique address in an area that is
//    never readable or writable (one 1 MiB reservation made inaccessible,
//    65,536 16-byte slots tracked by a bitmap outside it), so any read or
//    write through it faults. When the area is full, malloc(0) falls back to
//    a block whose every byte is tail canary.
// The canary and fill bytes come from the secret key and are never zero, so a
// stray NUL terminator is caught too. Large blocks keep their guard page
// (secure.h) instead. The fast paths do not change: in secure mode a thread's
// slot holds the SECURE placeholder (lab.h), whose lists are empty and which
// owns no span, so every malloc and free takes its slow path, which comes here.
//
// Invariant (secure mode): every block on a free list or in the quarantine has
// the fill byte in [16, block size); every block in use has a valid tail.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "core/lab.h"
#include "core/size_class.h"
#include "core/span.h"

namespace fw {

constexpr size_t kSecureTail = 5;  // 4 bytes of encoded size + at least one canary byte

// The class a secure block of n bytes aligned to `align` comes from, given the
// class c the fast path chose for it: the smallest class >= c whose blocks
// hold n + kSecureTail bytes and are multiples of align; kClassCount if none
// (the block is then a large one). align is what the call asked for
// (kMinAlign for malloc): c's own block size may be a multiple of more.
unsigned secure_class(unsigned c, size_t n, size_t align);

// Malloc side: checks the free fill of block p (block size bs; reports a write
// after free) and writes its tail for n requested bytes.
void secure_format(void* p, uint32_t bs, size_t n);

// Free side, for a pointer p into small span s: checks that p is a block in use
// (span_check_free) and its tail (reports an overflow), and returns its
// requested size.
size_t secure_requested(const void* p, const Span* s);

// Fills a free block's bytes after its first 16 (free and carving).
void secure_fill(void* p, uint32_t bs);
// A block entering the quarantine: its first word gets the fill as well.
void secure_fill_link(void* p);
// A block leaving the quarantine (block size bs): reports a write after free
// unless its first word, its free canary and its fill are intact.
void secure_check_quarantined(const void* p, uint32_t bs);

// Zero-size blocks: a slot of the inaccessible area, or nullptr if it is full
// (or could not be reserved); whether p is in the area; freeing a slot
// (reports a pointer that is not a slot in use).
void* zero_alloc();
bool zero_owns(const void* p);
void zero_free(void* p);

// Puts p (checked, canaried, filled; block size bs) in lab's quarantine and
// returns the block it displaces, to be freed now, or nullptr. Only lab's
// holder calls it.
void* quarantine_swap(Lab* lab, void* p, uint32_t bs);
// While lab's quarantine holds more than kLabQuarantineBytes: takes the block
// of another random slot out and returns it, to be freed now; nullptr once
// they fit. Only lab's holder calls it.
void* quarantine_over(Lab* lab);

}  // namespace fw
