// core/spare.cpp: a LAB's spare run (see spare.h).
#include "core/spare.h"

#include "core/large.h"
#include "core/options.h"
#include "core/span_pool.h"
#include "platform/os.h"

namespace fw {
namespace {

// Drops lab's spare from the LAB and returns it (null if none).
Span* spare_take(Lab* lab) {
  Span* run = lab->spare;
  if (run != nullptr) {
    lab->kept_bytes -= lab->spare_bytes;
    lab->spare = nullptr;
    lab->spare_bytes = 0;
  }
  return run;
}

void give_run(Span* run) { pool_give(run, run->run_len.load(std::memory_order_relaxed)); }

}  // namespace

void* spare_alloc(size_t size, size_t align, bool zero) {
  LargeShape b;
  if (!large_shape(size, align, &b)) return nullptr;
  Lab* slot = lab_enter();
  Span* run = slot->spare;  // null in every placeholder: none keeps spans
  if (run != nullptr && b.n != 0 && run->run_len.load(std::memory_order_relaxed) == b.n)
    spare_take(slot);
  else
    run = nullptr;
  lab_leave(slot);
  if (run != nullptr) return large_alloc_on(run, b, zero);
  void* p = large_alloc_shaped(b, zero);
  if (p == nullptr) {
    // No memory: a spare of another length is free memory too.
    slot = lab_enter();
    run = spare_take(slot);
    lab_leave(slot);
    if (run != nullptr) {
      give_run(run);
      p = large_alloc_shaped(b, zero);
    }
  }
  return p;
}

void spare_free(Lab* mine, void* p, Span* d) {
  Span* run = large_free_run(p, d);
  if (run == nullptr) return;  // a huge block: its region is gone
  const uint64_t bytes = run->committed.load(std::memory_order_relaxed);
  if (is_placeholder(mine) || !keeps_spans(mine) || bytes > kSpareMaxBytes || option(Option::decay_ms) == 0 ||
      mine->kept_bytes - mine->spare_bytes + bytes > kKeptBytes) {
    give_run(run);
    return;
  }
  Span* old = spare_take(mine);
  mine->spare = run;
  mine->spare_bytes = uint32_t(bytes);
  mine->kept_bytes += uint32_t(bytes);
  mine->spare_at = 0;  // stamped by the next acquisition (spare_expire): no clock read here
  if (old != nullptr) give_run(old);
}

void spare_release(Lab* lab) {
  if (Span* run = spare_take(lab)) give_run(run);
}

void spare_expire(Lab* lab) {
  if (lab->spare == nullptr) return;
  const uint64_t now = os::now_ms_coarse() | 1;  // 0 means "not stamped yet"
  if (lab->spare_at == 0)
    lab->spare_at = now;
  else if (now - lab->spare_at >= uint64_t(option(Option::decay_ms)))
    spare_release(lab);
}

}  // namespace fw
