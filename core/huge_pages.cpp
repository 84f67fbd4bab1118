// core/huge_pages.cpp: huge pages for the whole extents of large blocks (see huge_pages.h).
#include "core/huge_pages.h"

#include <atomic>

#include "core/arena.h"
#include "core/options.h"
#include "platform/os.h"

namespace fw {
namespace {

constexpr uint64_t kUnread = ~uint64_t(0);
constinit std::atomic<uint64_t> g_extents{0};
constinit std::atomic<uint64_t> g_budget{kUnread};

// An extent's bytes if huge pages are in use: the OS's huge page, when it is
// a whole number of vspans within a region; else 0.
uint64_t extent_bytes() {
  if (option(Option::huge_pages) == 0) return 0;
  const uint64_t h = os::huge_page_size();
  return h >= kVspanSize && h <= kRegionSize ? h : 0;
}

uint64_t budget() {
  uint64_t b = g_budget.load(std::memory_order_relaxed);
  if (b != kUnread) return b;
  const uint64_t limit = os::map_count_limit();
  b = limit == 0 ? 0 : limit / 8 > 0 ? limit / 8 : 1;
  uint64_t expected = kUnread;  // racing readers read the same figure
  g_budget.compare_exchange_strong(expected, b, std::memory_order_relaxed);
  return g_budget.load(std::memory_order_relaxed);
}

// Takes a place for one advised extent; false when the budget is spent.
bool extent_take() {
  const uint64_t b = budget();
  const uint64_t before = g_extents.fetch_add(1, std::memory_order_relaxed);
  if (b == 0 || before < b) return true;
  g_extents.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

// The descriptor whose `huge` flag stands for the extent at address a of
// region r (a is extent-aligned and inside the region).
Span* flag_of(uint32_t r, uintptr_t a) {
  const uintptr_t base = g_regions[r].base.load(std::memory_order_relaxed);
  return span_at(r * kVspansPerRegion + uint32_t((a - base) >> kVspanShift));
}

// Advises [lo, hi) (extent-aligned) for or against huge pages; if the OS
// refuses to advise for them, the flags of [lo, hi) are taken back.
void advise(uint32_t r, uintptr_t lo, uintptr_t hi, uint64_t h, bool on) {
  if (lo >= hi) return;
  if (os::advise_huge_pages(reinterpret_cast<void*>(lo), size_t(hi - lo), on) || !on) return;
  for (uintptr_t a = lo; a < hi; a += h) {
    flag_of(r, a)->huge.store(0, std::memory_order_relaxed);
    g_extents.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace

uint64_t huge_extent_bytes() { return extent_bytes(); }

void huge_pages_committed(Span* s, uint64_t before, uint64_t bytes) {
  const uint64_t h = extent_bytes();
  if (h == 0 || bytes < h) return;
  const uint32_t r = span_index(s) / kVspansPerRegion;
  const uintptr_t base = span_base(s);
  const uintptr_t first = (base + h - 1) & ~uintptr_t(h - 1);  // the first extent inside the span's window
  const uintptr_t end = (base + bytes) & ~uintptr_t(h - 1);     // the end of the last one inside its committed bytes
  // Extents wholly inside [base, base + before) were looked at when those
  // bytes were committed: start at the one that holds byte `before`.
  uintptr_t from = (base + before) & ~uintptr_t(h - 1);
  if (from < first) from = first;
  if (from >= end) return;
  if (g_regions[r].kind.load(std::memory_order_relaxed) == kRegionHuge) {
    os::advise_huge_pages(reinterpret_cast<void*>(from), size_t(end - from), true);
    return;
  }
  // Arena region: each extent taken with its flag, stretches of them advised
  // in one call each.
  uintptr_t lo = end;
  for (uintptr_t a = from; a < end; a += h) {
    const bool took = flag_of(r, a)->huge.load(std::memory_order_relaxed) == 0 && extent_take();
    if (took && flag_of(r, a)->huge.exchange(1, std::memory_order_relaxed) != 0)
      g_extents.fetch_sub(1, std::memory_order_relaxed);  // another holder's, advised already
    else if (took) {
      if (lo == end) lo = a;
      continue;
    }
    advise(r, lo, a, h, true);
    lo = end;
  }
  advise(r, lo, end, h, true);
}

void huge_pages_decommitting(Span* s, uint64_t bytes, uint64_t before) {
  const uint64_t h = extent_bytes();
  // Turned off (the option) while extents were advised: they are left so;
  // an extent's huge page is given back with its bytes all the same.
  if (h == 0 || before <= bytes) return;
  const uint32_t r = span_index(s) / kVspansPerRegion;
  const uintptr_t base = span_base(s);
  // Every extent that meets [bytes, before), whether or not it starts inside
  // the span's window (a piece of a split run may start mid-extent).
  const uintptr_t from = (base + bytes) & ~uintptr_t(h - 1);
  const uintptr_t end = (base + before + h - 1) & ~uintptr_t(h - 1);
  if (g_regions[r].kind.load(std::memory_order_relaxed) == kRegionHuge) {
    const uintptr_t lo = from > base ? from : (base + h - 1) & ~uintptr_t(h - 1);
    if (lo < end) os::advise_huge_pages(reinterpret_cast<void*>(lo), size_t(end - lo), false);
    return;
  }
  const uintptr_t region_base = g_regions[r].base.load(std::memory_order_relaxed);
  uintptr_t lo = end;
  for (uintptr_t a = from < region_base ? region_base : from; a < end; a += h) {
    if (flag_of(r, a)->huge.load(std::memory_order_relaxed) != 0 &&
        flag_of(r, a)->huge.exchange(0, std::memory_order_relaxed) != 0) {
      g_extents.fetch_sub(1, std::memory_order_relaxed);
      if (lo == end) lo = a;
      continue;
    }
    advise(r, lo, a, h, false);
    lo = end;
  }
  advise(r, lo, end, h, false);
}

uint64_t huge_extents() { return g_extents.load(std::memory_order_relaxed); }
uint64_t huge_extent_budget() { return budget(); }
void huge_set_extent_budget(uint64_t b) { g_budget.store(b, std::memory_order_relaxed); }

}  // namespace fw
