// core/span.cpp: the state transitions of small spans (see span.h for the
// anchor, the life cycle and the invariants).
#include "core/span.h"

#include "core/arena.h"
#include "core/options.h"
#include "core/report.h"
#include "core/reusable.h"
#include "core/secure.h"
#include "core/secure_heap.h"
#include "core/size_class.h"
#include "core/span_pool.h"
#include "core/stats.h"
#include "platform/os.h"

namespace fw {

namespace {
// span_hot_bytes: each transition to HOT adds the span's bytes, each from HOT
// (span_float, release) takes them off. Signed: a thread stopped for good
// between a claim and its count leaves the sum short by that span.
constinit std::atomic<int64_t> g_hot_bytes{0};
// The bytes a HOT span s counts for, read by its owner while s is HOT, before
// the CAS that takes it out of HOT: after it, another thread may give s to the
// pool and use it for another class or a large block (kNoClass, past the class
// table), and the count would take off what was never added.
int64_t hot_bytes_of_class(unsigned cls) { return int64_t(class_info(cls).span_bytes); }
int64_t hot_bytes_of(const Span* s) { return hot_bytes_of_class(s->cls.load(std::memory_order_relaxed)); }
void count_hot(int64_t bytes) { g_hot_bytes.fetch_add(bytes, std::memory_order_relaxed); }
}  // namespace

uint64_t span_hot_bytes() {
  int64_t v = g_hot_bytes.load(std::memory_order_relaxed);
  return v > 0 ? uint64_t(v) : 0;
}

namespace {

// One CAS on the anchor. Success is release (publishes the block links and the
// owner's writes); failure reloads with acquire.
FW_INLINE bool anchor_cas(Span* s, uint64_t& expected, const Anchor& desired) {
  return s->anchor.compare_exchange_weak(expected, desired.pack(), std::memory_order_acq_rel,
                                         std::memory_order_acquire);
}

// kLinked: the span became PARTIAL while linked in a reusable stack, which
// may be another class's (reusable_note_linked).
enum class After { kNothing, kReusable, kLinked, kPool };

// State a non-hot span takes when it has `free_listed` blocks on its list.
// Fills `next` (keeping head/count as given) and says what the caller must do.
After settle(const Span* s, const Anchor& cur, uint32_t free_listed, Anchor& next) {
  uint32_t carved = s->carved.load(std::memory_order_relaxed);
  uint32_t capacity = s->capacity.load(std::memory_order_relaxed);
  if (free_listed >= carved) {
    next = Anchor{0, 0, kFree, cur.linked, cur.tag + 1};
    return After::kPool;
  }
  if (free_listed + (capacity - carved) >= reuse_threshold(capacity)) {
    if (cur.state == kPartial) return After::kNothing;
    next.state = kPartial;
    next.tag = cur.tag + 1;
    if (cur.linked) return After::kLinked;  // still in a stack from an earlier life
    next.linked = true;
    return After::kReusable;
  }
  if (next.state != kFull) {
    next.state = kFull;
    next.tag = cur.tag + 1;
  }
  return After::kNothing;
}

// cls: s's class read before the CAS that published `after`. Once it is
// published, other threads may empty s, give it to the pool and reuse it for
// a large block (kNoClass, past the end of the stacks) or another class: the
// push goes to the stack of the class s had when it became PARTIAL, whose
// popper drops or moves an entry that changed since (span_claim_reusable).
void follow_up(Span* s, After after, unsigned cls) {
  if (after == After::kPool) {
    s->owner.store(nullptr, std::memory_order_relaxed);
    pool_give(s, 1);
  } else if (after == After::kReusable) {
    reusable_push(s, cls);
  } else if (after == After::kLinked) {
    reusable_note_linked(s, cls);
  }
}

}  // namespace

uint32_t reuse_threshold(uint32_t capacity) {
  // ceil(capacity * percent / 100), at least 1: exactly the percent the
  // option names (a 16.16 fraction rounded up made it one block more
  // whenever the product was whole: 2 of 4 blocks at 25%). The percent is
  // read once; the division by the constant 100 is a multiply and a shift
  // (this runs on every remote free).
  static std::atomic<uint32_t> percent{0};
  uint32_t pct = percent.load(std::memory_order_relaxed);
  if (pct == 0) {
    int64_t o = option(Option::reuse_percent);
    pct = uint32_t(o < 1 ? 1 : o > 100 ? 100 : o);
    percent.store(pct, std::memory_order_relaxed);
  }
  uint32_t t = uint32_t((uint64_t(capacity) * pct + 99) / 100);
  return t == 0 ? 1 : t;
}

namespace {
// span_guards and the budget (span.h). The count is exact: every guard placed
// adds one, every guard taken off takes one. kUnread: the budget is read from
// the OS at the first guard asked for (no guards outside secure mode).
constexpr uint64_t kUnread = ~uint64_t(0);
constinit std::atomic<uint64_t> g_guards{0};
constinit std::atomic<uint64_t> g_guard_budget{kUnread};
constinit std::atomic<bool> g_guards_capped_said{false};

uint64_t guard_budget() {
  uint64_t b = g_guard_budget.load(std::memory_order_relaxed);
  if (b != kUnread) return b;
  const uint64_t limit = os::map_count_limit();
  b = limit == 0 ? 0 : limit / 4 > 0 ? limit / 4 : 1;
  uint64_t expected = kUnread;  // racing readers read the same figure
  g_guard_budget.compare_exchange_strong(expected, b, std::memory_order_relaxed);
  return g_guard_budget.load(std::memory_order_relaxed);
}

// Takes a place for a guard in the budget; false (said once) when it is spent.
bool guard_take() {
  const uint64_t budget = guard_budget();
  const uint64_t before = g_guards.fetch_add(1, std::memory_order_relaxed);
  if (budget == 0 || before < budget) return true;
  g_guards.fetch_sub(1, std::memory_order_relaxed);
  if (!g_guards_capped_said.exchange(true, std::memory_order_relaxed))
    Line()
        .str("freeway: secure mode: ")
        .dec(budget)
        .str(" guard pages in place, the most allowed (each takes up to two of the process's ")
        .dec(os::map_count_limit())
        .str(" memory mappings): spans and large blocks without one get none from now on"
             " (raise vm.max_map_count to guard them all)\n")
        .write(2);
  return false;
}

// Makes the page at p a guard if the budget has room and the OS protects it.
bool guard_place(void* p, size_t ps) {
  if (!guard_take()) return false;
  if (os::protect(p, ps, false)) return true;
  g_guards.fetch_sub(1, std::memory_order_relaxed);  // the OS refused: no guard here
  return false;
}
}  // namespace

uint64_t span_guards() { return g_guards.load(std::memory_order_relaxed); }
uint64_t span_guard_budget() { return guard_budget(); }
void span_set_guard_budget(uint64_t budget) { g_guard_budget.store(budget, std::memory_order_relaxed); }

void span_set_guard(Span* s, uint32_t page) {
  uint32_t now = s->guard_page.load(std::memory_order_relaxed);
  if (now == page) return;
  size_t ps = os::page_size();
  uintptr_t base = span_base(s);
  if (now != 0) {
    // Making a page accessible again joins the mappings its guard split, so
    // the OS needs no new one for it.
    os::protect(reinterpret_cast<void*>(base + (now - 1) * ps), ps, true);
    g_guards.fetch_sub(1, std::memory_order_relaxed);
  }
  if (page != 0 && !guard_place(reinterpret_cast<void*>(base + (page - 1) * ps), ps)) page = 0;
  s->guard_page.store(uint16_t(page), std::memory_order_relaxed);
}

bool span_make_hot(Span* s, unsigned cls, Lab* lab) {
  const ClassInfo& ci = class_info(cls);
  span_set_use(s, cls);
  span_trim(s, ci.span_bytes);  // pages a bigger earlier use left behind
  const uint64_t had = s->committed.load(std::memory_order_relaxed);
  if (!span_commit(s, ci.span_bytes)) {
    pool_give(s, 1);
    return false;
  }
  if (ci.span_bytes > had) pool_pay_fresh(s, 1, ci.span_bytes - had);  // fresh pages: idle ones go back
  uint32_t capacity = ci.capacity;
  uint32_t colour = 0;
  if (secure_mode()) {
    // The real span's last page is the guard: blocks end before it. No
    // colour: secure mode's blocks keep their size's alignment.
    size_t ps = os::page_size();
    capacity = uint32_t((ci.span_bytes - ps) / ci.block_size);
    span_set_guard(s, uint32_t(ci.span_bytes / ps));
  } else {
    colour = span_colour(s, ci.colours);
    capacity = (ci.span_bytes - colour) / ci.block_size;
    span_set_guard(s, 0);
  }
  s->offset.store(uint32_t(span_base(s)) + colour, std::memory_order_relaxed);  // span.h
  s->block_size.store(ci.block_size, std::memory_order_relaxed);
  s->block_mul.store(block_mul_of(cls), std::memory_order_relaxed);
  s->sized_lo.store(uint32_t(kSizedRanges.lo[0][cls]), std::memory_order_relaxed);
  s->sized_width.store(uint32_t(kSizedRanges.width[0][cls]), std::memory_order_relaxed);
  s->capacity.store(capacity, std::memory_order_relaxed);
  s->carved.store(0, std::memory_order_relaxed);
  s->run_len.store(1, std::memory_order_relaxed);
  // The span may still be linked in a reusable stack from an earlier life, and
  // that stack's popper may clear `linked` concurrently: so CAS, keeping it.
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (a.state != kFree) report_misuse("heap corruption: pooled span not free, descriptor", s);
    if (anchor_cas(s, w, Anchor{0, 0, kHot, a.linked, a.tag + 1})) break;
  }
  s->owner.store(lab, std::memory_order_relaxed);
  count_hot(hot_bytes_of(s));
  return true;
}

bool span_claim_reusable(Span* s, unsigned cls, Lab* lab, void** list) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (a.state == kPartial) {
      // The class is read as of w: a span whose class changes goes through
      // FREE (a new tag) before its class is stored (release), so an anchor
      // still equal to w after the acquire load means `now` is this PARTIAL
      // span's. Read unchecked, it could be the next use's: kNoClass for a
      // large block, and a push onto the stack past the last class.
      unsigned now = s->cls.load(std::memory_order_acquire);
      const uint64_t again = s->anchor.load(std::memory_order_relaxed);
      if (again != w) {
        w = again;
        continue;
      }
      if (now != cls || lab == nullptr) {
        // Recycled into another class while linked here: move it; or a sweep's
        // span of this class: back on its stack (linked stays set).
        reusable_push(s, now);
        return false;
      }
      if (anchor_cas(s, w, Anchor{0, 0, kHot, false, a.tag + 1})) {
        s->owner.store(lab, std::memory_order_relaxed);
        count_hot(hot_bytes_of(s));
        *list = block_at(span_blocks(s), a.head);
        return true;
      }
    } else {
      Anchor b = a;
      b.linked = false;
      b.tag = a.tag + 1;
      if (anchor_cas(s, w, b)) return false;
    }
  }
}

bool span_claim_floating(Span* s, Lab* lab, void** list) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (a.state != kFull && a.state != kPartial) return false;
    if (anchor_cas(s, w, Anchor{0, 0, kHot, a.linked, a.tag + 1})) {
      s->owner.store(lab, std::memory_order_relaxed);
      count_hot(hot_bytes_of(s));
      *list = block_at(span_blocks(s), a.head);
      return true;
    }
  }
}

void* span_collect(Span* s) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (a.count == 0) return nullptr;
    if (anchor_cas(s, w, Anchor{0, 0, kHot, a.linked, a.tag, a.kept})) return block_at(span_blocks(s), a.head);
  }
}

namespace {

// The next batch of s's uncarved blocks (secure: for secure mode): marks them
// carved and returns the first, with *n the batch's count and *bsize their
// size; nullptr when every block is carved.
//
// Its size (span.h, kCarveMaxBytes and kCarvePages). Blocks smaller than a
// page: as many bytes as the span has carved so far (the batch doubles), at
// least a page and at most kCarveMaxBytes. A class a program uses a few times
// touches one page of its span, not 16 KiB; a busy class reaches full batches
// after two refills. Blocks of a page or more: the carve writes only the first
// words of each (link and canary), so it touches a page per block; the span's
// first batch is one block (a class used once touches one page, as above), the
// next ones kCarvePages blocks, the pages a full batch of small blocks touches
// (counted in bytes, a block of 16 KiB or more was a batch of its own, and
// nearly every malloc of one took a refill; mimalloc extends its pages by at
// least 4 blocks). Secure mode fills every free block whole (secure_heap.h),
// so there such a block is always a batch of its own.
FW_INLINE char* carve_batch(Span* s, bool secure, uint32_t* n_out, uint32_t* bsize_out) {
  uint32_t carved = s->carved.load(std::memory_order_relaxed);
  uint32_t capacity = s->capacity.load(std::memory_order_relaxed);
  if (carved >= capacity) return nullptr;
  uint32_t bsize = s->block_size.load(std::memory_order_relaxed);
  const uint32_t page = uint32_t(os::page_size());
  uint32_t n;
  if (bsize < page) {
    uint64_t bytes = uint64_t(carved) * bsize;
    if (bytes < page) bytes = page;
    if (bytes > kCarveMaxBytes) bytes = kCarveMaxBytes;
    n = uint32_t(bytes / bsize);
  } else {
    n = secure || carved == 0 ? 1 : kCarvePages;  // one page touched per block
  }
  if (n > capacity - carved) n = capacity - carved;
  s->carved.store(carved + n, std::memory_order_relaxed);
  *n_out = n;
  *bsize_out = bsize;
  return reinterpret_cast<char*>(span_blocks(s)) + size_t(carved) * bsize;
}

// Formats the n >= 1 blocks from p as free ones, linked in address order.
void format_free(char* p, uint32_t n, uint32_t bsize, bool secure) {
  for (uint32_t i = 1; i < n; i++, p += bsize) {
    block_link(p, p + bsize);
    set_canary(p);  // never handed out counts as free: freeing it is an error
    if (secure) secure_fill(p, bsize);  // free blocks carry the fill (secure_heap.h)
  }
  block_link(p, nullptr);
  set_canary(p);
  if (secure) secure_fill(p, bsize);
}

}  // namespace

void* span_carve_take(Span* s, void** rest) {
  uint32_t n, bsize;
  const bool secure = secure_mode();
  char* first = carve_batch(s, secure, &n, &bsize);
  *rest = nullptr;
  if (first == nullptr) return nullptr;
  if (n > 1) {
    format_free(first + bsize, n - 1, bsize, secure);
    *rest = first + bsize;
  }
  // As a block popped off a list leaves: with the fill secure mode checks
  // (secure_format), and a canary word that does not say "free" whatever the
  // memory held before.
  if (secure) secure_fill(first, bsize);
  clear_canary(first);
  return first;
}

// Release: telemetry (mirror_span) that reads carved 0 with acquire reads
// the own count own_take left, 0, and not the dropped list's.
void span_restart(Span* s) { s->carved.store(0, std::memory_order_release); }

bool span_float(Span* s, Lab* lab) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  Anchor a = Anchor::unpack(w);
  if (a.count != 0) return false;
  const int64_t bytes = hot_bytes_of(s);
  s->owner.store(nullptr, std::memory_order_relaxed);
  if (anchor_cas(s, w, Anchor{0, 0, kFull, a.linked, a.tag + 1})) {
    count_hot(-bytes);
    return true;
  }
  s->owner.store(lab, std::memory_order_relaxed);
  return false;
}

void span_keep(Span* s) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    a.kept = true;
    a.tag++;
    // Release: a freer that reads the bit with acquire sees the own list
    // empty for its kept life (a hot span's always is) and the class and carved count.
    if (anchor_cas(s, w, a)) return;
  }
}

bool span_unkeep(Span* s, const Lab* lab, unsigned cls) {
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  for (;;) {
    Anchor a = Anchor::unpack(w);
    // Another LAB's kept span (this one's was taken, pooled and kept there),
    // or this LAB's own kept span of another class (taken, pooled and come
    // back), has the bit too: the owner and class are read after the anchor,
    // whose acquire makes those of that kept life visible, and the CAS fails
    // if the span changed hands since.
    if (!span_kept_by(s, a, lab, cls)) return false;
    a.kept = false;
    a.tag++;
    if (anchor_cas(s, w, a)) return true;
  }
}

namespace {

// span_release with `local` holding m blocks; tail is its last block, or
// nullptr if not known yet: it is then looked for only if the span does not
// become FREE (a FREE span's blocks are not listed anywhere).
void release(Span* s, void* local, uint32_t m, void* tail) {
  uintptr_t base = span_blocks(s);
  const int64_t bytes = hot_bytes_of(s);
  const unsigned cls = s->cls.load(std::memory_order_relaxed);  // while HOT (follow_up)
  s->owner.store(nullptr, std::memory_order_relaxed);
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  After after;
  for (;;) {
    Anchor a = Anchor::unpack(w);
    Anchor next{local ? block_index(base, local) : a.head, a.count + m, kHot, a.linked, a.tag};
    after = settle(s, a, a.count + m, next);
    if (after != After::kPool && local != nullptr) {
      if (tail == nullptr)
        for (tail = local; block_next(tail) != nullptr;) tail = block_next(tail);
      block_link(tail, block_at(base, a.head));
    }
    if (anchor_cas(s, w, next)) break;
  }
  count_hot(-bytes);  // before follow_up, which may give s to the pool
  follow_up(s, after, cls);
}

}  // namespace

void span_release(Span* s, void* local) {
  uint32_t m = 0;
  void* tail = nullptr;
  for (void* b = local; b != nullptr; b = block_next(b)) {
    m++;
    tail = b;
  }
  release(s, local, m, tail);
}

void span_release_counted(Span* s, void* local, uint32_t m) { release(s, local, m, nullptr); }

void span_check_free(const Span* s, const void* p) {
  unsigned c = s->cls.load(std::memory_order_relaxed);
  // A span of no class holds no small block: p starts none of its blocks.
  const uint32_t k = c < kClassCount ? block_number(p, c, s->offset.load(std::memory_order_relaxed)) : UINT32_MAX;
  if (k >= s->carved.load(std::memory_order_relaxed)) {
    // A block's start past the carved part: never handed out, or a block of
    // an earlier life of the span, freed, whose span went back to the pool
    // and was carved anew since (a double free).
    if (k < s->capacity.load(std::memory_order_relaxed))
      report_misuse("double free, or free of a block never handed out:", p);
    report_misuse("free of a pointer that is not the start of a block (interior or never handed out):", p);
  }
  if (has_canary(p)) report_misuse("double free of", p);
}

void span_free_remote(Span* s, void* p) {
  span_check_free(s, p);
  set_canary(p);
  span_free_list(s, p, p, 1);
}

void span_free_list(Span* s, void* head, void* tail, uint32_t n) {
  uintptr_t base = span_blocks(s);
  uint32_t index = block_index(base, head);
  // While head is in use s cannot be recycled: its class now is the one the
  // push in follow_up needs, which after the CAS may have changed.
  const unsigned cls = s->cls.load(std::memory_order_relaxed);
  uint64_t w = s->anchor.load(std::memory_order_acquire);
  After after;
  uint32_t own = 0;  // a taken kept span's own list: its owner's frees
  for (;;) {
    Anchor a = Anchor::unpack(w);
    if (a.state != kHot && a.state != kFull && a.state != kPartial)
      report_misuse("double free (or free of a block not in use):", head);
    block_link(tail, block_at(base, a.head));
    Anchor next{index, a.count + n, a.state, a.linked, a.tag, a.kept};
    after = After::kNothing;
    if (a.state != kHot) {
      if (a.count + n > s->carved.load(std::memory_order_relaxed)) report_misuse("double free of", head);
      after = settle(s, a, a.count + n, next);
    } else if (a.kept) {
      // A kept span this free empties: taken to the pool (span_keep). The
      // own count read after the anchor's acquire is of this kept life, and
      // at most the list's length, so the sum reaches carved only when every
      // block is free.
      own = uint32_t(own_count_acquire(s));
      if (own + a.count + n == s->carved.load(std::memory_order_relaxed)) {
        next = Anchor{0, 0, kFree, a.linked, a.tag + 1};
        after = After::kPool;
      }
    }
    if (anchor_cas(s, w, next)) break;
  }
  if (after == After::kPool && Anchor::unpack(w).state == kHot) {
    // The owner's frees onto the own list are counted here, its entry no
    // longer counting them (lab_frees_of); and the span leaves HOT, counted
    // by the class read above, while its blocks were in use.
    stats_count_unbound_frees(cls, own);
    count_hot(-hot_bytes_of_class(cls));
  }
  follow_up(s, after, cls);
}

bool span_holds_carved(const Span* s, const void* p) {
  const uintptr_t base = span_blocks(s);
  const uintptr_t off = reinterpret_cast<uintptr_t>(p) - base;
  const uint32_t bsize = s->block_size.load(std::memory_order_relaxed);
  return reinterpret_cast<uintptr_t>(p) >= base && bsize != 0 && off % bsize == 0 &&
         off / bsize < s->carved.load(std::memory_order_relaxed);
}

bool span_is_valid(const Span* s) {
  Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_acquire));
  if (a.kept && a.state != kHot) return report_invariant("span: kept but not HOT", span_index(s));
  if (a.state != kFull && a.state != kPartial && a.state != kHot) return true;
  bool ok = true;
  uint32_t i = span_index(s);
  uint32_t carved = s->carved.load(std::memory_order_relaxed);
  uint32_t capacity = s->capacity.load(std::memory_order_relaxed);
  uint32_t bsize = s->block_size.load(std::memory_order_relaxed);
  if (carved > capacity) ok = report_invariant("span: carved > capacity", i);
  const uint32_t colour = span_colour_of(s);
  if (colour + uint64_t(capacity) * bsize > s->committed.load(std::memory_order_relaxed))
    ok = report_invariant("span: blocks beyond committed memory", i);
  const uint32_t cls = s->cls.load(std::memory_order_relaxed);
  if ((colour != 0 && (cls >= kClassCount || colour != span_colour(s, class_info(cls).colours))) ||
      s->committed.load(std::memory_order_relaxed) > kVspanSize)
    ok = report_invariant("span: blocks not at the span's base or its colour, or past its vspan", i);
  if (cls >= kClassCount || s->block_mul.load(std::memory_order_relaxed) != block_mul_of(cls))
    ok = report_invariant("span: block check multiplier is not its class's", i);
  if (a.count > carved) ok = report_invariant("span: more free blocks than carved", i);
  // Walk the list: it must hold exactly count blocks, each a block start.
  uint32_t n = 0;
  for (void* b = block_at(span_blocks(s), a.head); b != nullptr && n <= a.count; b = block_next(b)) {
    if (!span_holds_carved(s, b)) {
      ok = report_invariant("span: list holds a pointer that is not a carved block", i);
      break;
    }
    n++;
  }
  if (n != a.count) ok = report_invariant("span: free list length differs from count", i);
  if (a.state == kFull && a.count + (capacity - carved) >= reuse_threshold(capacity))
    ok = report_invariant("span: full span above the reuse threshold", i);
  if (a.state != kHot && a.count >= carved) ok = report_invariant("span: empty span not returned", i);
  if (a.state != kHot && s->owner.load(std::memory_order_relaxed) != nullptr)
    ok = report_invariant("span: unowned span names an owner", i);
  return ok;
}

}  // namespace fw
