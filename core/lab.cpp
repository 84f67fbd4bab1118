// core/lab.cpp: making, binding, flushing and refilling LABs (see lab.h).
#include "core/lab.h"

#include <algorithm>

#include "core/arena.h"
#include "core/options.h"
#include "core/percpu.h"
#include "core/report.h"
#include "core/reusable.h"
#include "core/secure.h"
#include "core/secure_heap.h"
#include "core/span_pool.h"
#include "core/stats.h"
#include "core/tagged_stack.h"
#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {

// constinit: the placeholders and the tables below are zero before any code
// runs. malloc can be called before this file's dynamic initialisers would run
// (another image's constructors, the Windows CRT's start-up), and a dynamic
// initialiser running after that would zero state already in use.
constinit FW_COLD_BSS Lab g_lab_empty{};
constinit FW_COLD_BSS Lab g_lab_busy{};
constinit FW_COLD_BSS Lab g_lab_dead{};
constinit FW_COLD_BSS Lab g_lab_secure{};
constinit FW_COLD_BSS Lab g_lab_cpu{};
FW_THREAD_SLOT_DEFINE(&g_lab_empty);

namespace {

constinit FW_COLD_BSS std::atomic<Lab*> g_lab_table[kMaxLabs]{};
constinit std::atomic<uint32_t> g_lab_next{0};
constinit std::atomic<Lab*> g_lab_all{nullptr};
constinit std::atomic<uint64_t> g_threads_live{0}, g_threads_created{0};
constinit std::atomic<uint64_t> g_acquisitions{0};
// The sum of every LAB's pending_bytes (lab_held_bytes), changed where they
// change. Signed for the reason span_hot_bytes is.
constinit std::atomic<int64_t> g_pending_total{0};
// The kept pool's bytes taken (lab.h): the sum of every LAB's kept_pooled,
// changed where they change. A count with nothing published through it:
// relaxed.
constinit std::atomic<uint64_t> g_kept_pooled{0};

struct IdleLink {
  std::atomic<uint32_t>& operator()(uint32_t i) const {
    return g_lab_table[i].load(std::memory_order_relaxed)->idle_next;
  }
};
constinit TaggedStack<IdleLink> g_idle;

// The memory first, then the id: an id taken before a mapping that failed (an
// address-space limit) was never used again, and enough such failures would
// have used up kMaxLabs. Callers racing for the last ids may map a LAB that
// gets none; it is not given back (metadata never is), which happens at most
// once per such caller.
Lab* lab_new() {
  if (g_lab_next.load(std::memory_order_relaxed) >= kMaxLabs) return nullptr;
  size_t bytes = (sizeof(Lab) + os::page_size() - 1) & ~(os::page_size() - 1);
  Lab* lab = static_cast<Lab*>(os::alloc_metadata(bytes));  // zero-filled
  if (lab == nullptr) return nullptr;
  uint32_t id = g_lab_next.load(std::memory_order_relaxed);
  do {
    if (id >= kMaxLabs) return nullptr;
  } while (!g_lab_next.compare_exchange_weak(id, id + 1, std::memory_order_relaxed));
  lab->id = id;
  // Counts from -kTickAllocs (lab.h, the decay's tick), stored without a
  // load: a fresh LAB's first page read first would map the zero page
  // (docs/design.md, "Fresh metadata is stored to first").
  for (unsigned c = 0; c < kClassCount; c++) {
    lab->lists[c].allocs.store(uint64_t(0) - kTickAllocs, std::memory_order_relaxed);
    lab->lists[c].allocs_base.store(kTickAllocs, std::memory_order_relaxed);
  }
  lab->tick_ms = os::now_ms_coarse();
  set_pending_slots(lab, kPendingChains);
  lab->pending_budget = kPendingBudget;
  g_lab_table[id].store(lab, std::memory_order_release);
  Lab* head = g_lab_all.load(std::memory_order_relaxed);
  do {
    lab->all_next.store(head, std::memory_order_relaxed);
  } while (!g_lab_all.compare_exchange_weak(head, lab, std::memory_order_release, std::memory_order_relaxed));
  return lab;
}

Lab* lab_take() {
  uint32_t id = g_idle.pop();
  if (id != kNoIndex) return g_lab_table[id].load(std::memory_order_relaxed);
  return lab_new();
}

void lab_put(Lab* lab) {
  lab->handed = nullptr;
  percpu_successor_set(lab, kSuccessorClosed);
  lab->kind.store(kLabIdle, std::memory_order_relaxed);
  g_idle.push(lab->id);
}

// --- Parking (lab.h) ---
// Slot i holds a parked LAB or null. A LAB enters an empty slot with a CAS
// (release: its lists and spans are complete before another thread can take
// it) and leaves it with a CAS to null (acq_rel), by which one thread becomes
// its only holder. Taking whichever LAB a slot holds at the CAS is correct
// even if it left and came back meanwhile: it is parked either way.
constinit std::atomic<Lab*> g_parked[kMaxParked]{};
constinit std::atomic<uint32_t> g_parked_slots{0};

unsigned parked_slots() {
  uint32_t n = g_parked_slots.load(std::memory_order_relaxed);
  if (n == 0) {
    n = uint32_t(os::cpu_count());
    if (n > kMaxParked) n = kMaxParked;
    if (n == 0) n = 1;
    g_parked_slots.store(n, std::memory_order_relaxed);
  }
  return n;
}

// Parks lab (its holder's last act, at thread exit): false if every slot is taken.
bool park(Lab* lab) {
  lab->handed = nullptr;  // its next holder's to set
  lab->parked_at.store(os::now_ns(), std::memory_order_relaxed);
  lab->kind.store(kLabParked, std::memory_order_relaxed);
  for (unsigned i = 0, n = parked_slots(); i < n; i++) {
    Lab* empty = nullptr;
    if (g_parked[i].compare_exchange_strong(empty, lab, std::memory_order_release, std::memory_order_relaxed))
      return true;
  }
  lab->kind.store(kLabThread, std::memory_order_relaxed);
  return false;
}

// Takes l out of slot i (above): true if this call made the caller its holder.
bool take_parked(unsigned i, Lab* l) {
  return g_parked[i].compare_exchange_strong(l, nullptr, std::memory_order_acq_rel, std::memory_order_relaxed);
}

// A parked LAB taken out of its slot, released: its spans to every thread, itself idle.
void release_taken(Lab* l) {
  lab_flush(l);
  lab_put(l);
}

// Takes `want` if it is parked, or returns nullptr.
Lab* unpark_this(Lab* want) {
  for (unsigned i = 0, n = parked_slots(); i < n; i++) {
    if (g_parked[i].load(std::memory_order_relaxed) == want && take_parked(i, want)) return want;
  }
  return nullptr;
}

// Takes the LAB parked last (the likeliest to hold the blocks a successor was
// handed), or nullptr if none is.
Lab* unpark() {
  for (int attempt = 0; attempt < 4; attempt++) {
    unsigned best = kMaxParked;
    uint64_t best_at = 0;
    Lab* best_lab = nullptr;
    for (unsigned i = 0, n = parked_slots(); i < n; i++) {
      Lab* l = g_parked[i].load(std::memory_order_relaxed);
      if (l == nullptr) continue;
      uint64_t at = l->parked_at.load(std::memory_order_relaxed);
      if (best_lab == nullptr || at > best_at) {
        best = i;
        best_at = at;
        best_lab = l;
      }
    }
    if (best_lab == nullptr) return nullptr;
    if (take_parked(best, best_lab)) return best_lab;
  }
  return nullptr;  // the slots kept changing: a LAB from the idle stack will do
}

// Flushes and makes idle the parked LABs parked before `before` (every one
// for UINT64_MAX).
void expire_parked(uint64_t before) {
  for (unsigned i = 0, n = parked_slots(); i < n; i++) {
    Lab* l = g_parked[i].load(std::memory_order_relaxed);
    if (l == nullptr || l->parked_at.load(std::memory_order_relaxed) >= before) continue;
    if (take_parked(i, l)) release_taken(l);
  }
}

// A thread frees into a span of parked LAB o: the thread that o was parked
// for is most likely this one, bound to a LAB of its own before o's thread
// exited (lab_bind_thread), so nobody will take o whole. It is released now,
// its spans open to every thread, rather than holding them for kParkedNs.
void release_parked(Lab* o) {
  if (unpark_this(o) != nullptr) release_taken(o);  // else taken or released meanwhile
}

// lab frees into a span of parked LAB o. A thread's LAB names o as its
// handed LAB, which its slow path's last step takes or releases
// (lab_adopt_handed), if its thread bound after o's: only such a thread can
// be the successor o's thread started before it exited. A thread bound
// before (a creator that outlives its workers and frees some of their
// blocks) leaves o parked for the next thread that binds, which takes it
// whole, or for its expiry (kParkedNs): taking o, it gave up its own cache
// and the blocks it holds there, and the next worker started from an empty
// one (mimalloc-bench's mstress with 2 threads: peak RSS 37 -> 31 MiB,
// mimalloc 32; docs/design.md, "Thread exit, parking and adoption").
// Any other LAB releases o now.
void parked_owner_seen(Lab* lab, Lab* o) {
  if (lab->kind.load(std::memory_order_relaxed) == kLabThread && !secure_mode()) {
    if (lab->bind_no.load(std::memory_order_relaxed) > o->bind_no.load(std::memory_order_relaxed)) lab->handed = o;
  } else {
    release_parked(o);
  }
}

void expire_old_parked() {
  uint64_t now = os::now_ns();
  if (now > kParkedNs) expire_parked(now - kParkedNs);
}

// Runs at thread exit (platform thread-exit hook) with the thread's LAB.
void lab_thread_exit(void* arg) {
  Lab* lab = static_cast<Lab*>(arg);
  lab_enter();
  lab_flush_quarantine(lab);  // an idle LAB holds no quarantine
  percpu_successor_set(lab, kSuccessorClosed);  // before the count: a naming it was part of ends
  percpu_thread_unbound(g_threads_live.fetch_sub(1, std::memory_order_relaxed) - 1);
  telemetry_event(FWT_EV_THREAD_EXIT, lab->id, 0, 0);
  expire_old_parked();
  lab_flush_pending(lab);  // blocks of spans it does not own: theirs now
  if (percpu_on() || !park(lab)) {
    lab_flush(lab);
    lab_put(lab);
  }
  lab_leave(&g_lab_dead);
}

// A span for class c: a reusable one first (Hoard: refill partly-empty spans
// before growing), looked for again after a sweep of stacks that may hold one
// (reusable.h), else one from the span-pool.
Span* acquire_span(Lab* lab, unsigned c, void** list) {
  *list = nullptr;
  for (bool swept = false;; swept = true) {
    while (Span* s = reusable_pop(c)) {
      if (span_claim_reusable(s, c, lab, list)) {
        percpu_caches_grew();
        return s;
      }
    }
    if (swept || !reusable_sweep()) break;
  }
  Span* s = pool_take_span(class_info(c).span_bytes);
  if (s == nullptr || !span_make_hot(s, c, lab)) return nullptr;
  percpu_caches_grew();
  const uint64_t n = g_acquisitions.fetch_add(1, std::memory_order_relaxed);
  const uint64_t every = uint64_t(option(Option::peak_sample));  // 0: never
  if (every > 0 && n % every == 0) stats_sample_peak();
  if (n % kParkedCheckEvery == 0) expire_old_parked();  // the heap grows: spans parked too long go back
  return s;
}

// The spans lab holds, hot and kept, all classes (a figure: relaxed loads of
// another LAB's fields; kept entries may be stale).
unsigned lab_spans_held(const Lab* lab) {
  unsigned n = 0;
  for (unsigned c = 0; c < kClassCount; c++) n += unsigned(lab->hot[c] != nullptr) + lab->kept_n[c];
  return n;
}

}  // namespace

Lab* lab_bind_thread(Lab* handed_from) {
  if (!arena_init() || !os::thread_exit_init(&lab_thread_exit)) return nullptr;
  // A signal handler that ran just before this thread's first call set BUSY may
  // already have bound a LAB for the thread: use that one, never a second.
  if (Lab* bound = static_cast<Lab*>(os::thread_exit_registered())) return bound;
  // A thread whose first call frees a block was most likely handed it by a
  // thread that exits or has exited: it takes the LAB that owns the block's
  // span if that LAB is parked, and otherwise (its thread has not exited
  // yet) one from the idle stack, never the LAB another thread's exit parked
  // for its own successor, naming the owner as its handed LAB, which a later
  // slow path takes if it is parked by then (lab_adopt_handed). It does not
  // wait for that exit: Stop 98 yielded the CPU up to 8 times for it, and a
  // free that was a thread's first call then took 10.6 ms, against 0.4 us,
  // when a busy process shared the CPU and the owner waited to join the
  // thread (docs/design.md, "Thread exit, parking and adoption"). Taking the
  // one parked last, a Larson server's successors (4 threads on 2 cores)
  // often took each other's LABs, and each then allocated from spans another
  // thread was freeing into: the live blocks lay on 4,197 distinct pages,
  // 3,444 with this rule and 3,589 under mimalloc (medians of 8 runs;
  // docs/design.md, "Thread exit, parking and adoption").
  Lab* lab = handed_from != nullptr ? unpark_this(handed_from) : unpark();
  Lab* handed = nullptr;
  Lab* predecessor = nullptr;  // handed_from, bound to a live thread (percpu_thread_bound)
  if (lab == nullptr) {
    lab = lab_take();
    if (lab == nullptr) return nullptr;
    const uint32_t kind = handed_from != nullptr ? handed_from->kind.load(std::memory_order_relaxed) : kLabIdle;
    if ((kind == kLabThread || kind == kLabParked) && !secure_mode()) handed = handed_from;
    if (kind == kLabThread) predecessor = handed_from;
  }
  lab->handed = handed;
  percpu_successor_set(lab, kSuccessorOpen);
  lab->kind.store(kLabThread, std::memory_order_relaxed);
  // May call malloc (pthread_setspecific past the first keys): that call finds
  // the BUSY placeholder and is served by a transient LAB. A LAB whose
  // thread's exit would go unseen (the registration failed: no memory for the
  // thread's key or FLS block) would be lost with its spans at that exit: it
  // goes back, and the thread's calls are served by transient LABs.
  if (!os::thread_exit_register(lab)) {
    lab_flush(lab);  // an unparked LAB's spans
    lab_put(lab);
    return nullptr;
  }
  percpu_thread_bound(g_threads_live.fetch_add(1, std::memory_order_relaxed) + 1, lab, predecessor);
  lab->bind_no.store(g_threads_created.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  telemetry_event(FWT_EV_THREAD_START, lab->id, os::thread_self(), 0);
  return lab;
}

Lab* lab_adopt_handed(Lab* lab) {
  Lab* o = lab->handed;
  const uint32_t kind = o->kind.load(std::memory_order_relaxed);
  // Its thread is bound, for as long as it lives (a creator that lives on:
  // one load at each slow path), or another thread took it since: either way
  // a later look settles it. A LAB another thread took and parked again is
  // taken as its own would be: any parked LAB serves, as at a first malloc's
  // bind (unpark).
  if (kind == kLabThread) return lab;
  if (kind != kLabParked) {  // released meanwhile
    lab->handed = nullptr;
    return lab;
  }
  if (lab_spans_held(lab) >= lab_spans_held(o)) {  // this cache is no smaller: o's spans go to every thread
    lab->handed = nullptr;
    release_parked(o);
    return lab;
  }
  // Seen parked but not taken: park stores the kind before its CAS fills the
  // slot, or another thread took it. Either way a later look settles it.
  if (unpark_this(o) == nullptr) return lab;
  // This thread is o's only holder now. Its exit hook gets o in lab's place
  // (the key's value, set at the bind: no allocation), and lab goes idle.
  if (!os::thread_exit_register(o)) {
    release_taken(o);
    lab->handed = nullptr;
    return lab;
  }
  // Namings of this thread's, as successor or predecessor, end as lab goes
  // idle (lab_put): the thread counts as a thread of its own from now on.
  percpu_successor_set(o, kSuccessorOpen);
  o->bind_no.store(lab->bind_no.load(std::memory_order_relaxed), std::memory_order_relaxed);  // this thread's place
  o->kind.store(kLabThread, std::memory_order_relaxed);
  release_taken(lab);
  return o;
}

Lab* lab_take_transient() {
  if (!arena_init()) return nullptr;
  Lab* lab = lab_take();
  if (lab) lab->kind.store(kLabTransient, std::memory_order_relaxed);
  return lab;
}

void lab_make_idle(unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    Lab* lab = lab_new();
    if (lab == nullptr) return;
    lab_put(lab);
  }
}

Lab* lab_take_cpu() {
  if (!arena_init()) return nullptr;
  Lab* lab = lab_take();
  if (lab) lab->kind.store(kLabCpu, std::memory_order_relaxed);
  return lab;
}

void lab_retire(Lab* lab) {
  lab_flush(lab);
  lab_put(lab);
}

void lab_put_transient(Lab* lab) {
  lab_flush_pending(lab);
  lab_put(lab);
}

namespace {

// Ends chain ch of span s (class c) in lab's accounts, before its blocks go
// to s or become lab's own: its bytes leave the budget, and its blocks count
// as lab's frees (lab.h: pushes are counted here, not one by one). Returns
// how many blocks it holds.
uint32_t chain_close(Lab* lab, const PendingChain& ch, const Span* s, unsigned c) {
  const uint32_t bytes = pending_bytes_of(ch, s->block_size.load(std::memory_order_relaxed));
  lab->pending_bytes -= bytes;
  g_pending_total.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
  const uint32_t n = pending_count(ch);
  lab_count_n(lab->lists[c].frees, n);
  return n;
}

// Gives chain i to its span. The class is read while the chain still holds
// blocks of the span, so the span cannot have been given back and reused for
// another class. Its class's bit stays set (pending_of_class may name empty
// slots: adopt_or_give_chains clears it).
void chain_flush(Lab* lab, unsigned i) {
  PendingChain& ch = lab->pending[i];
  Span* const s = ch.span;
  if (s == nullptr) return;
  const uint32_t n = chain_close(lab, ch, s, s->cls.load(std::memory_order_relaxed));
  span_free_list(s, ch.head, ch.tail, n);
  ch = PendingChain{};
}

// Gives every chain to its span, keeping the slot count.
void give_all_chains(Lab* lab) {
  for (unsigned i = 0; i <= lab->pending_mask; i++) chain_flush(lab, i);
  for (uint64_t& bits : lab->pending_of_class) bits = 0;
}

// Per-thread and CPU LABs outside secure mode; a CPU LAB keeps at most one
// span a class (kKeptSpansCpu, lab.h).
bool keeps_spans(const Lab* lab) {
  uint32_t kind = lab->kind.load(std::memory_order_relaxed);
  return (kind == kLabThread || kind == kLabParked || kind == kLabCpu) && !secure_mode();
}

// Whether lab's holder frees blocks of its kept spans of class c onto
// free[c], with those of its hot span (lab.h, "The class's list across its
// spans"): a per-thread LAB's (and a parked one's, which was), for a class
// whose spans hold few blocks.
bool lists_kept_frees(const Lab* lab, unsigned c) {
  const uint32_t kind = lab->kind.load(std::memory_order_relaxed);
  return (kind == kLabThread || kind == kLabParked) && !secure_mode() && lists_across_spans(c);
}

// own_at (span.h) for span s, which lab keeps in class c.
uintptr_t kept_list_at(const Lab* lab, unsigned c, const Span* s) {
  return lists_kept_frees(lab, c) ? own_kept_at(lab, c) : own_list_at(s);
}

// Blocks kept span k has free: on its owner-side list and on its remote list.
// a: an anchor word of k read by the caller.
uint32_t kept_free_count(const Span* k, const Anchor& a) {
  // A kept span's own count is its list's length: at most its capacity.
  return uint32_t(own_count(k)) + a.count;
}
uint32_t kept_free_count(const Span* k) {
  return kept_free_count(k, Anchor::unpack(k->anchor.load(std::memory_order_relaxed)));
}

// Drops kept entry i of class c from the array (the last entry takes its
// place). Its bytes go back to the kept pool first, as far as lab took from
// it: what lab keeps within its own allowance stays so.
void kept_drop(Lab* lab, unsigned c, unsigned i) {
  lab->kept_at(c, i) = lab->kept_at(c, --lab->kept_n[c]);
  const uint32_t bytes = class_info(c).span_bytes;
  lab->kept_bytes -= bytes;
  if (lab->kept_pooled != 0) {
    const uint64_t back = lab->kept_pooled < bytes ? lab->kept_pooled : bytes;
    lab->kept_pooled -= back;
    g_kept_pooled.fetch_sub(back, std::memory_order_relaxed);
  }
  if (lab->kept_n[c] == 0) lab->kept_classes &= ~(uint64_t(1) << c);
}

// Room in the kept pool for one more span of class c past lab's own
// allowance (lab.h): taken from the pool's count, and lab's kept_pooled, if
// the pool's bytes stay within kept_pool_limit(). Only per-thread LABs (and
// parked ones, which were) take from it.
bool kept_pool_take(Lab* lab, unsigned c) {
  const uint32_t kind = lab->kind.load(std::memory_order_relaxed);
  if ((kind != kLabThread && kind != kLabParked) || lab->kept_n[c] >= kept_spans_most(lab)) return false;
  const uint32_t bytes = class_info(c).span_bytes;
  const uint64_t limit = kept_pool_limit();
  uint64_t taken = g_kept_pooled.load(std::memory_order_relaxed);
  do {
    if (taken + bytes > limit) return false;
  } while (
      !g_kept_pooled.compare_exchange_weak(taken, taken + bytes, std::memory_order_relaxed, std::memory_order_relaxed));
  lab->kept_pooled += bytes;
  return true;
}

// Drops the entries of class c other than `except` that name s: stale ones
// (kept_live, lab.h), left when another thread's free took s to the pool
// while lab kept it, before s is kept again, so that it is never listed
// twice.
void kept_forget(Lab* lab, unsigned c, const Span* s, unsigned except) {
  const HolderField<Span*>* e = &lab->kept_at(c, 0);
  for (unsigned i = 0; i < lab->kept_n[c];) {
    if (i != except && *e == s) {
      if (except == lab->kept_n[c] - 1u) except = i;  // the entry kept moves into i
      kept_drop(lab, c, i);  // the last entry moves into i: i is read again
    } else if (++i < lab->kept_n[c]) {
      e = lab->kept_after(c, i, e);  // not past the last: entry kKeptEntries is past the array
    }
  }
}

// Span s, lab's hot span of class c until now (hot_leave), becomes kept entry
// i, already counted: its anchor's kept bit is set last, after its own list
// was reset (span_keep). If s came from outside lab and was not kept since
// (hot_fresh), stale entries naming s are dropped first; while lab owns s no
// other entry of class c can name it, so its later keeps need no look. So the
// class's entries are read once a span that came and was kept: reading them
// at every keep took 97 of 545 instructions a pair for 8-128 KiB blocks
// replaced at random (a span holds 2 to 32, so the hot span is kept again
// every few blocks), and reading them as each span came cost sizesweep, whose
// spans mostly float unkept once the kept budget is spent.
void kept_set(Lab* lab, unsigned c, unsigned i, Span* s) {
  lab->kept_at(c, i) = s;
  if (FW_UNLIKELY(hot_is_fresh(lab, c))) {
    kept_forget(lab, c, s, i);
    lab->hot_fresh &= ~(uint64_t(1) << c);
  }
  span_keep(s);
}

// Gives kept span i of class c back with its list (it becomes FULL, PARTIAL or
// FREE by its free count, span_release) and drops it from the array; a stale
// entry (a freer took the span: span_unkeep fails) is only dropped. Returns
// whether it gave the span back.
bool kept_release(Lab* lab, unsigned c, unsigned i) {
  Span* k = lab->kept_at(c, i);
  kept_drop(lab, c, i);
  if (!span_unkeep(k, lab, c)) return false;
  uint32_t n = uint32_t(own_count(k));  // its list's length (kept)
  void* list = own_take(lab, k, c);
  span_release_counted(k, list, n);
  return true;
}

// lab_return_kept_frees for class c, noting the list's frees it has seen
// (kept_seen): release_empty_kept and release_emptied_kept return a list's
// blocks of kept spans only after frees since.
void return_kept_frees_seen(Lab* lab, unsigned c) {
  lab_return_kept_frees(lab, c);
  lab->kept_seen[c].frees = lab->lists[c].frees.load(std::memory_order_relaxed);
}

// Whether blocks of lab's kept spans of class c may wait on its lists: its
// free[c] took frees since they last went back to their spans (kept_seen),
// or its kept list holds some.
bool kept_frees_waiting(const Lab* lab, unsigned c) {
  return lab->lists[c].frees.load(std::memory_order_relaxed) != lab->kept_seen[c].frees ||
         lab->kept_frees[c].head != nullptr;
}

// Whether lab's kept entry k of class c has no block in use, or is stale:
// release_empty_kept and release_emptied_kept give those back.
bool kept_emptied(const Lab* lab, unsigned c, const Span* k) {
  return !kept_live(lab, c, k) || kept_free_count(k) >= k->carved.load(std::memory_order_relaxed);
}

// Span s becomes lab's hot span of class c: its owner's frees go onto free[c]
// (own_at, span.h), counted in the LAB's frees[c] (own_prepend); its own list
// stays empty. fresh: s came from outside lab (hot_fresh).
void hot_enter(Lab* lab, unsigned c, Span* s, bool fresh) {
  lab->hot[c] = s;
  lab->hot_fresh = (lab->hot_fresh & ~(uint64_t(1) << c)) | (uint64_t(fresh) << c);
  s->own_at.store(own_hot_at(lab, c), std::memory_order_relaxed);
}

// lab's hot span s of class c stops being hot (it is kept, floated or given
// back): its owner's frees go where a kept span's go from here (kept_list_at);
// its own list is empty, as a hot span's always is.
void hot_leave(Lab* lab, unsigned c, Span* s) { s->own_at.store(kept_list_at(lab, c, s), std::memory_order_relaxed); }

// Gives the hot span of class c back with its blocks on free[c], and leaves
// the class without one. free[c] holds no other span's blocks (release_kept
// returned them).
void hot_release(Lab* lab, unsigned c) {
  Span* s = lab->hot[c];
  hot_leave(lab, c, s);
  span_release(s, lab->lists[c].head);
  lab->hot[c] = nullptr;
  lab->lists[c].head = nullptr;
}

}  // namespace

// A block that leaves free[c] for its span's own list was counted as a free
// when it was pushed (lists[c].frees), and its own count counts it again, so
// it is taken off frees: every such block was pushed since its span stopped
// being hot (a span is kept only while free[c] is empty), so frees never
// goes below 0. A block of kept_frees[c], all of kept spans (lab.h), was
// counted in that list's count only, which is dropped: its own count counts
// it. Nothing to do in a LAB that keeps its frees apart by span, whose
// free[c] holds only hot[c]'s blocks.
namespace {
// Pushes free block b of a span lab keeps onto that span's own list
// (own_list_at), counted there.
void own_list_push(void* b, const Span* s) {
  const uintptr_t list = own_list_at(s);
  block_link(b, word_load_relaxed(list));
  own_prepend(list, b);
}
}  // namespace

void lab_return_kept_frees(Lab* lab, unsigned c) {
  if (!lists_kept_frees(lab, c) || lab->kept_n[c] == 0) return;
  const Span* hot = lab->hot[c];
  Lab::KeptFrees& kf = lab->kept_frees[c];
  for (void* b = kf.head; b != nullptr;) {
    void* const next = block_next(b);
    own_list_push(b, span_of(b));
    b = next;
  }
  kf.head = nullptr;
  kf.count.store(0, std::memory_order_relaxed);
  void* stay = nullptr;  // the last block that stays; nullptr: none yet
  void* b = lab->lists[c].head;
  uint64_t moved = 0;
  while (b != nullptr) {
    void* const next = block_next(b);
    Span* s = span_of(b);
    if (s == hot) {  // stays: linked after the last that stays
      if (stay == nullptr)
        lab->lists[c].head = b;
      else
        block_link(stay, b);
      stay = b;
    } else {
      own_list_push(b, s);
      moved++;
    }
    b = next;
  }
  if (stay == nullptr)
    lab->lists[c].head = nullptr;
  else
    block_link(stay, nullptr);
  lab->lists[c].frees.store(lab->lists[c].frees.load(std::memory_order_relaxed) - moved, std::memory_order_relaxed);
}

namespace {

// Gives back every kept span of class c, their blocks on free[c] and on the
// kept list first.
void release_kept(Lab* lab, unsigned c) {
  lab_return_kept_frees(lab, c);
  while (lab->kept_n[c] > 0) kept_release(lab, c, lab->kept_n[c] - 1u);
}

// Gives back kept spans that have no block in use: at most kKeptLook of them
// are looked at per call, going on where the last call stopped (kept_next,
// kept_pos), the classes with kept spans in turn, and drops stale entries
// (kept_live). A span emptied by its owner stays kept for the thread's next
// blocks of its class, which then come off its own list with no carving, or
// from block 0 carved again if the list is out of address order (kept_switch;
// one emptied by other threads' frees went to the pool as they emptied it,
// span_keep); each time the thread goes to the shared stacks
// for a span (lab_refill), the next kept spans in turn are looked at, so every
// empty one goes where any thread can use them within (kept spans /
// kKeptLook + classes) acquisitions. (Visiting every class at each
// acquisition read every kept span's descriptor each time: 9% of the
// instructions of blocks of 16-64 KiB, whose spans are taken every few
// blocks.)
void release_empty_kept(Lab* lab) {
  const uint64_t classes = lab->kept_classes;
  if (classes == 0) return;
  unsigned d = lab->kept_next - 1u;  // the class the last call looked at, if it has kept spans left there
  unsigned i = lab->kept_pos;
  if (lab->kept_next == 0 || ((classes >> d) & 1) == 0 || i >= lab->kept_n[d]) {  // kKeptDone included
    const uint64_t ahead = classes & (~uint64_t(0) << lab->kept_next);  // kept_next <= kClassCount < 64
    d = unsigned(__builtin_ctzll(ahead != 0 ? ahead : classes));
    i = 0;
  }
  lab->kept_next = d + 1;
  // A class the thread took no block of since the last look at it gives
  // the blocks of its kept spans on its list back to them, which may empty
  // some (lab.h, the class's list across its spans). A class in use keeps
  // its list whole: returning all but as many blocks as it took since (a
  // thread cache's low-water mark) walked that many blocks at each look, a
  // miss each (docs/benchmarks.md, Stop 85). Only frees since the last
  // return can have put such blocks there: a list left with its hot span's
  // blocks alone is not walked again at each look.
  const uint64_t allocs = lab_allocs_of(lab, d);
  if (allocs == lab->kept_seen[d].allocs && kept_frees_waiting(lab, d)) return_kept_frees_seen(lab, d);
  lab->kept_seen[d].allocs = allocs;
  // kept_release moves the last entry into i: i is looked at again.
  for (unsigned looked = 0; looked < kKeptLook && i < lab->kept_n[d]; looked++) {
    Span* k = lab->kept_at(d, i);
    if (kept_emptied(lab, d, k))
      kept_release(lab, d, i);  // empty, or stale: dropped
    else
      i++;
  }
  // Past the class's last entry, the next call goes on to the next class
  // (kKeptDone) even if this class keeps another span before it: a class
  // that keeps a span at every acquisition, the one a growing heap fills, had
  // each call look at its one new entry and never reach the others, whose
  // empty spans stayed kept (phases: the kept pool held a past phase's 72 MB
  // of emptied spans through the next phase).
  lab->kept_pos = i < lab->kept_n[d] ? i : kKeptDone;
}

// Gives back every kept span of class c with no block in use, and drops
// stale entries; returns the bytes of the spans it gave back.
uint64_t release_emptied_of(Lab* lab, unsigned c) {
  uint64_t gave = 0;
  // kept_release moves the last entry into i: i is looked at again.
  for (unsigned i = 0; i < lab->kept_n[c];) {
    if (!kept_emptied(lab, c, lab->kept_at(c, i)))
      i++;
    else if (kept_release(lab, c, i))  // a stale entry is only dropped
      gave += class_info(c).span_bytes;
  }
  return gave;
}

// Gives back every kept span with no block in use, of every class, at once
// (lab_release_emptied_current), and drops stale entries; returns the bytes of
// the spans it gave back. A class whose list took frees since its blocks of
// kept spans last went back to them (kept_seen) returns them first, which may
// empty some: the list is walked once per batch of frees, not at each call.
// release_empty_kept does the same a few spans at a time as the thread takes
// spans; this is for a thread that takes none but allocates big blocks while
// its emptied spans hold pages.
uint64_t release_emptied_kept(Lab* lab) {
  uint64_t gave = 0;
  for (uint64_t classes = lab->kept_classes; classes != 0; classes &= classes - 1) {
    const unsigned c = unsigned(__builtin_ctzll(classes));
    if (kept_frees_waiting(lab, c)) return_kept_frees_seen(lab, c);
    gave += release_emptied_of(lab, c);
  }
  return gave;
}

// The decay's look at lab's kept spans (lab_tick): every kept span with no
// block in use goes back, of every class, and stale entries are dropped, as
// release_emptied_kept does; but a class listed across its spans returns
// its list's blocks of kept spans to them only if it took fewer blocks since
// this look's last look at it (tick_seen), a delay before, than half its kept
// spans hold (none, for a class no longer used). A class in use for more
// keeps its list whole, as at release_empty_kept's looks: a walk of a long
// list is a miss a block, and its spans' blocks on it are in use as far as
// the spans know, so its spans stay kept. A class used for less holds more
// spans than a delay's use needs, and its list would go on handing out the
// blocks freed last wherever they lie, so no span of a freed heap would
// empty: the walk returns them, the class's next blocks come from its kept
// spans one span at a time (kept_switch), and the spans whose blocks the
// program frees for good go back. The walk is a miss a block on the list, at
// most once a delay, and only for a class that took fewer blocks in that
// delay than half its kept spans hold. (The looks keep counts apart:
// release_empty_kept's first look at a class leaves it whole.)
void release_idle_kept(Lab* lab) {
  for (uint64_t classes = lab->kept_classes; classes != 0; classes &= classes - 1) {
    const unsigned c = unsigned(__builtin_ctzll(classes));
    const uint64_t allocs = lab_allocs_of(lab, c);
    const uint64_t room = uint64_t(lab->kept_n[c]) * class_info(c).capacity;  // blocks its kept spans hold
    if ((allocs - lab->tick_seen[c]) * 2 < room && kept_frees_waiting(lab, c)) return_kept_frees_seen(lab, c);
    lab->tick_seen[c] = allocs;
    release_emptied_of(lab, c);
  }
}

// Whether free list `list`, of blocks of bsize bytes, starts with kOrderLook
// links that each step to the block beside, all the same way: frees that
// came in address order, either way, leave such a list, which is taken to
// hand its blocks out in address order already (only those links are read:
// a list shuffled but for its last few frees passes). A span emptied in
// another order (a program that frees a phase's heap by a tree's or a hash
// table's order) would hand its blocks out in that order: the next phase's
// objects, built one after another, would lie scattered over the span, and a
// walk over them in the order they were built would miss where one over
// neighbouring blocks is prefetched. So kept_switch carves such a span again,
// as a span from the pool is (mimalloc resets a page whose blocks are all
// free; jemalloc hands out a slab's lowest free block first). A list already
// in address order is kept: carving it again would only write every block's
// link anew (threadtest, whose rounds free their blocks in allocation order:
// 16% slower with 2 threads when every emptied span was carved again).
constexpr unsigned kOrderLook = 4;  // links read: one more block's line each, once a span's turn
bool list_in_address_order(const void* list, uint32_t bsize) {
  const char* b = static_cast<const char*>(list);
  ptrdiff_t step = 0;
  for (unsigned i = 0; i < kOrderLook && b != nullptr; i++) {
    const char* next = static_cast<const char*>(block_next(b));
    if (next == nullptr) return true;
    const ptrdiff_t d = next - b;
    if ((d != ptrdiff_t(bsize) && d != -ptrdiff_t(bsize)) || (step != 0 && d != step)) return false;
    step = d;
    b = next;
  }
  return true;
}

// hot[c] has no block left: makes a kept span with free blocks hot[c], keeping
// the old hot span in its place. It reads the kept spans in turn, from where
// the last switch stopped (kept_look[c]), and takes the first with a free
// block: the span passed over longest, which has gathered the most of the
// thread's frees when they fall evenly on its spans, as a server's random
// replacements do. So a switch reads one or two descriptors, not every kept
// span (reading 16 to take the best was 16 of larson-bigheap's 153
// instructions a pair, one thread; docs/benchmarks.md, Stop 50), and a span
// with many free blocks further on is reached within as many switches as
// spans lie before it, each taking at least one block. It reads at most
// kKeptLook: false (nothing changed) when none of them has a free block, so a
// switch costs kKeptLook reads while every kept span is full (a growing heap,
// where reading all of them cost up to 256 reads a span). The thread then
// takes a span from the shared stacks while a kept span it did not read may
// have some, which its next switches reach (kept spans count in full in the
// bound).
//
// The span it takes is claimed first (span_unkeep): an entry whose span a
// freer took is dropped, and the look goes on.
bool kept_switch(Lab* lab, unsigned c) {
  for (;;) {
    const unsigned n = lab->kept_n[c];
    const unsigned reads = n < kKeptLook ? n : kKeptLook;
    unsigned i = lab->kept_look[c] < n ? unsigned(lab->kept_look[c]) : 0u;
    unsigned found = n;
    // 17 instructions a read, 24 while each entry was indexed (kept_after),
    // and a switch of a class whose spans hold a few blocks reads several
    // (2.3 a malloc of 8-128 KiB blocks replaced at random, callgrind).
    const HolderField<Span*>* e = &lab->kept_at(c, i);
    for (unsigned r = 0; r < reads; r++) {
      if (kept_free_count(*e) != 0 || span_has_uncarved(*e)) {  // uncarved: restarted (kept_restart_all)
        found = i;
        i = i + 1 == n ? 0 : i + 1;
        break;
      }
      if (++i == n) i = 0;
      e = lab->kept_after(c, i, e);
    }
    lab->kept_look[c] = uint16_t(i);
    if (found == n) return false;
    // The next switch reads entry i first, and hands out the head of that
    // span's own list first: a block freed into it since it was last hot,
    // often long enough ago that its line has left the cache. Its link is the
    // first thing that switch waits on, so its line is fetched now, while
    // the blocks between two switches are handed out (larson-medium, whose
    // spans of 2-4 blocks switch at most mallocs: 7.7% faster, pinned;
    // docs/benchmarks.md, Stop 83). A block pushed on top meanwhile is one
    // freed since, likely still cached.
    if (i != found) __builtin_prefetch(own_head(lab->kept_at(c, i)), 1);
    Span* s = lab->kept_at(c, found);
    if (!span_unkeep(s, lab, c)) {
      kept_drop(lab, c, found);  // stale
      continue;
    }
    Span* old = lab->hot[c];
    hot_leave(lab, c, old);
    kept_set(lab, c, found, old);  // exhausted: free[c] is empty (lab_refill)
    // Every carved block of s free on its own list (own count == carved
    // leaves none in use, remote or on a chain), in an order other than the
    // blocks' own: s starts over, carved again in address order
    // (span_restart), instead of handing out the list in the order of its
    // frees (list_in_address_order).
    const bool all_free = own_count(s) == s->carved.load(std::memory_order_relaxed);
    void* list = own_take(lab, s, c);  // empty if its free blocks are remote: collected next
    if (all_free && !list_in_address_order(list, s->block_size.load(std::memory_order_relaxed))) {
      span_restart(s);
      list = nullptr;
    }
    lab->lists[c].head = list;
    hot_enter(lab, c, s, false);
    return true;
  }
}

// Whether every block that lab's live kept spans of class c have in use as
// far as they know lies on kept_frees[c], which holds n: no remote free
// waits in any of them, and their carved blocks less their own lists' come
// to n. Then the spans hold nothing the program uses. One read of each
// descriptor, none of the blocks.
bool kept_all_listed(const Lab* lab, unsigned c, uint64_t n) {
  uint64_t in_use = 0;
  for (unsigned i = 0; i < lab->kept_n[c]; i++) {
    const Span* k = lab->kept_at(c, i);
    if (!kept_live(lab, c, k)) continue;
    if (Anchor::unpack(k->anchor.load(std::memory_order_acquire)).count != 0) return false;
    in_use += k->carved.load(std::memory_order_relaxed) - own_count(k);
  }
  return in_use == n;
}

// Takes kept_frees[c] whole, leaving it empty: its blocks count as lab's
// frees from here, as own_take counts an own list's. Returns its head.
void* kept_frees_detach(Lab* lab, unsigned c) {
  Lab::KeptFrees& kf = lab->kept_frees[c];
  void* const head = kf.head;
  lab_count_n(lab->lists[c].frees, kf.count.load(std::memory_order_relaxed));
  kf.head = nullptr;
  kf.count.store(0, std::memory_order_relaxed);
  return head;
}

// kept_all_listed held: kept_frees[c] is dropped unread (its blocks counted
// as lab's frees), each live kept span's own list with it (own_take counts
// its blocks), and each such span starts over from block 0 (span_restart),
// to be carved again in address order when a switch makes it hot
// (kept_switch takes a kept span with blocks still to carve).
void kept_restart_all(Lab* lab, unsigned c) {
  (void)kept_frees_detach(lab, c);
  for (unsigned i = 0; i < lab->kept_n[c]; i++) {
    Span* k = lab->kept_at(c, i);
    if (!kept_live(lab, c, k)) continue;
    (void)own_take(lab, k, c);
    span_restart(k);
  }
}

// The most blocks of a kept list taken whole whose spans kept_frees_take
// makes free onto free[c] from then on.
constexpr uint64_t kKeptReuseMost = 16;

// free[c] is empty and hot[c] set: the blocks the thread freed into its kept
// spans of class c that keep their frees apart (kept_frees[c], lab.h "The
// class's list across its spans"). When they are a span's worth, at least
// half of what the kept spans hold, and every block the kept spans have in
// use (the program dropped a structure of these blocks), the kept spans all
// start over unread (kept_restart_all): the next blocks come one span at a
// time, in address order (kept_switch), and an emptied span the thread no
// longer needs goes to the pool (release_empty_kept). Otherwise the list
// becomes free[c], as one list of the class's frees did before. A walk of a
// list dropped in part back to its spans read each block once, a chain of
// misses: sizesweep, whose cycles free the older of two live generations,
// took up to 1.18 times as long at 1-4 KiB (docs/benchmarks.md, Stop 104).
// When the list holds at most kKeptReuseMost blocks, the thread frees and
// allocates the class in turn, which one list serves with no slow path: the
// spans of those blocks free onto free[c] from then on, until kept again.
// Returns whether free[c] has blocks.
bool kept_frees_take(Lab* lab, unsigned c) {
  Lab::KeptFrees& kf = lab->kept_frees[c];
  if (kf.head == nullptr) return false;
  const uint64_t n = kf.count.load(std::memory_order_relaxed);
  const uint64_t capacity = class_info(c).capacity;
  if (n >= capacity && 2 * n >= lab->kept_n[c] * capacity && kept_all_listed(lab, c, n)) {
    kept_restart_all(lab, c);
    return false;
  }
  if (n <= kKeptReuseMost) {
    const uintptr_t apart = own_kept_at(lab, c), joined = own_hot_at(lab, c);
    for (const void* b = kf.head; b != nullptr; b = block_next(b)) {
      Span* s = span_of(b);
      if (s->own_at.load(std::memory_order_relaxed) == apart) s->own_at.store(joined, std::memory_order_relaxed);
    }
  }
  lab->lists[c].head = kept_frees_detach(lab, c);
  return true;
}

// Before lab takes a new span for class c: its pending frees of class c go to
// their spans first, which may make them reusable (the blowup bound), except
// the longest chain, whose span lab adopts if no other LAB owns it (FULL or
// PARTIAL: span_claim_floating). The span's blocks lab's threads freed last
// are that chain's, still in the cache: they become the hot span's free list,
// ahead of its remote list, and the frees into the span that follow are owned
// frees onto free[c]. Without it, a LAB whose threads free their older blocks
// of spans it no longer owns (per-CPU mode, where threads share a CPU's LAB and
// its hot span runs dry) handed out only blocks freed long before, from spans
// taken back from the reusable stacks, and waited on each one's line (lab.h).
// Returns the adopted span, which *list heads, or nullptr (every chain given).
Span* adopt_or_give_chains(Lab* lab, unsigned c, void** list) {
  unsigned best = kPendingMax;
  uint32_t most = 0;
  for (uint64_t bits = lab->pending_of_class[c]; bits != 0; bits &= bits - 1) {
    for (unsigned i = unsigned(__builtin_ctzll(bits)); i <= lab->pending_mask; i += kPendingChains) {
      const PendingChain& ch = lab->pending[i];
      if (ch.span == nullptr || ch.span->cls.load(std::memory_order_relaxed) != c) continue;
      const uint32_t n = pending_count(ch);
      if (n <= most) {
        chain_flush(lab, i);
        continue;
      }
      if (best != kPendingMax) chain_flush(lab, best);
      best = i;
      most = n;
    }
  }
  lab->pending_of_class[c] = 0;
  if (best == kPendingMax) return nullptr;
  PendingChain& ch = lab->pending[best];
  Span* const s = ch.span;
  void* remote;
  if (!span_claim_floating(s, lab, &remote)) {
    chain_flush(lab, best);
    return nullptr;
  }
  // The chain's blocks are free blocks of lab's span now, counted as frees
  // as a chain given to its span is (chain_close).
  chain_close(lab, ch, s, c);
  block_link(ch.tail, remote);
  *list = ch.head;
  ch = PendingChain{};
  percpu_caches_grew();
  return s;
}

// Whether lab's chain slots and budget grow (lab.h): a per-thread LAB's (a
// parked one's keeps what it had) or a CPU LAB's, outside secure mode.
bool grows_chains(const Lab* lab) {
  uint32_t kind = lab->kind.load(std::memory_order_relaxed);
  return (kind == kLabThread || kind == kLabParked || kind == kLabCpu) && !secure_mode();
}

// Whether lab's chains get a spare room (lab.h): those whose holder frees
// through the per-thread fast path, which stops at room 1.
bool chains_have_spare(const Lab* lab) { return lab->kind.load(std::memory_order_relaxed) == kLabThread; }

// Starts a new window of chain starts (lab.h).
void new_window(Lab* lab) {
  lab->pending_started = 0;
  lab->pending_conflicts = 0;
  lab->pending_buddies = 0;
}

// At the end of a window of chain starts (lab.h): doubles or halves the slots
// of a per-thread or CPU LAB by how many starts evicted another span's chain,
// and sets its budget to its share of the heap (per thread bound to a LAB, or
// per CPU). Chains started before keep their limits; one that finds the
// chains over a lowered budget gives them all first.
void resize_slots(Lab* lab) {
  const uint32_t slots = lab->pending_mask + 1;
  uint32_t to = slots;
  // A window with conflicts enough to double never halves, even at
  // kPendingMax: spans whose descriptors share slots (more spans than slots,
  // or spans of several regions at the same place in each) leave the upper
  // half's partners empty, and halving there would flip the count, giving
  // every chain back, window after window.
  if (lab->pending_conflicts > slots / 4) {
    if (slots < kPendingMax) to = slots * 2;
  } else if (lab->pending_buddies < slots / 32 && slots > kPendingChains) {
    to = slots / 2;
  }
  new_window(lab);
  if (!grows_chains(lab)) return;
  const uint64_t sharers = lab->kind.load(std::memory_order_relaxed) == kLabCpu
                               ? g_percpu.ncpu
                               : g_threads_live.load(std::memory_order_relaxed);
  lab->pending_budget = pending_share(committed_bytes(), sharers);
  if (to == slots) return;
  give_all_chains(lab);  // each chain's slot and limit depend on the slot count
  set_pending_slots(lab, to);
}

}  // namespace

void lab_flush_pending(Lab* lab) {
  give_all_chains(lab);
  set_pending_slots(lab, kPendingChains);  // its next use starts small
  lab->pending_budget = kPendingBudget;
  new_window(lab);
}

void lab_collect_parked() { expire_parked(UINT64_MAX); }

uint32_t lab_parked_count() {
  uint32_t n = 0;
  for (unsigned i = 0, slots = parked_slots(); i < slots; i++)
    n += g_parked[i].load(std::memory_order_relaxed) != nullptr;
  return n;
}

uint64_t lab_frees_of(const Lab* lab, unsigned c) {
  // The frees its spans' own counts hold (own_take adds them).
  return lab->lists[c].frees.load(std::memory_order_relaxed) + lab_own_frees(lab, c);
}

uint64_t lab_own_frees(const Lab* lab, unsigned c) {
  uint64_t n = lab->kept_frees[c].count.load(std::memory_order_relaxed);
  if (const Span* h = lab->hot[c]) n += own_count(h);
  const unsigned kept = lab->kept_n[c];
  for (unsigned i = 0; i < kept && i < kKeptEntries; i++) {
    const Span* k = lab->kept_at(c, i);
    if (k != nullptr && kept_live(lab, c, k)) n += own_count(k);  // a taken span's: counted by its freer
  }
  return n;
}

namespace {
// Calls f(class, blocks) for each of lab's pending chains. The holder writes
// the fields read here with relaxed stores (HolderField, lab.h), so each read
// gives a value the field had, perhaps of two states of a chain (a figure,
// never followed; descriptors are never unmapped).
template <typename F>
void each_pending(const Lab* lab, F f) {
  // A LAB with no chain holds no chain bytes: most LABs of a program with
  // many threads, which statistics (peak samples) read every one of.
  if (lab->pending_bytes == 0) return;
  const uint32_t slots = (lab->pending_mask & (kPendingMax - 1)) + 1;
  for (unsigned i = 0; i < slots; i++) {
    const PendingChain& ch = lab->pending[i];
    const Span* s = ch.span;
    if (s == nullptr) continue;
    const uint32_t limit = ch.limit, room = ch.room;
    if (room < limit) f(s->cls.load(std::memory_order_relaxed), limit - room);
  }
}
}  // namespace

uint32_t lab_pending_count(const Lab* lab) {
  uint32_t n = 0;
  each_pending(lab, [&n](unsigned, uint32_t blocks) { n += blocks; });
  return n;
}

void lab_add_pending_frees(const Lab* lab, uint64_t frees[kClassCount]) {
  each_pending(lab, [frees](unsigned c, uint32_t blocks) {
    if (c < kClassCount) frees[c] += blocks;
  });
}

void lab_defer_free(Lab* lab, Span* s, void* p) {
  unsigned i = pending_slot_in(lab, s);
  PendingChain* ch = &lab->pending[i];
  if (ch->span != s || ch->room <= ch->spare) {
    if (Lab* o = s->owner.load(std::memory_order_relaxed); o != nullptr && o->kind.load(std::memory_order_relaxed) == kLabParked)
      parked_owner_seen(lab, o);
    // The blocks s's chain took, if it filled here rather than losing its slot.
    const uint32_t filled = ch->span == s ? uint32_t(ch->limit) - ch->spare : 0;
    if (ch->span != nullptr && ch->span != s && ch->room > ch->spare) lab->pending_conflicts++;
    if (lab->pending_mask >= kPendingChains) {
      const PendingChain& partner = lab->pending[i ^ ((lab->pending_mask + 1) / 2)];
      if (partner.span != nullptr && partner.room > partner.spare) lab->pending_buddies++;
    }
    chain_flush(lab, i);
    if (++lab->pending_started > lab->pending_mask) {
      resize_slots(lab);
      i = pending_slot_in(lab, s);
      ch = &lab->pending[i];
    }
    const uint32_t bsize = s->block_size.load(std::memory_order_relaxed);
    // A block bigger than the whole budget (past 64 KiB, at the floor:
    // kPendingBudget) would overrun it alone: it goes to its span at once,
    // one CAS, as a chain of one block that filled would, counted as
    // chain_close counts (the class read while the block still holds s).
    if (FW_UNLIKELY(bsize > lab->pending_budget)) {
      lab_count(lab->lists[s->cls.load(std::memory_order_relaxed)].frees);
      span_free_list(s, p, p, 1);
      return;
    }
    uint32_t limit = pending_limit(bsize, lab->pending_mask + 1, lab->pending_budget);
    if (filled != 0) {
      const uint32_t grown = pending_grown(filled, bsize, lab->pending_budget, lab->pending_bytes);
      if (grown > limit) limit = grown;
    }
    // No more than the blocks s has in use (p among them): the chain that
    // takes a span's last blocks then fills, and goes to the span at once
    // (below), which returns the span to the pool; a chain still waiting for
    // more would keep it from being empty until its slot is wanted, and a
    // LAB may have thousands of chains. (Other threads' frees may lower the
    // count meanwhile: then the chain just waits, as any chain does.) A span
    // another LAB keeps has free blocks on its owner's list too
    // (kept_free_count): without them the chain that takes its last blocks
    // would wait for more, and the span, all its blocks free, stay kept
    // (span_keep takes it when that chain goes to it).
    const Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_relaxed));
    const uint32_t carved = s->carved.load(std::memory_order_relaxed);
    const uint32_t free_now = a.kept ? kept_free_count(s, a) : a.count;
    const uint32_t in_use = carved - std::min(carved, free_now);
    if (in_use >= 1 && in_use < limit) limit = in_use;
    // Nor, whatever those racing loads gave, more than s holds, so that room
    // fits its 16 bits (lab.h).
    const uint32_t capacity = s->capacity.load(std::memory_order_relaxed);
    if (limit > capacity) limit = capacity;
    // A CPU LAB's fast path pushes down to room 0 and never gives a chain
    // (rseq_push_counted): a chain that would take s's last blocks there would
    // fill with no free to follow and hold an emptied span. It stops one block
    // short instead, so the free of the last block finds it full and comes
    // here, which gives the chain and then that block to s.
    if (lab->kind.load(std::memory_order_relaxed) == kLabCpu && limit == in_use && in_use >= 2) limit = in_use - 1;
    // Chains of blocks bigger than their share can overrun the budget: then
    // every chain goes to its span first.
    if (lab->pending_bytes + limit * bsize > lab->pending_budget) give_all_chains(lab);
    lab->pending_bytes += limit * bsize;
    g_pending_total.fetch_add(int64_t(limit) * bsize, std::memory_order_relaxed);
    percpu_caches_grew();
    // A chain of a thread's LAB that takes fewer blocks than s has in use gets
    // a spare room: free's fast path pushes while room > 1, so the chain fills
    // on the fast path and the next free into s, which finds room 1, gives it
    // and starts the next chain here: one slow path per chain. A chain that
    // takes s's last blocks has none: the free that finds room 1 fills it and
    // gives it at once (below). A CPU LAB's fast path pushes down to room 0.
    const uint32_t spare = chains_have_spare(lab) && limit < in_use ? 1 : 0;
    ch->room = uint16_t(limit + spare);
    ch->limit = uint16_t(limit + spare);
    ch->spare = uint16_t(spare);
    ch->head = nullptr;
    ch->tail = p;
    ch->span = s;
    lab->pending_of_class[s->cls.load(std::memory_order_relaxed)] |= uint64_t(1) << (i % kPendingChains);
  }
  block_link(p, ch->head);
  ch->head = p;
  --ch->room;
  // A chain with no spare room that this free filled (its span's last blocks,
  // or a CPU LAB's): to its span now.
  if (ch->room == 0) chain_flush(lab, i);
}

void lab_flush(Lab* lab) {
  lab_flush_pending(lab);
  for (unsigned c = 0; c < kClassCount; c++) {
    release_kept(lab, c);
    if (lab->hot[c] != nullptr) hot_release(lab, c);
  }
}

void lab_reclaim(Lab* lab) {
  lab_flush_quarantine(lab);  // secure mode: quarantined blocks keep their spans in use
  lab_flush(lab);
  lab_collect_parked();
}

// The calling thread's LAB for a collect (lab_collect_current,
// lab_release_emptied_current), given what its slot holds; nullptr when there
// is none to collect (per-CPU mode, or inside a call on this thread: BUSY).
// Secure mode keeps the SECURE placeholder in the slot between calls: the
// thread's LAB is the one its exit registration holds (none before its first
// call). Its chains hold what quarantine_flush just freed.
static Lab* collected_lab(Lab* slot) {
  Lab* lab = slot == &g_lab_secure ? static_cast<Lab*>(os::thread_exit_registered()) : slot;
  return lab == nullptr || is_placeholder(lab) ? nullptr : lab;
}

void lab_collect_current(Collect what) {
  Lab* slot = lab_current();
  Lab* lab = collected_lab(slot);
  if (lab == nullptr) return;
  lab_enter();
  if (what == Collect::kAll) {
    lab_reclaim(lab);
  } else {
    lab_flush_pending(lab);
    for (unsigned c = 0; c < kClassCount; c++) release_kept(lab, c);
  }
  lab_leave(slot);
}

uint64_t lab_release_emptied_current() {
  Lab* slot = lab_current();
  Lab* lab = collected_lab(slot);
  if (lab == nullptr || lab->kept_classes == 0) return 0;
  lab_enter();
  const uint64_t gave = release_emptied_kept(lab);
  lab_leave(slot);
  return gave;
}

void* lab_tick(void* p, Lab* lab, ClassList* l) {
  lab_arm_tick(lab, unsigned(l - lab->lists));
  if (lab->kind.load(std::memory_order_relaxed) == kLabThread) {
    const uint64_t now = os::now_ms_coarse();
    const uint64_t delay = uint64_t(option(Option::decay_ms));
    const uint64_t every = delay > kTickLookMinMs ? delay : kTickLookMinMs;
    if (now - lab->tick_ms >= every) {
      expire_old_parked();  // a dead thread's LAB no thread took, as at a thread's exit
      release_idle_kept(lab);
      pool_tick();
      // The next look counts from this one's end: the spans it gave back carry
      // the pool's stamps of then, and are a delay old at the next look's pass.
      lab->tick_ms = os::now_ms_coarse();
    }
  }
  lab_leave(lab);
  return p;
}

// lab_refill's block p of class c, carved and handed out at once: counted
// as a block taken off free[c] is.
FW_INLINE void* handed_out(Lab* lab, unsigned c, void* p) {
  lab_count_alloc(lab, c);
  return p;
}

void* lab_refill(Lab* lab, unsigned c) {
  bool reclaimed = false;  // lab_reclaim ran: a second failure is final
  for (;;) {
    if (void* p = lab->lists[c].head) {
      lab->lists[c].head = block_next(p);
      __builtin_prefetch(lab->lists[c].head, 1);  // as alloc_class does
      clear_canary(p);
      lab_count_alloc(lab, c);
      return p;
    }
    if (Span* s = lab->hot[c]) {
      if (kept_frees_take(lab, c)) continue;
      if ((lab->lists[c].head = span_collect(s)) != nullptr) continue;
      if (span_has_uncarved(s)) {
        if (void* p = span_carve_take(s, &lab->lists[c].head)) return handed_out(lab, c, p);
      }
      // s has no block left to give.
      if (keeps_spans(lab)) {
        if (kept_switch(lab, c)) continue;
        if (kept_has_room(lab, c) || kept_pool_take(lab, c)) {
          hot_leave(lab, c, s);
          const unsigned i = lab->kept_n[c]++;
          lab->kept_bytes += class_info(c).span_bytes;
          lab->kept_classes |= uint64_t(1) << c;
          kept_set(lab, c, i, s);
          lab->hot[c] = nullptr;
        }
      }
      if (lab->hot[c] != nullptr) {
        hot_leave(lab, c, s);  // before the span can have another owner
        if (!span_float(s, lab)) {  // remote frees arrived: collect them
          hot_enter(lab, c, s, hot_is_fresh(lab, c));  // as it was
          continue;
        }
        lab->hot[c] = nullptr;
      }
    }
    void* list;
    Span* s = adopt_or_give_chains(lab, c, &list);
    if (s == nullptr) {
      release_empty_kept(lab);
      s = acquire_span(lab, c, &list);
      if (s == nullptr) {
        if (reclaimed) return nullptr;
        lab_reclaim(lab);
        reclaimed = true;
        continue;
      }
    }
    own_set(s, nullptr, 0);  // large_size meant another thing until now, own_frees another span's (span.h)
    hot_enter(lab, c, s, true);  // stale entries may name s, if lab kept it before
    lab->lists[c].head = list;
    if (list == nullptr) {
      if (void* p = span_carve_take(s, &lab->lists[c].head)) return handed_out(lab, c, p);
    }
  }
}

void lab_free_block(Lab* lab, void* p, Span* d) {
  if (d->owner.load(std::memory_order_relaxed) == lab) {
    own_push(d, p);  // a kept span its owner empties stays kept (release_empty_kept); counted in the word after its
                     // list head (own_count_after)
  } else {
    lab_defer_free(lab, d, p);  // batched: one CAS per run of frees into one span; counted by chain_flush
  }
}

Lab* lab_own(Lab* slot, Lab* handed_from) {
  if (slot == &g_lab_empty || slot == &g_lab_secure) {
    if (Lab* bound = lab_bind_thread(handed_from)) return bound;
  }
  return slot;
}

Lab* lab_slot_after_secure(Lab* mine) { return is_placeholder(mine) ? mine : &g_lab_secure; }

Span* quarantined_span(const void* p) {
  Span* d = span_of(p);
  if (d == nullptr) report_misuse("heap corruption: a quarantined block outside the heap", p);
  return d;
}

void lab_flush_quarantine(Lab* lab) {
  // Only secure mode fills a quarantine; outside it a thread's exit leaves
  // these last pages of its LAB untouched (a scan would map the zero page and
  // the store of the count fault again).
  if (!secure_mode()) return;
  for (void*& slot : lab->quarantine) {
    void* p = slot;
    if (p == nullptr) continue;
    slot = nullptr;
    Span* d = quarantined_span(p);
    // Checked as a block leaving by a later free is (quarantine_swap): the
    // free below writes a link over its first word.
    secure_check_quarantined(p, d->block_size.load(std::memory_order_relaxed));
    lab_free_block(lab, p, d);
  }
  lab->quarantine_bytes = 0;
}

Lab* lab_first() { return g_lab_all.load(std::memory_order_acquire); }
uint64_t lab_threads_live() { return g_threads_live.load(std::memory_order_relaxed); }
uint64_t lab_threads_created() { return g_threads_created.load(std::memory_order_relaxed); }
uint64_t kept_pool_limit() {
  if (option(Option::kept_pool) == 0) return 0;
  // The per-thread caches the default mode allows (percpu.h: more threads
  // than that go per CPU; one more for a successor that starts before its
  // predecessor exits), whatever this process's FREEWAY_PERCPU.
  const uint64_t caches = uint64_t(percpu_switch_threads()) + 1;
  const uint64_t live = g_threads_live.load(std::memory_order_relaxed);
  const uint64_t bound = live > 1 ? live : 1;
  return bound >= caches ? 0 : (caches - bound) * uint64_t(kKeptBytes);
}
uint64_t kept_pool_taken() { return g_kept_pooled.load(std::memory_order_relaxed); }
uint64_t lab_held_bytes() {
  int64_t pending = g_pending_total.load(std::memory_order_relaxed);
  return span_hot_bytes() + (pending > 0 ? uint64_t(pending) : 0);
}

namespace {

// The own list (own_head, span.h) of a span a LAB owns: blocks of it, as many as its count.
bool own_list_is_valid(const Span* s) {
  uint32_t carved = s->carved.load(std::memory_order_relaxed);
  uint32_t n = 0;
  for (void* b = own_head(s); b != nullptr && n <= carved; b = block_next(b), n++) {
    if (!span_holds_carved(s, b))
      return report_invariant("lab: an owned span's own list holds a block not of it", span_index(s));
  }
  if (n != own_count(s)) return report_invariant("lab: an owned span's own list differs from its count", span_index(s));
  return true;
}

}  // namespace

bool lab_is_valid(const Lab* lab) {
  bool ok = true;
  const uint32_t slots = lab->pending_mask + 1;
  if ((slots & (slots - 1)) != 0 || slots < kPendingChains || slots > kPendingMax ||
      (slots != kPendingChains && !grows_chains(lab)))
    ok = report_invariant("lab: pending slot count not a power of two in range, or grown in a LAB that grows none",
                          slots);
  if (lab->pending_offsets != lab->pending_mask * sizeof(PendingChain))
    ok = report_invariant("lab: pending_offsets is not the slot mask scaled to slots", lab->pending_offsets);
  uint64_t of_class[kClassCount] = {};  // the masks, derived from the chains
  uint64_t bytes = 0;
  for (unsigned i = 0; i < slots && i < kPendingMax; i++) {
    const PendingChain& ch = lab->pending[i];
    uint32_t n = 0, count = pending_count(ch);
    for (void* b = ch.head; b != nullptr && n <= count; b = block_next(b)) n++;
    if (n != count || (ch.span == nullptr) != (n == 0))
      ok = report_invariant("lab: pending chain does not match its count", n);
    if (ch.span == nullptr) continue;
    if (ch.spare > 1 || (ch.spare == 1 && !chains_have_spare(lab)) ||
        ch.room < ch.spare)
      ok = report_invariant("lab: pending chain with a spare room it cannot have", ch.spare);
    if (pending_slot_in(lab, ch.span) != i)
      ok = report_invariant("lab: pending chain in another span's slot", span_index(ch.span));
    bytes += pending_bytes_of(ch, ch.span->block_size.load(std::memory_order_relaxed));
    unsigned c = ch.span->cls.load(std::memory_order_relaxed);
    if (c < kClassCount)
      of_class[c] |= uint64_t(1) << (i % kPendingChains);
    else
      ok = report_invariant("lab: pending chain of a span with no size class", span_index(ch.span));
  }
  for (unsigned c = 0; c < kClassCount; c++)
    if ((of_class[c] & ~lab->pending_of_class[c]) != 0)
      ok = report_invariant("lab: a pending chain's class mask lacks its bit", c);
  if (bytes != lab->pending_bytes || bytes > lab->pending_budget)
    ok = report_invariant("lab: pending chains hold other than their byte count, or over the budget", uint32_t(bytes));
  const uint32_t holder_kind = lab->kind.load(std::memory_order_relaxed);
  if (holder_kind == kLabThread || holder_kind == kLabParked)
    for (unsigned c = 0; c < kClassCount; c++)
      if (lab->lists[c].head != nullptr && !tick_armed(lab->lists[c]))
        ok = report_invariant("lab: a thread's class with blocks to hand out whose count would not tick", c);
  uint64_t quarantined = 0;  // secure mode (lab.h): the quarantine's block sizes
  for (const void* q : lab->quarantine) {
    if (q == nullptr) continue;
    if (const Span* d = span_of(q))
      quarantined += d->block_size.load(std::memory_order_relaxed);
    else
      ok = report_invariant("lab: a quarantined block outside the heap", 0);
  }
  if (quarantined != lab->quarantine_bytes || quarantined > kLabQuarantineBytes)
    ok = report_invariant("lab: the quarantine holds other than its byte count, or over its bound", quarantined);
  if (lab->pending_budget < kPendingBudget || lab->pending_budget > kPendingBudgetMax ||
      (lab->pending_budget != kPendingBudget && !grows_chains(lab)))
    ok = report_invariant("lab: pending budget out of range, or grown in a LAB that grows none", lab->pending_budget);
  for (unsigned c = 0; c < kClassCount; c++) {
    const Span* s = lab->hot[c];
    if (s == nullptr) {
      if (lab->lists[c].head != nullptr) ok = report_invariant("lab: free list without a hot span", c);
      continue;
    }
    Anchor a = Anchor::unpack(s->anchor.load(std::memory_order_acquire));
    if (a.state != kHot || a.kept)
      ok = report_invariant("lab: hot span not in state HOT, or marked kept", span_index(s));
    if (s->owner.load(std::memory_order_relaxed) != lab) ok = report_invariant("lab: hot span owned by another", c);
    if (s->cls.load(std::memory_order_relaxed) != c) ok = report_invariant("lab: hot span of another class", c);
    if (s->own_at.load(std::memory_order_relaxed) != own_hot_at(lab, c))
      ok = report_invariant("lab: the hot span's frees do not go to free[c]", c);
    // free[c]: blocks of s, and in a LAB that lists its kept spans' frees
    // there, of those spans; no more than they all hold (else a cycle).
    const uint64_t most = uint64_t(lab->kept_n[c] + 1u) * s->capacity.load(std::memory_order_relaxed);
    uint64_t n = 0;
    for (void* b = lab->lists[c].head; b != nullptr && n <= most; b = block_next(b), n++) {
      if (span_holds_carved(s, b)) continue;
      const Span* bs = lists_kept_frees(lab, c) ? span_of(b) : nullptr;
      if (bs == nullptr || !kept_live(lab, c, bs) || !span_holds_carved(bs, b)) {
        ok = report_invariant("lab: free list holds a block not of its hot span or, where it may, a kept one", c);
        break;
      }
    }
    if (n > most) ok = report_invariant("lab: free list longer than its spans (cycle?)", c);
    if (own_head(s) != nullptr || own_count(s) != 0) ok = report_invariant("lab: hot span with an own list", c);
  }
  if (lab->kept_next > kClassCount) ok = report_invariant("lab: kept_next past the classes", lab->kept_next);
  uint64_t kept_bytes = 0;
  for (unsigned c = 0; c < kClassCount; c++) {
    unsigned kept = lab->kept_n[c];
    if ((kept > 0) != (((lab->kept_classes >> c) & 1) != 0))
      ok = report_invariant("lab: kept_classes disagrees with kept_n", c);
    if (lab->kept_look[c] >= kKeptEntries) ok = report_invariant("lab: kept_look past the array", c);
    if (kept > kept_spans_most(lab) || (kept > 0 && !keeps_spans(lab))) {
      ok = report_invariant("lab: kept spans in a LAB that keeps none, or too many", c);
      continue;
    }
    kept_bytes += uint64_t(kept) * class_info(c).span_bytes;
    for (unsigned i = 0; i < kept; i++) {
      const Span* s = lab->kept_at(c, i);
      if (s == nullptr) {
        ok = report_invariant("lab: an empty kept entry", c);
        continue;
      }
      // Stale entries too, unless it came from outside and was not kept since (kept_set).
      if (s == lab->hot[c] && !hot_is_fresh(lab, c))
        ok = report_invariant("lab: an entry names the hot span", span_index(s));
      if (!kept_live(lab, c, s)) continue;  // stale: a freer took its span (span_keep)
      const uintptr_t at = s->own_at.load(std::memory_order_relaxed);
      if (s == lab->hot[c] ||
          (at != kept_list_at(lab, c, s) && !(lists_kept_frees(lab, c) && at == own_hot_at(lab, c))))
        ok = report_invariant("lab: kept span is the hot one, or its frees go elsewhere", span_index(s));
      for (unsigned j = 0; j < i; j++)
        if (lab->kept_at(c, j) == s) ok = report_invariant("lab: span kept twice", span_index(s));
      if (!own_list_is_valid(s)) ok = false;
    }
    // kept_frees[c]: blocks of its live kept spans of class c, never of
    // hot[c] (kept_all_listed counts the kept spans' blocks in use only), as
    // many as its count says.
    const Lab::KeptFrees& kf = lab->kept_frees[c];
    if (kf.head == nullptr && kf.count.load(std::memory_order_relaxed) == 0) continue;
    if (!lists_kept_frees(lab, c) || kept == 0) {
      ok = report_invariant("lab: a kept list in a class that lists no kept frees, or keeps no span", c);
      continue;
    }
    const uint64_t most = uint64_t(kept + 1u) * class_info(c).capacity;
    uint64_t n = 0;
    bool blocks_ok = true;
    for (const void* b = kf.head; b != nullptr && n <= most; b = block_next(b), n++) {
      const Span* bs = span_of(b);
      if (bs == nullptr || !span_holds_carved(bs, b) || bs == lab->hot[c] || !kept_live(lab, c, bs)) {
        ok = blocks_ok = report_invariant("lab: kept list holds a block not of a kept span of its class", c);
        break;
      }
    }
    if (blocks_ok && (n > most || n != kf.count.load(std::memory_order_relaxed)))
      ok = report_invariant("lab: kept list's count is not its length (or a cycle)", c);
  }
  if (kept_bytes != lab->kept_bytes || lab->kept_pooled > kept_bytes || kept_bytes - lab->kept_pooled > kKeptBytes)
    ok = report_invariant("lab: kept_bytes is not its kept spans' bytes, or over its allowance and pooled bytes",
                          kept_bytes);
  const uint32_t kind = lab->kind.load(std::memory_order_relaxed);
  if (lab->kept_pooled != 0 && kind != kLabThread && kind != kLabParked)
    ok = report_invariant("lab: pooled kept bytes in a LAB that takes none", lab->kept_pooled);
  return ok;
}

}  // namespace fw
