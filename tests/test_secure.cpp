// Secure mode (this program runs with FREEWAY_SECURE=1): encoded free lists,
// guard pages that turn overflows into faults, and what core/secure_heap.h
// adds: tail canaries, free fill, the quarantine.
#include <doctest/doctest.h>

#include <csignal>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include "misuse_util.h"

#include "core/arena.h"
#include "core/lab.h"
#include "core/span.h"
#include "platform/os.h"
#include "core/secure.h"
#include "core/secure_heap.h"
#include "freeway.h"

using namespace fw;

namespace {
// Runs fn in a child; returns the signal that ended it (0 if it exited).
template <class Fn>
int child_signal(Fn fn) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The default action, not doctest's fatal-signal handler (which allocates,
    // and under TSan reports that instead of letting the fault end the child).
    signal(SIGSEGV, SIG_DFL);
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}
}  // namespace

TEST_CASE("secure mode stores free-list links encoded with a random key") {
  // The process's first block of its class: the blocks carved after it are
  // free and linked in order, each link encoded.
  char* p = static_cast<char*>(fw_malloc(64));
  REQUIRE(secure_mode());
  CHECK(g_list_key.load() != 0);
  const uint32_t bs = span_of(p)->block_size.load();
  void* next = p + bs;
  uintptr_t raw = *static_cast<uintptr_t*>(next);
  CHECK(raw != reinterpret_cast<uintptr_t>(p + 2 * bs));
  CHECK(block_next(next) == p + 2 * bs);
  fw_free(p);
}

TEST_CASE("secure mode: writing past the last block of a small span hits a guard page") {
  int sig = child_signal([] {
    // Allocate 4 KiB blocks (the 4,091 bytes asked for and the tail) until
    // one is the last block of its span, which ends at the guard page.
    for (int i = 0; i < 1000; i++) {
      char* p = static_cast<char*>(fw_malloc(4096 - kSecureTail));
      Span* s = span_of(p);
      uint32_t last = s->capacity.load() - 1;
      if (block_number(p, s->cls.load(), s->offset.load()) == last) {
        volatile char* over = p + s->block_size.load();  // past the block (its tail canary is inside)
        *over = 1;  // the guard page: must fault
        _exit(0);
      }
    }
    _exit(2);
  });
  CHECK(sig == SIGSEGV);
}

TEST_CASE("secure mode: writing past the end of a large block hits a guard page") {
  int sig = child_signal([] {
    char* p = static_cast<char*>(fw_malloc(300 * 1024));  // usable up to the page end
    size_t usable = fw_usable_size(p);
    p[usable - 1] = 1;  // fine
    volatile char* over = p + usable;
    *over = 1;  // must fault
  });
  CHECK(sig == SIGSEGV);
}

TEST_CASE("secure mode keeps the heap invariants") {
  void* v[1000];
  for (int i = 0; i < 1000; i++) v[i] = fw_malloc(16 + (i * 97) % 20000);
  for (int i = 0; i < 1000; i += 2) fw_free(v[i]);
  CHECK(fw_check_heap() == 0);
  for (int i = 1; i < 1000; i += 2) fw_free(v[i]);
  CHECK(fw_check_heap() == 0);
}

// --- What secure mode adds (core/secure_heap.h): each bug in a child that must
// stop with "freeway: <problem> 0x<address>" (misuse_util.h). ---
namespace {
using namespace fwtest::misuse;
const std::initializer_list<const char*> kOverflow = {"heap overflow"};
const std::initializer_list<const char*> kAfterFree = {"write after free"};
}  // namespace

TEST_CASE("secure: a one-byte overflow past the requested size is caught at free") {
  expect_abort("1-byte overflow of a 24-byte block", kOverflow, [] {
    char* p = static_cast<char*>(fw_malloc(24));
    std::memset(p, 'a', 24);
    p[24] = 'b';  // one byte too far, inside the block
    announce(p);
    fw_free(launder(p));
  });
}

TEST_CASE("secure: a NUL terminator written one byte too far is caught at free") {
  expect_abort("off-by-one NUL after a 100-byte string", kOverflow, [] {
    char* p = static_cast<char*>(fw_malloc(100));
    std::memset(p, 'x', 100);
    static_cast<char*>(launder(p))[100] = '\0';  // strcpy of a 100-char string into 100 bytes
    announce(p);
    fw_free(p);
  });
}

TEST_CASE("secure: an 8-byte memcpy overflow of a 4 KiB block is caught at free") {
  expect_abort("memcpy 8 bytes past a 4000-byte block", kOverflow, [] {
    char* p = static_cast<char*>(fw_malloc(4000));
    char src[4008];
    std::memset(src, 7, sizeof src);
    std::memcpy(launder(p), src, sizeof src);
    announce(p);
    fw_free(p);
  });
}

TEST_CASE("secure: an overflow is caught by realloc and by malloc_usable_size too") {
  expect_abort("overflow, then realloc", kOverflow, [] {
    char* p = static_cast<char*>(fw_malloc(40));
    static_cast<char*>(launder(p))[41] = 1;
    announce(p);
    p = static_cast<char*>(fw_realloc(p, 400));
  });
  expect_abort("overflow, then malloc_usable_size", kOverflow, [] {
    char* p = static_cast<char*>(fw_malloc(40));
    static_cast<char*>(launder(p))[40] = 1;
    announce(p);
    std::printf("%zu\n", fw_usable_size(p));
  });
}

TEST_CASE("secure: an underflow into the block before is caught when that block is freed") {
  expect_abort("1-byte underflow of the next block", kOverflow, [] {
    // Two neighbours of one span: writing before b changes a's size field.
    char* a = static_cast<char*>(fw_malloc(40));
    char* b = static_cast<char*>(fw_malloc(40));
    if (b != a + span_of(a)->block_size.load()) {
      say("child: setup failed: the two blocks are not neighbours\n");
      _exit(99);
    }
    // The byte written must differ from the one there: a's size field is
    // encoded with a random key, so a fixed value matched it in one run of 256.
    char* under = static_cast<char*>(launder(b)) - 1;
    *under = char(*under ^ 0x55);
    announce(a);
    fw_free(a);
  });
}

TEST_CASE("secure: a write after free is caught when the block is handed out again") {
  expect_abort("write into a freed 64-byte block", kAfterFree, [] {
    char* p = static_cast<char*>(fw_malloc(64));
    fw_free(p);
    static_cast<char*>(launder(p))[40] = 1;  // after the link and canary words
    announce(p);
    fw_collect();  // out of the quarantine, back on a free list
    for (int i = 0; i < 100000; i++) fw_malloc(64);
    say("child: the freed block never came back\n");
  });
}

TEST_CASE("secure: a write into a quarantined block is caught when fw_collect empties the quarantine") {
  expect_abort("write into the first word of a freed block, then fw_collect", kAfterFree, [] {
    char* p = static_cast<char*>(fw_malloc(64));
    fw_free(p);
    std::memset(launder(p), 'A', 16);  // the words a free-list link would overwrite
    announce(p);
    fw_collect();  // the quarantine's blocks leave: each is checked first
    say("child: fw_collect did not check the quarantined block\n");
  });
}

TEST_CASE("secure: a block handed out shows no free-list link: its words read as the fill, never the list key") {
  // Blocks carved in a row link each to the next (the last to nullptr, whose
  // encoded form is the key): none of them may show its link.
  std::vector<char*> v;
  for (int i = 0; i < 200; i++) v.push_back(static_cast<char*>(fw_malloc(100)));
  const uintptr_t key = g_list_key.load();
  REQUIRE(key != 0);
  int shown = 0;
  for (size_t i = 0; i < v.size(); i++) {
    uintptr_t w;
    std::memcpy(&w, v[i], sizeof w);
    for (char* other : v) shown += (w ^ key) == reinterpret_cast<uintptr_t>(other);
    shown += w == key;
  }
  CHECK(shown == 0);
  for (char* p : v) fw_free(p);
}

TEST_CASE("secure: a plain malloc of a power of two takes the next class, not one twice as big") {
  // Each block needs kSecureTail bytes more: 64 asks for 69, the 80-byte class.
  for (size_t n : {size_t(32), size_t(64), size_t(128), size_t(256), size_t(1024)}) {
    char* p = static_cast<char*>(fw_malloc(n));
    REQUIRE(p != nullptr);
    const uint32_t bs = span_of(p)->block_size.load();
    CHECK_MESSAGE(bs == class_block_size(class_of(n + kSecureTail)), "malloc(", n, ") took a block of ", bs);
    fw_free(p);
  }
  // An aligned request still gets its alignment.
  for (size_t a : {size_t(64), size_t(256), size_t(4096)}) {
    void* p = fw_malloc_aligned(a, a);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % a == 0);
    fw_free(p);
  }
}

TEST_CASE("secure: a write into any word of a small block during its quarantine is caught when it leaves") {
  expect_abort("write into the first word of a freed 8-byte block", kAfterFree, [] {
    char* p = static_cast<char*>(fw_malloc(8));  // a 16-byte block: no fill bytes after 16
    fw_free(p);
    static_cast<char*>(launder(p))[3] = 1;  // where the free-list link will go
    announce(p);
    for (int i = 0; i < 100000; i++) fw_free(fw_malloc(8));  // frees push it out of the quarantine
    say("child: the block never left the quarantine\n");
  });
}

TEST_CASE("secure: zero-size blocks cannot be read or written, and are unique, freeable and reallocable") {
  CHECK(child_signal([] {
          volatile char* z = static_cast<char*>(fw_malloc(0));
          *z = 'x';  // must fault
        }) == SIGSEGV);
  CHECK(child_signal([] {
          volatile char* z = static_cast<char*>(fw_malloc(0));
          char c = *z;  // must fault
          (void)c;
        }) == SIGSEGV);
  std::vector<void*> live;
  for (int i = 0; i < 1000; i++) live.push_back(fw_malloc(0));
  std::vector<void*> sorted = live;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // unique while live
  for (void* z : live) {
    CHECK(z != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(z) % 16 == 0);
    CHECK(fw_usable_size(z) == 0);
    CHECK(fw_owns(z));
  }
  for (void* z : live) fw_free(z);
  for (int i = 0; i < 200000; i++) fw_free(fw_malloc(0));  // slots are reused
  char* r = static_cast<char*>(fw_realloc(fw_malloc(0), 10));
  std::memset(r, 1, 10);
  CHECK(fw_usable_size(r) == 10);
  fw_free(r);
  void* a = fw_malloc_aligned(64, 0);  // aligned beyond 16: an ordinary block
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  fw_free(a);
  expect_abort("double free of malloc(0)", {"double free"}, [] {
    void* z = fw_malloc(0);
    fw_free(z);
    announce(z);
    fw_free(launder(z));
  });
}

TEST_CASE("secure: the freed block is never the next one handed out, and blocks do not come back in order") {
  // LIFO reuse (the default mode, and every thread-cached allocator) gives the
  // block just freed to the next malloc: a use-after-free then reads the new
  // owner's data. Secure mode keeps it in the quarantine instead.
  constexpr int kRounds = 20000;
  int immediate = 0;
  for (int i = 0; i < kRounds; i++) {
    void* p = fw_malloc(48);
    fw_free(p);
    void* q = fw_malloc(48);
    if (q == p) immediate++;
    fw_free(q);
  }
  CHECK(immediate == 0);
  // Which freed block comes back when must not be predictable: free 512
  // blocks, allocate 512 again and note, for each, which of the freed ones it
  // is. Done twice, a LIFO or FIFO heap gives the same pattern both times.
  auto pattern = [] {
    std::vector<void*> old(512);
    for (void*& p : old) p = fw_malloc(200);
    for (void* p : old) fw_free(p);
    std::vector<int> which;
    std::vector<void*> again(512);
    for (void*& q : again) {
      q = fw_malloc(200);
      int k = int(std::find(old.begin(), old.end(), q) - old.begin());
      which.push_back(k < 512 ? k : -1);
    }
    for (void* q : again) fw_free(q);
    return which;
  };
  std::vector<int> first = pattern(), second = pattern();
  int same = 0, reused = 0;
  for (size_t i = 0; i < first.size(); i++) {
    same += first[i] >= 0 && first[i] == second[i];
    reused += first[i] >= 0;
  }
  MESSAGE("of 512 blocks, ", reused, " were freed ones; the second run put the same one in ", same, " of those places");
  REQUIRE(reused >= 32);  // freed blocks do come back
  CHECK(same * 4 < reused);
}

TEST_CASE("secure: a thread's quarantine holds at most 1 MiB of blocks, whatever their size") {
  // 256 slots of 64 KiB blocks would hold 16 MiB back: past the byte bound,
  // free frees other slots' blocks too (secure_heap.h).
  fw_collect();
  fw_stats_t before;
  fw_stats(&before);
  std::vector<void*> blocks;
  for (int i = 0; i < 300; i++) blocks.push_back(fw_malloc(64 * 1024));
  for (void* b : blocks) fw_free(b);
  fw_stats_t after;
  fw_stats(&after);
  CHECK(after.live_bytes <= before.live_bytes + (1u << 20) + 64 * 1024);  // the bound, 1 MiB, and the block freed last
  CHECK(after.live_bytes > before.live_bytes);                            // blocks are still quarantined
  CHECK(fw_check_heap() == 0);
  // Small blocks keep the 256 slots: after 2,000 frees of 1 KiB blocks into
  // random slots, nearly all of them are full (each empty with odds of
  // (255/256)^2000, 0.04%), and 256 such blocks fit the bound.
  fw_collect();
  fw_stats(&before);
  blocks.clear();
  for (int i = 0; i < 2000; i++) blocks.push_back(fw_malloc(1000));
  for (void* b : blocks) fw_free(b);
  fw_stats(&after);
  CHECK(after.live_bytes >= before.live_bytes + 240 * 1000);
  fw_collect();
}

TEST_CASE("secure: fw_collect gives the calling thread's pending frees to their spans") {
  // Enough blocks that most of them sit in spans the thread no longer owns:
  // freeing every other one fills the quarantine, whose blocks then go to
  // chains, and fw_collect frees the quarantine and must give the chains too.
  std::vector<void*> v;
  for (int i = 0; i < 20000; i++) v.push_back(fw_malloc(48));
  for (size_t i = 0; i < v.size(); i += 2) fw_free(v[i]);
  fw_collect();
  const Lab* mine = static_cast<const Lab*>(os::thread_exit_registered());
  REQUIRE(mine != nullptr);
  CHECK(lab_pending_count(mine) == 0);
  for (size_t i = 1; i < v.size(); i += 2) fw_free(v[i]);
  fw_collect();
  CHECK(lab_pending_count(mine) == 0);
}

TEST_CASE("secure: sized free must give the size asked for, not just one the block could hold") {
  expect_abort("free_sized(p, 25) of a 24-byte block", {"sized free"}, [] {
    void* p = fw_malloc(24);
    announce(p);
    fw_free_sized(launder(p), 25);  // the default mode accepts any size of the class
  });
}

TEST_CASE("secure: usable size is the size asked for, calloc zeroes it, realloc keeps it") {
  char* p = static_cast<char*>(fw_malloc(24));
  CHECK(fw_usable_size(p) == 24);
  std::memset(p, 3, 24);
  p = static_cast<char*>(fw_realloc(p, 1000));
  CHECK(fw_usable_size(p) == 1000);
  for (int i = 0; i < 24; i++) CHECK(p[i] == 3);
  p = static_cast<char*>(fw_realloc(p, 10));
  CHECK(fw_usable_size(p) == 10);
  fw_free(p);
  char* z = static_cast<char*>(fw_calloc(10, 10));
  bool zero = true;
  for (int i = 0; i < 100; i++) zero = zero && z[i] == 0;
  CHECK(zero);
  fw_free(z);
  void* a = fw_malloc_aligned(256, 100);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  CHECK(fw_usable_size(a) == 100);
  fw_free(a);
  fw_collect();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("secure: guard pages stay within a quarter of the OS's limit on mappings: past it spans go without, "
          "said once on stderr, and the heap stays sound") {
  // On Linux each guard page splits a read-write mapping (up to two more
  // mappings of vm.max_map_count's 65530), and a heap of a few GiB would leave
  // the program none for its thread stacks. A small budget, set in a child, is
  // reached with a few spans.
  const size_t limit = os::map_count_limit();
  if (limit != 0) CHECK(span_guard_budget() == limit / 4);
  Outcome o = run_child([] {
    const uint64_t budget = span_guards() + 4;
    span_set_guard_budget(budget);
    std::vector<void*> blocks;
    std::vector<const Span*> spans;
    for (int round = 0; round < 2; round++) {  // two rounds past the budget: still one line
      size_t target = spans.size() + 8;
      while (spans.size() < target && blocks.size() < 100000) {
        char* p = static_cast<char*>(fw_malloc(4096 - kSecureTail));
        if (p == nullptr) _exit(2);
        std::memset(p, 7, 4096 - kSecureTail);
        blocks.push_back(p);
        if (std::find(spans.begin(), spans.end(), span_of(p)) == spans.end()) spans.push_back(span_of(p));
      }
    }
    unsigned guarded = 0, bare = 0;
    for (const Span* s : spans) (s->guard_page.load() != 0 ? guarded : bare)++;
    char line[160];
    std::snprintf(line, sizeof line, "guards=%llu budget=%llu spans guarded=%u bare=%u\n",
                  (unsigned long long)span_guards(), (unsigned long long)budget, guarded, bare);
    say(line);
    if (span_guards() > budget) _exit(3);
    if (bare == 0 || guarded == 0) _exit(4);
    for (void* p : blocks) fw_free(p);
    fw_collect();
    if (fw_check_heap() != 0) _exit(5);
    _exit(0);
  });
  INFO("child stderr:\n" << o.err);
  CHECK(o.exit_status == 0);
  size_t said = 0;
  for (size_t at = o.err.find("guard pages in place"); at != std::string::npos;
       at = o.err.find("guard pages in place", at + 1))
    said++;
  CHECK(said == 1);
  CHECK(o.err.find("vm.max_map_count") != std::string::npos);
}
