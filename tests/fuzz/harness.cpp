// The fuzz harness: reads its input as a program of allocation operations and
// runs it on the fw_* API (the core, without the malloc override: in a fuzzer
// build ASan owns malloc), against a shadow model of every block: the size
// asked for, the alignment asked for, and a fill pattern over all its usable
// bytes. Every block is checked before it is freed or reallocated; the
// allocator's answers (alignment, usable size >= size, zeroed calloc, errno)
// are checked when it gives them. A second thread frees blocks the program
// hands it (remote frees) and allocates blocks it hands back. At the end of
// each input every block is freed, the heap invariants must hold
// (fw_check_heap) and the live bytes must be back where they started.
//
// Any failure prints what it saw and aborts, which libFuzzer (tools/fuzz)
// records as a crash; tests/fuzz/regressions keeps such inputs, replayed by
// ctest (fw_fuzz_replay, replay_main.cpp).
//
// Program format: a sequence of operations, each an opcode byte followed by
// the bytes its arguments take; a program ends where its input ends.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "freeway.h"

// The whole-heap check after each input costs more than most inputs; the
// fuzzer runs it after one input in four (chosen by the input's length, so a
// saved input repeats it), the replay after every input.
extern "C" int fw_fuzz_check_every_input;
int fw_fuzz_check_every_input = 0;

namespace {

[[noreturn]] void fail(const char* what, const void* p, size_t a, size_t b) {
  std::fprintf(stderr, "fuzz harness: %s (block %p, %zu, %zu)\n", what, p, a, b);
  std::fflush(stderr);
  std::abort();
}

// Byte i of a block with tag t.
inline unsigned char pattern(uint64_t t, size_t i) { return (unsigned char)(t ^ (i * 0x9d) ^ (i >> 8)); }

// The byte loops below are the harness's, not the allocator's: no coverage
// feedback (libFuzzer's comparison tracing would make them most of the time).
#if defined(__clang__)
#define FW_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define FW_NO_COVERAGE
#endif

// Which bytes a check looks at: all of them up to 64 KiB; above, the first and
// last 4 KiB and one byte in every 16 pages in between (every 256 pages in a
// huge block), so that large blocks do not become resident whole: page faults
// would be most of the fuzzer's time. next_checked(n, i) is the one after i.
FW_NO_COVERAGE inline size_t next_checked(size_t n, size_t i) {
  if (n <= 65536 || i < 4095 || i + 4096 >= n) return i + 1;
  size_t j = i + (n <= (8u << 20) ? 65521 : 1048573);
  return j < n - 4096 ? j : n - 4096;
}

FW_NO_COVERAGE void fill(void* p, size_t n, uint64_t t) {
  unsigned char* c = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; i = next_checked(n, i)) c[i] = pattern(t, i);
}

// First checked byte of the n filled that differs, below limit; SIZE_MAX if none.
FW_NO_COVERAGE size_t first_bad(const void* p, size_t n, size_t limit, uint64_t t) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n && i < limit; i = next_checked(n, i))
    if (c[i] != pattern(t, i)) return i;
  return SIZE_MAX;
}

void check(const void* p, size_t n, uint64_t t, const char* what) {
  size_t i = first_bad(p, n, n, t);
  if (i != SIZE_MAX) fail(what, p, i, n);
}

// After a move: of the bytes filled in a block of `filled` bytes, those below
// `limit` (the smaller of the old and new sizes) must have moved along.
void check_moved(const void* p, size_t filled, size_t limit, uint64_t t, const char* what) {
  size_t i = first_bad(p, filled, limit, t);
  if (i != SIZE_MAX) fail(what, p, i, limit);
}

// True when all of [p, p+n) checked is zero.
FW_NO_COVERAGE bool zeroed(const void* p, size_t n) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i = next_checked(n, i))
    if (c[i] != 0) return false;
  return true;
}

struct Block {
  void* p = nullptr;
  size_t size = 0;    // asked for
  size_t usable = 0;  // fw_usable_size at allocation: all of it is filled
  size_t align = 0;
  uint64_t tag = 0;
};

// Takes a new block into the model: checks what freeway promised, fills it.
void adopt(Block& b, void* p, size_t size, size_t align, uint64_t tag) {
  if (p == nullptr) fail("allocation failed", nullptr, size, align);
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) fail("block not 16-byte aligned", p, size, align);
  if (align && reinterpret_cast<uintptr_t>(p) % align != 0) fail("block not aligned as asked", p, size, align);
  if (!fw_owns(p)) fail("fw_owns is false for a block freeway returned", p, size, 0);
  size_t u = fw_usable_size(p);
  if (u < size) fail("usable size below the size asked for", p, u, size);
  b = Block{p, size, u, align, tag};
  fill(p, u, tag);
}

void release(Block& b, bool sized) {
  check(b.p, b.usable, b.tag, "block corrupted before free");
  if (fw_usable_size(b.p) != b.usable) fail("usable size changed while the block lived", b.p, b.usable, 0);
  // A sized free names the alignment of an aligned allocation (C23: free_sized
  // is for malloc, calloc and realloc blocks; free_aligned_sized for aligned_alloc's).
  if (sized && b.align != 0) fw_free_aligned_sized(b.p, b.align, b.size);
  else if (sized) fw_free_sized(b.p, b.size);
  else fw_free(b.p);
  b = Block{};
}

// ---------------------------------------------------------------------------
// The second thread: frees what it is handed, allocates what it is asked for.

struct Msg {
  Block b;        // to free (b.p != nullptr)
  size_t alloc;   // or: allocate a block of this size and hand it back
  uint64_t tag;
};

template <class T, size_t N>
struct Ring {  // single producer, single consumer
  std::atomic<size_t> head{0}, tail{0};
  T item[N];
  bool push(const T& v) {
    size_t t = tail.load(std::memory_order_relaxed);
    if (t - head.load(std::memory_order_acquire) == N) return false;
    item[t % N] = v;
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  bool pop(T& v) {
    size_t h = head.load(std::memory_order_relaxed);
    if (h == tail.load(std::memory_order_acquire)) return false;
    v = item[h % N];
    head.store(h + 1, std::memory_order_release);
    return true;
  }
};

Ring<Msg, 256> g_to_helper;
Ring<Block, 256> g_from_helper;
std::atomic<uint32_t> g_sent{0}, g_done{0};  // messages sent, messages handled

void helper_main() {
  for (;;) {
    Msg m;
    if (!g_to_helper.pop(m)) {
      uint32_t sent = g_sent.load(std::memory_order_acquire);
      if (sent == g_done.load(std::memory_order_relaxed)) g_sent.wait(sent);  // sleep until more
      continue;
    }
    if (m.b.p != nullptr) {
      release(m.b, false);
    } else {
      Block b;
      adopt(b, fw_malloc(m.alloc), m.alloc, 0, m.tag);
      while (!g_from_helper.push(b)) std::this_thread::yield();
    }
    g_done.fetch_add(1, std::memory_order_release);
    g_done.notify_all();
  }
}

void to_helper(const Msg& m) {
  while (!g_to_helper.push(m)) std::this_thread::yield();
  g_sent.fetch_add(1, std::memory_order_release);
  g_sent.notify_all();
}

void sync_helper() {
  for (;;) {
    uint32_t done = g_done.load(std::memory_order_acquire);
    if (done == g_sent.load(std::memory_order_relaxed)) return;
    g_done.wait(done);
  }
}

// ---------------------------------------------------------------------------
// The program reader.

struct Reader {
  const uint8_t* d;
  size_t n, at = 0;
  bool more() const { return at < n; }
  uint8_t u8() { return at < n ? d[at++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  uint32_t u32() { return uint32_t(u16()) | (uint32_t(u16()) << 16); }
  // A size: small, medium, large, or next to a size-class boundary.
  size_t size() {
    uint8_t k = u8();
    switch (k & 7) {
      case 0: case 1: case 2: return u8();                      // 0..255
      case 3: return u16() % 4097;                              // up to 4 KiB
      case 4: return u16() * 2u + (k >> 7);                     // up to 128 KiB
      case 5: return (size_t(u16()) << 6) % (6u << 20);         // up to 6 MiB (large)
      case 6: {                                                 // a class boundary, +-1
        unsigned e = 4 + (k >> 3) % 17;                         // 2^4 .. 2^20
        size_t base = (size_t(1) << e) + ((k >> 5) & 3) * (size_t(1) << e) / 4;
        return base + (u8() % 3) - 1;
      }
      default: return size_t(1) << ((k >> 3) % 23);            // powers of two to 4 MiB
    }
  }
  size_t align() { return size_t(1) << (u8() % 24); }           // 1 .. 8 MiB
};

constexpr int kSlots = 32;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::thread* helper = new std::thread(helper_main);  // lives for the process
  (void)helper;
  static uint64_t baseline = [] {
    fw_stats_t s;
    fw_stats(&s);
    return s.live_bytes;
  }();

  Block slot[kSlots];
  int huge_live = 0;
  Reader r{data, size};
  uint64_t tag = size * 0x9e3779b97f4a7c15ull + 1;
  while (r.more()) {
    uint8_t op = r.u8();
    Block& b = slot[r.u8() % kSlots];
    tag += 0x2545f4914f6cdd1dull;
    switch (op % 16) {
      case 0: case 1: {  // malloc
        if (b.p) release(b, false);
        size_t n = r.size();
        adopt(b, fw_malloc(n), n, 0, tag);
        break;
      }
      case 2: {  // calloc, zeroed
        if (b.p) release(b, false);
        size_t count = 1 + r.u8() % 64, n = r.size() / count;
        void* p = fw_calloc(count, n);
        if (p && !zeroed(p, count * n)) fail("calloc block not zeroed", p, 0, count * n);
        adopt(b, p, count * n, 0, tag);
        break;
      }
      case 3: {  // realloc: the contents up to the smaller size move along
        size_t n = r.size();
        if (b.p == nullptr) {
          adopt(b, fw_realloc(nullptr, n), n, 0, tag);
          break;
        }
        check(b.p, b.usable, b.tag, "block corrupted before realloc");
        if (n == 0) {  // frees, returns NULL (as glibc)
          if (fw_realloc(b.p, 0) != nullptr) fail("realloc(p, 0) returned a block", b.p, 0, 0);
          b = Block{};
          break;
        }
        void* q = fw_realloc(b.p, n);
        if (q == nullptr) fail("realloc failed", b.p, b.size, n);
        check_moved(q, b.usable, b.size < n ? b.size : n, b.tag, "realloc lost the contents");
        adopt(b, q, n, 0, tag);
        break;
      }
      case 4: {  // fw_malloc_aligned
        if (b.p) release(b, false);
        size_t a = r.align(), n = r.size();
        adopt(b, fw_malloc_aligned(a, n), n, a, tag);
        break;
      }
      case 5: {  // posix_memalign: alignment >= sizeof(void*)
        if (b.p) release(b, false);
        size_t a = r.align(), n = r.size();
        void* p = nullptr;
        int rc = fw_posix_memalign(&p, a, n);
        if (a < sizeof(void*)) {
          if (rc != EINVAL) fail("posix_memalign accepted an alignment below sizeof(void*)", p, a, n);
          if (rc == 0) fw_free(p);
          break;
        }
        if (rc != 0) fail("posix_memalign failed", nullptr, a, n);
        adopt(b, p, n, a, tag);
        break;
      }
      case 6: {  // the other aligned forms
        if (b.p) release(b, false);
        size_t n = r.size();
        switch (r.u8() % 4) {
          case 0: { size_t a = r.align(); adopt(b, fw_aligned_alloc(a, n), n, a, tag); break; }
          case 1: { size_t a = r.align(); adopt(b, fw_memalign(a, n), n, a, tag); break; }
          case 2: adopt(b, fw_valloc(n), n, 4096, tag); break;
          default: adopt(b, fw_pvalloc(n), n, 4096, tag); break;
        }
        break;
      }
      case 7: case 8:  // free
        if (b.p) release(b, false);
        break;
      case 9:  // free_sized (free_aligned_sized for an aligned block)
        if (b.p) release(b, true);
        break;
      case 10:  // hand the block to the other thread, which frees it
        if (b.p) {
          to_helper(Msg{b, 0, 0});
          b = Block{};
        }
        break;
      case 11: {  // the other thread allocates blocks and hands them back
        int k = 1 + r.u8() % 8;
        size_t n = r.size() % 70000;
        for (int i = 0; i < k; i++) to_helper(Msg{Block{}, n + size_t(i) * 24, tag + uint64_t(i)});
        sync_helper();
        Block got;
        while (g_from_helper.pop(got)) {
          Block& dst = slot[(&b - slot + (got.tag & 7)) % kSlots];
          if (dst.p) release(dst, false);
          check(got.p, got.usable, got.tag, "block from the other thread corrupted");
          dst = got;
        }
        break;
      }
      case 12: {  // reallocarray, including overflow
        size_t count = r.u16(), n = r.size();
        size_t total;
        if (__builtin_mul_overflow(count, n, &total) || total > (64u << 20)) {
          errno = 0;
          void* q = fw_reallocarray(b.p, SIZE_MAX / 2, 3);
          if (q != nullptr || errno != ENOMEM) fail("reallocarray overflow did not fail with ENOMEM", q, 0, 0);
          break;  // b is untouched
        }
        if (b.p) check(b.p, b.usable, b.tag, "block corrupted before reallocarray");
        if (total == 0) {
          if (b.p) {
            fw_reallocarray(b.p, count, n);  // frees
            b = Block{};
          }
          break;
        }
        void* q = fw_reallocarray(b.p, count, n);
        if (q == nullptr) fail("reallocarray failed", b.p, count, n);
        if (b.p) check_moved(q, b.usable, b.size < total ? b.size : total, b.tag, "reallocarray lost the contents");
        adopt(b, q, total, 0, tag);
        break;
      }
      case 13: {  // errors: calloc overflow, bad alignments
        errno = 0;
        if (fw_calloc(SIZE_MAX / 8, 16 + r.u8()) != nullptr || errno != ENOMEM)
          fail("calloc overflow did not fail with ENOMEM", nullptr, 0, 0);
        errno = 0;
        size_t bad = 3 + 2 * size_t(r.u8());  // odd, not a power of two
        if (fw_malloc_aligned(bad, 64) != nullptr || errno != EINVAL)
          fail("fw_malloc_aligned accepted an alignment that is not a power of two", nullptr, bad, 0);
        break;
      }
      case 14: {  // huge (a region of its own), at most two at a time, rarely
        if (b.p) release(b, false);
        if (huge_live >= 2 || r.u8() % 4 != 0) break;
        size_t n = (size_t(257) << 20) + size_t(r.u16()) * 4096;
        adopt(b, fw_malloc(n), n, 0, tag);
        break;
      }
      default:  // give free memory back to the OS (rarely: everything faults in again)
        if (r.u8() % 8 == 0) fw_collect();
        break;
    }
    huge_live = 0;
    for (Block& s : slot)
      if (s.p && s.size > (256u << 20)) huge_live++;
  }
  sync_helper();
  for (Block& s : slot)
    if (s.p) release(s, false);
  if ((fw_fuzz_check_every_input || size % 4 == 0) && fw_check_heap() != 0)
    fail("fw_check_heap found violations", nullptr, 0, 0);
  fw_stats_t st;
  fw_stats(&st);
  if (st.live_bytes != baseline) fail("live bytes not back to the start after freeing everything", nullptr,
                                      size_t(st.live_bytes), size_t(baseline));
  return 0;
}
