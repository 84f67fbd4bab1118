// core/tagged_stack.h: a lock-free Treiber stack of nodes named by 32-bit index,
// with an ABA tag (scalloc §3.3, Michael §2.3).
//
// top = (tag << 32) | (index + 1), 0 in the low half meaning empty. Every
// successful push or pop increments tag, so a pop that read top = (t, i) and
// i's link can only succeed if nothing happened to the stack since: a node
// popped and pushed back in between comes back with a different tag.
// Nodes live in type-stable memory (never unmapped), so reading the link of a
// node another thread has just popped is harmless: the CAS then fails.
//
// Link(i) returns the std::atomic<uint32_t>& that holds node i's successor
// (index + 1, 0 = none); a node is in at most one stack per link field.
#pragma once
#include <atomic>
#include <cstdint>

namespace fw {

constexpr uint32_t kNoIndex = 0xffffffffu;

template <class Link>
class TaggedStack {
 public:
  void push(uint32_t index) {
    uint64_t old = top_.load(std::memory_order_relaxed);
    uint64_t desired;
    do {
      Link()(index).store(uint32_t(old), std::memory_order_relaxed);
      desired = (((old >> 32) + 1) << 32) | uint64_t(index + 1);
      // release: the node's link and contents are visible to the popper.
    } while (!top_.compare_exchange_weak(old, desired, std::memory_order_release,
                                         std::memory_order_relaxed));
  }

  uint32_t pop() {
    uint64_t old = top_.load(std::memory_order_acquire);
    while (uint32_t(old) != 0) {
      uint32_t index = uint32_t(old) - 1;
      uint32_t next = Link()(index).load(std::memory_order_relaxed);
      uint64_t desired = (((old >> 32) + 1) << 32) | next;
      // acquire: we see what the pusher wrote before its push.
      if (top_.compare_exchange_weak(old, desired, std::memory_order_acquire,
                                     std::memory_order_acquire))
        return index;
    }
    return kNoIndex;
  }

  bool empty() const { return uint32_t(top_.load(std::memory_order_relaxed)) == 0; }
  // First node, for walks done while the stack is quiet (checkers, stats).
  uint32_t peek() const { return uint32_t(top_.load(std::memory_order_acquire)) - 1; }

 private:
  std::atomic<uint64_t> top_{0};
};

}  // namespace fw
