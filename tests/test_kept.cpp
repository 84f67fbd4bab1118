// Kept spans (lab.h): a per-thread LAB keeps owning the spans it filled, up to
// kKeptBytes of them over all its classes, so that its thread's frees into
// them are local. Run with FREEWAY_KEPT_POOL=0: these cases fill a LAB's own
// allowance; test_kept_pool the pool past it.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/alloc.h"
#include "core/arena.h"
#include "core/free.h"
#include "core/lab.h"
#include "core/span_pool.h"
#include "freeway.h"
#include "kept_util.h"
#include "platform/os.h"
#include "misuse_util.h"
#include "test_util.h"

using namespace fw;
using fwtest::fill_spans;
using fwtest::state_of;

namespace {

constexpr size_t kSize = fwtest::kKeptTestSize;

uint32_t local_of(const Span* s) { return uint32_t(own_count(s)); }
unsigned kept_count() { return lab_current()->kept_n[class_of(kSize)]; }

std::vector<void*> blocks_of(const std::vector<void*>& v, const Span* s) {
  std::vector<void*> out;
  for (void* p : v)
    if (span_of(p) == s) out.push_back(p);
  return out;
}

// Whether s is among the calling thread's kept spans of class c.
bool is_kept(const Span* s, unsigned c) {
  const Lab* lab = lab_current();
  for (unsigned i = 0; i < lab->kept_n[c]; i++)
    if (lab->kept_at(c, i) == s) return true;
  return false;
}

// Called by a thread pinned to the first CPU: fills three spans, and another
// thread on that CPU frees every block of the first, which its free takes to
// the pool (that CPU's stack), leaving this LAB's entry for it stale. Returns
// that span, with the blocks still in use in *v.
Span* first_taken_by_freer(std::vector<void*>* v) {
  std::vector<Span*> spans;
  *v = fill_spans(3, &spans);
  Span* x = spans[0];
  std::vector<void*> first = blocks_of(*v, x);
  std::thread([&] {
    REQUIRE(fwtest::pin_to_first_cpu() >= 0);
    for (void* p : first) fw_free(p);
  }).join();
  REQUIRE(state_of(x) == kFree);  // taken; the entry is stale
  return x;
}

// Lists s as a kept span of class c of lab, as a stale entry stands (the
// span taken by another thread's free) before the LAB's next look drops it.
void put_stale_entry(Lab* lab, unsigned c, Span* s) {
  REQUIRE(kept_has_room(lab, c));
  lab->kept_at(c, lab->kept_n[c]++) = s;
  lab->kept_bytes += class_info(c).span_bytes;
  lab->kept_classes |= uint64_t(1) << c;
}

// Mallocs one block of `size` into *out; true if that made the thread take a
// span from the shared stacks: its hot span of the class (*hot, kept up to
// date) changed to one that was not among its kept spans.
bool malloc_took_span(size_t size, std::vector<void*>* out, Span** hot) {
  const unsigned c = class_of(size);
  Span* was_kept[kKeptEntries];  // on the stack: a vector's malloc would change the LAB
  const unsigned n = lab_current()->kept_n[c];
  for (unsigned i = 0; i < n; i++) was_kept[i] = lab_current()->kept_at(c, i);
  out->push_back(fw_malloc(size));
  Span* now = lab_current()->hot[c];
  const bool took = now != *hot && std::find(was_kept, was_kept + n, now) == was_kept + n;
  *hot = now;
  return took;
}

// Fills three spans and frees every block of the first, which stays kept:
// returns it, with the blocks still in use in *v. The blocks are freed in
// address order, or shuffled.
Span* empty_first_of_three(std::vector<void*>* v, bool shuffled = false) {
  std::vector<Span*> spans;
  *v = fill_spans(3, &spans);
  REQUIRE(spans.size() >= 3);
  Span* first = spans[0];
  const unsigned kept = kept_count();
  std::vector<void*> blocks = blocks_of(*v, first);
  if (shuffled) std::shuffle(blocks.begin(), blocks.end(), std::mt19937(12345));
  for (void* p : blocks) fw_free(p);
  CHECK(state_of(first) == kHot);
  CHECK(first->owner.load() == lab_current());
  CHECK(kept_count() == kept);
  CHECK(fw_check_heap() == 0);
  return first;
}

// Frees blocks from another thread, whose exit gives its pending chains to
// their spans: they reach their spans' remote lists.
void free_from_another_thread(const std::vector<void*>& blocks) {
  std::thread([&] {
    for (void* p : blocks) fw_free(p);
  }).join();
}

void free_all_but(const std::vector<void*>& v, const Span* emptied) {
  for (void* p : v)
    if (span_of(p) != emptied) fw_free(p);
}

}  // namespace

TEST_CASE("a span the thread filled stays its own, and its frees into it are local") {
  std::thread([] {
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(3, &spans);
    REQUIRE(spans.size() >= 3);
    Span* first = spans[0];
    CHECK(state_of(first) == kHot);
    CHECK(first->owner.load() == lab_current());
    CHECK(first != lab_current()->hot[class_of(kSize)]);
    CHECK(kept_count() >= 2);
    std::vector<void*> mine = blocks_of(v, first);
    for (size_t i = 0; i < 100; i++) fw_free(mine[i]);
    // On the span's own list: no pending chain, nothing on its remote list.
    CHECK(local_of(first) == 100);
    CHECK(Anchor::unpack(first->anchor.load()).count == 0);
    CHECK(lab_current()->pending[pending_slot_in(lab_current(), first)].span != first);
    CHECK(fw_check_heap() == 0);  // the block equation counts kept lists as free
    for (size_t i = 100; i < mine.size(); i++) fw_free(mine[i]);
    for (void* p : v)
      if (span_of(p) != first) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("when the hot span runs out, the next kept span in turn with a free block becomes hot, and the next switch "
          "goes on from there") {
  fw_collect();  // no LAB parked with kept spans for this thread to take
  std::thread([] {
    const unsigned c = class_of(kSize);
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(4, &spans);
    REQUIRE(spans.size() >= 4);
    REQUIRE(kept_count() == 3);
    // The kept spans in the order the next switch reads them (from kept_look,
    // which a LAB bound before keeps).
    const Lab* lab = lab_current();
    const unsigned at = lab->kept_look[c] < 3 ? lab->kept_look[c] : 0u;
    Span* full = lab->kept_at(c, at);
    Span* few = lab->kept_at(c, (at + 1) % 3);
    Span* many = lab->kept_at(c, (at + 2) % 3);
    // One stays full, the next gets 10 blocks back, the last 50: the first
    // switch reads the full one, then takes the one with 10, though the last
    // has more.
    std::vector<void*> one = blocks_of(v, few), two = blocks_of(v, many);
    for (int i = 0; i < 10; i++) fw_free(one[i]);
    for (int i = 0; i < 50; i++) fw_free(two[i]);
    Span* hot = lab->hot[c];
    std::vector<void*> more;
    while (lab->hot[c] == hot) more.push_back(fw_malloc(kSize));
    CHECK(span_of(more.back()) == few);
    CHECK(lab->hot[c] == few);
    CHECK(state_of(hot) == kHot);  // kept, not floated
    CHECK(is_kept(hot, c));
    CHECK(is_kept(full, c));
    // The other 9 blocks, then the next switch starts past the one it took.
    for (int i = 0; i < 9; i++) more.push_back(fw_malloc(kSize));
    void* next = fw_malloc(kSize);
    more.push_back(next);
    CHECK(span_of(next) == many);
    CHECK(lab->hot[c] == many);
    CHECK(fw_check_heap() == 0);
    for (void* p : more) fw_free(p);
    for (size_t i = 10; i < one.size(); i++) fw_free(one[i]);
    for (size_t i = 50; i < two.size(); i++) fw_free(two[i]);
    for (void* p : v)
      if (span_of(p) != few && span_of(p) != many) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

namespace {

// The blocks of kept span `first` among `more`, in the order handed out, and
// how many of them are block `at(i)` of the span at position i.
uint32_t blocks_at(const std::vector<void*>& more, const Span* first, uint32_t (*at)(uint32_t, uint32_t)) {
  std::vector<void*> from_first;
  for (void* p : more)
    if (span_of(p) == first) from_first.push_back(p);
  const uint32_t carved = first->carved.load(), bsize = first->block_size.load();
  REQUIRE(from_first.size() == carved);
  uint32_t n = 0;
  for (uint32_t i = 0; i < carved; i++)
    n += reinterpret_cast<uintptr_t>(from_first[i]) == span_blocks(first) + size_t(at(i, carved)) * bsize;
  return n;
}

// Empties the first of three kept spans (freed shuffled or in address order),
// uses up the hot span so that the emptied one becomes hot, takes every block
// it has, and returns how many of them came where block at(i) of the span
// starts.
uint32_t refill_emptied(bool shuffled, uint32_t (*at)(uint32_t, uint32_t)) {
  std::vector<void*> v;
  Span* first = empty_first_of_three(&v, shuffled);
  const uint32_t carved = first->carved.load();
  CHECK(local_of(first) == carved);
  const unsigned c = class_of(kSize);
  Span* hot = lab_current()->hot[c];
  std::vector<void*> more;
  while (lab_current()->hot[c] == hot) more.push_back(fw_malloc(kSize));
  CHECK(lab_current()->hot[c] == first);
  for (uint32_t i = 1; i < carved; i++) more.push_back(fw_malloc(kSize));
  const uint32_t n = blocks_at(more, first, at);
  CHECK(first->carved.load() == carved);
  CHECK(fw_check_heap() == 0);
  for (void* p : more) fw_free(p);
  free_all_but(v, first);
  CHECK(fw_check_heap() == 0);
  return n;
}

}  // namespace

TEST_CASE(
    "a kept span whose last block in use is freed stays kept, and if it was emptied in another order than its blocks, "
    "it is carved again from block 0 when it next becomes hot, so its blocks come in address order") {
  fw_collect();  // no LAB parked with kept spans for this thread to take
  std::thread([] {
    const uint32_t n = refill_emptied(true, [](uint32_t i, uint32_t) { return i; });
    CHECK(n == class_info(class_of(kSize)).capacity);  // fill_spans filled every span whole
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "a kept span emptied in address order keeps its list: the thread's next blocks of its class come off it, "
    "the last freed first, with no carving") {
  fw_collect();
  std::thread([] {
    const uint32_t n = refill_emptied(false, [](uint32_t i, uint32_t carved) { return carved - 1 - i; });
    CHECK(n == class_info(class_of(kSize)).capacity);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "a second free of a block of an emptied kept span, after the span started over and carved fewer blocks, "
    "aborts as a double free") {
  fw_collect();
  fwtest::misuse::expect_abort("double free past a restarted span's carved part", {"double free"}, [] {
    std::vector<void*> v;
    Span* first = empty_first_of_three(&v, true);
    const uint32_t capacity = class_info(class_of(kSize)).capacity;
    void* last = reinterpret_cast<void*>(span_blocks(first) + size_t(capacity - 1) * first->block_size.load());
    const unsigned c = class_of(kSize);
    Span* hot = lab_current()->hot[c];
    while (lab_current()->hot[c] == hot) (void)fw_malloc(kSize);  // the next block comes from `first`
    if (lab_current()->hot[c] != first || first->carved.load() >= capacity) {
      fwtest::misuse::say("child: setup failed: the emptied span did not start over\n");
      _exit(99);
    }
    fwtest::misuse::announce(last);
    fw_free(fwtest::misuse::launder(last));
  });
}

TEST_CASE("an emptied kept span goes back to the span-pool when its thread next takes a span from the shared stacks, its class the only one with kept spans") {
  // No LAB parked by earlier cases: one taken over could keep spans of this
  // class that other threads' frees have emptied, which would go back too.
  fw_collect();
  std::thread([] {
    std::vector<void*> v;
    Span* first = empty_first_of_three(&v);
    const unsigned kept = kept_count();
    // Blocks of another class until the thread takes a span for it (its LAB
    // may be a parked one, with spans of that class already).
    const unsigned c2 = class_of(4 * kSize);
    REQUIRE(c2 != class_of(kSize));
    std::vector<void*> other;
    Span* hot = lab_current()->hot[c2];
    bool took = false;
    while (!took && other.size() < (kKeptSpans + 2) * class_info(c2).capacity) {
      took = malloc_took_span(4 * kSize, &other, &hot);
      if (!took) CHECK(state_of(first) == kHot);
    }
    CHECK(took);
    // Given back: free in the pool, or already the span the thread just took.
    CHECK(kept_count() == kept - 1);
    CHECK(!is_kept(first, class_of(kSize)));
    CHECK((state_of(first) == kFree || first->cls.load() == c2));
    CHECK(fw_check_heap() == 0);
    for (void* p : other) fw_free(p);
    free_all_but(v, first);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("emptied kept spans of several classes go back one class per span taken, all within as many spans as "
          "classes with kept spans: kept spans with blocks in use stay") {
  fw_collect();
  std::thread([] {
    // Three classes, each with three spans filled; then the first span of each
    // is emptied (kept, no block in use) and the second stays kept with every
    // block in use. (Emptied before every class is filled, a span would go
    // back as the next class takes its spans.)
    const size_t sizes[] = {64, 128, 256};
    std::vector<void*> blocks[3];
    Span* emptied[3];
    Span* in_use[3];
    for (int k = 0; k < 3; k++) {
      std::vector<Span*> spans;
      blocks[k] = fill_spans(3, &spans, sizes[k]);
      REQUIRE(spans.size() >= 3);
      emptied[k] = spans[0];
      in_use[k] = spans[1];
    }
    std::vector<void*> live;
    for (int k = 0; k < 3; k++) {
      for (void* p : blocks[k]) {
        if (span_of(p) == emptied[k]) fw_free(p);
        else live.push_back(p);
      }
      REQUIRE(state_of(emptied[k]) == kHot);
    }
    auto released = [&] {
      int n = 0;
      for (int k = 0; k < 3; k++) n += !is_kept(emptied[k], class_of(sizes[k]));
      return n;
    };
    REQUIRE(released() == 0);
    // Blocks of a fourth class, counting the spans the thread takes from the
    // shared stacks: each gives back the empty kept spans of at most one
    // class; this class's own exhausted spans may join the turn.
    const size_t big = 4096;
    const unsigned c2 = class_of(big);
    std::vector<void*> other;
    Span* hot = lab_current()->hot[c2];
    unsigned taken = 0;
    int before = 0;
    while (released() < 3 && taken < 4 && other.size() < 64 * class_info(c2).capacity) {
      if (malloc_took_span(big, &other, &hot)) {
        taken++;
        CHECK(released() - before <= 1);
        before = released();
      }
    }
    CHECK(released() == 3);
    CHECK(taken <= 4);
    for (int k = 0; k < 3; k++) {
      CHECK((state_of(emptied[k]) == kFree || emptied[k]->cls.load() == c2));
      CHECK(is_kept(in_use[k], class_of(sizes[k])));
      CHECK(state_of(in_use[k]) == kHot);
    }
    CHECK(fw_check_heap() == 0);
    for (void* p : other) fw_free(p);
    for (void* p : live) fw_free(p);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "a class that keeps a span at every span taken does not hold the turn: the emptied kept spans of another "
    "class go back while it grows") {
  fw_collect();
  std::thread([] {
    // 64-byte spans kept, then 32-byte ones: the turn of release_empty_kept
    // is on the 32-byte class (a lower class, reached by wrapping round) as it
    // grows, one kept span at each span it takes.
    const unsigned a = class_of(64), b = class_of(32);
    REQUIRE(b < a);
    std::vector<Span*> spans_a, spans_b;
    std::vector<void*> va = fill_spans(10, &spans_a, 64);
    std::vector<void*> vb = fill_spans(4, &spans_b, 32);
    for (void* p : va) fw_free(p);  // every 64-byte span empty, nine kept
    REQUIRE(lab_current()->kept_n[a] == 9);
    // 40 more 32-byte spans, each a span taken and the last one kept: within
    // the 16 MiB allowance (no pool in this program), so none floats.
    std::vector<void*> more = fill_spans(40, &spans_b, 32);
    CHECK(lab_current()->kept_n[b] >= 40);
    CHECK(lab_current()->kept_n[a] == 0);  // went back while b grew
    CHECK(fw_check_heap() == 0);
    for (void* p : vb) fw_free(p);
    for (void* p : more) fw_free(p);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "a big block that faults in fresh pages has its thread's emptied kept spans go back first, and the pool gives "
    "back as many bytes of pages (alloc.cpp, pay_fresh)") {
  fw_collect();  // no pages pooled, and no parked LAB with kept spans
  std::thread([] {
    // Blocks of a class whose thread's frees go onto free[c] across its spans
    // (lab.h): those of the kept spans go back to them before the spans can
    // be found empty. 40 spans, within the 16 MiB allowance: 39 kept. One
    // block of every other span stays in use, so that the emptied spans lie
    // apart and cannot make up the big block's run: its pages are fresh.
    constexpr size_t kBlock = 4104;
    const unsigned c = class_of(kBlock);
    REQUIRE(lists_across_spans(c));
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(40, &spans, kBlock);
    for (void* p : v) std::memset(p, 1, kBlock);
    std::vector<void*> live;
    for (void* p : v) {
      const size_t i = size_t(std::find(spans.begin(), spans.end(), span_of(p)) - spans.begin());
      if (i % 2 == 1 && (live.empty() || span_of(live.back()) != span_of(p)))
        live.push_back(p);
      else
        fw_free(p);
    }
    const unsigned kept = lab_current()->kept_n[c];
    REQUIRE(kept >= 30);  // emptied by their own thread, or holding one block: still kept
    const size_t held =
        size_t(std::count_if(live.begin(), live.end(), [&](void* p) { return span_of(p) != lab_current()->hot[c]; }));
    const uint64_t emptied = uint64_t(kept - held) * class_info(c).span_bytes, before = committed_bytes();
    // A big block (more than kBigRunVspans vspans) with no run in the pool.
    constexpr size_t kBig = size_t(24) << 20;
    char* big = static_cast<char*>(fw_malloc(kBig));
    REQUIRE(big != nullptr);
    std::memset(big, 2, kBig);
    const uint64_t after = committed_bytes();
    INFO("committed before: ", before >> 10, " KiB, after: ", after >> 10, " KiB, emptied spans: ", emptied >> 10,
         " KiB");
    CHECK(lab_current()->kept_n[c] == held);
    CHECK(after <= before + kBig - emptied / 2);
    CHECK(fw_check_heap() == 0);
    fw_free(big);
    for (void* p : live) fw_free(p);
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("past kKeptBytes of kept spans, the exhausted hot span floats") {
  fw_collect();  // no parked LAB with kept spans of other classes: the budget is all this class's
  std::thread([] {
    std::vector<Span*> spans;
    REQUIRE(kept_pool_limit() == 0);  // FREEWAY_KEPT_POOL=0 (tests/CMakeLists.txt)
    std::vector<void*> v = fill_spans(kKeptSpans + 4, &spans);
    REQUIRE(class_info(class_of(kSize)).span_bytes * kKeptSpans == kKeptBytes);
    CHECK(kept_count() == kKeptSpans);
    CHECK(lab_current()->kept_bytes == kKeptBytes);
    unsigned hot = 0, full = 0;
    for (Span* s : spans) {
      uint32_t st = state_of(s);
      if (st == kHot) hot++;
      if (st == kFull) full++;
    }
    CHECK(hot == kKeptSpans + 1);  // the kept ones and the hot one
    CHECK(full == spans.size() - hot);
    CHECK(full >= 2);
    CHECK(fw_check_heap() == 0);
    for (void* p : v) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE("the kept budget is the LAB's: a class of 256 KiB spans keeps what the other classes left of kKeptBytes") {
  fw_collect();
  std::thread([] {
    // Forty spans of 64-byte blocks first (39 kept), then 4 KiB blocks.
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(40, &spans);
    REQUIRE(spans.size() == 40);
    const uint32_t small_kept = lab_current()->kept_bytes;
    CHECK(small_kept == 39 * class_info(class_of(64)).span_bytes);
    const size_t size = 4096;
    const unsigned c = class_of(size);
    REQUIRE(class_info(c).span_bytes == 256 * 1024);
    const uint32_t room = (kKeptBytes - small_kept) / (256 * 1024);
    for (uint32_t i = 0; i < (room + 3) * class_info(c).capacity; i++) v.push_back(fw_malloc(size));
    CHECK(lab_current()->kept_n[c] == room);
    CHECK(lab_current()->kept_bytes == small_kept + room * 256 * 1024);
    CHECK(lab_current()->kept_bytes <= kKeptBytes);
    CHECK(fw_check_heap() == 0);
    for (void* p : v) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE("with more kept spans than one look reads, a free block in any of them is handed out within as many "
          "switches as it takes looks to reach it") {
  fw_collect();
  std::thread([] {
    const unsigned c = class_of(kSize);
    const unsigned n = 3 * kKeptLook;  // n - 1 kept, the last one hot and used up
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(n, &spans);
    REQUIRE(spans.size() == n);
    REQUIRE(kept_count() == n - 1);
    REQUIRE(lab_current()->hot[c] == spans.back());
    // One block back in one kept span; every other kept span is full.
    Span* target = spans[n / 2];
    void* back = blocks_of(v, target).front();
    fw_free(back);
    // Each switch reads the next kKeptLook kept spans; one that finds no free
    // block takes a span from the shared stacks (its blocks come first) and
    // keeps the used-up one. Within ceil(kept / kKeptLook) + 1 switches the
    // look has read every kept span.
    const unsigned most_taken = (n + 3) / kKeptLook + 1;
    std::vector<void*> more;
    Span* hot = lab_current()->hot[c];
    unsigned taken = 0;
    bool found = false;
    while (!found && taken <= most_taken) {
      taken += malloc_took_span(kSize, &more, &hot);
      found = more.back() == back;
    }
    CHECK(found);
    CHECK(taken <= most_taken);
    CHECK(lab_current()->hot[c] == target);
    CHECK(kept_count() == n - 1 + taken);  // every used-up hot span kept: the budget has room
    CHECK(fw_check_heap() == 0);
    for (void* p : more) fw_free(p);
    for (void* b : v)
      if (b != back) fw_free(b);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE("fw_collect gives kept spans back, and a parked LAB's too") {
  std::vector<void*> v;
  std::vector<Span*> spans;
  std::thread([&] {
    v = fill_spans(4, &spans);
    CHECK(kept_count() >= 3);
    // fw_collect: this thread's kept spans float (FULL: no block free).
    fw_collect();
    CHECK(kept_count() == 0);
    CHECK(state_of(spans[0]) == kFull);
    CHECK(spans[0]->owner.load() == nullptr);
    CHECK(fw_check_heap() == 0);
    std::vector<void*> w = fill_spans(3, &spans);
    v.insert(v.end(), w.begin(), w.end());
    CHECK(kept_count() >= 2);
  }).join();
  // The exited thread's LAB is parked with its spans (lab.h); fw_collect flushes it,
  // and then every span it filled is no one's.
  fw_collect();
  for (Span* s : spans) {
    uint32_t st = state_of(s);
    CHECK((st == kFull || st == kPartial));
    CHECK(s->owner.load() == nullptr);
  }
  CHECK(fw_check_heap() == 0);
  for (void* p : v) fw_free(p);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "other threads' frees into a kept span reach it remotely, and the free that empties one, counting its "
    "own list, takes it to the pool: its entry goes stale and is dropped") {
  std::thread([] {
    const unsigned c = class_of(kSize);
    std::vector<Span*> spans;
    std::vector<void*> v = fill_spans(4, &spans);
    std::vector<void*> first = blocks_of(v, spans[0]), second = blocks_of(v, spans[1]);
    const size_t half = first.size() / 2;
    // The owner frees half of span 1 onto its own list; another thread frees
    // the rest of it and half of span 2 (its exit gives its pending chains to
    // the spans). The last chain into span 1 finds every block free.
    for (size_t i = 0; i < half; i++) fw_free(first[i]);
    CHECK(local_of(spans[0]) == half);
    const fw_stats_t before = [] {
      fw_stats_t st;
      fw_stats(&st);
      return st;
    }();
    std::thread([&] {
      for (size_t i = half; i < first.size(); i++) fw_free(first[i]);
      // Already, before this thread's exit: its chains into span 1 took no
      // more blocks than the span had in use, its own list's free blocks not
      // counted in use, so the last one filled with the last free and went
      // to the span at once (lab.cpp, the chain's limit).
      CHECK(state_of(spans[0]) == kFree);
      for (size_t i = 0; i < second.size() / 2; i++) fw_free(second[i]);
    }).join();
    CHECK(state_of(spans[0]) == kFree);  // taken to the pool by the freer
    CHECK(spans[0]->owner.load() == nullptr);
    CHECK(is_kept(spans[0], c));  // the owner's entry, stale until it next looks
    CHECK(!kept_live(lab_current(), c, spans[0]));
    CHECK(kept_live(lab_current(), c, spans[1]));
    CHECK(Anchor::unpack(spans[1]->anchor.load()).count == second.size() / 2);
    CHECK(lab_is_valid(lab_current()));
    fw_stats_t after;
    fw_stats(&after);
    // The span left the caches, and every free into it is counted (the own
    // list's by the freer): the block equation holds.
    CHECK(after.spans_hot == before.spans_hot - 1);
    CHECK(after.classes[c].frees - before.classes[c].frees == first.size() - half + second.size() / 2);
    CHECK(fw_check_heap() == 0);
    // The hot span runs out: the switch passes over the stale entry (its
    // claim fails, and it is dropped) and takes span 2, whose free blocks are
    // on its remote list.
    Span* hot = lab_current()->hot[c];
    std::vector<void*> more;
    while (lab_current()->hot[c] == hot) more.push_back(fw_malloc(kSize));
    CHECK(lab_current()->hot[c] == spans[1]);
    CHECK(!is_kept(spans[0], c));
    more.push_back(fw_malloc(kSize));
    CHECK(span_of(more.back()) == spans[1]);  // collected from its remote list
    CHECK(lab_is_valid(lab_current()));
    CHECK(fw_check_heap() == 0);
    for (void* p : more) fw_free(p);
    for (size_t i = second.size() / 2; i < second.size(); i++) fw_free(second[i]);
    for (void* p : v)
      if (span_of(p) != spans[0] && span_of(p) != spans[1]) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE(
    "a taken kept span that comes back to its LAB as the hot span of its class loses its stale entry before "
    "it is kept: it is never listed twice") {
  std::thread([] {
    REQUIRE(fwtest::pin_to_first_cpu() >= 0);  // with the freer below: one CPU's pool stack
    const unsigned a = class_of(kSize);
    std::vector<void*> v;
    Span* x = first_taken_by_freer(&v);
    Lab* lab = lab_current();
    REQUIRE(is_kept(x, a));
    // Blocks of class a until x comes back from the pool as hot[a], the
    // stale entry there all along (put back if a look dropped it).
    const auto put_back_stale = [&] {
      if (!is_kept(x, a)) put_stale_entry(lab, a, x);
    };
    std::vector<void*> more;
    for (uint32_t i = 0; i < 64 * class_info(a).capacity && lab->hot[a] != x; i++) {
      if (state_of(x) == kFree) put_back_stale();
      more.push_back(fw_malloc(kSize));
    }
    if (lab->hot[a] != x) {
      MESSAGE("the span did not come back to this LAB from the pool: nothing to check");
    } else {
      put_back_stale();                         // the malloc that took x may have dropped it first
      CHECK(hot_is_fresh(lab, a));              // marked: an entry may name the hot span
      CHECK(lab_is_valid(lab));
      // x runs out and is kept, the stale entry dropped first: one entry.
      while (lab->hot[a] == x) more.push_back(fw_malloc(kSize));
      CHECK(kept_live(lab, a, x));
      unsigned entries = 0;
      for (unsigned i = 0; i < lab->kept_n[a]; i++) entries += lab->kept_at(a, i) == x;
      CHECK(entries == 1);
      CHECK(lab_is_valid(lab));
    }
    CHECK(fw_check_heap() == 0);
    for (void* p : more) fw_free(p);
    for (void* p : v)
      if (span_of(p) != x) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE(
    "a taken kept span that comes back to its LAB and is kept in another class is not claimed through the "
    "stale entry of its first class") {
  std::thread([] {
    REQUIRE(fwtest::pin_to_first_cpu() >= 0);  // with the freer below: one CPU's pool stack
    const unsigned a = class_of(kSize), b = class_of(4 * kSize);
    std::vector<void*> v;
    Span* x = first_taken_by_freer(&v);
    Lab* lab = lab_current();
    // Blocks of class b until x is this LAB's hot span of b, then until it
    // runs out and is kept there.
    std::vector<void*> other;
    for (uint32_t i = 0; i < 64 * class_info(b).capacity && lab->hot[b] != x; i++)
      other.push_back(fw_malloc(4 * kSize));
    if (lab->hot[b] != x) {
      MESSAGE("the span did not come back to this LAB from the pool: nothing to check");
    } else {
      while (lab->hot[b] == x) other.push_back(fw_malloc(4 * kSize));
      REQUIRE(kept_live(lab, b, x));
      // The stale entry in class a: the LAB's acquisitions for b may have
      // looked at it and dropped it already (release_empty_kept); if so it is
      // put back, as it stands when a LAB's first look at it comes later.
      if (!is_kept(x, a)) put_stale_entry(lab, a, x);
      CHECK(!kept_live(lab, a, x));
      CHECK(!span_unkeep(x, lab, a));  // a claim through it fails: x is b's
      CHECK(kept_live(lab, b, x));
      CHECK(lab_is_valid(lab));
      CHECK(fw_check_heap() == 0);
      // Class a's hot span runs out and the switch looks at its entries,
      // and more spans of a are taken, which looks at them again: x stays
      // class b's kept span, and every block of class a is of a span of a.
      std::vector<void*> more;
      for (uint32_t i = 0; i < 3 * class_info(a).capacity; i++) more.push_back(fw_malloc(kSize));
      for (void* p : more) CHECK(span_of(p)->cls.load() == a);
      CHECK(!is_kept(x, a));
      CHECK(kept_live(lab, b, x));
      CHECK(lab_is_valid(lab));
      CHECK(fw_check_heap() == 0);
      for (void* p : more) fw_free(p);
    }
    for (void* p : other) fw_free(p);
    for (void* p : v)
      if (span_of(p) != x) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

namespace {

// The class's list across its spans (lab.h): a class whose spans hold few
// blocks.
constexpr size_t kAcrossSize = 16384;

// Fills three spans of kAcrossSize blocks (*v): returns the first, kept.
Span* first_of_three_across(std::vector<void*>* v) {
  const unsigned c = class_of(kAcrossSize);
  REQUIRE(lists_across_spans(c));
  std::vector<Span*> spans;
  *v = fill_spans(3, &spans, kAcrossSize);
  REQUIRE(spans.size() >= 3);
  REQUIRE(is_kept(spans[0], c));
  return spans[0];
}

}  // namespace

TEST_CASE(
    "a class listed across its spans: the owner's frees of a kept span's blocks wait on the kept list, in use as "
    "far as the span knows, so another thread's frees of the rest do not take it, and back on its own list they "
    "leave it empty") {
  fw_collect();
  std::thread([] {
    const unsigned c = class_of(kAcrossSize);
    std::vector<void*> v;
    Span* first = first_of_three_across(&v);
    std::vector<void*> mine = blocks_of(v, first);
    const size_t half = mine.size() / 2;
    Lab* lab = lab_current();
    for (size_t i = 0; i < half; i++) fw_free(mine[i]);
    CHECK(lab->kept_frees[c].head == mine[half - 1]);
    CHECK(lab->kept_frees[c].count.load() == half);
    CHECK(local_of(first) == 0);
    free_from_another_thread(std::vector<void*>(mine.begin() + long(half), mine.end()));
    CHECK(state_of(first) == kHot);  // still kept: its blocks on free[c] are in use for it
    CHECK(kept_live(lab, c, first));
    CHECK(Anchor::unpack(first->anchor.load()).count == mine.size() - half);
    CHECK(fw_check_heap() == 0);
    lab_return_kept_frees(lab, c);
    CHECK(local_of(first) == half);
    CHECK(lab->kept_frees[c].head == nullptr);
    CHECK(lab->kept_frees[c].count.load() == 0);
    for (void* b = lab->lists[c].head; b != nullptr; b = block_next(b)) CHECK(span_of(b) != first);
    CHECK(fw_check_heap() == 0);
    // Every block of it free now: it goes back with the LAB's kept spans.
    fw_collect();
    CHECK(state_of(first) == kFree);
    CHECK(fw_check_heap() == 0);
    free_all_but(v, first);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE(
    "a class listed across its spans: an emptied kept span goes back to the span-pool at the second look at its "
    "class with none of its blocks handed out in between") {
  fw_collect();
  std::thread([] {
    const unsigned c = class_of(kAcrossSize);
    std::vector<void*> v;
    Span* first = first_of_three_across(&v);
    for (void* p : blocks_of(v, first)) fw_free(p);
    CHECK(state_of(first) == kHot);
    CHECK(is_kept(first, c));
    CHECK(fw_check_heap() == 0);
    // Blocks of another class, counting the spans taken from the shared
    // stacks: the first look at c finds blocks handed out since the LAB's
    // last look and leaves free[c] whole; the next returns its kept spans'
    // blocks, and the emptied span goes back. c2's kept spans join the turn.
    const size_t other_size = 64;
    std::vector<void*> other;
    Span* hot = lab_current()->hot[class_of(other_size)];
    unsigned taken = 0;
    other.reserve(64 * class_info(class_of(other_size)).capacity);
    while (is_kept(first, c) && taken < 5 && other.size() < 64 * class_info(class_of(other_size)).capacity)
      taken += malloc_took_span(other_size, &other, &hot);
    CHECK(!is_kept(first, c));
    CHECK(taken >= 2);  // not at the first look
    CHECK(taken <= 4);
    CHECK((state_of(first) == kFree || first->cls.load() == class_of(other_size)));
    CHECK(fw_check_heap() == 0);
    for (void* p : other) fw_free(p);
    free_all_but(v, first);
    CHECK(fw_check_heap() == 0);
  }).join();
}

namespace {

constexpr size_t kDropSize = 1024;  // a class listed across its spans, 256 blocks a span

// Fills four spans of kDropSize blocks (*v, *spans), then takes the blocks
// of the next span that free[c] holds (*hot_blocks), so that free[c] is dry
// and the four spans are kept.
void four_kept_spans(std::vector<void*>* v, std::vector<Span*>* spans, std::vector<void*>* hot_blocks) {
  const unsigned c = class_of(kDropSize);
  REQUIRE(lists_across_spans(c));
  for (;;) {  // a span's capacity depends on its colour: fill until a fifth span starts
    void* p = fw_malloc(kDropSize);
    REQUIRE(p != nullptr);
    if (spans->empty() || spans->back() != span_of(p)) {
      if (spans->size() == 4) {
        hot_blocks->push_back(p);
        break;
      }
      spans->push_back(span_of(p));
    }
    v->push_back(p);
  }
  Lab* lab = lab_current();
  while (lab->lists[c].head != nullptr) hot_blocks->push_back(fw_malloc(kDropSize));
  for (Span* s : *spans) REQUIRE(is_kept(s, c));
  for (Span* s : *spans) REQUIRE(s->own_at.load() == own_kept_at(lab, c));
}

// A new thread's four kept spans of kDropSize blocks (four_kept_spans), and
// their blocks in an order of frees shuffled with `seed`.
struct Dropped {
  unsigned c = class_of(kDropSize);
  std::vector<void*> v, hot_blocks, order;
  std::vector<Span*> spans;
  explicit Dropped(unsigned seed) {
    four_kept_spans(&v, &spans, &hot_blocks);
    order = v;
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  }
  bool of_spans(const void* b) const { return std::find(spans.begin(), spans.end(), span_of(b)) != spans.end(); }
};

// Of consecutive blocks of w, how many pairs lie side by side, the second after the first.
size_t side_by_side(const std::vector<void*>& w) {
  size_t n = 0;
  for (size_t i = 1; i < w.size(); i++)
    n += static_cast<char*>(w[i]) - static_cast<char*>(w[i - 1]) ==
         ptrdiff_t(class_info(class_of(kDropSize)).block_size);
  return n;
}

}  // namespace

TEST_CASE(
    "a class listed across its spans: a structure its thread built and dropped whole, in random order, comes "
    "back span by span in address order, its kept spans carved again") {
  fw_collect();
  std::thread([] {
    const Dropped d(7);
    const unsigned c = d.c;
    Lab* lab = lab_current();
    for (void* p : d.order) fw_free(p);
    CHECK(lab->kept_frees[c].count.load() == d.v.size());
    CHECK(lab->lists[c].head == nullptr);
    CHECK(fw_check_heap() == 0);
    // The first malloc finds free[c] dry and the kept list holding every
    // block the kept spans have in use: they start over, unread.
    std::vector<void*> w;
    w.push_back(fw_malloc(kDropSize));
    CHECK(lab->kept_frees[c].head == nullptr);
    for (Span* s : d.spans) CHECK((s->carved.load() == 0 || s == lab->hot[c]));
    CHECK(fw_check_heap() == 0);
    while (w.size() < d.v.size()) w.push_back(fw_malloc(kDropSize));
    // In the order of the frees, reversed, almost no two would lie side by side.
    CHECK(side_by_side(w) >= w.size() * 9 / 10);
    CHECK(fw_check_heap() == 0);
    for (void* p : w) fw_free(p);
    for (void* p : d.hot_blocks) fw_free(p);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE(
    "a class listed across its spans: a structure dropped in part, three quarters of its kept spans' blocks, "
    "is taken whole onto free[c] at the next refill, the block freed last first") {
  fw_collect();
  std::thread([] {
    const Dropped d(11);
    const unsigned c = d.c;
    Lab* lab = lab_current();
    std::vector<void*> live;
    size_t dropped = 0;
    void* last = nullptr;
    for (size_t i = 0; i < d.order.size(); i++) {
      if (i % 4 == 3) {
        live.push_back(d.order[i]);
      } else {
        fw_free(last = d.order[i]);
        dropped++;
      }
    }
    CHECK(lab->kept_frees[c].count.load() == dropped);
    for (Span* s : d.spans) CHECK(local_of(s) == 0);
    CHECK(fw_check_heap() == 0);
    void* p = fw_malloc(kDropSize);  // free[c] dry: the refill
    CHECK(lab->kept_frees[c].head == nullptr);
    // Blocks still in use: no span starts over, and the list is free[c] now.
    CHECK(p == last);
    for (Span* s : d.spans) CHECK(local_of(s) == 0);
    for (Span* s : d.spans) CHECK(s->carved.load() > 0);
    uint64_t listed = 0;
    for (void* b = lab->lists[c].head; b != nullptr; b = block_next(b)) listed += d.of_spans(b) ? 1 : 0;
    CHECK(listed == dropped - 1);
    CHECK(fw_check_heap() == 0);
    fw_free(p);
    for (void* q : live) fw_free(q);
    for (void* q : d.hot_blocks) fw_free(q);
    CHECK(fw_check_heap() == 0);
  }).join();
}

TEST_CASE(
    "a thread that empties its kept spans and goes on with a few blocks, on its fast path alone, gives them back "
    "within the decay's delay, and their pages go back a delay later (the decay's tick, lab.h)") {
  fw_collect();
  fwtest::set_option(Option::decay_ms, 20);  // looks and passes 20 ms apart
  std::thread([] {
    const unsigned c = class_of(kSize);
    std::vector<Span*> spans;
    const std::vector<void*> v = fill_spans(6, &spans);
    REQUIRE(spans.size() >= 6);
    for (void* p : v) fw_free(p);
    // The spans before the last are kept with no block in use; the last is hot,
    // its blocks on free[c].
    const std::vector<Span*> emptied(spans.begin(), spans.end() - 1);
    for (Span* s : emptied) REQUIRE(is_kept(s, c));
    REQUIRE(lab_current()->hot[c] == spans.back());
    auto all = [&](auto pred) {
      for (Span* s : emptied)
        if (!pred(s)) return false;
      return true;
    };
    auto given_back = [&](const Span* s) { return !is_kept(s, c); };
    auto paged_out = [&](const Span* s) { return s->committed.load() == 0; };
    // One block allocated and freed in turn: the hot span's list, the fast
    // path each time (no span taken, no pool operation).
    const auto start = std::chrono::steady_clock::now();
    auto within = [&](int ms) { return std::chrono::steady_clock::now() - start < std::chrono::milliseconds(ms); };
    while (!all(given_back) && within(2000)) fw_free(fw_malloc(kSize));
    CHECK(all(given_back));
    for (Span* s : emptied) CHECK(state_of(s) == kFree);
    CHECK(lab_current()->hot[c] == spans.back());
    while (!all(paged_out) && within(4000)) fw_free(fw_malloc(kSize));
    CHECK(all(paged_out));
    for (Span* s : emptied) {
      unsigned char resident = 1;
      REQUIRE(mincore(reinterpret_cast<void*>(span_base(s)), os::page_size(), &resident) == 0);
      CHECK((resident & 1) == 0);
    }
    CHECK(fw_check_heap() == 0);
  }).join();
}

// Four kept spans of kDropSize blocks (four_kept_spans), all their blocks
// freed: they wait on the class's lists (kept_frees), in use as far as their
// spans know. For the decay tick's cases: any_kept() says whether one of them
// is still kept, within(ms) whether ms have not yet passed since they were
// freed, and given_back() checks that every one went back to the pool.
struct FreedKeptSpans {
  unsigned c = class_of(kDropSize);
  std::vector<void*> v, hot_blocks;
  std::vector<Span*> spans;
  std::chrono::steady_clock::time_point start;
  FreedKeptSpans() {
    four_kept_spans(&v, &spans, &hot_blocks);
    for (void* p : v) fw_free(p);
    for (Span* s : spans) REQUIRE(is_kept(s, c));
    start = std::chrono::steady_clock::now();
  }
  ~FreedKeptSpans() {
    for (void* p : hot_blocks) fw_free(p);
  }
  bool within(int ms) const { return std::chrono::steady_clock::now() - start < std::chrono::milliseconds(ms); }
  bool any_kept() const {
    for (Span* s : spans)
      if (is_kept(s, c)) return true;
    return false;
  }
  void given_back() const {
    CHECK(!any_kept());
    for (Span* s : spans) CHECK(state_of(s) == kFree);
    CHECK(fw_check_heap() == 0);
  }
};

TEST_CASE(
    "the decay's tick: a class listed across its spans that the thread stops using gives its emptied kept spans "
    "back once it handed out no block for a delay, while the thread allocates only blocks of another class") {
  fw_collect();
  fwtest::set_option(Option::decay_ms, 20);  // looks and passes 20 ms apart
  std::thread([] {
    FreedKeptSpans f;
    for (Span* s : f.spans) REQUIRE(local_of(s) == 0);  // their blocks are on the LAB's list, not their own
    while (f.any_kept() && f.within(2000)) fw_free(fw_malloc(kSize));  // another class only
    f.given_back();
  }).join();
  CHECK(fw_check_heap() == 0);
}

TEST_CASE(
    "the decay's tick: a class listed across its spans that the thread goes on using, but for fewer blocks a delay "
    "than half its kept spans hold, returns its list to its spans, and the emptied ones go back") {
  fw_collect();
  fwtest::set_option(Option::decay_ms, 20);  // looks and passes 20 ms apart
  std::thread([] {
    FreedKeptSpans f;
    // The class stays in use: one of its blocks replaced every millisecond,
    // about 20 a delay against the four spans' 1,000-odd blocks.
    void* q = f.hot_blocks.back();
    f.hot_blocks.pop_back();
    auto next = std::chrono::steady_clock::now();
    while (f.any_kept() && f.within(2000)) {
      fw_free(fw_malloc(kSize));
      if (std::chrono::steady_clock::now() >= next) {
        fw_free(q);
        q = fw_malloc(kDropSize);
        REQUIRE(q != nullptr);
        next += std::chrono::milliseconds(1);
      }
    }
    f.given_back();
    fw_free(q);
  }).join();
  CHECK(fw_check_heap() == 0);
}
