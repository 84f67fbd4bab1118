// Span descriptors: the anchor word and every state transition of a small span.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/arena.h"
#include "core/free.h"
#include "core/lab.h"
#include "core/options.h"
#include "core/reusable.h"
#include "core/secure.h"
#include "core/size_class.h"
#include "core/span.h"
#include "core/span_pool.h"
#include "misuse_util.h"
#include "platform/os.h"

using namespace fw;

namespace {

Lab g_owner;  // a LAB stand-in: the transitions only compare owner pointers

Anchor anchor_of(const Span* s) { return Anchor::unpack(s->anchor.load()); }

// How many distinct colours the 16 descriptors from index `first` take, for
// a class with `colours` colours (span_colour).
long colours_of_16_from(uint32_t first, uint32_t colours) {
  std::vector<uint32_t> seen;
  for (uint32_t i = first; i < first + 16; i++) seen.push_back(span_colour(span_at(i), colours));
  std::sort(seen.begin(), seen.end());
  return std::unique(seen.begin(), seen.end()) - seen.begin();
}

// Carves every block hot span s has left and hands them all out, in order.
std::vector<void*> carve_all(Span* s) {
  std::vector<void*> blocks;
  void* rest;
  while (void* p = span_carve_take(s, &rest)) {
    blocks.push_back(p);
    for (void* b = rest; b != nullptr; b = block_next(b)) blocks.push_back(b);
  }
  for (void* b : blocks) clear_canary(b);  // handed out, as malloc does
  return blocks;
}

// A span from the pool, made hot for class c (arena_init first).
Span* hot_span(unsigned c) {
  REQUIRE(arena_init());
  Span* s = pool_take_span(0);
  REQUIRE(s != nullptr);
  REQUIRE(span_make_hot(s, c, &g_owner));
  return s;
}

// A hot span of class c with every block carved; returns the blocks in order.
std::vector<void*> hot_span_all_carved(Span*& s, unsigned c) {
  s = hot_span(c);
  return carve_all(s);
}

// Floats hot span s, all of whose `blocks` are in use, and frees the first
// reuse_threshold of them remotely: s becomes PARTIAL. Returns that threshold.
uint32_t float_to_partial(Span* s, const std::vector<void*>& blocks) {
  REQUIRE(span_float(s, &g_owner));
  const uint32_t threshold = reuse_threshold(uint32_t(blocks.size()));
  for (uint32_t i = 0; i < threshold; i++) span_free_remote(s, blocks[i]);
  REQUIRE(anchor_of(s).state == kPartial);
  return threshold;
}

}  // namespace

TEST_CASE("a span's reuse threshold is exactly FREEWAY_REUSE_PERCENT of its blocks, rounded up") {
  REQUIRE(option(Option::reuse_percent) == 25);  // the default
  CHECK(reuse_threshold(4) == 1);  // the 64 KiB blocks' class: one free block of four
  CHECK(reuse_threshold(8) == 2);
  CHECK(reuse_threshold(4096) == 1024);
  CHECK(reuse_threshold(3) == 1);  // 0.75, up
  CHECK(reuse_threshold(5) == 2);  // 1.25, up
  CHECK(reuse_threshold(3840) == 960);
  CHECK(reuse_threshold(1) == 1);
}

TEST_CASE("span_make_hot gives a span its class's sized-free range, the sizes sized_free_fits allows") {
  // free's fast path checks a sized free against the descriptor's range
  // (span.h, sized_lo; free.h, span_sized_free_fits), not the class's table:
  // every size up to past the block, and sizes only a wrapped subtraction or
  // a truncation to 32 bits would let through, for every class.
  for (unsigned c = 0; c < kClassCount; c++) {
    CAPTURE(c);
    Span* s = hot_span(c);
    const size_t holds = class_block_size(c);
    std::vector<size_t> sizes;
    for (size_t n = 0; n <= holds + 16; n++) sizes.push_back(n);
    for (size_t n : {holds * 2, size_t(UINT32_MAX), size_t(UINT32_MAX) + 1, (size_t(1) << 32) + holds,
                     (size_t(1) << 32) + holds / 2 + 1, SIZE_MAX - holds, SIZE_MAX})
      sizes.push_back(n);
    unsigned wrong = 0;
    for (bool aligned : {false, true})
      for (size_t n : sizes)
        if (span_sized_free_fits(s, n, aligned) != sized_free_fits(n, holds, aligned) && wrong++ < 4)
          FAIL_CHECK("size " << n << ", aligned " << aligned);
    CHECK(wrong == 0);
    span_release(s, nullptr);
    CHECK(anchor_of(s).state == kFree);
  }
}

TEST_CASE(
    "span_carve_take hands out every block of a span once, each counted as carved, in batches within bounds, for every "
    "class") {
  for (unsigned c = 0; c < kClassCount; c++) {
    CAPTURE(c);
    Span* s = hot_span(c);
    const uintptr_t base = span_blocks(s);
    const uint32_t bsize = class_block_size(c), capacity = s->capacity.load();
    std::vector<void*> blocks;
    for (;;) {
      const uint32_t before = s->carved.load();
      void* rest = reinterpret_cast<void*>(uintptr_t(1));
      void* p = span_carve_take(s, &rest);
      if (p == nullptr) {
        CHECK(rest == nullptr);
        break;
      }
      // The block after the last one carved, now counted as carved (free's
      // block test accepts it), and in use: its canary word does not say free.
      CHECK(reinterpret_cast<uintptr_t>(p) == base + uintptr_t(before) * bsize);
      CHECK(s->carved.load() > before);
      CHECK(static_cast<uint64_t*>(p)[1] != canary_of(p));
      blocks.push_back(p);
      // The rest of the batch: the blocks after it, in order, free, up to carved.
      uint32_t k = before + 1;
      for (void* b = rest; b != nullptr; b = block_next(b), k++) {
        CHECK(reinterpret_cast<uintptr_t>(b) == base + uintptr_t(k) * bsize);
        CHECK(static_cast<uint64_t*>(b)[1] == canary_of(b));
        clear_canary(b);  // handed out, as malloc does
        blocks.push_back(b);
      }
      CHECK(k == s->carved.load());
      REQUIRE(blocks.size() <= capacity);  // a carve that counted nothing would loop here
      // The batch's bound: the bytes of blocks smaller than a page; for
      // bigger ones, whose carve touches a page each, one first (a class
      // used once touches one page), then kCarvePages of them.
      const uint32_t batch = k - before;
      if (bsize >= os::page_size())
        CHECK(batch == (before == 0 ? 1 : std::min(kCarvePages, capacity - before)));
      else
        CHECK(uint64_t(batch) * bsize <= kCarveMaxBytes);
    }
    CHECK(s->carved.load() == capacity);
    CHECK(blocks.size() == capacity);
    // Every block back: the span is FREE again.
    for (size_t i = 0; i < blocks.size(); i++) {
      set_canary(blocks[i]);
      block_link(blocks[i], i + 1 < blocks.size() ? blocks[i + 1] : nullptr);
    }
    span_release(s, blocks[0]);
    CHECK(anchor_of(s).state == kFree);
  }
}

TEST_CASE("anchor packs and unpacks every field") {
  Anchor a{65536, 65536, kPartial, true, Anchor::kTagMask, true};
  Anchor b = Anchor::unpack(a.pack());
  CHECK(b.head == a.head);
  CHECK(b.count == a.count);
  CHECK(b.state == a.state);
  CHECK(b.linked == a.linked);
  CHECK(b.tag == a.tag);
  CHECK(b.kept == a.kept);
  Anchor z = Anchor::unpack(Anchor{0, 0, kFree, false, 0}.pack());
  CHECK(z.head == 0);
  CHECK(z.linked == false);
  CHECK(z.kept == false);
  // The tag wraps within its 25 bits without touching the other fields.
  Anchor w = Anchor::unpack(Anchor{5, 7, kHot, false, Anchor::kTagMask + 1}.pack());
  CHECK(w.tag == 0);
  CHECK(w.head == 5);
  CHECK(w.state == kHot);
  CHECK(w.kept == false);
}

TEST_CASE("a span taken from the pool becomes HOT for its owner and carves every block once") {
  Span* s;
  unsigned c = class_of(48);
  auto blocks = hot_span_all_carved(s, c);
  CHECK(anchor_of(s).state == kHot);
  CHECK(s->owner.load() == &g_owner);
  CHECK(blocks.size() == s->capacity.load());
  CHECK(s->capacity.load() <= class_info(c).capacity);  // secure mode keeps a guard page
  // Block 0 sits at the vspan's base plus the span's colour, and the span fits in the vspan.
  uintptr_t base = span_blocks(s);
  CHECK(base == span_base(s) + (secure_mode() ? 0 : span_colour(s, class_info(c).colours)));
  CHECK(base - span_base(s) + s->capacity.load() * class_block_size(c) <= kVspanSize);
  CHECK(class_info(c).span_bytes <= kVspanSize);
  for (size_t i = 0; i < blocks.size(); i++)
    CHECK(reinterpret_cast<uintptr_t>(blocks[i]) == base + i * class_block_size(c));
  CHECK(span_is_valid(s));
  span_release(s, nullptr);
}

TEST_CASE(
    "spans of a class past 1 KiB start their blocks at a colour within the slack and hold every block a span "
    "without colour holds") {
  REQUIRE(arena_init());
  for (size_t size : {size_t(1280), size_t(10240), size_t(20480), size_t(98304)}) {
    const unsigned c = class_of(size);
    const ClassInfo& ci = class_info(c);
    REQUIRE(ci.colours > 1);
    for (int i = 0; i < 8; i++) {
      Span* s = pool_take_span(0);
      REQUIRE(s != nullptr);
      REQUIRE(span_make_hot(s, c, &g_owner));
      const uintptr_t colour = span_blocks(s) - span_base(s);
      CHECK(colour == (secure_mode() ? 0 : span_colour(s, ci.colours)));
      CHECK(colour % 64 == 0);
      CHECK(colour <= ci.span_bytes - ci.capacity * ci.block_size);
      if (!secure_mode()) CHECK(s->capacity.load() == ci.capacity);
      auto blocks = carve_all(s);
      CHECK(blocks.size() == s->capacity.load());
      CHECK(reinterpret_cast<uintptr_t>(blocks.back()) + ci.block_size <= span_base(s) + kVspanSize);
      CHECK(span_is_valid(s));
      for (void* p : blocks) span_free_remote(s, p);
      span_release(s, nullptr);
      CHECK(anchor_of(s).state == kFree);
    }
    // Nearby descriptors take different colours: any 16 in a row at least 12
    // of the 17 or more.
    for (uint32_t first : {0u, 5u, 1000u, 4093u}) CHECK(colours_of_16_from(first, ci.colours) >= 12);
  }
}

TEST_CASE("spans of a coloured class start their blocks at a colour in 64-byte steps below the size's power of two, "
          "nearby spans at different colours, and a plain twin's spans at the base with every block aligned to its "
          "size") {
  REQUIRE(arena_init());
  const unsigned c = class_of(1024);
  REQUIRE(class_info(c).colours == 16);
  // Any 16 descriptors in a row take at least 12 colours (the hash's spread).
  for (uint32_t first : {0u, 5u, 1000u, 4093u}) CHECK(colours_of_16_from(first, 16) >= 12);
  CHECK(span_colour(span_at(7), 1) == 0);
  for (int i = 0; i < 16; i++) {
    Span* s = pool_take_span(0);
    REQUIRE(s != nullptr);
    REQUIRE(span_make_hot(s, c, &g_owner));
    const uintptr_t colour = span_blocks(s) - span_base(s);
    CHECK(colour == span_colour(s, 16));
    CHECK(colour % 64 == 0);
    CHECK(colour < 1024);
    CHECK(s->capacity.load() == (kVspanSize - colour) / 1024);  // 256 blocks, or 255 past a colour
    auto blocks = carve_all(s);
    CHECK(reinterpret_cast<uintptr_t>(blocks.back()) + 1024 <= span_base(s) + kVspanSize);
    CHECK(span_is_valid(s));
    for (void* p : blocks) span_free_remote(s, p);
    span_release(s, nullptr);
    CHECK(anchor_of(s).state == kFree);
  }
  Span* s;
  auto blocks = hot_span_all_carved(s, plain_class(c));
  CHECK(span_blocks(s) == span_base(s));
  CHECK(blocks.size() == 256);
  for (void* p : blocks) CHECK(reinterpret_cast<uintptr_t>(p) % 1024 == 0);
  CHECK(span_is_valid(s));
  for (void* p : blocks) span_free_remote(s, p);
  span_release(s, nullptr);
}

TEST_CASE("the block check takes exactly the carved blocks' starts: not a pointer inside a block, nor one past "
          "the carved part, for block sizes with and without an odd factor") {
  for (size_t size : {16, 48, 64, 1024, 48 * 1024}) {
    const unsigned c = class_of(size);
    const uintptr_t bsize = class_block_size(c);
    Span* s;
    hot_span_all_carved(s, c);
    const uint32_t start = s->offset.load();
    const uint32_t carved = s->carved.load();
    const uintptr_t base = span_blocks(s);
    CHECK(start == uint32_t(base));  // the low 32 bits of block 0's address (span.h)
    for (uint32_t i = 0; i < carved; i++) {
      CHECK(block_number(reinterpret_cast<void*>(base + i * bsize), c, start) == i);
      for (uintptr_t inside : {uintptr_t(16), bsize / 2, bsize - 16})
        if (inside != 0 && inside < bsize)
          CHECK(block_number(reinterpret_cast<void*>(base + i * bsize + inside), c, start) >= carved);
    }
    // Past the carved part, up to the vspan's end: block starts and others.
    for (uintptr_t q = base + carved * bsize; q < span_base(s) + kVspanSize; q += 16)
      CHECK(block_number(reinterpret_cast<void*>(q), c, start) >= carved);
    span_release(s, nullptr);
  }
}

TEST_CASE("the block check's shared rotate gives every class's block index at each block start and at least the "
          "capacity anywhere else in the vspan, on both sides of block 0 (every offset, every class)") {
  // The proof is at kBlockRotate (secure.h); this checks it for the classes
  // as they are, over every offset a pointer in the vspan can have from
  // block 0: (-kVspanSize, kVspanSize).
  const int64_t span = int64_t(kVspanSize);
  for (unsigned c = 0; c < kClassCount; c++) {
    const int64_t d = class_block_size(c);
    const uint32_t capacity = uint32_t(kVspanSize / d);  // the most any span of the class holds
    const uint32_t mul = block_mul_of(c);
    uint64_t wrong = 0;
    for (int64_t n = -span + 1; n < span; n++) {
      const uint32_t k = block_number_at(uint32_t(n), mul);
      const bool start = n >= 0 && n % d == 0;
      if (start ? k != uint32_t(n / d) : k < capacity) wrong++;
    }
    CAPTURE(c);
    CAPTURE(d);
    CHECK(wrong == 0);
  }
}

TEST_CASE("a hot span's descriptor holds its class's block check multiplier, which span_is_valid checks") {
  for (size_t size : {16, 48, 640, 48 * 1024}) {
    const unsigned c = class_of(size);
    Span* s;
    hot_span_all_carved(s, c);
    CHECK(s->block_mul.load() == block_mul_of(c));
    CHECK(span_is_valid(s));
    // span_is_valid sees a wrong multiplier (its report goes to /dev/null).
    s->block_mul.store(block_mul_of(c) + 2);
    const int saved = dup(2), null = open("/dev/null", O_WRONLY);
    REQUIRE((saved >= 0 && null >= 0));
    dup2(null, 2);
    const bool valid = span_is_valid(s);
    dup2(saved, 2);
    close(saved);
    close(null);
    CHECK(!valid);
    s->block_mul.store(block_mul_of(c));
    span_release(s, nullptr);
  }
}

TEST_CASE("remote frees to a hot span are collected by the owner in one step") {
  Span* s;
  auto blocks = hot_span_all_carved(s, class_of(64));
  for (int i = 0; i < 10; i++) span_free_remote(s, blocks[i]);
  CHECK(anchor_of(s).count == 10);
  CHECK(anchor_of(s).state == kHot);
  int n = 0;
  for (void* b = span_collect(s); b != nullptr; b = block_next(b)) n++;
  CHECK(n == 10);
  CHECK(anchor_of(s).count == 0);
  CHECK(span_collect(s) == nullptr);
  span_release(s, nullptr);
}

TEST_CASE("an exhausted span floats as FULL, becomes PARTIAL at the reuse threshold, and FREE with its last block") {
  Span* s;
  unsigned c = class_of(256);
  auto blocks = hot_span_all_carved(s, c);
  REQUIRE(span_float(s, &g_owner));
  CHECK(anchor_of(s).state == kFull);
  CHECK(s->owner.load() == nullptr);
  uint32_t threshold = reuse_threshold(uint32_t(blocks.size()));
  size_t i = 0;
  for (; i + 1 < threshold; i++) span_free_remote(s, blocks[i]);
  CHECK(anchor_of(s).state == kFull);
  CHECK(span_is_valid(s));
  span_free_remote(s, blocks[i++]);
  CHECK(anchor_of(s).state == kPartial);
  CHECK(anchor_of(s).linked);
  CHECK(span_is_valid(s));
  for (; i + 1 < blocks.size(); i++) span_free_remote(s, blocks[i]);
  CHECK(anchor_of(s).state == kPartial);
  span_free_remote(s, blocks[i]);  // the last block in use: back to the pool at once
  CHECK(anchor_of(s).state == kFree);
  CHECK(anchor_of(s).linked);  // lazily removed from the reusable stack
  // Popping the stale link drops it and clears `linked`.
  Span* popped = reusable_pop(c);
  REQUIRE(popped == s);
  void* list = nullptr;
  CHECK_FALSE(span_claim_reusable(popped, c, &g_owner, &list));
  CHECK_FALSE(anchor_of(s).linked);
}

TEST_CASE("a PARTIAL span is claimed from the reusable stack with its free list") {
  Span* s;
  unsigned c = class_of(512);
  auto blocks = hot_span_all_carved(s, c);
  const uint32_t threshold = float_to_partial(s, blocks);
  Lab other;
  Span* popped = reusable_pop(c);
  REQUIRE(popped == s);
  void* list = nullptr;
  REQUIRE(span_claim_reusable(popped, c, &other, &list));
  CHECK(anchor_of(s).state == kHot);
  CHECK_FALSE(anchor_of(s).linked);
  CHECK(s->owner.load() == &other);
  uint32_t n = 0;
  for (void* b = list; b != nullptr; b = block_next(b)) n++;
  CHECK(n == threshold);
  // Give everything back: the span is empty, so release returns it to the pool.
  for (uint32_t i = threshold; i < blocks.size(); i++) span_free_remote(s, blocks[i]);
  span_release(s, list);
  CHECK(anchor_of(s).state == kFree);
}

namespace {

// A span that went PARTIAL in class a's reusable stack and FREE while linked
// there, taken from the pool again for class b, floated, and made PARTIAL by
// remote frees of the first `threshold` of its blocks (returned in order): so
// it is a PARTIAL span of b still linked in a's stack.
std::vector<void*> partial_in_b_linked_in_a(Span*& s, unsigned a, unsigned b, uint32_t& threshold) {
  auto blocks = hot_span_all_carved(s, a);
  REQUIRE(span_float(s, &g_owner));
  for (void* p : blocks) span_free_remote(s, p);  // PARTIAL (linked in a), then FREE
  REQUIRE(anchor_of(s).state == kFree);
  REQUIRE(anchor_of(s).linked);
  // The pool hands the same span out for class b (pool is LIFO on this CPU).
  Span* again = nullptr;
  std::vector<Span*> others;
  while ((again = pool_take_span(0)) != s) {
    REQUIRE(again != nullptr);
    others.push_back(again);
  }
  for (Span* o : others) pool_give(o, 1);
  REQUIRE(span_make_hot(s, b, &g_owner));
  auto blocks_b = carve_all(s);
  threshold = float_to_partial(s, blocks_b);
  REQUIRE(anchor_of(s).linked);  // still linked in a's stack: not pushed again
  return blocks_b;
}

// Claims s, popped from b's stack, and gives every block back (the span goes to the pool).
void claim_and_empty(Span* s, unsigned b, const std::vector<void*>& blocks_b, uint32_t threshold) {
  void* list = nullptr;
  REQUIRE(span_claim_reusable(s, b, &g_owner, &list));
  for (uint32_t i = threshold; i < blocks_b.size(); i++) span_free_remote(s, blocks_b[i]);
  span_release(s, list);
  CHECK(anchor_of(s).state == kFree);
}

}  // namespace

TEST_CASE("a span recycled into another class while linked is moved to its class's stack on pop") {
  Span* s;
  unsigned a = class_of(1024), b = class_of(96);
  uint32_t threshold;
  auto blocks_b = partial_in_b_linked_in_a(s, a, b, threshold);
  CHECK(reusable_pop(b) != s);
  Span* popped = reusable_pop(a);
  REQUIRE(popped == s);
  void* list = nullptr;
  CHECK_FALSE(span_claim_reusable(popped, a, &g_owner, &list));  // moved to b
  Span* in_b = reusable_pop(b);
  REQUIRE(in_b == s);
  claim_and_empty(in_b, b, blocks_b, threshold);
}

TEST_CASE(
    "a span recycled into another class while linked, once PARTIAL, marks the old stack: a sweep moves it to "
    "its class's stack, drops stale entries and puts the old class's own spans back") {
  Span* s;
  unsigned a = class_of(2048), b = class_of(160);
  // A PARTIAL span of a's own, under s in a's stack once s is linked there.
  Span* own;
  auto own_blocks = hot_span_all_carved(own, a);
  const uint32_t own_threshold = float_to_partial(own, own_blocks);
  uint32_t threshold;
  auto blocks_b = partial_in_b_linked_in_a(s, a, b, threshold);
  // A stale entry: a span of a that went PARTIAL and then FREE, still linked.
  Span* stale;
  auto stale_blocks = hot_span_all_carved(stale, a);
  REQUIRE(span_float(stale, &g_owner));
  for (void* p : stale_blocks) span_free_remote(stale, p);
  REQUIRE(anchor_of(stale).state == kFree);
  REQUIRE(anchor_of(stale).linked);
  CHECK(reusable_pop(b) == nullptr);  // b's takers would not find s: it is in a's stack
  REQUIRE(reusable_sweep());          // marked when s went PARTIAL
  CHECK_FALSE(reusable_sweep());      // the mark is used up
  CHECK(anchor_of(s).linked);         // moved, not dropped
  CHECK_FALSE(anchor_of(stale).linked);  // dropped
  Span* in_b = reusable_pop(b);
  REQUIRE(in_b == s);
  claim_and_empty(in_b, b, blocks_b, threshold);
  // a's own span went back onto a's stack, still PARTIAL and linked.
  CHECK(anchor_of(own).state == kPartial);
  CHECK(anchor_of(own).linked);
  REQUIRE(reusable_pop(a) == own);
  claim_and_empty(own, a, own_blocks, own_threshold);
}

TEST_CASE("releasing a hot span settles it by its free count") {
  unsigned c = class_of(128);
  SUBCASE("nothing in use: FREE") {
    Span* s;
    auto blocks = hot_span_all_carved(s, c);
    for (void* p : blocks) span_free_remote(s, p);
    span_release(s, nullptr);
    CHECK(anchor_of(s).state == kFree);
  }
  SUBCASE("almost all in use: FULL") {
    Span* s;
    auto blocks = hot_span_all_carved(s, c);
    block_link(blocks[0], nullptr);
    set_canary(blocks[0]);
    span_release(s, blocks[0]);  // one block on the owner-side list
    CHECK(anchor_of(s).state == kFull);
    CHECK(anchor_of(s).count == 1);
    CHECK(span_is_valid(s));
    for (size_t i = 1; i < blocks.size(); i++) span_free_remote(s, blocks[i]);
    CHECK(anchor_of(s).state == kFree);
  }
  SUBCASE("mostly uncarved: PARTIAL") {
    REQUIRE(arena_init());
    Span* s = pool_take_span(0);
    REQUIRE(span_make_hot(s, c, &g_owner));
    void* list;
    void* first = span_carve_take(s, &list);  // a first batch; the rest stays uncarved
    REQUIRE(list != nullptr);
    span_release(s, list);  // all but `first` back
    CHECK(anchor_of(s).state == kPartial);
    CHECK(span_is_valid(s));
    span_free_remote(s, first);
    CHECK(anchor_of(s).state == kFree);
    void* l = nullptr;
    Span* popped = reusable_pop(c);
    REQUIRE(popped == s);
    CHECK_FALSE(span_claim_reusable(popped, c, &g_owner, &l));
  }
}

TEST_CASE("span_hot_bytes adds a span's bytes as it becomes HOT and takes them off as it leaves HOT") {
  unsigned c = class_of(512);
  const uint64_t bytes = class_info(c).span_bytes;
  std::vector<void*> blocks;
  blocks.reserve(class_info(c).capacity);
  const uint64_t before = span_hot_bytes();
  Span* s;
  blocks = hot_span_all_carved(s, c);  // FREE -> HOT
  CHECK(span_hot_bytes() == before + bytes);
  REQUIRE(span_float(s, &g_owner));  // HOT -> FULL
  CHECK(span_hot_bytes() == before);
  uint32_t threshold = reuse_threshold(uint32_t(blocks.size()));
  for (uint32_t i = 0; i < threshold; i++) span_free_remote(s, blocks[i]);  // FULL -> PARTIAL
  CHECK(span_hot_bytes() == before);
  REQUIRE(reusable_pop(c) == s);
  void* list = nullptr;
  REQUIRE(span_claim_reusable(s, c, &g_owner, &list));  // PARTIAL -> HOT
  CHECK(span_hot_bytes() == before + bytes);
  for (uint32_t i = threshold; i < blocks.size(); i++) span_free_remote(s, blocks[i]);
  span_release(s, list);  // HOT -> FREE
  CHECK(anchor_of(s).state == kFree);
  CHECK(span_hot_bytes() == before);
}

TEST_CASE("a block freed again after its span went back to the pool and was carved anew is reported as a double "
          "free, not as an interior pointer") {
  // Past the new carving, the block is on no list and carries no canary test:
  // span_check_free's block test (past carved) is what catches it.
  fwtest::misuse::expect_abort("double free of a block of a span carved anew", {"double free"}, [] {
    const unsigned c = class_of(128);
    Span* s;
    auto blocks = hot_span_all_carved(s, c);
    for (void* p : blocks) span_free_remote(s, p);  // every block freed: the span goes back to the pool
    span_release(s, nullptr);
    Span* again = pool_take_span(0);
    void* rest;
    if (again != s || !span_make_hot(again, c, &g_owner) || span_carve_take(again, &rest) == nullptr ||
        again->carved.load() >= again->capacity.load()) {
      fwtest::misuse::say("child: setup failed: the span was not taken again and carved in part\n");
      _exit(99);
    }
    void* stale = blocks.back();
    fwtest::misuse::announce(stale);
    span_check_free(again, stale);
  });
}
