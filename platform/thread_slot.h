// platform/thread_slot.h: the one per-thread pointer that malloc and free's
// fast paths read and write (the thread's cache, core/lab.h).
//
// ThreadSlot<&initial> is a pointer per thread that starts as &initial in every
// thread, read and written with no call and no initialisation check:
//  - POSIX: an initial-exec `thread_local`: one %fs-relative load or store.
//  - Windows (x86-64): the PE image's own static TLS (the .tls section that the
//    loader copies for every thread, as MSVC's __declspec(thread) does), reached
//    through the TEB by hand: gs:[0x58] is the thread's TLS array, _tls_index
//    this image's entry, and the slot's offset in the block a SECREL32
//    relocation. Four instructions, no call. GCC for mingw would compile
//    `thread_local` to emutls, which calls malloc on a thread's first use and
//    would recurse into freeway, so it is not used here. The .tls template is
//    relocated by the loader, so the slot starts at &initial in every thread,
//    threads created before the image was loaded included.
// The slot is only a cache of the pointer: it must never be the only record of
// a resource (thread exit goes through os::thread_exit_register).
#pragma once
#include <cstdint>

#if defined(_WIN32) && !defined(__x86_64__) && !defined(_M_X64)
#error "freeway's Windows port supports x86-64 only (platform/thread_slot.h)"
#endif

namespace fw::os {

#if defined(_MSC_VER) && !defined(__clang__)
// MSVC: __declspec(thread) compiles to the same TEB sequence as below.
template <auto* Initial>
struct ThreadSlot {
  using T = decltype(Initial);
  static inline __declspec(thread) T value = Initial;
  static __forceinline T get() { return value; }
  static __forceinline void set(T v) { value = v; }
};
#define FW_THREAD_SLOT_DEFINE(initial) static_assert(true, "the slot is defined in the header")

#elif defined(_WIN32)
extern "C" unsigned int _tls_index;  // this image's TLS index (mingw-w64 CRT's tlssup)

// One named slot per use: the section is the image's .tls, whose template the
// loader copies per thread. Declared in the header, defined once by the user
// with FW_THREAD_SLOT_DEFINE.
#define FW_THREAD_SLOT_SYMBOL fw_thread_slot
extern "C" void* FW_THREAD_SLOT_SYMBOL;

template <auto* Initial>
struct ThreadSlot {
  using T = decltype(Initial);
  // The slot's address in the calling thread: the same for the whole life of
  // the thread, so the asm is not volatile and the compiler computes it once
  // per function (four instructions), then loads and stores through it.
  static inline __attribute__((always_inline)) T* ref() {
    char* p;
    asm("movq %%gs:0x58, %0\n\t"          // TEB.ThreadLocalStoragePointer
        "movl _tls_index(%%rip), %%ecx\n\t"
        "movq (%0,%%rcx,8), %0\n\t"       // this image's TLS block
        "leaq fw_thread_slot@secrel32(%0), %0"
        : "=r"(p) : : "rcx");
    return reinterpret_cast<T*>(p);
  }
  static inline __attribute__((always_inline)) T get() { return *ref(); }
  static inline __attribute__((always_inline)) void set(T v) { *ref() = v; }
};
// In exactly one source file: the slot's storage in .tls, starting at initial.
#define FW_THREAD_SLOT_DEFINE(initial) \
  extern "C" {                          \
  __attribute__((section(".tls$FW"), used)) void* FW_THREAD_SLOT_SYMBOL = (initial); \
  }                                     \
  static_assert(true, "")

#else
template <auto* Initial>
struct ThreadSlot {
  using T = decltype(Initial);
  static inline thread_local T value __attribute__((tls_model("initial-exec"))) = Initial;
  static inline __attribute__((always_inline)) T get() { return value; }
  static inline __attribute__((always_inline)) void set(T v) { value = v; }
};
#define FW_THREAD_SLOT_DEFINE(initial) static_assert(true, "the thread_local is defined in the header")
#endif

}  // namespace fw::os
