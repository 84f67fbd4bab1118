// shim/new.cpp: C++ operator new and delete, replaced.
//
// The throwing forms follow the standard: on failure call the installed
// new_handler and try again, or throw std::bad_alloc when there is none. The
// nothrow forms return nullptr where the throwing form would throw, including
// when the handler itself throws.
//
// Without a dependency on the C++ runtime. libfreeway.so must not pull
// libstdc++ (and with it libm and libgcc_s: about 1.2 MiB of resident memory)
// into every C program it is preloaded into. So the runtime's functions are
// weak references, resolved when the program has the runtime loaded:
// std::get_new_handler, and std::__throw_bad_alloc to throw. A weak reference
// is bound once, when libfreeway.so loads (it is linked -z now), so when an
// allocation fails and one is missing the runtime is looked up then: a C
// program that dlopens a C++ plugin (a Python or Perl extension, a PAM module)
// has the runtime in the plugin's local scope, and libc++ names the throwing
// function differently. A nothrow form whose handler might throw
// hands the request to the runtime's own nothrow operator new (found with
// dlsym), which calls this file's throwing form inside its try
// block and turns std::bad_alloc into nullptr. This file is built without
// exceptions: it throws and catches nothing itself, and the unwind tables
// every x86-64 function has let an exception pass through it.
#include <cstddef>
#include <new>
#if defined(_WIN32)
#include <bits/functexcept.h>  // std::__throw_bad_alloc
#else
#include <dlfcn.h>
#endif

#include "core/alloc.h"
#include "core/report.h"
#include "freeway.h"

extern "C" int freeway_override_anchor;

#if !defined(_WIN32)
// The C++ runtime's, if loaded (weak: null otherwise).
extern "C" std::new_handler fw_cxx_get_new_handler() __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
extern "C" [[noreturn]] void fw_cxx_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv") __attribute__((weak));
#endif

namespace {

__attribute__((used)) int* const g_pull_overrides = &freeway_override_anchor;

#if defined(_WIN32)
// Windows: libfreeway.a is linked into the program with its C++ runtime.
std::new_handler new_handler() { return std::get_new_handler(); }
[[noreturn]] void throw_bad_alloc() { std::__throw_bad_alloc(); }
void* runtime_nothrow(const char*) { return nullptr; }
#else
// The C++ runtime's function `symbol`, looked up when an allocation failed:
// in the global scope, else in whichever C++ runtime is loaded (RTLD_NOLOAD:
// one a plugin brought in its local scope). nullptr when none has it.
void* runtime_function(const char* symbol) {
  if (void* f = dlsym(RTLD_DEFAULT, symbol)) return f;
  for (const char* runtime : {"libstdc++.so.6", "libc++.so.1", "libc++abi.so.1"}) {
    void* h = dlopen(runtime, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    void* f = dlsym(h, symbol);
    dlclose(h);  // NOLOAD took a reference; the runtime stays loaded
    if (f != nullptr) return f;
  }
  return nullptr;
}

std::new_handler new_handler() {
  if (fw_cxx_get_new_handler != nullptr) return fw_cxx_get_new_handler();
  // libstdc++ and libc++abi both export std::get_new_handler by this name.
  auto get = reinterpret_cast<std::new_handler (*)()>(runtime_function("_ZSt15get_new_handlerv"));
  return get != nullptr ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc() {
  if (fw_cxx_throw_bad_alloc != nullptr) fw_cxx_throw_bad_alloc();
  using Thrower = void (*)();
  // libstdc++'s std::__throw_bad_alloc, else libc++'s std::__1::__throw_bad_alloc.
  for (const char* symbol : {"_ZSt17__throw_bad_allocv", "_ZNSt3__117__throw_bad_allocEv"})
    if (auto f = reinterpret_cast<Thrower>(runtime_function(symbol))) f();
  fw::report_misuse("operator new: out of memory, and no C++ runtime loaded to throw std::bad_alloc; at", nullptr);
}

// The C++ runtime's own nothrow form of the operator (its try/catch around
// our throwing form); nullptr when the runtime is not there to ask.
void* runtime_nothrow(const char* symbol) {
  void* f = dlsym(RTLD_NEXT, symbol);
  return f != nullptr ? f : runtime_function(symbol);
}
#endif

FW_NOINLINE void* new_or_throw(size_t n, size_t align) {
  for (;;) {
    void* p = align ? fw_malloc_aligned(align, n) : fw_malloc(n);
    if (p != nullptr) return p;
    std::new_handler h = new_handler();
    if (h == nullptr) throw_bad_alloc();
    h();
  }
}

template <class... Args>
void* new_nothrow(size_t n, size_t align, const char* symbol, Args... extra) noexcept {
  void* p = align ? fw_malloc_aligned(align, n) : fw_malloc(n);
  if (p != nullptr || new_handler() == nullptr) return p;
  // A handler is installed and may throw: the runtime's nothrow form calls our
  // throwing form inside its try block.
  if (void* f = runtime_nothrow(symbol)) return reinterpret_cast<void* (*)(size_t, Args...)>(f)(n, extra...);
  for (;;) {  // no runtime nothrow form to be found: call the handler ourselves
    if (std::new_handler h = new_handler()) h();
    else return nullptr;
    p = align ? fw_malloc_aligned(align, n) : fw_malloc(n);
    if (p != nullptr) return p;
  }
}

// operator new's way into malloc's slow paths: the new-handler loop only
// when they give nullptr. Reached by a jump from new_fast, so that the test
// of the result, and n kept for the loop, are here and not on the fast path.
FW_NOINLINE void* new_slow(size_t n, fw::Lab* lab, size_t w) {
  void* p = fw::malloc_slow(n, lab, w);
  return FW_LIKELY(p != nullptr) ? p : new_or_throw(n, 0);
}
FW_NOINLINE void* new_medium_or_large(size_t n) {
  void* p = fw::malloc_medium_or_large(n);
  return FW_LIKELY(p != nullptr) ? p : new_or_throw(n, 0);
}

// operator new(n): malloc's fast path inline (core/alloc.h), its slow paths
// through the two above. Through a call to fw_malloc, every new paid the
// call, a saved register and the handler test; with the test after the
// inline path (until Stop 90), the saved register still: n was kept across
// the slow paths' calls for the handler loop.
FW_INLINE void* new_fast(size_t n) { return fw::alloc_small<new_slow, new_medium_or_large>(n); }

}  // namespace

// Aligned as the C functions are (override.cpp).
#define FW_NEW __attribute__((visibility("default"), aligned(64)))
using std::align_val_t;
using std::nothrow_t;

FW_NEW void* operator new(size_t n) { return new_fast(n); }
FW_NEW void* operator new[](size_t n) { return new_fast(n); }
FW_NEW void* operator new(size_t n, const nothrow_t& t) noexcept {
  return new_nothrow(n, 0, "_ZnwmRKSt9nothrow_t", &t);
}
FW_NEW void* operator new[](size_t n, const nothrow_t& t) noexcept {
  return new_nothrow(n, 0, "_ZnamRKSt9nothrow_t", &t);
}
// An alignment that is not a power of two (0 included) is undefined in the
// standard; the C++ runtime throws std::bad_alloc at once (nullptr from the
// nothrow forms), and so do these: no new_handler can make it valid, and
// calling one until it gives up would loop for ever with a handler that
// only returns.
FW_INLINE bool bad_alignment(align_val_t a) { return !fw::is_pow2(size_t(a)); }

FW_NEW void* operator new(size_t n, align_val_t a) {
  if (bad_alignment(a)) throw_bad_alloc();
  return new_or_throw(n, size_t(a));
}
FW_NEW void* operator new[](size_t n, align_val_t a) {
  if (bad_alignment(a)) throw_bad_alloc();
  return new_or_throw(n, size_t(a));
}
FW_NEW void* operator new(size_t n, align_val_t a, const nothrow_t& t) noexcept {
  if (bad_alignment(a)) return nullptr;
  return new_nothrow(n, size_t(a), "_ZnwmSt11align_val_tRKSt9nothrow_t", a, &t);
}
FW_NEW void* operator new[](size_t n, align_val_t a, const nothrow_t& t) noexcept {
  if (bad_alignment(a)) return nullptr;
  return new_nothrow(n, size_t(a), "_ZnamSt11align_val_tRKSt9nothrow_t", a, &t);
}

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
