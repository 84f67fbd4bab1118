// shim/new.cpp: C++ operator new and delete, replaced.
//
// The throwing forms follow the standard: on failure call the installed
// new_handler and try again, or throw std::bad_alloc when there is none. The
// nothrow forms return nullptr where the throwing form would throw, including
// when the handler itself throws. This file is the one place in freeway built
// with exceptions (the standard requires them here); the core has none.
#include <cstddef>
#include <new>


#include "freeway.h"

extern "C" int freeway_override_anchor;

namespace {

__attribute__((used)) int* const g_pull_overrides = &freeway_override_anchor;

void* new_or_throw(size_t n, size_t align) {
  for (;;) {
    void* p = align ? fw_malloc_aligned(align, n) : fw_malloc(n);
    if (p != nullptr) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* new_nothrow(size_t n, size_t align) noexcept {
  void* p = align ? fw_malloc_aligned(align, n) : fw_malloc(n);
  if (p != nullptr || std::get_new_handler() == nullptr) return p;
  try {
    return new_or_throw(n, align);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

#define FW_NEW __attribute__((visibility("default")))
using std::align_val_t;
using std::nothrow_t;

FW_NEW void* operator new(size_t n) { return new_or_throw(n, 0); }
FW_NEW void* operator new[](size_t n) { return new_or_throw(n, 0); }
FW_NEW void* operator new(size_t n, const nothrow_t&) noexcept { return new_nothrow(n, 0); }
FW_NEW void* operator new[](size_t n, const nothrow_t&) noexcept { return new_nothrow(n, 0); }
FW_NEW void* operator new(size_t n, align_val_t a) { return new_or_throw(n, size_t(a)); }
FW_NEW void* operator new[](size_t n, align_val_t a) { return new_or_throw(n, size_t(a)); }
FW_NEW void* operator new(size_t n, align_val_t a, const nothrow_t&) noexcept { return new_nothrow(n, size_t(a)); }
FW_NEW void* operator new[](size_t n, align_val_t a, const nothrow_t&) noexcept { return new_nothrow(n, size_t(a)); }

FW_NEW void operator delete(void* p) noexcept { fw_free(p); }
FW_NEW void operator delete[](void* p) noexcept { fw_free(p); }
FW_NEW void operator delete(void* p, const nothrow_t&) noexcept { fw_free(p); }
FW_NEW void operator delete[](void* p, const nothrow_t&) noexcept { fw_free(p); }
FW_NEW void operator delete(void* p, size_t n) noexcept { fw_free_sized(p, n); }
FW_NEW void operator delete[](void* p, size_t n) noexcept { fw_free_sized(p, n); }
FW_NEW void operator delete(void* p, align_val_t a) noexcept { fw_free(p); }
FW_NEW void operator delete[](void* p, align_val_t a) noexcept { fw_free(p); }
FW_NEW void operator delete(void* p, align_val_t a, const nothrow_t&) noexcept { fw_free(p); }
FW_NEW void operator delete[](void* p, align_val_t a, const nothrow_t&) noexcept { fw_free(p); }
FW_NEW void operator delete(void* p, size_t n, align_val_t a) noexcept { fw_free_aligned_sized(p, size_t(a), n); }
FW_NEW void operator delete[](void* p, size_t n, align_val_t a) noexcept { fw_free_aligned_sized(p, size_t(a), n); }
