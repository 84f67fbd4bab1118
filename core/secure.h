// core/secure.h: hardening against bad frees, and FREEWAY_SECURE=1.
//
// Always on:
//  - Block check. A pointer freed into a small span must be the start of a
//    carved block: with off = (p - start) mod 2^32, start being the address of
//    the span's block 0 (whose low 32 bits the descriptor keeps, span.h), and
//    block size d = 2^k * m (m odd), off is a multiple of d exactly when
//    rotr32(off * inv(m), k) <= (2^32-1)/d, and the result is then off/d, the
//    block's index. So one subtraction, one multiply, one rotate and one
//    compare with `carved` reject interior pointers, pointers between blocks
//    and pointers past the carved part.
//    (Granlund-Montgomery exact division; carved * d <= kVspanSize < 2^32, so
//    a non-multiple, whose result is above (2^32-1)/d, always fails the
//    compare. p lies in start's vspan, which starts with block 0.)
//  - Free canary. A freed block's second word holds kCanary(p) = key ^ p; malloc
//    clears it when it hands the block out. Freeing a block whose second word
//    already holds its canary is a double free, however many frees came in
//    between. The key is random per process, so live data matches it only by
//    a 2^-64 chance.
// FREEWAY_SECURE=1 adds:
//  - encoded free lists: every next pointer stored in a free block is XORed
//    with a second random key, so a use-after-free write or a leak of a freed
//    block does not give or take a usable pointer;
//  - guard pages: the last page of every small span and the page after every
//    large block are made inaccessible, so a linear overflow faults.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/config.h"
#include "core/size_class.h"

namespace fw {

extern FW_HIDDEN std::atomic<uint64_t> g_canary_key;  // never 0 once initialised
extern FW_HIDDEN std::atomic<uint64_t> g_list_key;    // 0 unless FREEWAY_SECURE=1

// Draws the keys (once; racing callers agree through CAS). Must run before any
// block is carved: arena_init calls it.
void secure_init();
// FREEWAY_SECURE, -1 until read (secure_mode_read), then 0 or 1 for good.
extern FW_HIDDEN std::atomic<int> g_secure;
bool secure_mode_read();
// Whether the process runs in secure mode. Asked on every slow path, often more
// than once, so inline: a load and a compare once the option has been read.
FW_INLINE bool secure_mode() {
  const int s = g_secure.load(std::memory_order_relaxed);
  return FW_LIKELY(s >= 0) ? s == 1 : secure_mode_read();
}

// --- block check ---
struct ClassDiv {
  uint32_t inv;    // inverse of the odd part of the block size, mod 2^32
  uint32_t shift;  // power of two in the block size
};
namespace detail {
constexpr ClassDiv make_div(uint32_t d) {
  uint32_t k = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    k++;
  }
  uint32_t inv = d;  // Newton: each step doubles the correct low bits
  for (int i = 0; i < 5; i++) inv *= 2 - d * inv;
  return ClassDiv{inv, k};
}
struct DivTable {
  ClassDiv div[kClassCount];
};
constexpr DivTable make_div_table() {
  DivTable t{};
  for (unsigned c = 0; c < kClassCount; c++) t.div[c] = make_div(kClassTables.info[c].block_size);
  return t;
}
}  // namespace detail
inline constexpr detail::DivTable kClassDivs = detail::make_div_table();

// Index of the block p starts in its span of class c, whose block 0 is at an
// address with low 32 bits `start` (the descriptor's offset, span.h), or a
// number >= the span's capacity if p is not a block start (p, in the same
// vspan, below block 0 wraps to an offset near 2^32).
FW_INLINE uint32_t block_number_at(uint32_t off, size_t c) {  // off = the low 32 bits of p - start
  uint32_t x = off * kClassDivs.div[c].inv;
  uint32_t s = kClassDivs.div[c].shift;
  return (x >> s) | (x << ((32 - s) & 31));
}
FW_INLINE uint32_t block_number(const void* p, size_t c, uint32_t start) {
  return block_number_at(uint32_t(reinterpret_cast<uintptr_t>(p)) - start, c);
}

// --- canary ---
FW_INLINE uint64_t canary_of(const void* p) {
  return g_canary_key.load(std::memory_order_relaxed) ^ reinterpret_cast<uintptr_t>(p);
}
#if FREEWAY_HARDENING
FW_INLINE bool has_canary(const void* p) { return static_cast<const uint64_t*>(p)[1] == canary_of(p); }
FW_INLINE void set_canary(void* p) { static_cast<uint64_t*>(p)[1] = canary_of(p); }
FW_INLINE void clear_canary(void* p) { static_cast<uint64_t*>(p)[1] = 0; }
#else  // measurement build: no canary anywhere, so no path tests a stale one
FW_INLINE bool has_canary(const void*) { return false; }
FW_INLINE void set_canary(void*) {}
FW_INLINE void clear_canary(void*) {}
#endif

// --- free-list links (encoded in secure mode) ---
FW_INLINE void* block_next(const void* b) {
  return reinterpret_cast<void*>(*static_cast<const uintptr_t*>(b) ^ g_list_key.load(std::memory_order_relaxed));
}
FW_INLINE void block_link(void* b, const void* next) {
  *static_cast<uintptr_t*>(b) = reinterpret_cast<uintptr_t>(next) ^ g_list_key.load(std::memory_order_relaxed);
}
// The same for the per-thread fast paths (alloc.h, free.h), which never run in
// secure mode: there the thread slot holds the SECURE placeholder between
// calls (lab.h), so every call takes a slow path. Outside it the key is 0, so
// a plain link is the encoded one, without a load and an XOR on every call.
FW_INLINE void* block_next_fast(const void* b) { return *static_cast<void* const*>(b); }
FW_INLINE void block_link_fast(void* b, const void* next) { *static_cast<const void**>(b) = next; }

}  // namespace fw
