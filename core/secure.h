// core/secure.h: hardening against bad frees, and FREEWAY_SECURE=1.
//
// Always on:
//  - Block check. A pointer freed into a small span must be the start of a
//    carved block: with off = (p - start) mod 2^32, start being the address of
//    the span's block 0 (whose low 32 bits the descriptor keeps, span.h), and
//    block size d = 2^s * m (m odd), rotr32(off * mul, R) with
//    mul = 2^(R-s) * inv(m) mod 2^32 and the fixed rotate R = kBlockRotate is
//    off/d when off is a multiple of d, and at least 2^(32-R) otherwise, above
//    any span's capacity (proof at kBlockRotate). So one subtraction, one
//    multiply, one rotate by a constant and one compare with `carved` reject
//    interior pointers, pointers between blocks and pointers past the carved
//    part. The multiplier is the class's (kClassDivs) and, for free's fast
//    path, the descriptor's copy (span.h: block_mul), so that the path loads
//    neither the class nor a table entry (Granlund-Montgomery exact division,
//    with the power of two scaled up to a rotate every class shares: 3
//    instructions fewer than a rotate by the class's own count).
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
// The rotate every class's block check shares. For p in the vspan of a span
// whose block 0 is at start, n = p - start lies in (-kVspanSize, kVspanSize).
// With d = 2^s * m, mul = 2^(R-s) * inv(m) and x = n * mul mod 2^32:
//  - n = k * d: x = k * 2^R exactly (k < 2^(32-R)), so rotr32(x, R) = k;
//  - x's low R bits not all 0: the rotate moves them to the top, so the result
//    is at least 2^(32-R), above any capacity (kVspanSize / kMinAlign);
//  - x = j * 2^R: then n * 2^(R-s) = j * m * 2^R mod 2^32, so n = j * d plus a
//    multiple of 2^(32-R+s); a non-zero multiple is at least 2^(32-R+s), which
//    is 2 * kVspanSize or more when R <= 31 - kVspanShift + log2(kMinAlign),
//    while |n - j * d| < 2 * kVspanSize for the j < capacity that pass: so n
//    is block j's start.
// R must also be at least every block size's power of two (so 2^(R-s) is an
// integer): the largest, kSmallMax's. With 256 KiB vspans, 16-byte
// granules and 128 KiB blocks that leaves R = 17 alone (the asserts below).
// tests/test_span.cpp checks every class against every n.
constexpr unsigned kBlockRotate = 17;
static_assert((kMinAlign & (kMinAlign - 1)) == 0, "kMinAlign is a power of two");
static_assert(kBlockRotate <= 31 - kVspanShift + unsigned(__builtin_ctzll(kMinAlign)),
              "a multiple of 2^(32-R+s) other than 0 is 2 * kVspanSize or more");
static_assert(kVspanSize / kMinAlign <= (size_t(1) << (32 - kBlockRotate)), "a failed check is above any capacity");

struct ClassDiv {
  uint32_t mul;  // 2^(kBlockRotate - s) * inv(m) mod 2^32 for block size 2^s * m, m odd
};
namespace detail {
constexpr ClassDiv make_div(uint32_t d) {
  const unsigned s = unsigned(__builtin_ctz(d));  // the power of two in d
  const uint32_t m = d >> s;
  uint32_t inv = m;  // Newton: each step doubles the correct low bits
  for (int i = 0; i < 5; i++) inv *= 2 - m * inv;
  return ClassDiv{inv << (kBlockRotate - s)};
}
struct DivTable {
  ClassDiv div[kClassCount];
};
constexpr DivTable make_div_table() {
  DivTable t{};
  for (unsigned c = 0; c < kClassCount; c++) t.div[c] = make_div(kClassTables.info[c].block_size);
  return t;
}
constexpr bool rotate_fits_every_class() {
  for (unsigned c = 0; c < kClassCount; c++) {
    const uint32_t d = kClassTables.info[c].block_size;
    if (unsigned(__builtin_ctz(d)) > kBlockRotate || d % kMinAlign != 0) return false;
  }
  return true;
}
static_assert(rotate_fits_every_class(), "every block size is a multiple of kMinAlign with at most 2^kBlockRotate in it");
}  // namespace detail
inline constexpr detail::DivTable kClassDivs = detail::make_div_table();
FW_INLINE uint32_t block_mul_of(size_t c) { return kClassDivs.div[c].mul; }

// Index of the block p starts in its span, whose block 0 is at an address with
// low 32 bits `start` (the descriptor's offset, span.h) and whose class's
// multiplier is mul, or a number >= the span's capacity if p is not a block
// start (p, in the same vspan, below block 0 wraps to an offset near 2^32).
// block_rotate(off * mul) is the block's index (free's fast path takes the
// offset and the multiplier from the descriptor's copies, with one load:
// relaxed.h, pair_relaxed).
FW_INLINE uint32_t block_rotate(uint32_t x) { return (x >> kBlockRotate) | (x << (32 - kBlockRotate)); }
FW_INLINE uint32_t block_number_at(uint32_t off, uint32_t mul) {  // off = the low 32 bits of p - start
  return block_rotate(off * mul);
}
FW_INLINE uint32_t block_number(const void* p, size_t c, uint32_t start) {
  return block_number_at(uint32_t(reinterpret_cast<uintptr_t>(p)) - start, block_mul_of(c));
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
