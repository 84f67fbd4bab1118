// Heap misuse: freeway must stop the process with SIGABRT and say what went
// wrong, on stderr: "freeway: <description> 0x<address>" (core/report.h).
// Each case runs in a child (misuse_util.h). The program runs twice, in the
// default mode and with FREEWAY_SECURE=1 (tests/reliability.cmake).
#include <doctest/doctest.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <initializer_list>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "freeway.h"
#include "misuse_util.h"
#include "test_util.h"

namespace {

using namespace fwtest::misuse;

const std::initializer_list<const char*> kDoubleFree = {"double free"};
const std::initializer_list<const char*> kInterior = {"interior", "not the start", "not its start"};
const std::initializer_list<const char*> kForeign = {"did not allocate", "not allocated", "did not hand out"};
const std::initializer_list<const char*> kNeverHandedOut = {"never handed out", "did not allocate", "not allocated",
                                                             "did not hand out"};
const std::initializer_list<const char*> kFreed = {"freed", "double free", "not in use"};

// After an undetected double free: does malloc hand the block out twice?
void probe_double_handout(size_t n) {
  void* a = malloc(n);
  void* b = malloc(n);
  char m[160];
  std::snprintf(m, sizeof m, "child: after the double free, malloc(%zu) returned %p then %p%s\n", n, a, b,
                a == b ? " (the same block twice)" : "");
  say(m);
}

char g_static_buffer[256];

}  // namespace

TEST_CASE("misuse: immediate double free of a small block aborts with 'double free' and the address") {
  expect_abort("immediate double free of a small block", kDoubleFree, [] {
    void* p = malloc(48);
    std::memset(p, 1, 48);
    free(p);
    announce(p);
    free(launder(p));
    probe_double_handout(48);
  });
}

TEST_CASE("misuse: double free with other frees in between (a, b, c, a) aborts") {
  expect_abort("double free with frees in between (a b c a)", kDoubleFree, [] {
    void* a = malloc(64);
    void* b = malloc(64);
    void* c = malloc(64);
    free(a);
    free(b);
    free(c);
    announce(a);
    free(launder(a));
    probe_double_handout(64);
  });
}

TEST_CASE("misuse: double free of a small block first freed by another thread aborts") {
  expect_abort("double free, first free on another thread", kDoubleFree, [] {
    void* p = malloc(200);
    std::thread([p] { free(p); }).join();
    announce(p);
    free(launder(p));
    probe_double_handout(200);
  });
}

// Frees into a span another thread allocated from go onto a pending chain in
// the freeing thread's LAB (core/lab.h). A free that finds the chain full
// takes a short path of its own (free_chain_full, core/free.h), after the
// fast path's checks: a double free there must still stop the process, both
// of a block still in the chain and of one already given to its span.
namespace {
void double_free_at_full_chain(unsigned extra) {
  constexpr unsigned kBlocks = 2000;  // 64-byte blocks: more than one chain's worth (256 at most)
  static void* blocks[kBlocks];
  std::thread([] {
    for (void*& b : blocks) b = malloc(64);
  }).join();
  for (unsigned i = 0; i < 256 + extra; i++) free(blocks[i]);
  announce(blocks[0]);
  free(launder(blocks[0]));
  probe_double_handout(64);
}
}  // namespace

TEST_CASE("misuse: double free of a block in a full pending chain aborts") {
  expect_abort("double free, the chain holding the block full", kDoubleFree, [] { double_free_at_full_chain(0); });
}

TEST_CASE("misuse: double free of a block a full pending chain gave to its span aborts") {
  expect_abort("double free, the block's chain given to its span", kDoubleFree, [] { double_free_at_full_chain(8); });
}

TEST_CASE("misuse: double free of a large block (4 MiB) aborts") {
  expect_abort("double free of a large block (4 MiB)", kDoubleFree, [] {
    void* p = malloc(4u << 20);
    std::memset(p, 1, 4096);
    free(p);
    announce(p);
    free(launder(p));
  });
}

TEST_CASE("misuse: free of an interior pointer (p+16 of a 64-byte block) aborts") {
  expect_abort("free of p+16 of a 64-byte block", kInterior, [] {
    char* p = static_cast<char*>(malloc(64));
    announce(p + 16);
    free(launder(p + 16));
  });
}

TEST_CASE("misuse: free of an interior pointer (p+8 of a 64-byte block) aborts") {
  expect_abort("free of p+8 of a 64-byte block", kInterior, [] {
    char* p = static_cast<char*>(malloc(64));
    announce(p + 8);
    free(launder(p + 8));
  });
}

TEST_CASE("misuse: free of a pointer inside a large block (p+4096 of 1 MiB) aborts") {
  expect_abort("free of p+4096 of a 1 MiB block", kInterior, [] {
    char* p = static_cast<char*>(malloc(1u << 20));
    announce(p + 4096);
    free(launder(p + 4096));
  });
}

TEST_CASE("misuse: free of a pointer inside a huge block, past its first vspan (p+2 MiB of 300 MiB), aborts as "
          "inside a block") {
  expect_abort("free of p+2 MiB of a 300 MiB block", kInterior, [] {
    char* p = static_cast<char*>(malloc(size_t(300) << 20));
    announce(p + (2u << 20));
    free(launder(p + (2u << 20)));
  });
}

TEST_CASE("misuse: free of a stack address aborts with 'did not allocate'") {
  expect_abort("free of a stack address", kForeign, [] {
    char buf[128];
    std::memset(buf, 0, sizeof buf);
    announce(buf + 16);
    free(launder(buf + 16));
  });
}

TEST_CASE("misuse: free of a static (global) address aborts with 'did not allocate'") {
  expect_abort("free of a static address", kForeign, [] {
    announce(g_static_buffer + 32);
    free(launder(g_static_buffer + 32));
  });
}

TEST_CASE("misuse: free of memory in freeway's arena that it never handed out (uncarved tail of a span) aborts") {
  expect_abort("free of p+60000 in a fresh 16-byte span (never carved)", kNeverHandedOut, [] {
    // Find the first block of a fresh span of the 16-byte class: an address at
    // a 1 MiB boundary (a span at colour 0 of a vspan there), followed by the next 1023 blocks in
    // order (the first carve: 16 KiB). p + 60000 is then in the span (64 KiB)
    // but far past its carved part. (Secure mode adds a 5-byte tail to each
    // block: 11 bytes then fill a 16-byte block.)
    const char* secure = getenv("FREEWAY_SECURE");
    const size_t n = secure != nullptr && atoi(secure) > 0 ? 11 : 16;
    char* first = nullptr;
    for (int i = 0; i < (1 << 20) && first == nullptr; i++) {
      char* p = static_cast<char*>(malloc(n));
      if ((reinterpret_cast<uintptr_t>(p) & ((1u << 20) - 1)) != 0) continue;
      bool sequential = true;
      for (int k = 1; k < 1024 && sequential; k++) sequential = malloc(n) == p + 16 * k;
      if (sequential) first = p;
    }
    if (first == nullptr) {
      say("child: setup failed: no fresh span of the 16-byte class found\n");
      _exit(99);
    }
    announce(first + 60000);
    free(launder(first + 60000));
  });
}

TEST_CASE("misuse: realloc (to a smaller size) of a freed block aborts") {
  expect_abort("realloc(p, 32) of a freed 64-byte block", kFreed, [] {
    void* p = malloc(64);
    free(p);
    announce(p);
    void* q = realloc(launder(p), 32);
    char m[96];
    std::snprintf(m, sizeof m, "child: realloc of the freed block returned %p\n", q);
    say(m);
  });
}

TEST_CASE("misuse: realloc (to a larger size) of a freed block aborts") {
  expect_abort("realloc(p, 4000) of a freed 64-byte block", kFreed, [] {
    void* p = malloc(64);
    free(p);
    announce(p);
    void* q = realloc(launder(p), 4000);
    char m[96];
    std::snprintf(m, sizeof m, "child: realloc of the freed block returned %p\n", q);
    say(m);
  });
}

// A pointer inside a small, large (128 KiB to 256 MiB) or huge block, to a
// size it could keep in place, grow to or move to: realloc must not take it
// for the block. A small block's cases go through realloc's own checks of its
// common cases (core/alloc.cpp small_in_use), the others through the full path.
TEST_CASE("misuse: realloc of a pointer inside a small, large or huge block aborts, whatever the size asked") {
  struct Case {
    const char* name;
    size_t block, offset, size;
  };
  const Case cases[] = {
      {"realloc(p+16, 40) of a 64-byte block (keep in place)", 64, 16, 40},
      {"realloc(p+48, 600) of a 1000-byte block (keep in place)", 1000, 48, 600},
      {"realloc(p+16, 4000) of a 64-byte block (move)", 64, 16, 4000},
      {"realloc(p+16, 400000) of a 600000-byte block (keep in place)", 600000, 16, 400000},
      {"realloc(p+256 KiB, 700000) of a 600000-byte block (grow in place)", 600000, 256u << 10, 700000},
      {"realloc(p+16, 1 MiB) of a 300 MiB block", size_t(300) << 20, 16, 1u << 20},
      {"realloc(p+2 MiB, 1 MiB) of a 300 MiB block", size_t(300) << 20, 2u << 20, 1u << 20},
  };
  for (const Case& c : cases) {
    expect_abort(c.name, kInterior, [c] {
      char* p = static_cast<char*>(malloc(c.block));
      announce(p + c.offset);
      void* q = realloc(launder(p + c.offset), c.size);
      char m[96];
      std::snprintf(m, sizeof m, "child: realloc of the interior pointer returned %p\n", q);
      say(m);
    });
  }
}

// ---------------------------------------------------------------------------
// Sized frees (issue 11): the size must be one the block can have.

const std::initializer_list<const char*> kSizedFree = {"sized free"};

TEST_CASE("misuse: sized operator delete with a size larger than the block aborts") {
  expect_abort("operator delete(p, 4096) of a 48-byte block", kSizedFree, [] {
    void* p = ::operator new(48);
    announce(p);
    ::operator delete(launder(p), 4096);
  });
}

TEST_CASE("misuse: sized operator delete with a size far below the block's aborts") {
  expect_abort("operator delete(p, 100) of a 1024-byte block", kSizedFree, [] {
    void* p = ::operator new(1024);
    announce(p);
    ::operator delete(launder(p), 100);
  });
}

TEST_CASE("misuse: free_sized with a wrong size of a block another thread allocated aborts") {
  expect_abort("free_sized(p, 2000) of another thread's 200-byte block", kSizedFree, [] {
    void* p = nullptr;
    std::thread([&p] { p = malloc(200); }).join();
    announce(p);
    fw_free_sized(launder(p), 2000);
  });
}

TEST_CASE("misuse: free_sized of a large block with a size larger than it aborts") {
  expect_abort("free_sized(p, 8 MiB) of a 4 MiB block", kSizedFree, [] {
    void* p = malloc(4 << 20);
    announce(p);
    fw_free_sized(launder(p), 8 << 20);
  });
}

// new[] of a type with a destructor stores the element count (the array
// cookie) before the elements, so the pointer the program holds is inside the
// block. Releasing it with delete (not delete[]) or free passes that interior
// pointer, and freeway stops: the family mismatch is caught at no cost. (For
// types without a destructor new and new[] make the same block, and freeway
// cannot tell which one a program used.)
struct WithDestructor {
  char bytes[256];
  ~WithDestructor() { launder(this); }
};
const std::initializer_list<const char*> kMismatch = {"sized free", "not the start of a block"};

TEST_CASE("misuse: delete of a new[] array of a type with a destructor aborts") {
  expect_abort("delete p, p = new T[2] (T has a destructor)", kMismatch, [] {
    WithDestructor* p = new WithDestructor[2];
    announce(p);
    delete static_cast<WithDestructor*>(launder(p));
  });
}

TEST_CASE("misuse: free of a new[] array of a type with a destructor aborts") {
  expect_abort("free(p), p = new T[2] (T has a destructor)", kMismatch, [] {
    WithDestructor* p = new WithDestructor[2];
    announce(p);
    std::free(launder(p));
  });
}

TEST_CASE("sized frees with the sizes programs legitimately pass go through") {
  // Exact sizes, sizes after realloc kept the block, calloc, aligned new and
  // delete, large blocks, and NULL: none of these may stop the process.
  for (size_t n = 0; n <= 70000; n = n < 512 ? n + 1 : n * 9 / 8) {
    void* p = ::operator new(n);
    ::operator delete(p, n);
    void* q = malloc(n);
    fw_free_sized(q, n);
    char* a = new char[n + 1];
    delete[] a;
  }
  for (size_t n : {size_t(100), size_t(1000), size_t(5000), size_t(100000), size_t(3) << 20}) {
    void* p = malloc(n);
    void* q = realloc(p, n * 3 / 4);  // may keep the block
    fw_free_sized(q, n * 3 / 4);
    void* c = calloc(n, 1);
    fw_free_sized(c, n);
  }
  for (size_t align : {size_t(32), size_t(64), size_t(256), size_t(4096), size_t(1) << 16}) {
    for (size_t n : {size_t(1), size_t(24), size_t(100), size_t(3000), size_t(200000)}) {
      void* p = ::operator new(n, std::align_val_t(align));
      ::operator delete(p, n, std::align_val_t(align));
      void* q = aligned_alloc(align, n);
      fw_free_aligned_sized(q, align, n);
    }
  }
  fw_free_sized(nullptr, 123);
  ::operator delete(nullptr, size_t(64));
  CHECK(fw_check_heap() == 0);
}
