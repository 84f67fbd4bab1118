// test_api.cpp: the C allocation API as a program sees it when it links
// libfreeway.so: the malloc family (replaced) and the fw_* functions of
// freeway.h. glibc's documented behaviour is the reference wherever C and
// POSIX leave a choice.
//
// The compiler knows malloc & co. and may fold calls whose result it can
// predict (malloc(SIZE_MAX) == NULL, a malloc/free pair with nothing between).
// Sizes therefore go through opaque(), and pointers through escape(), so that
// every call below really reaches the allocator. errno is checked right after
// the call it belongs to, before any other check (reporting may change it).
#include <doctest/doctest.h>

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "freeway.h"

// C23 / glibc 2.39 functions; Debian 12's glibc headers do not declare them,
// libfreeway.so defines them.
extern "C" void free_sized(void* p, size_t size);
extern "C" void free_aligned_sized(void* p, size_t alignment, size_t size);

namespace {

constexpr size_t KiB = size_t(1) << 10;
constexpr size_t MiB = size_t(1) << 20;
constexpr size_t kPtrdiffMax = size_t(PTRDIFF_MAX);

template <class T>
T opaque(T v) {
  asm volatile("" : "+r"(v));
  return v;
}

void escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

bool aligned_to(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

// A byte pattern that depends on the position and a seed, so that a block
// copied to the wrong offset or mixed with another block is noticed. It is
// made of 8-byte words so that 300 MiB blocks fill and check quickly.
uint64_t pattern_word(size_t w, unsigned seed) {
  uint64_t x = (uint64_t(w) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(seed) * 0xD1B54A32D192ED03ull);
  x ^= x >> 29;
  return x * 0xBF58476D1CE4E5B9ull;
}

unsigned char pattern(size_t i, unsigned seed) {
  return static_cast<unsigned char>(pattern_word(i / 8, seed) >> (8 * (i % 8)));
}

void fill(void* p, size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  size_t words = n / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t x = pattern_word(w, seed);
    memcpy(b + 8 * w, &x, 8);
  }
  for (size_t i = words * 8; i < n; ++i) b[i] = pattern(i, seed);
}

// Returns the first offset in [0, n) whose byte does not match, or n.
size_t first_mismatch(const void* p, size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  size_t words = n / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t x;
    memcpy(&x, b + 8 * w, 8);
    if (x != pattern_word(w, seed)) {
      for (size_t i = 8 * w;; ++i)
        if (b[i] != pattern(i, seed)) return i;
    }
  }
  for (size_t i = words * 8; i < n; ++i)
    if (b[i] != pattern(i, seed)) return i;
  return n;
}

// Every byte of [p, p+n) is v. (All bytes equal the first one exactly when the
// block equals itself shifted by one byte.)
bool all_bytes(const void* p, size_t n, unsigned char v) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (n == 0) return true;
  return b[0] == v && memcmp(b, b + 1, n - 1) == 0;
}

// Sizes no allocator can satisfy on a 64-bit machine.
const size_t kImpossible[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096, SIZE_MAX / 2 + 1, kPtrdiffMax + 1, kPtrdiffMax, size_t(1) << 62,
    size_t(1) << 56,
};

fw_stats_t stats() {
  fw_stats_t s;
  memset(&s, 0, sizeof s);
  fw_stats(&s);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// Errors.

TEST_CASE("malloc of an impossible size returns NULL and sets errno to ENOMEM") {
  for (size_t n : kImpossible) {
    CAPTURE(n);
    errno = 0;
    void* p = malloc(opaque(n));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = fw_malloc(opaque(n));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
  }
}

TEST_CASE("calloc of an impossible total size returns NULL and sets errno to ENOMEM") {
  for (size_t n : kImpossible) {
    CAPTURE(n);
    errno = 0;
    void* p = calloc(opaque(size_t(1)), opaque(n));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = calloc(opaque(n), opaque(size_t(1)));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
  }
  // count * size == PTRDIFF_MAX + 1 without overflowing size_t.
  errno = 0;
  void* p = calloc(opaque(size_t(2)), opaque(kPtrdiffMax / 2 + 1));
  CHECK(errno == ENOMEM);
  CHECK(p == nullptr);
  if (p) free(p);
}

TEST_CASE("calloc whose count times size overflows returns NULL and sets errno to ENOMEM") {
  const size_t cases[][2] = {
      {SIZE_MAX, SIZE_MAX},           {SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {size_t(1) << 32, size_t(1) << 32},
      {(size_t(1) << 33) + 1, size_t(1) << 31}, {3, SIZE_MAX / 3 + 1}, {SIZE_MAX, 16},
  };
  for (const auto& c : cases) {
    CAPTURE(c[0]);
    CAPTURE(c[1]);
    errno = 0;
    void* p = calloc(opaque(c[0]), opaque(c[1]));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = fw_calloc(opaque(c[0]), opaque(c[1]));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
  }
}

TEST_CASE("reallocarray whose count times size overflows returns NULL, sets ENOMEM and leaves the block intact") {
  const size_t n = 777;
  void* p = malloc(n);
  REQUIRE(p != nullptr);
  fill(p, n, 1);
  const size_t cases[][2] = {{SIZE_MAX, 2}, {2, SIZE_MAX / 2 + 1}, {size_t(1) << 32, size_t(1) << 32}};
  for (const auto& c : cases) {
    errno = 0;
    void* q = reallocarray(p, opaque(c[0]), opaque(c[1]));
    CHECK(errno == ENOMEM);
    CHECK(q == nullptr);
    errno = 0;
    q = fw_reallocarray(p, opaque(c[0]), opaque(c[1]));
    CHECK(errno == ENOMEM);
    CHECK(q == nullptr);
    // Product fits but is impossible.
    errno = 0;
    q = reallocarray(p, opaque(size_t(2)), opaque(kPtrdiffMax / 2 + 1));
    CHECK(errno == ENOMEM);
    CHECK(q == nullptr);
  }
  CHECK(first_mismatch(p, n, 1) == n);
  CHECK(fw_owns(p));
  free(p);
  // reallocarray(NULL, ...) with overflow fails the same way.
  errno = 0;
  void* q = reallocarray(nullptr, opaque(SIZE_MAX), opaque(size_t(3)));
  CHECK(errno == ENOMEM);
  CHECK(q == nullptr);
}

TEST_CASE("reallocarray resizes like realloc(count * size) and keeps the contents") {
  auto* p = static_cast<uint32_t*>(reallocarray(nullptr, 10, sizeof(uint32_t)));
  REQUIRE(p != nullptr);
  for (uint32_t i = 0; i < 10; ++i) p[i] = i * 7;
  p = static_cast<uint32_t*>(reallocarray(p, 100000, sizeof(uint32_t)));
  REQUIRE(p != nullptr);
  CHECK(malloc_usable_size(p) >= 100000 * sizeof(uint32_t));
  for (uint32_t i = 0; i < 10; ++i) CHECK(p[i] == i * 7);
  for (uint32_t i = 0; i < 100000; ++i) p[i] = i;
  p = static_cast<uint32_t*>(fw_reallocarray(p, 5, sizeof(uint32_t)));
  REQUIRE(p != nullptr);
  for (uint32_t i = 0; i < 5; ++i) CHECK(p[i] == i);
  free(p);
}

TEST_CASE("posix_memalign rejects alignments that are not a power of two or below sizeof(void*) with EINVAL") {
  const size_t bad[] = {0, 1, 2, 4, 3, 5, 6, 12, 24, 48, 96, 100, 1000, 4097, (size_t(1) << 20) + 16,
                        SIZE_MAX, SIZE_MAX / 2, (size_t(1) << 63) + 1};
  static_assert(sizeof(void*) == 8, "the list above assumes 8-byte pointers");
  for (size_t a : bad) {
    CAPTURE(a);
    void* sentinel = reinterpret_cast<void*>(uintptr_t(0x5ca1ab1e));
    void* out = sentinel;
    CHECK(posix_memalign(&out, opaque(a), 64) == EINVAL);
    CHECK(out == sentinel);
    out = sentinel;
    CHECK(fw_posix_memalign(&out, opaque(a), 64) == EINVAL);
    CHECK(out == sentinel);
    // An impossible size with an invalid alignment: the alignment is reported.
    out = sentinel;
    CHECK(posix_memalign(&out, opaque(a), opaque(SIZE_MAX)) == EINVAL);
    CHECK(out == sentinel);
  }
}

TEST_CASE("posix_memalign of an impossible size returns ENOMEM and leaves *out untouched") {
  for (size_t a : {size_t(8), size_t(16), size_t(64), size_t(4096), size_t(1) << 21}) {
    for (size_t n : kImpossible) {
      CAPTURE(a);
      CAPTURE(n);
      void* sentinel = reinterpret_cast<void*>(uintptr_t(0xdeadbee0));
      void* out = sentinel;
      CHECK(posix_memalign(&out, opaque(a), opaque(n)) == ENOMEM);
      CHECK(out == sentinel);
      out = sentinel;
      CHECK(fw_posix_memalign(&out, opaque(a), opaque(n)) == ENOMEM);
      CHECK(out == sentinel);
    }
  }
}

TEST_CASE("aligned_alloc and fw_malloc_aligned reject an alignment that is not a power of two with EINVAL") {
  const size_t bad[] = {0, 3, 5, 6, 12, 24, 48, 100, 1000, 4097, (size_t(1) << 20) + 16, SIZE_MAX, (size_t(1) << 63) + 1};
  for (size_t a : bad) {
    CAPTURE(a);
    errno = 0;
    void* p = aligned_alloc(opaque(a), 64);
    CHECK(errno == EINVAL);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = fw_aligned_alloc(opaque(a), 64);
    CHECK(errno == EINVAL);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = fw_malloc_aligned(opaque(a), 64);
    CHECK(errno == EINVAL);
    CHECK(p == nullptr);
    if (p) free(p);
  }
}

TEST_CASE("aligned allocation of an impossible size returns NULL and sets errno to ENOMEM") {
  for (size_t a : {size_t(16), size_t(64), size_t(4096), size_t(1) << 21}) {
    for (size_t n : kImpossible) {
      CAPTURE(a);
      CAPTURE(n);
      errno = 0;
      void* p = aligned_alloc(opaque(a), opaque(n));
      CHECK(errno == ENOMEM);
      CHECK(p == nullptr);
      if (p) free(p);
      errno = 0;
      p = memalign(opaque(a), opaque(n));
      CHECK(errno == ENOMEM);
      CHECK(p == nullptr);
      if (p) free(p);
      errno = 0;
      p = fw_malloc_aligned(opaque(a), opaque(n));
      CHECK(errno == ENOMEM);
      CHECK(p == nullptr);
      if (p) free(p);
    }
  }
  for (size_t n : kImpossible) {
    CAPTURE(n);
    errno = 0;
    void* p = valloc(opaque(n));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
    errno = 0;
    p = pvalloc(opaque(n));
    CHECK(errno == ENOMEM);
    CHECK(p == nullptr);
    if (p) free(p);
  }
}

TEST_CASE("aligned_alloc accepts the small power-of-two alignments 1, 2, 4 and 8 and still aligns to 16") {
  for (size_t a : {size_t(1), size_t(2), size_t(4), size_t(8)}) {
    CAPTURE(a);
    void* p = aligned_alloc(opaque(a), 40);
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, 16));
    memset(p, 0x11, 40);
    free(p);
  }
}

TEST_CASE("memalign rounds an alignment that is not a power of two up to the next power of two") {
  struct Case {
    size_t asked, expect;
  };
  const Case cases[] = {{0, 16},    {1, 16},      {3, 16},         {17, 32},         {24, 32},
                        {48, 64},   {100, 128},   {1000, 1024},    {3000, 4096},     {4097, 8192},
                        {100000, 131072}, {(size_t(1) << 20) + 1, size_t(1) << 21}, {3 * MiB, 4 * MiB}};
  for (const Case& c : cases) {
    for (size_t n : {size_t(1), size_t(100), c.expect, 3 * c.expect + 5}) {  // size 0: see below
      CAPTURE(c.asked);
      CAPTURE(n);
      void* p = memalign(opaque(c.asked), opaque(n));
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, c.expect));
      CHECK(malloc_usable_size(p) >= n);
      memset(p, 0x5a, n);
      free(p);
      p = fw_memalign(opaque(c.asked), opaque(n));
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, c.expect));
      memset(p, 0x5a, n);
      free(p);
    }
  }
  // An alignment too big to round up (glibc: EINVAL).
  errno = 0;
  void* p = memalign(opaque(SIZE_MAX), 16);
  CHECK(errno == EINVAL);
  CHECK(p == nullptr);
}

TEST_CASE("at every power of two up to 2^63 the aligned allocators agree: a block or ENOMEM, never EINVAL (glibc)") {
  // glibc's tst-malloc-too-large: a valid alignment that cannot be had is
  // ENOMEM. memalign, aligned_alloc and posix_memalign take the same answer
  // for the same request; valloc and pvalloc are page alignment.
  for (unsigned k = 0; k < 64; ++k) {
    const size_t a = size_t(1) << k;
    CAPTURE(k);
    errno = 0;
    void* m = memalign(opaque(a), 4096);
    const int em = errno;
    errno = 0;
    void* al = aligned_alloc(opaque(a), 4096);
    const int ea = errno;
    void* pm = nullptr;
    const int rp = posix_memalign(&pm, opaque(a), 4096);
    for (void* p : {m, al, pm})
      if (p) CHECK(aligned_to(p, a));
    if (!m) CHECK(em == ENOMEM);
    if (!al) CHECK(ea == ENOMEM);
    if (a >= sizeof(void*))
      CHECK((rp == 0 || rp == ENOMEM));
    else
      CHECK(rp == EINVAL);  // POSIX: below sizeof(void*) is not a valid alignment for it
    if (a <= (size_t(1) << 30)) {  // within any arena: all three must succeed
      CHECK(m != nullptr);
      CHECK(al != nullptr);
      if (a >= sizeof(void*)) CHECK(pm != nullptr);
    }
    free(m);
    free(al);
    if (rp == 0) free(pm);
    // The request that cannot be had, at the same alignment: ENOMEM everywhere.
    errno = 0;
    CHECK(memalign(opaque(a), opaque(SIZE_MAX - 4096)) == nullptr);
    CHECK(errno == ENOMEM);
    errno = 0;
    CHECK(aligned_alloc(opaque(a), opaque(SIZE_MAX - 4096)) == nullptr);
    CHECK(errno == ENOMEM);
    if (a >= sizeof(void*)) CHECK(posix_memalign(&pm, opaque(a), opaque(SIZE_MAX - 4096)) == ENOMEM);
  }
  // Beyond the largest power of two: not an alignment at all (EINVAL).
  errno = 0;
  CHECK(memalign(opaque((size_t(1) << 63) + 1), 16) == nullptr);
  CHECK(errno == EINVAL);
  void* v = valloc(opaque(100));
  void* pv = pvalloc(opaque(100));
  REQUIRE(v != nullptr);
  REQUIRE(pv != nullptr);
  CHECK(aligned_to(v, size_t(sysconf(_SC_PAGESIZE))));
  CHECK(aligned_to(pv, size_t(sysconf(_SC_PAGESIZE))));
  free(v);
  free(pv);
}

// ---------------------------------------------------------------------------
// Alignment.

namespace {

enum class AlignFn { posix_memalign_, aligned_alloc_, memalign_, fw_malloc_aligned_, fw_posix_memalign_ };

const char* name_of(AlignFn f) {
  switch (f) {
    case AlignFn::posix_memalign_: return "posix_memalign";
    case AlignFn::aligned_alloc_: return "aligned_alloc";
    case AlignFn::memalign_: return "memalign";
    case AlignFn::fw_malloc_aligned_: return "fw_malloc_aligned";
    case AlignFn::fw_posix_memalign_: return "fw_posix_memalign";
  }
  return "?";
}

void* alloc_with(AlignFn f, size_t a, size_t n, int* posix_rc) {
  *posix_rc = 0;
  void* p = nullptr;
  switch (f) {
    case AlignFn::posix_memalign_: *posix_rc = posix_memalign(&p, opaque(a), opaque(n)); return p;
    case AlignFn::fw_posix_memalign_: *posix_rc = fw_posix_memalign(&p, opaque(a), opaque(n)); return p;
    case AlignFn::aligned_alloc_: return aligned_alloc(opaque(a), opaque(n));
    case AlignFn::memalign_: return memalign(opaque(a), opaque(n));
    case AlignFn::fw_malloc_aligned_: return fw_malloc_aligned(opaque(a), opaque(n));
  }
  return nullptr;
}

// Every power of two in [lo, hi], with sizes 1, a-1, a and 3a+5 (or only 0).
// The blocks of one alignment are alive together, each written whole with its
// own pattern and checked after all are written, so overlapping blocks show.
void check_alignments(size_t lo, size_t hi, bool zero_size) {
  const AlignFn fns[] = {AlignFn::posix_memalign_, AlignFn::aligned_alloc_, AlignFn::memalign_,
                         AlignFn::fw_malloc_aligned_, AlignFn::fw_posix_memalign_};
  for (AlignFn f : fns) {
    for (size_t a = lo; a <= hi; a <<= 1) {
      const bool posix = f == AlignFn::posix_memalign_ || f == AlignFn::fw_posix_memalign_;
      const size_t sizes[] = {1, a - 1, a, 3 * a + 5, 0, 0, 0};
      const int first = zero_size ? 4 : 0, end = zero_size ? 7 : 4;
      void* blocks[7] = {};
      size_t usable[7] = {};
      for (int i = first; i < end; ++i) {
        size_t n = sizes[i];
        INFO(std::string(name_of(f)), " alignment ", a, " size ", n);
        int rc;
        void* p = alloc_with(f, a, n, &rc);
        if (posix && a < sizeof(void*)) {
          CHECK(rc == EINVAL);
          continue;
        }
        CHECK(rc == 0);
        CHECK(p != nullptr);
        if (p == nullptr) continue;  // go on: the other sizes and alignments say more
        CHECK(aligned_to(p, a));
        CHECK(aligned_to(p, 16));
        CHECK(fw_owns(p));
        usable[i] = malloc_usable_size(p);
        CHECK(usable[i] >= n);
        CHECK(fw_usable_size(p) == usable[i]);
        fill(p, n, unsigned(i + 1));
        blocks[i] = p;
      }
      if (zero_size && blocks[4] && blocks[5] && blocks[6]) {
        INFO(std::string(name_of(f)), " alignment ", a, " size 0");
        CHECK(blocks[4] != blocks[5]);
        CHECK(blocks[5] != blocks[6]);
        CHECK(blocks[4] != blocks[6]);
      }
      for (int i = first; i < end; ++i) {
        if (!blocks[i]) continue;
        INFO(std::string(name_of(f)), " alignment ", a, " size ", sizes[i]);
        CHECK(first_mismatch(blocks[i], sizes[i], unsigned(i + 1)) == sizes[i]);
        // The rest of the usable size is writable too.
        memset(static_cast<char*>(blocks[i]) + sizes[i], 0xee, usable[i] - sizes[i]);
        free(blocks[i]);
      }
    }
  }
}

}  // namespace

TEST_CASE("every block is aligned to at least 16 bytes") {
  std::vector<void*> blocks;
  for (size_t n = 0; n <= 2048; ++n) blocks.push_back(malloc(opaque(n)));
  for (size_t n = 2048; n <= 8 * MiB; n = n * 5 / 4 + 3) blocks.push_back(malloc(opaque(n)));
  for (size_t n = 0; n <= 300; ++n) blocks.push_back(calloc(opaque(n), 3));
  for (size_t n = 1; n <= 300; ++n) blocks.push_back(realloc(nullptr, opaque(n * 7)));
  for (void* p : blocks) {
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, 16));
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    void* q = realloc(blocks[i], opaque(i * 13 % 5000 + 1));
    REQUIRE(q != nullptr);
    CHECK(aligned_to(q, 16));
    free(q);
  }
}

TEST_CASE("posix_memalign, aligned_alloc, memalign and fw_malloc_aligned honour every power-of-two alignment from 1 byte to 8 MiB") {
  check_alignments(1, 8 * MiB, false);
}

namespace {

// Plain blocks of `size` (up to 64 spans' worth, until one lies off 128
// bytes: the colours are in use) interleaved with aligned ones: every
// `every` plain blocks, one from posix_memalign and one from aligned_alloc
// at each alignment in `aligns`, each checked to be aligned and whole.
// Returns how many plain blocks lay off 128 bytes (all are on 64).
size_t plain_among_aligned(size_t size, std::initializer_list<size_t> aligns, size_t every) {
  std::vector<void*> plain, aligned;
  size_t off_128 = 0;
  for (size_t i = 0; i < 64 * (256 * KiB / size) && off_128 == 0; i++) {
    void* p = malloc(opaque(size));
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, 64));
    off_128 += !aligned_to(p, 128);
    plain.push_back(p);
    if (i % every != 0) continue;
    for (size_t a : aligns) {
      INFO("size ", size, " alignment ", a);
      void* q = nullptr;
      REQUIRE(posix_memalign(&q, a, size) == 0);
      aligned.push_back(q);
      q = aligned_alloc(opaque(a), size);
      REQUIRE(q != nullptr);
      aligned.push_back(q);
      for (void* b : {aligned[aligned.size() - 2], q}) {
        CHECK(aligned_to(b, a));
        CHECK(fw_usable_size(b) >= size);
        memset(b, 0x5a, size);  // the whole block is the caller's
      }
    }
  }
  for (void* p : plain) free(p);
  for (void* q : aligned) free(q);
  return off_128;
}

}  // namespace

TEST_CASE(
    "blocks of 128 B to 1 KiB asked for with more than 64 bytes' alignment are aligned, while plain ones of "
    "those sizes lie at cache colours, aligned to 64 bytes") {
  // Plain blocks of a coloured class (core/size_class.h) start at a colour,
  // a multiple of 64 bytes; aligned allocation past 64 takes the class's
  // plain twin. A span of these classes takes colour 0 in at most half the
  // cases.
  for (size_t size : {size_t(128), size_t(256), size_t(384), size_t(640), size_t(768), size_t(1024)}) {
    INFO("size ", size);
    CHECK(plain_among_aligned(size, {size & (0 - size), size_t(128)}, 16) > 0);
  }
}

TEST_CASE(
    "blocks past 1 KiB asked for with more than 64 bytes' alignment are aligned and whole, while plain ones of "
    "sizes whose spans leave slack lie at cache colours, aligned to 64 bytes") {
  // A class past 1 KiB colours its spans within their slack and has no plain
  // twin (core/size_class.h): aligned allocation past 64 bytes takes a later
  // class.
  for (size_t size : {size_t(1280), size_t(10240), size_t(20480), size_t(49152), size_t(98304)}) {
    INFO("size ", size);
    CHECK(plain_among_aligned(size, {size_t(128), size & (0 - size), size_t(4096)}, 4) > 0);
  }
}

TEST_CASE("posix_memalign, aligned_alloc, memalign and fw_malloc_aligned honour alignments of 16, 32 and 64 MiB") {
  check_alignments(16 * MiB, 64 * MiB, false);
}

TEST_CASE("aligned allocation of size 0 returns a unique freeable block for every alignment from 1 byte to 64 MiB") {
  // Three zero-size blocks of each alignment alive at once: distinct, aligned, freeable.
  check_alignments(1, 64 * MiB, true);
}

TEST_CASE("aligned allocation of huge blocks (above 256 MiB) honours alignments up to 64 MiB") {
  const AlignFn fns[] = {AlignFn::posix_memalign_, AlignFn::aligned_alloc_, AlignFn::memalign_,
                         AlignFn::fw_malloc_aligned_};
  for (AlignFn f : fns) {
    for (size_t a : {size_t(4096), 2 * MiB, 16 * MiB, 64 * MiB}) {
      const size_t n = 300 * MiB + 5;
      INFO(std::string(name_of(f)), " alignment ", a, " size ", n);
      int rc;
      void* p = alloc_with(f, a, n, &rc);
      CHECK(rc == 0);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      CHECK(fw_owns(p));
      CHECK(malloc_usable_size(p) >= n);
      // Write the first and last MiB whole, and one byte every 64 KiB between.
      auto* b = static_cast<unsigned char*>(p);
      fill(b, MiB, 9);
      fill(b + n - MiB, MiB, 10);
      for (size_t off = MiB; off < n - MiB; off += 64 * KiB) b[off] = 0x77;
      CHECK(first_mismatch(b, MiB, 9) == MiB);
      CHECK(first_mismatch(b + n - MiB, MiB, 10) == MiB);
      free(p);
    }
  }
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("an alignment of 128 MiB to 2^63 either fails with ENOMEM or gives a block that frees cleanly") {
  // glibc fails from about 2^36 on (ENOMEM); an allocator that reserves
  // address space lazily may succeed further. Either is fine, but a block it
  // returns must be aligned, usable and freeable.
  const AlignFn fns[] = {AlignFn::posix_memalign_, AlignFn::aligned_alloc_, AlignFn::memalign_,
                         AlignFn::fw_malloc_aligned_};
  for (AlignFn f : fns) {
    for (unsigned shift = 27; shift <= 63; ++shift) {
      const size_t a = size_t(1) << shift;
      INFO(std::string(name_of(f)), " alignment 2^", shift);
      int rc;
      errno = 0;
      void* p = alloc_with(f, a, 100, &rc);
      const int e = errno;
      if (p == nullptr) {
        if (f == AlignFn::posix_memalign_) CHECK(rc == ENOMEM);
        else if (f == AlignFn::memalign_) CHECK((e == ENOMEM || e == EINVAL));  // glibc: ENOMEM
        else CHECK(e == ENOMEM);
        continue;
      }
      CHECK(rc == 0);
      CHECK(aligned_to(p, a));
      CHECK(fw_owns(p));
      CHECK(malloc_usable_size(p) >= 100);
      memset(p, 0x31, 100);
      free(p);
    }
  }
  fw_collect();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("valloc returns page-aligned memory") {
  const size_t pg = page_size();
  for (size_t n : {size_t(0), size_t(1), pg - 1, pg, pg + 1, 100 * KiB, MiB, 5 * MiB + 3}) {
    CAPTURE(n);
    void* p = valloc(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, pg));
    CHECK(malloc_usable_size(p) >= n);
    memset(p, 0x3c, n);
    free(p);
    p = fw_valloc(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, pg));
    memset(p, 0x3c, n);
    free(p);
  }
}

TEST_CASE("pvalloc rounds the size up to a whole page") {
  const size_t pg = page_size();
  for (size_t n : {size_t(0), size_t(1), pg - 1, pg, pg + 1, 3 * pg + 17, 100 * KiB + 1, 5 * MiB + 3}) {
    CAPTURE(n);
    const size_t rounded = n == 0 ? pg : (n + pg - 1) / pg * pg;  // glibc: pvalloc(0) is one page
    void* p = pvalloc(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, pg));
    CHECK(malloc_usable_size(p) >= rounded);
    memset(p, 0x3c, rounded);
    free(p);
    p = fw_pvalloc(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, pg));
    CHECK(fw_usable_size(p) >= rounded);
    memset(p, 0x3c, rounded);
    free(p);
  }
}

// ---------------------------------------------------------------------------
// malloc(0), free(NULL), usable size.

TEST_CASE("malloc(0) returns a unique non-NULL pointer") {
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) {
    void* p = malloc(opaque(size_t(0)));
    REQUIRE(p != nullptr);
    CHECK(seen.insert(p).second);
    CHECK(fw_owns(p));
    blocks.push_back(p);
    void* q = fw_malloc(opaque(size_t(0)));
    REQUIRE(q != nullptr);
    CHECK(seen.insert(q).second);
    blocks.push_back(q);
  }
  for (void* p : blocks) free(p);
}

TEST_CASE("calloc with a zero count or size returns a unique non-NULL pointer") {
  void* a = calloc(opaque(size_t(0)), 16);
  void* b = calloc(16, opaque(size_t(0)));
  void* c = calloc(opaque(size_t(0)), opaque(size_t(0)));
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  REQUIRE(c != nullptr);
  CHECK(a != b);
  CHECK(b != c);
  CHECK(a != c);
  free(a);
  free(b);
  free(c);
}

TEST_CASE("free(NULL) and the other frees of NULL are no-ops") {
  fw_stats_t before = stats();
  for (int i = 0; i < 100; ++i) {
    free(nullptr);
    fw_free(nullptr);
    free_sized(nullptr, 0);
    free_aligned_sized(nullptr, 64, 0);
    fw_free_sized(nullptr, 0);
    fw_free_aligned_sized(nullptr, 64, 0);
  }
  fw_stats_t after = stats();
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("free does not change errno") {
  // glibc guarantees this since 2.33 (and POSIX.1-2024 requires it), even when
  // free gives memory back to the system.
  const size_t sizes[] = {0, 24, 1000, 100 * KiB, 3 * MiB, 64 * MiB, 300 * MiB};
  for (size_t n : sizes) {
    CAPTURE(n);
    void* p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    memset(p, 1, n);
    errno = 12345;
    free(p);
    CHECK(errno == 12345);
    p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    errno = 54321;
    fw_collect();
    free(p);
    CHECK(errno == 54321);
  }
}

TEST_CASE("malloc_usable_size is at least the size asked for and all of it is writable") {
  CHECK(malloc_usable_size(nullptr) == 0);
  CHECK(fw_usable_size(nullptr) == 0);
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 4096; ++n) sizes.push_back(n);
  for (size_t p2 = 8192; p2 <= 64 * MiB; p2 <<= 1)
    for (size_t n : {p2 - 1, p2, p2 + 1, p2 + p2 / 3}) sizes.push_back(n);
  // Around the large/huge boundary (256 MiB).
  for (size_t n : {256 * MiB - 1, 256 * MiB, 256 * MiB + 1}) sizes.push_back(n);
  for (size_t n : sizes) {
    CAPTURE(n);
    // Two neighbours written whole: neither may spill into the other.
    void* a = malloc(opaque(n));
    void* b = malloc(opaque(n));
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    size_t ua = malloc_usable_size(a), ub = malloc_usable_size(b);
    CHECK(ua >= n);
    CHECK(ub >= n);
    CHECK(fw_usable_size(a) == ua);
    if (n <= 4096) {
      fill(a, ua, 7);
      fill(b, ub, 8);
      CHECK(first_mismatch(a, ua, 7) == ua);
      CHECK(first_mismatch(b, ub, 8) == ub);
    } else {
      memset(a, 0xa1, ua);
      memset(b, 0xb2, ub);
      CHECK(all_bytes(a, ua, 0xa1));
      CHECK(all_bytes(b, ub, 0xb2));
    }
    free(a);
    free(b);
  }
}

// ---------------------------------------------------------------------------
// calloc.

namespace {

// Allocates blocks of n bytes, dirties them, frees them, then callocs the same
// size (and a few nearby sizes) again and checks every byte is zero.
void check_calloc_after_dirty(size_t n, int rounds, int count) {
  for (int r = 0; r < rounds; ++r) {
    std::vector<void*> blocks;
    for (int i = 0; i < count; ++i) {
      void* p = malloc(opaque(n));
      REQUIRE(p != nullptr);
      memset(p, 0xa5, malloc_usable_size(p));
      blocks.push_back(p);
    }
    for (void* p : blocks) free(p);
    blocks.clear();
    for (int i = 0; i < count; ++i) {
      size_t m = i % 3 == 0 ? n : i % 3 == 1 ? n - n / 8 : n / 2 + 1;
      // count * size forms: (1, m), (m, 1), and (m/8, 8) when it divides.
      void* p = i % 2 ? calloc(opaque(size_t(1)), opaque(m)) : calloc(opaque(m), opaque(size_t(1)));
      REQUIRE(p != nullptr);
      INFO("size ", n, " round ", r, " calloc of ", m);
      CHECK(all_bytes(p, m, 0));
      memset(p, 0x5a, m);  // dirty again for the next round
      blocks.push_back(p);
    }
    for (void* p : blocks) free(p);
  }
  void* p = calloc(opaque(n / 8), 8);
  REQUIRE(p != nullptr);
  CHECK(all_bytes(p, n / 8 * 8, 0));
  free(p);
  p = fw_calloc(opaque(n / 16), 16);
  REQUIRE(p != nullptr);
  CHECK(all_bytes(p, n / 16 * 16, 0));
  free(p);
}

}  // namespace

TEST_CASE("calloc returns zeroed memory after dirty small blocks are freed and reused") {
  for (size_t n : {size_t(16), size_t(24), size_t(100), size_t(1000), size_t(4000)}) check_calloc_after_dirty(n, 4, 200);
}

TEST_CASE("calloc returns zeroed memory after dirty medium (100 KiB) blocks are freed and reused") {
  check_calloc_after_dirty(100 * KiB, 4, 40);
  check_calloc_after_dirty(128 * KiB, 3, 20);
}

TEST_CASE("calloc returns zeroed memory after dirty large (3 MiB) blocks are freed and reused") {
  check_calloc_after_dirty(3 * MiB, 3, 8);
}

TEST_CASE("calloc returns zeroed memory after dirty huge (300 MiB) blocks are freed and reused") {
  check_calloc_after_dirty(300 * MiB, 2, 1);
}

TEST_CASE("calloc returns zeroed memory when the freed dirty block had a different size") {
  // Dirty memory of one size, calloc of another that may land in the same place.
  const size_t sizes[] = {48, 1000, 70 * KiB, 100 * KiB, 200 * KiB, MiB, 3 * MiB, 40 * MiB};
  for (size_t dirty : sizes) {
    for (size_t n : sizes) {
      CAPTURE(dirty);
      CAPTURE(n);
      void* d = malloc(opaque(dirty));
      REQUIRE(d != nullptr);
      memset(d, 0xff, malloc_usable_size(d));
      free(d);
      void* p = calloc(1, opaque(n));
      REQUIRE(p != nullptr);
      CHECK(all_bytes(p, n, 0));
      free(p);
    }
  }
}

// ---------------------------------------------------------------------------
// realloc.

TEST_CASE("realloc(NULL, n) behaves as malloc(n)") {
  for (size_t n : {size_t(0), size_t(1), size_t(100), 100 * KiB, 3 * MiB}) {
    CAPTURE(n);
    void* p = realloc(nullptr, opaque(n));
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    CHECK(aligned_to(p, 16));
    CHECK(malloc_usable_size(p) >= n);
    memset(p, 0x77, n);
    free(p);
    p = fw_realloc(nullptr, opaque(n));
    REQUIRE(p != nullptr);
    CHECK(malloc_usable_size(p) >= n);
    free(p);
  }
  // realloc(NULL, 0) is malloc(0): a unique pointer.
  void* a = realloc(nullptr, opaque(size_t(0)));
  void* b = realloc(nullptr, opaque(size_t(0)));
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a != b);
  free(a);
  free(b);
  // An impossible size fails like malloc.
  errno = 0;
  void* r = realloc(nullptr, opaque(SIZE_MAX));
  CHECK(errno == ENOMEM);
  CHECK(r == nullptr);
}

TEST_CASE("realloc(p, 0) frees p and returns NULL") {
  for (size_t n : {size_t(0), size_t(1), size_t(100), 100 * KiB, 3 * MiB, 300 * MiB}) {
    CAPTURE(n);
    void* p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    memset(p, 1, n);
    fw_stats_t before = stats();
    void* q = realloc(p, opaque(size_t(0)));
    CHECK(q == nullptr);
    fw_stats_t after = stats();
    CHECK(after.live_bytes < before.live_bytes);
    CHECK(after.live_bytes + n <= before.live_bytes);
    if (q) free(q);
    p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(fw_realloc(p, opaque(size_t(0))) == nullptr);
  }
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("realloc that fails leaves the old block intact") {
  for (size_t n : {size_t(1), size_t(1000), 100 * KiB, 3 * MiB, 300 * MiB}) {
    for (size_t bad : kImpossible) {
      CAPTURE(n);
      CAPTURE(bad);
      void* p = malloc(opaque(n));
      REQUIRE(p != nullptr);
      fill(p, n < 65536 ? n : 65536, 3);
      memset(static_cast<char*>(p) + n - 1, 0x42, 1);
      errno = 0;
      void* q = realloc(p, opaque(bad));
      CHECK(errno == ENOMEM);
      CHECK(q == nullptr);
      if (n > 1) CHECK(first_mismatch(p, n < 65536 ? n - 1 : 65536, 3) == (n < 65536 ? n - 1 : 65536));
      CHECK(static_cast<unsigned char*>(p)[n - 1] == 0x42);
      CHECK(fw_owns(p));
      CHECK(malloc_usable_size(p) >= n);
      errno = 0;
      q = fw_realloc(p, opaque(bad));
      CHECK(errno == ENOMEM);
      CHECK(q == nullptr);
      CHECK(static_cast<unsigned char*>(p)[n - 1] == 0x42);
      // Still usable: grow it for real, then free it.
      q = realloc(p, opaque(n + 10));
      REQUIRE(q != nullptr);
      CHECK(static_cast<unsigned char*>(q)[n - 1] == 0x42);
      free(q);
    }
  }
  CHECK(fw_check_heap() == 0);
}

namespace {

// Walks one block through the given sizes with realloc, checking after each
// step that the first min(old, new) bytes survived, then rewriting it whole.
void realloc_walk(const std::vector<size_t>& sizes) {
  unsigned seed = 100;
  void* p = malloc(opaque(sizes[0]));
  REQUIRE(p != nullptr);
  fill(p, sizes[0], seed);
  size_t cur = sizes[0];
  for (size_t i = 1; i < sizes.size(); ++i) {
    size_t n = sizes[i];
    INFO("realloc from ", cur, " to ", n);
    void* q = realloc(p, opaque(n));
    REQUIRE(q != nullptr);
    CHECK(aligned_to(q, 16));
    CHECK(malloc_usable_size(q) >= n);
    size_t keep = cur < n ? cur : n;
    CHECK(first_mismatch(q, keep, seed) == keep);
    ++seed;
    fill(q, n, seed);
    p = q;
    cur = n;
  }
  free(p);
}

}  // namespace

TEST_CASE("realloc keeps the contents when growing and shrinking among small sizes") {
  realloc_walk({1, 8, 16, 17, 24, 31, 32, 48, 64, 65, 100, 128, 200, 256, 500, 1000, 1024, 1025, 2000, 4096, 8000,
                4000, 1000, 300, 64, 40, 17, 16, 1, 2, 3000, 5, 1024});
}

TEST_CASE("realloc keeps the contents from small to medium to large sizes and back") {
  realloc_walk({100, 60 * KiB, 100 * KiB, 128 * KiB, 128 * KiB + 1, 200 * KiB, MiB, 3 * MiB, 3 * MiB + 4096, 8 * MiB,
                3 * MiB, 128 * KiB + 1, 128 * KiB, 100 * KiB, 1000, 24});
}

TEST_CASE("realloc keeps the contents from small straight to large and from large straight to small") {
  realloc_walk({24, 2 * MiB, 24});
  realloc_walk({1000, 3 * MiB, 100});
  realloc_walk({100 * KiB, 5 * MiB, 100 * KiB});
}

TEST_CASE("realloc keeps the contents from large to much larger (1 MiB to 200 MiB) and back") {
  realloc_walk({MiB, 200 * MiB, MiB});
}

TEST_CASE("realloc keeps the contents across the huge-object boundary (256 MiB)") {
  realloc_walk({MiB, 255 * MiB, 257 * MiB, 300 * MiB, 256 * MiB, 3 * MiB, 400, 300 * MiB, 64});
}

TEST_CASE("realloc in small steps keeps the contents (grow and shrink in place)") {
  std::vector<size_t> sizes;
  for (size_t n = 1; n < 2 * MiB; n = n + n / 7 + 1) sizes.push_back(n);
  for (size_t n = 2 * MiB; n > 16; n = n - n / 9 - 1) sizes.push_back(n);
  realloc_walk(sizes);
  // Large blocks growing and shrinking by a page at a time.
  sizes.clear();
  for (size_t n = 3 * MiB; n < 3 * MiB + 64 * 4096; n += 4096 + 7) sizes.push_back(n);
  for (size_t n = 3 * MiB + 64 * 4096; n > MiB; n -= 40000) sizes.push_back(n);
  realloc_walk(sizes);
}

TEST_CASE("realloc keeps the contents of blocks from aligned allocation and valloc") {
  // An aligned block need not start where its span or run starts; realloc
  // must still find it, keep its bytes and free it.
  for (size_t a : {size_t(64), size_t(4096), size_t(64) * KiB, MiB, 2 * MiB, 8 * MiB}) {
    for (size_t n : {size_t(10), size_t(5000), 200 * KiB, 3 * MiB}) {
      for (size_t m : {size_t(1), n / 2 + 1, n + 1, 2 * n + 100, 9 * MiB}) {
        INFO("alignment ", a, " size ", n, " realloc to ", m);
        void* p = aligned_alloc(opaque(a), opaque(n));
        REQUIRE(p != nullptr);
        fill(p, n, 77);
        void* q = realloc(p, opaque(m));
        REQUIRE(q != nullptr);
        size_t keep = n < m ? n : m;
        CHECK(first_mismatch(q, keep, 77) == keep);
        CHECK(malloc_usable_size(q) >= m);
        memset(q, 0x21, m);
        free(q);
      }
    }
  }
  void* v = valloc(opaque(size_t(100)));
  REQUIRE(v != nullptr);
  fill(v, 100, 5);
  v = realloc(v, opaque(size_t(70000)));
  REQUIRE(v != nullptr);
  CHECK(first_mismatch(v, 100, 5) == 100);
  free(v);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("realloc of many live blocks in random order keeps every block's contents") {
  // Blocks sharing spans, resized in a deterministic pseudo-random order.
  constexpr int kBlocks = 300;
  std::vector<void*> p(kBlocks);
  std::vector<size_t> n(kBlocks);
  std::vector<unsigned> seed(kBlocks);
  uint64_t rng = 12345;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 33;
  };
  auto pick = [&]() -> size_t {
    unsigned k = next() % 100;
    if (k < 70) return next() % 600;
    if (k < 95) return next() % (200 * KiB);
    return next() % (4 * MiB);
  };
  for (int i = 0; i < kBlocks; ++i) {
    n[i] = pick();
    seed[i] = unsigned(i);
    p[i] = malloc(opaque(n[i]));
    REQUIRE(p[i] != nullptr);
    fill(p[i], n[i], seed[i]);
  }
  for (int step = 0; step < 3000; ++step) {
    int i = int(next() % kBlocks);
    size_t m = pick();
    void* q = realloc(p[i], opaque(m));
    if (m == 0) {
      CHECK(q == nullptr);  // freed
      q = malloc(0);
      REQUIRE(q != nullptr);
      p[i] = q;
      n[i] = 0;
      continue;
    }
    REQUIRE(q != nullptr);
    size_t keep = n[i] < m ? n[i] : m;
    INFO("step ", step, " block ", i, " from ", n[i], " to ", m);
    REQUIRE(first_mismatch(q, keep, seed[i]) == keep);
    seed[i] += 1000;
    fill(q, m, seed[i]);
    p[i] = q;
    n[i] = m;
  }
  for (int i = 0; i < kBlocks; ++i) {
    CHECK(first_mismatch(p[i], n[i], seed[i]) == n[i]);
    free(p[i]);
  }
  CHECK(fw_check_heap() == 0);
}

// ---------------------------------------------------------------------------
// fw_owns.

namespace {
char g_static_buffer[4096];
const char g_const_buffer[] = "a string in .rodata";
}  // namespace

TEST_CASE("fw_owns is true for freeway blocks and false for stack, static and NULL addresses") {
  CHECK_FALSE(fw_owns(nullptr));
  char stack_buffer[64];
  escape(stack_buffer);
  CHECK_FALSE(fw_owns(stack_buffer));
  CHECK_FALSE(fw_owns(g_static_buffer));
  CHECK_FALSE(fw_owns(g_const_buffer));
  CHECK_FALSE(fw_owns("literal"));
  CHECK_FALSE(fw_owns(reinterpret_cast<const void*>(&fw_owns)));
  CHECK_FALSE(fw_owns(reinterpret_cast<const void*>(uintptr_t(1))));
  CHECK_FALSE(fw_owns(reinterpret_cast<const void*>(~uintptr_t(0) - 15)));
  CHECK_FALSE(fw_owns(reinterpret_cast<const void*>(uintptr_t(1) << 47)));
  // Memory mapped by the program itself is not freeway's.
  void* m = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  CHECK_FALSE(fw_owns(m));
  munmap(m, 1 << 20);

  std::vector<void*> mine;
  for (size_t n : {size_t(0), size_t(1), size_t(100), 100 * KiB, 3 * MiB, 300 * MiB}) {
    mine.push_back(malloc(opaque(n)));
    mine.push_back(calloc(1, opaque(n)));
    mine.push_back(aligned_alloc(4096, opaque(n)));
    mine.push_back(memalign(2 * MiB, opaque(n)));
    mine.push_back(valloc(opaque(n)));
    mine.push_back(fw_malloc(opaque(n)));
  }
  for (void* p : mine) {
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
  }
  for (void* p : mine) free(p);
}

// ---------------------------------------------------------------------------
// Statistics and heap checks.

TEST_CASE("fw_stats live_bytes rises by at least n after allocating n bytes and falls back after freeing") {
  for (size_t n : {size_t(1), size_t(100), size_t(5000), 100 * KiB, 3 * MiB, 300 * MiB}) {
    CAPTURE(n);
    fw_stats_t s0 = stats();
    void* p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    fw_stats_t s1 = stats();
    CHECK(s1.live_bytes >= s0.live_bytes + n);
    CHECK(s1.peak_live_bytes >= s1.live_bytes);
    free(p);
    fw_stats_t s2 = stats();
    CHECK(s2.live_bytes == s0.live_bytes);
  }
  // Many blocks at once.
  std::vector<void*> blocks;
  blocks.reserve(5000);  // the vector's own buffer is live memory too
  fw_stats_t s0 = stats();
  size_t total = 0;
  for (size_t i = 0; i < 5000; ++i) {
    size_t n = (i * 37) % 3000 + 1;
    blocks.push_back(malloc(opaque(n)));
    total += n;
  }
  fw_stats_t s1 = stats();
  CHECK(s1.live_bytes >= s0.live_bytes + total);
  for (void* p : blocks) free(p);
  fw_stats_t s2 = stats();
  CHECK(s2.live_bytes == s0.live_bytes);
}

TEST_CASE("fw_stats counts large objects in large_live_bytes, large_allocs and large_frees") {
  for (size_t n : {3 * MiB, 300 * MiB}) {
    CAPTURE(n);
    fw_stats_t s0 = stats();
    void* p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    fw_stats_t s1 = stats();
    CHECK(s1.large_allocs == s0.large_allocs + 1);
    CHECK(s1.large_live_bytes >= s0.large_live_bytes + n);
    free(p);
    fw_stats_t s2 = stats();
    CHECK(s2.large_frees == s0.large_frees + 1);
    CHECK(s2.large_live_bytes == s0.large_live_bytes);
  }
}

TEST_CASE("fw_stats per-class allocs and frees counts move with malloc and free") {
  fw_stats_t s0 = stats();
  REQUIRE(s0.class_count > 0);
  REQUIRE(s0.class_count <= FW_SIZE_CLASS_MAX);
  // Class block sizes grow with the class index.
  for (uint32_t c = 1; c < s0.class_count; ++c) CHECK(s0.classes[c].block_size > s0.classes[c - 1].block_size);
  for (size_t n : {size_t(48), size_t(200), size_t(3000), 100 * KiB}) {
    CAPTURE(n);
    // The smallest class holding n.
    uint32_t c = 0;
    while (c < s0.class_count && s0.classes[c].block_size < n) ++c;
    REQUIRE(c < s0.class_count);
    fw_stats_t a = stats();
    constexpr int kCount = 100;
    void* blocks[kCount];
    for (auto& p : blocks) {
      p = malloc(opaque(n));
      REQUIRE(p != nullptr);
      CHECK(malloc_usable_size(p) == a.classes[c].block_size);
    }
    fw_stats_t b = stats();
    CHECK(b.classes[c].allocs == a.classes[c].allocs + kCount);
    CHECK(b.classes[c].live == a.classes[c].live + kCount);
    CHECK(b.classes[c].spans >= 1);
    for (void* p : blocks) free(p);
    fw_stats_t d = stats();
    CHECK(d.classes[c].frees == a.classes[c].frees + kCount);
    CHECK(d.classes[c].live == a.classes[c].live);
    CHECK(d.classes[c].allocs - d.classes[c].frees == d.classes[c].live);
  }
}

TEST_CASE("fw_stats reports committed and reserved memory and one live thread (per-thread mode: none per-CPU)") {
  void* p = malloc(1000);
  escape(p);
  fw_stats_t s = stats();
  CHECK(s.committed_bytes > 0);
  CHECK(s.reserved_bytes >= s.committed_bytes);
  CHECK(s.peak_committed_bytes >= s.committed_bytes);
  CHECK(s.peak_live_bytes >= s.live_bytes);
  CHECK(s.live_bytes >= 1000);
  if (!fw_caches_per_cpu()) CHECK(s.threads_live >= 1);  // per-CPU: threads bound before a switch, if any
  CHECK(s.threads_created >= s.threads_live);
  free(p);
}

TEST_CASE("fw_collect runs, does not raise committed memory, and the heap stays usable") {
  std::vector<void*> blocks;
  for (int i = 0; i < 2000; ++i) blocks.push_back(malloc(opaque(size_t(i % 50 * 100 + 16))));
  for (int i = 0; i < 20; ++i) blocks.push_back(malloc(opaque(2 * MiB + size_t(i) * 4096)));
  for (void* p : blocks) {
    REQUIRE(p != nullptr);
    memset(p, 0x99, 16);
  }
  for (void* p : blocks) free(p);
  fw_stats_t before = stats();
  fw_collect();
  fw_stats_t after = stats();
  CHECK(after.committed_bytes <= before.committed_bytes);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(fw_check_heap() == 0);
  // Twice in a row, and allocation afterwards.
  fw_collect();
  void* p = malloc(opaque(size_t(300)));
  REQUIRE(p != nullptr);
  memset(p, 0, 300);
  void* q = calloc(1, opaque(3 * MiB));
  REQUIRE(q != nullptr);
  CHECK(all_bytes(q, 3 * MiB, 0));
  free(p);
  free(q);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("fw_check_heap returns 0 in a quiet single-threaded program") {
  CHECK(fw_check_heap() == 0);
  std::vector<void*> blocks;
  for (size_t i = 0; i < 3000; ++i) blocks.push_back(malloc(opaque((i * 131) % 9000)));
  blocks.push_back(malloc(opaque(5 * MiB)));
  blocks.push_back(aligned_alloc(MiB, opaque(100)));
  CHECK(fw_check_heap() == 0);  // with blocks live
  for (size_t i = 0; i < blocks.size(); i += 2) free(blocks[i]);
  CHECK(fw_check_heap() == 0);  // half freed
  for (size_t i = 1; i < blocks.size(); i += 2) free(blocks[i]);
  CHECK(fw_check_heap() == 0);  // all freed
}

TEST_CASE("fw_stats_print writes a readable summary to a file descriptor") {
  FILE* f = tmpfile();
  REQUIRE(f != nullptr);
  fw_stats_print(fileno(f));
  long len = lseek(fileno(f), 0, SEEK_END);
  CHECK(len > 0);
  std::string text(size_t(len > 0 ? len : 0), '\0');
  lseek(fileno(f), 0, SEEK_SET);
  CHECK(read(fileno(f), text.data(), text.size()) == ssize_t(text.size()));
  fclose(f);
  CHECK(text.find('\n') != std::string::npos);
}

// ---------------------------------------------------------------------------
// The sized frees and the prefixed API share one heap with malloc.

TEST_CASE("free_sized and free_aligned_sized free the block they are given") {
  for (size_t n : {size_t(1), size_t(100), 100 * KiB, 3 * MiB}) {
    CAPTURE(n);
    fw_stats_t s0 = stats();
    void* p = malloc(opaque(n));
    REQUIRE(p != nullptr);
    free_sized(p, n);
    p = aligned_alloc(256, opaque(n));
    REQUIRE(p != nullptr);
    free_aligned_sized(p, 256, n);
    p = fw_malloc(opaque(n));
    REQUIRE(p != nullptr);
    fw_free_sized(p, n);
    p = fw_malloc_aligned(4096, opaque(n));
    REQUIRE(p != nullptr);
    fw_free_aligned_sized(p, 4096, n);
    fw_stats_t s1 = stats();
    CHECK(s1.live_bytes == s0.live_bytes);
  }
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("blocks from the fw_ functions and from malloc are interchangeable") {
  void* a = fw_malloc(100);
  void* b = fw_calloc(10, 10);
  void* c = fw_aligned_alloc(64, 100);
  void* d = fw_memalign(64, 100);
  void* e = fw_valloc(100);
  void* f = fw_pvalloc(100);
  void* g = nullptr;
  REQUIRE(fw_posix_memalign(&g, 64, 100) == 0);
  for (void* p : {a, b, c, d, e, f, g}) {
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    CHECK(malloc_usable_size(p) == fw_usable_size(p));
  }
  a = realloc(a, 5000);  // fw_ block resized by realloc
  REQUIRE(a != nullptr);
  for (void* p : {a, b, c, d, e, f, g}) free(p);
  void* h = malloc(100);
  h = fw_realloc(h, 9000);  // malloc block resized by fw_realloc
  REQUIRE(h != nullptr);
  fw_free(h);
  CHECK(fw_check_heap() == 0);
}
