// test_cxx_new.cpp: C++ operator new and delete, replaced by libfreeway.so.
//
// Every replaceable form is called explicitly (::operator new(...)) as well as
// through new-expressions. GCC may remove a new/delete pair whose memory is
// never observed, so pointers go through escape() and sizes through opaque().
#include <doctest/doctest.h>

#include <malloc.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "freeway.h"

namespace {

constexpr size_t KiB = size_t(1) << 10;
constexpr size_t MiB = size_t(1) << 20;

template <class T>
T opaque(T v) {
  asm volatile("" : "+r"(v));
  return v;
}

void escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

bool aligned_to(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

uint64_t live_bytes() {
  fw_stats_t s;
  fw_stats(&s);
  return s.live_bytes;
}

// Allocate with one form of operator new and free again: for CHECK_THROWS_AS.
void new_delete(size_t n) { ::operator delete(::operator new(n)); }
void new_delete_array(size_t n) { ::operator delete[](::operator new[](n)); }
void new_delete_aligned(size_t n, size_t a) { ::operator delete(::operator new(n, std::align_val_t{a}), std::align_val_t{a}); }
void new_delete_aligned_array(size_t n, size_t a) {
  ::operator delete[](::operator new[](n, std::align_val_t{a}), std::align_val_t{a});
}

template <class T>
void new_expression(size_t count) {
  T* p = new T[count];
  escape(p);
  delete[] p;
}

// Sizes no allocator can satisfy.
const size_t kImpossible[] = {SIZE_MAX, SIZE_MAX - 4096, size_t(PTRDIFF_MAX) + 1, size_t(PTRDIFF_MAX),
                              size_t(1) << 62};

// A type with a constructor and destructor, so new[] stores an element count
// (array cookie) before the elements.
int g_alive = 0;
struct Tracked {
  uint64_t value;
  Tracked() : value(0x1234) { ++g_alive; }
  ~Tracked() { --g_alive; }
};

struct alignas(64) Aligned64 {
  unsigned char bytes[64];
};
struct alignas(4096) AlignedPage {
  unsigned char bytes[100];
};
struct alignas(1 << 16) Aligned64K {
  int x;
};

}  // namespace

// ---------------------------------------------------------------------------
// Every form of operator new and delete.

TEST_CASE("plain operator new and delete allocate from freeway") {
  for (size_t n : {size_t(0), size_t(1), size_t(24), size_t(1000), 100 * KiB, 3 * MiB}) {
    CAPTURE(n);
    void* p = ::operator new(opaque(n));
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    CHECK(aligned_to(p, 16));
    CHECK(malloc_usable_size(p) >= n);
    memset(p, 0xab, n);
    ::operator delete(p);
  }
  int* i = new int(42);
  escape(i);
  CHECK(fw_owns(i));
  CHECK(*i == 42);
  delete i;
  auto* t = new Tracked;
  escape(t);
  CHECK(g_alive == 1);
  CHECK(fw_owns(t));
  delete t;
  CHECK(g_alive == 0);
}

TEST_CASE("array operator new[] and delete[] work, with and without an array cookie") {
  for (size_t n : {size_t(0), size_t(1), size_t(24), size_t(1000), 100 * KiB, 3 * MiB}) {
    CAPTURE(n);
    void* p = ::operator new[](opaque(n));
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    memset(p, 0xcd, n);
    ::operator delete[](p);
  }
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(200000)}) {
    CAPTURE(n);
    auto* a = new Tracked[opaque(n)];
    escape(a);
    CHECK(g_alive == int(n));
    CHECK(a[n - 1].value == 0x1234);
    delete[] a;
    CHECK(g_alive == 0);
    auto* c = new char[opaque(n)];
    escape(c);
    memset(c, 1, n);
    CHECK(fw_owns(c));
    delete[] c;
  }
}

TEST_CASE("nothrow operator new and new[] return usable freeway memory") {
  for (size_t n : {size_t(0), size_t(1), size_t(1000), 100 * KiB, 3 * MiB}) {
    CAPTURE(n);
    void* p = ::operator new(opaque(n), std::nothrow);
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    memset(p, 0x11, n);
    ::operator delete(p, std::nothrow);
    p = ::operator new[](opaque(n), std::nothrow);
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    memset(p, 0x22, n);
    ::operator delete[](p, std::nothrow);
  }
  auto* t = new (std::nothrow) Tracked[opaque(size_t(10))];
  REQUIRE(t != nullptr);
  escape(t);
  CHECK(g_alive == 10);
  delete[] t;
  CHECK(g_alive == 0);
}

TEST_CASE("sized operator delete and delete[] free the block") {
  // No doctest macro between the two live_bytes() readings: doctest keeps
  // memory of its own for CAPTURE and INFO.
  const uint64_t before = live_bytes();
  for (size_t n : {size_t(1), size_t(24), size_t(1000), 100 * KiB, 3 * MiB}) {
    void* p = ::operator new(opaque(n));
    memset(p, 1, n);
    ::operator delete(p, n);
    p = ::operator new[](opaque(n));
    memset(p, 2, n);
    ::operator delete[](p, n);
  }
  // A delete-expression on a complete type calls the sized form (C++14).
  for (int i = 0; i < 1000; ++i) {
    auto* t = new Tracked;
    escape(t);
    delete t;
  }
  const uint64_t after = live_bytes();
  CHECK(after == before);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("aligned operator new with align_val_t returns aligned storage for alignments 32 B to 1 MiB") {
  for (size_t a = 32; a <= MiB; a <<= 1) {
    for (size_t n : {size_t(1), a / 2 + 1, a, 3 * a + 5}) {
      INFO("alignment ", a, " size ", n);
      const std::align_val_t al{a};
      void* p = ::operator new(opaque(n), al);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      CHECK(fw_owns(p));
      CHECK(malloc_usable_size(p) >= n);
      memset(p, 0x33, n);
      ::operator delete(p, al);

      p = ::operator new[](opaque(n), al);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      memset(p, 0x44, n);
      ::operator delete[](p, al);

      p = ::operator new(opaque(n), al);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      memset(p, 0x55, n);
      ::operator delete(p, n, al);  // sized + aligned

      p = ::operator new[](opaque(n), al);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      memset(p, 0x66, n);
      ::operator delete[](p, n, al);
    }
  }
}

TEST_CASE("aligned operator delete in every form frees the block") {
  const uint64_t before = live_bytes();  // no doctest macro until the second reading
  for (size_t a = 32; a <= MiB; a <<= 1) {
    for (size_t n : {size_t(1), a, 3 * a + 5}) {
      const std::align_val_t al{a};
      void* p = ::operator new(opaque(n), al);
      memset(p, 1, n);
      ::operator delete(p, al);
      p = ::operator new[](opaque(n), al);
      memset(p, 2, n);
      ::operator delete[](p, al);
      p = ::operator new(opaque(n), al);
      memset(p, 3, n);
      ::operator delete(p, n, al);
      p = ::operator new[](opaque(n), al);
      memset(p, 4, n);
      ::operator delete[](p, n, al);
      p = ::operator new(opaque(n), al, std::nothrow);
      memset(p, 5, n);
      ::operator delete(p, al, std::nothrow);
      p = ::operator new[](opaque(n), al, std::nothrow);
      memset(p, 6, n);
      ::operator delete[](p, al, std::nothrow);
    }
  }
  const uint64_t after = live_bytes();
  CHECK(after == before);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("aligned nothrow operator new returns aligned storage for alignments 32 B to 1 MiB") {
  for (size_t a = 32; a <= MiB; a <<= 1) {
    for (size_t n : {size_t(1), a, 3 * a + 5}) {
      INFO("alignment ", a, " size ", n);
      const std::align_val_t al{a};
      void* p = ::operator new(opaque(n), al, std::nothrow);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      memset(p, 0x77, n);
      ::operator delete(p, al, std::nothrow);
      p = ::operator new[](opaque(n), al, std::nothrow);
      REQUIRE(p != nullptr);
      CHECK(aligned_to(p, a));
      memset(p, 0x88, n);
      ::operator delete[](p, al, std::nothrow);
    }
  }
}

TEST_CASE("aligned operator new honours every power-of-two alignment from 1 byte to 64 MiB") {
  // Sizes 1, a-1, a, 3a+5, alive together and written whole (size 0: below).
  for (size_t a = 1; a <= 64 * MiB; a <<= 1) {
    const size_t sizes[] = {1, a > 1 ? a - 1 : 1, a, 3 * a + 5};
    void* blocks[4];
    for (int i = 0; i < 4; ++i) {
      INFO("alignment ", a, " size ", sizes[i]);
      blocks[i] = ::operator new(opaque(sizes[i]), std::align_val_t{a});
      REQUIRE(blocks[i] != nullptr);
      CHECK(aligned_to(blocks[i], a));
      CHECK(aligned_to(blocks[i], 16));
      memset(blocks[i], 0x10 + i, sizes[i]);
    }
    for (int i = 0; i < 4; ++i) {
      INFO("alignment ", a, " size ", sizes[i]);
      const auto* b = static_cast<const unsigned char*>(blocks[i]);
      CHECK(b[0] == 0x10 + i);
      CHECK(b[sizes[i] - 1] == 0x10 + i);
      ::operator delete(blocks[i], sizes[i], std::align_val_t{a});
    }
  }
}

TEST_CASE("aligned operator new of size 0 returns a unique block for every alignment from 1 byte to 64 MiB") {
  for (size_t a = 1; a <= 64 * MiB; a <<= 1) {
    INFO("alignment ", a);
    const std::align_val_t al{a};
    void* p = nullptr;
    void* q = nullptr;
    try {
      p = ::operator new(opaque(size_t(0)), al);
      q = ::operator new[](opaque(size_t(0)), al);
    } catch (const std::bad_alloc&) {
      FAIL_CHECK("operator new(0, align_val_t) threw bad_alloc");
    }
    CHECK(p != nullptr);
    CHECK(q != nullptr);
    CHECK(p != q);
    CHECK(aligned_to(p, a));
    CHECK(aligned_to(q, a));
    if (p) ::operator delete(p, al);
    if (q) ::operator delete[](q, al);
  }
}

TEST_CASE("new-expressions of over-aligned types use aligned storage") {
  auto* a = new Aligned64;
  escape(a);
  CHECK(aligned_to(a, 64));
  CHECK(fw_owns(a));
  delete a;
  auto* b = new AlignedPage[opaque(size_t(5))];
  escape(b);
  CHECK(aligned_to(b, 4096));
  delete[] b;
  auto* c = new (std::nothrow) Aligned64K;
  REQUIRE(c != nullptr);
  escape(c);
  CHECK(aligned_to(c, 1 << 16));
  delete c;
  std::vector<Aligned64> v(1000);
  CHECK(aligned_to(v.data(), 64));
  auto up = std::make_unique<AlignedPage>();
  CHECK(aligned_to(up.get(), 4096));
}

TEST_CASE("operator delete of nullptr is a no-op in every form") {
  const uint64_t before = live_bytes();
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::nothrow);
  ::operator delete[](nullptr, std::nothrow);
  ::operator delete(nullptr, size_t(16));
  ::operator delete[](nullptr, size_t(16));
  ::operator delete(nullptr, std::align_val_t{64});
  ::operator delete[](nullptr, std::align_val_t{64});
  ::operator delete(nullptr, std::align_val_t{64}, std::nothrow);
  ::operator delete[](nullptr, std::align_val_t{64}, std::nothrow);
  ::operator delete(nullptr, size_t(16), std::align_val_t{64});
  ::operator delete[](nullptr, size_t(16), std::align_val_t{64});
  Tracked* t = nullptr;
  delete opaque(t);
  delete[] opaque(t);
  CHECK(live_bytes() == before);
}

TEST_CASE("operator new(0) returns unique non-null pointers") {
  std::set<void*> seen;
  std::vector<void*> blocks;
  blocks.reserve(2000);
  for (int i = 0; i < 1000; ++i) {
    void* p = ::operator new(opaque(size_t(0)));
    void* q = ::operator new[](opaque(size_t(0)));
    REQUIRE(p != nullptr);
    REQUIRE(q != nullptr);
    CHECK(seen.insert(p).second);
    CHECK(seen.insert(q).second);
    blocks.push_back(p);
    blocks.push_back(q);
  }
  for (size_t i = 0; i < blocks.size(); i += 2) {
    ::operator delete(blocks[i]);
    ::operator delete[](blocks[i + 1]);
  }
}

TEST_CASE("memory from new can be freed with free and resized with realloc (one heap)") {
  // Not portable C++, but with malloc replaced by the same allocator the two
  // families share one heap: a program mixing them by mistake keeps working.
  void* p = ::operator new(100);
  CHECK(fw_owns(p));
  void* m = malloc(100);
  CHECK(fw_owns(m));
  ::operator delete(m);
  free(p);
  CHECK(fw_check_heap() == 0);
}

// ---------------------------------------------------------------------------
// Failure.

TEST_CASE("operator new of an impossible size throws std::bad_alloc") {
  for (size_t n : kImpossible) {
    CAPTURE(n);
    CHECK_THROWS_AS(new_delete(opaque(n)), std::bad_alloc);
    CHECK_THROWS_AS(new_delete_array(opaque(n)), std::bad_alloc);
    CHECK_THROWS_AS(new_delete_aligned(opaque(n), 64), std::bad_alloc);
    CHECK_THROWS_AS(new_delete_aligned_array(opaque(n), 4096), std::bad_alloc);
    CHECK_THROWS_AS(new_delete_aligned(opaque(n), 4 * MiB), std::bad_alloc);
  }
  // new-expressions: an element count too big for the compiler's limit throws
  // std::bad_array_new_length (a bad_alloc) without calling operator new; one
  // that passes it (2^56 bytes) reaches operator new, which throws bad_alloc.
  // (The result goes through escape(): an unused new-expression may be
  // optimised away, allocation and all.)
  CHECK_THROWS_AS(new_expression<uint64_t>(opaque(SIZE_MAX / 2)), std::bad_alloc);
  CHECK_THROWS_AS(new_expression<uint64_t>(opaque(size_t(1) << 53)), std::bad_alloc);
  CHECK_THROWS_AS(new_expression<Tracked>(opaque(size_t(1) << 53)), std::bad_alloc);
  CHECK(g_alive == 0);
  // A failed allocation inside a container.
  std::vector<char> v;
  CHECK_THROWS_AS(v.reserve(opaque(size_t(PTRDIFF_MAX) - 16)), std::exception);
}

TEST_CASE("nothrow operator new of an impossible size returns nullptr") {
  for (size_t n : kImpossible) {
    CAPTURE(n);
    CHECK(::operator new(opaque(n), std::nothrow) == nullptr);
    CHECK(::operator new[](opaque(n), std::nothrow) == nullptr);
    CHECK(::operator new(opaque(n), std::align_val_t{64}, std::nothrow) == nullptr);
    CHECK(::operator new[](opaque(n), std::align_val_t{MiB}, std::nothrow) == nullptr);
  }
  size_t count = opaque(size_t(1) << 53);  // 2^56 bytes: reaches operator new[]
  uint64_t* a = new (std::nothrow) uint64_t[count];
  escape(a);
  CHECK(a == nullptr);
  delete[] a;
}

namespace {
int g_handler_calls = 0;
// Counts its calls, then uninstalls itself: the retry that follows finds no
// handler and fails for good.
void counting_handler() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);
}
void throwing_handler() {
  ++g_handler_calls;
  throw std::bad_alloc();
}
}  // namespace

TEST_CASE("a new_handler installed with std::set_new_handler is called when operator new fails") {
  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK_THROWS_AS(new_delete(opaque(SIZE_MAX)), std::bad_alloc);
  CHECK(g_handler_calls == 1);
  const bool still_installed = std::get_new_handler() != nullptr;
  CHECK_FALSE(still_installed);

  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK_THROWS_AS(new_delete_array(opaque(SIZE_MAX)), std::bad_alloc);
  CHECK(g_handler_calls == 1);

  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK_THROWS_AS(new_delete_aligned(opaque(SIZE_MAX), 256), std::bad_alloc);
  CHECK(g_handler_calls == 1);

  // A handler that throws: its exception leaves operator new.
  g_handler_calls = 0;
  std::set_new_handler(throwing_handler);
  CHECK_THROWS_AS(new_delete(opaque(SIZE_MAX)), std::bad_alloc);
  CHECK(g_handler_calls == 1);
  std::set_new_handler(nullptr);

  // No handler after a success.
  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  void* p = ::operator new(opaque(size_t(100)));
  CHECK(g_handler_calls == 0);
  ::operator delete(p);
  std::set_new_handler(nullptr);
}

TEST_CASE("aligned operator new with an alignment that is not a power of two throws bad_alloc without calling the "
          "new_handler (nothrow: nullptr)") {
  for (size_t a : {size_t(0), size_t(3), size_t(24), size_t(96), (size_t(1) << 20) + 1}) {
    CAPTURE(a);
    g_handler_calls = 0;
    std::set_new_handler(counting_handler);
    CHECK_THROWS_AS(escape(::operator new(opaque(size_t(16)), std::align_val_t{opaque(a)})), std::bad_alloc);
    CHECK_THROWS_AS(escape(::operator new[](opaque(size_t(16)), std::align_val_t{opaque(a)})), std::bad_alloc);
    CHECK(::operator new(opaque(size_t(16)), std::align_val_t{opaque(a)}, std::nothrow) == nullptr);
    CHECK(::operator new[](opaque(size_t(16)), std::align_val_t{opaque(a)}, std::nothrow) == nullptr);
    CHECK(g_handler_calls == 0);
    std::set_new_handler(nullptr);
  }
}

TEST_CASE("nothrow operator new calls the new_handler before returning nullptr") {
  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(::operator new(opaque(SIZE_MAX), std::nothrow) == nullptr);
  CHECK(g_handler_calls == 1);

  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  CHECK(::operator new(opaque(SIZE_MAX), std::align_val_t{64}, std::nothrow) == nullptr);
  CHECK(g_handler_calls == 1);
  std::set_new_handler(nullptr);
}

TEST_CASE("nothrow operator new returns nullptr when the new_handler throws bad_alloc") {
  // [new.delete.single]: the nothrow forms behave as if they called the
  // throwing form inside try { } catch (const bad_alloc&) { return nullptr; };
  // a new_handler may throw bad_alloc ([new.handler]). libstdc++ does this.
  g_handler_calls = 0;
  std::set_new_handler(throwing_handler);
  void* p = ::operator new(opaque(SIZE_MAX), std::nothrow);
  void* q = ::operator new[](opaque(SIZE_MAX), std::align_val_t{64}, std::nothrow);
  std::set_new_handler(nullptr);
  CHECK(p == nullptr);
  CHECK(q == nullptr);
  CHECK(g_handler_calls == 2);
}

// ---------------------------------------------------------------------------
// Containers.

TEST_CASE("std::vector<std::string> with many long and short strings works") {
  std::vector<std::string> v;
  for (int i = 0; i < 200000; ++i) {
    std::string s = std::to_string(i);
    if (i % 3 == 0) s += std::string(size_t(i % 200), char('a' + i % 26));  // past the SSO buffer
    v.push_back(std::move(s));
  }
  for (int i = 0; i < 200000; i += 997) {
    std::string expect = std::to_string(i);
    if (i % 3 == 0) expect += std::string(size_t(i % 200), char('a' + i % 26));
    REQUIRE(v[size_t(i)] == expect);
    CHECK(fw_owns(v.data()));
  }
  v.erase(v.begin(), v.begin() + 100000);
  v.shrink_to_fit();
  CHECK(v.size() == 100000);
  CHECK(v.front() == std::to_string(100000) + std::string(size_t(100000 % 200), char('a' + 100000 % 26)));
}

TEST_CASE("std::map and std::unordered_map with many entries work") {
  std::map<int, std::string> m;
  std::unordered_map<std::string, int> u;
  for (int i = 0; i < 300000; ++i) {
    int k = int(uint64_t(i) * 7919u % 1000003u);  // one key per i
    m[k] = "value-" + std::to_string(i);
    u["key-" + std::to_string(k)] = i;
  }
  CHECK(m.size() == u.size());
  int last = -1;
  for (const auto& [k, val] : m) {
    REQUIRE(k > last);
    last = k;
    REQUIRE(u.count("key-" + std::to_string(k)) == 1);
  }
  for (int i = 0; i < 300000; i += 2) {
    int k = int(uint64_t(i) * 7919u % 1000003u);
    m.erase(k);
    u.erase("key-" + std::to_string(k));
  }
  CHECK(m.size() == u.size());
  for (int i = 1; i < 300000; i += 1000) {  // odd i: kept
    int k = int(uint64_t(i) * 7919u % 1000003u);
    REQUIRE(m.count(k) == 1);
    CHECK(m[k] == "value-" + std::to_string(i));
    CHECK(u.at("key-" + std::to_string(k)) == i);
  }
  m.clear();
  u.clear();
  u.rehash(0);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("shared_ptr, unique_ptr and nested containers free everything they allocate") {
  const uint64_t before = live_bytes();
  {
    std::vector<std::shared_ptr<std::vector<std::string>>> owners;
    for (int i = 0; i < 2000; ++i) {
      auto sp = std::make_shared<std::vector<std::string>>();
      for (int j = 0; j < i % 17; ++j) sp->push_back(std::string(size_t(j * 9), 'x'));
      owners.push_back(sp);
      owners.push_back(sp);  // shared twice
    }
    std::vector<std::unique_ptr<Tracked[]>> arrays;
    for (int i = 1; i < 500; ++i) arrays.push_back(std::make_unique<Tracked[]>(size_t(i)));
    CHECK(g_alive == 499 * 500 / 2);
  }
  CHECK(g_alive == 0);
  CHECK(live_bytes() == before);
}
