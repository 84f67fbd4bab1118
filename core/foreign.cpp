// core/foreign.cpp: the registered foreign heap (see foreign.h).
#include "core/foreign.h"

#include <atomic>

namespace fw {
namespace {
std::atomic<const ForeignHeap*> g_foreign{nullptr};
}

void foreign_register(const ForeignHeap* heap) { g_foreign.store(heap, std::memory_order_release); }

const ForeignHeap* foreign_owner(const void* p) {
  const ForeignHeap* h = g_foreign.load(std::memory_order_acquire);
  return h != nullptr && p != nullptr && h->owns(p) ? h : nullptr;
}

}  // namespace fw
