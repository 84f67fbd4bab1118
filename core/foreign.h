// core/foreign.h: blocks that another allocator in the process made.
//
// On Linux freeway replaces the C library's allocator before the program's
// first allocation, so a pointer outside freeway's regions is always misuse.
// On Windows the CRT keeps a heap of its own: the CRT allocates inside itself
// (_strdup, _getcwd, the stdio buffers), and blocks allocated before freeway
// took over stay live. A shim that knows such a heap registers it here; free,
// realloc and usable_size then offer a pointer that no freeway region holds
// to that heap (its owns() must be safe on any pointer) before reporting it.
// The region map decides first, so a foreign heap can never claim a block of
// freeway's, and freeway never treats a foreign block as its own.
//
// Invariant: registered once, before any foreign pointer can reach freeway,
// and never changed (readers load it with acquire, without a lock).
#pragma once
#include <cstddef>

namespace fw {

struct ForeignHeap {
  bool (*owns)(const void* p);            // p starts a live block of this heap
  void (*free)(void* p);
  size_t (*usable_size)(const void* p);
};

void foreign_register(const ForeignHeap* heap);
// The registered heap if it owns p, else nullptr. Only called for pointers
// that no freeway region holds (slow paths).
const ForeignHeap* foreign_owner(const void* p);

}  // namespace fw
