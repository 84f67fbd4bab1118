// core/secure_heap.cpp: secure mode's block format and quarantine (see secure_heap.h).
#include "core/secure_heap.h"

#include <cstring>

#include "core/report.h"
#include "core/secure.h"
#include "platform/os.h"

namespace fw {
namespace {

// The zero-size area: base (0 until first use) and a bit per slot in use.
constexpr size_t kZeroBytes = size_t(1) << 20;
constexpr size_t kZeroSlots = kZeroBytes / 16;
std::atomic<uintptr_t> g_zero_base{0};
FW_COLD_BSS std::atomic<uint64_t> g_zero_used[kZeroSlots / 64];
std::atomic<uint64_t> g_zero_draws{0};

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t key() { return g_canary_key.load(std::memory_order_relaxed); }
// Never zero: a NUL written one byte too far must change the byte.
uint8_t canary_byte() { return uint8_t(mix64(key() ^ 0x6361) >> 56) | 0x80; }
uint8_t fill_byte() { return uint8_t(mix64(key() ^ 0x66696c) >> 56) | 0x81; }
uint32_t size_mask(const void* p) { return uint32_t(mix64(key() ^ reinterpret_cast<uintptr_t>(p))); }

// Index of the first byte of [p, p+n) that differs from v, or n.
size_t first_other(const uint8_t* p, size_t n, uint8_t v) {
  size_t i = 0;
  uint64_t word = 0x0101010101010101ull * v;
  for (; i < n && (reinterpret_cast<uintptr_t>(p + i) & 7) != 0; i++)
    if (p[i] != v) return i;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != word) break;
  }
  for (; i < n; i++)
    if (p[i] != v) return i;
  return n;
}

// Whether a free block's bytes after its first 16 all hold the fill.
bool fill_intact(const uint8_t* b, uint32_t bs) { return bs <= 16 || first_other(b + 16, bs - 16, fill_byte()) == bs - 16; }

}  // namespace

unsigned secure_class(unsigned c, size_t n, size_t align) {
  size_t need = n + kSecureTail;
  if (need > kSmallMax) return kClassCount;
  unsigned fit = class_of(need);
  // Secure mode's spans take no colour: a plain twin's blocks are its sized
  // class's (size_class.h).
  c = sized_class(c);
  if (fit > c) c = fit;
  while (c < kSizeClasses && (class_block_size(c) & (align - 1)) != 0) c++;  // aligned requests only: classes are multiples of kMinAlign
  if (c == kSizeClasses) return kClassCount;
  return c;
}

void secure_format(void* p, uint32_t bs, size_t n) {
  uint8_t* b = static_cast<uint8_t*>(p);
  if (!fill_intact(b, bs)) report_misuse("write after free", p);
  // The first word still holds the encoded free-list link: a program that
  // reads memory it never wrote would learn the list key from it (the last
  // block carved holds the key itself). It gets the fill, as the rest.
  std::memset(b, fill_byte(), 8);
  std::memset(b + n, canary_byte(), bs - 4 - n);
  uint32_t enc = uint32_t(n) ^ size_mask(p);
  std::memcpy(b + bs - 4, &enc, 4);
}

size_t secure_requested(const void* p, const Span* s) {
  span_check_free(s, p);
  const uint8_t* b = static_cast<const uint8_t*>(p);
  uint32_t bs = s->block_size.load(std::memory_order_relaxed);
  uint32_t enc;
  std::memcpy(&enc, b + bs - 4, 4);
  size_t n = enc ^ size_mask(p);
  if (n + kSecureTail > bs) report_misuse("heap overflow over the end of the block (its size field)", p);
  if (first_other(b + n, bs - 4 - n, canary_byte()) != bs - 4 - n) report_overflow(p, n);
  return n;
}

void secure_fill(void* p, uint32_t bs) {
  if (bs > 16) std::memset(static_cast<uint8_t*>(p) + 16, fill_byte(), bs - 16);
}

void* zero_alloc() {
  uintptr_t base = g_zero_base.load(std::memory_order_acquire);
  if (base == 0) {
    void* area = os::reserve_aligned(kZeroBytes, 1u << 16);
    if (area == nullptr) return nullptr;
    // Reserved memory is usable as is where commit is a no-op (Linux): take that away.
    if (os::features().commit_is_noop && !os::protect(area, kZeroBytes, false)) {
      os::release(area, kZeroBytes);
      return nullptr;
    }
    // Racing first callers: one area wins, the others give theirs back.
    if (g_zero_base.compare_exchange_strong(base, reinterpret_cast<uintptr_t>(area), std::memory_order_acq_rel,
                                            std::memory_order_acquire))
      base = reinterpret_cast<uintptr_t>(area);
    else
      os::release(area, kZeroBytes);
  }
  // Search from a random word, so that which address comes next is not predictable.
  size_t words = kZeroSlots / 64;
  size_t start = size_t(mix64(g_zero_draws.fetch_add(1, std::memory_order_relaxed) ^ key())) % words;
  for (size_t k = 0; k < words; k++) {
    size_t w = (start + k) % words;
    uint64_t used = g_zero_used[w].load(std::memory_order_relaxed);
    while (used != ~uint64_t(0)) {
      unsigned bit = unsigned(__builtin_ctzll(~used));
      if (g_zero_used[w].compare_exchange_weak(used, used | (uint64_t(1) << bit), std::memory_order_relaxed))
        return reinterpret_cast<void*>(base + (w * 64 + bit) * 16);
    }
  }
  return nullptr;
}

bool zero_owns(const void* p) {
  uintptr_t base = g_zero_base.load(std::memory_order_acquire);
  return base != 0 && reinterpret_cast<uintptr_t>(p) - base < kZeroBytes;
}

void zero_free(void* p) {
  uintptr_t off = reinterpret_cast<uintptr_t>(p) - g_zero_base.load(std::memory_order_acquire);
  if (off % 16 != 0) report_misuse("free of a pointer inside a zero-size block area (not a block):", p);
  size_t slot = off / 16;
  uint64_t bit = uint64_t(1) << (slot % 64);
  if ((g_zero_used[slot / 64].fetch_and(~bit, std::memory_order_relaxed) & bit) == 0)
    report_misuse("double free of a zero-size block", p);
}

void secure_fill_link(void* p) { std::memset(p, fill_byte(), 8); }

void secure_check_quarantined(const void* p, uint32_t bs) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  if (first_other(b, 8, fill_byte()) != 8 || !has_canary(p) || !fill_intact(b, bs))
    report_misuse("write after free", p);
}

namespace {
// The next random slot of lab's quarantine: xorshift64 seeded from the
// secret key, so which block leaves next cannot be told from outside; a
// multiply spreads its bits over the slot index.
void*& random_slot(Lab* lab, const void* p) {
  uint64_t x = lab->quarantine_rng;
  if (x == 0) x = mix64(key() ^ (uint64_t(lab->id) << 32) ^ reinterpret_cast<uintptr_t>(p)) | 1;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  lab->quarantine_rng = x;
  return lab->quarantine[(x * 0x9e3779b97f4a7c15ull) >> 56 & (kLabQuarantine - 1)];
}

// A block leaving lab's quarantine: checked, and its size taken off.
void* leave_quarantine(Lab* lab, void* out) {
  const uint32_t bs = quarantined_span(out)->block_size.load(std::memory_order_relaxed);
  secure_check_quarantined(out, bs);
  lab->quarantine_bytes -= bs;
  return out;
}
}  // namespace

void* quarantine_swap(Lab* lab, void* p, uint32_t bs) {
  void*& slot = random_slot(lab, p);
  void* out = slot;
  slot = p;
  lab->quarantine_bytes += bs;
  return out != nullptr ? leave_quarantine(lab, out) : nullptr;
}

void* quarantine_over(Lab* lab) {
  while (lab->quarantine_bytes > kLabQuarantineBytes) {
    // Random slots until one holds a block (they hold more than 1 MiB, so
    // at least 8 of the 256 do: kSmallMax is 128 KiB).
    void*& slot = random_slot(lab, lab);
    if (void* out = slot) {
      slot = nullptr;
      return leave_quarantine(lab, out);
    }
  }
  return nullptr;
}

}  // namespace fw
