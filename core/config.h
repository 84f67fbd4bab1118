// core/config.h: the geometry of the heap and the few macros every core file uses.
// Everything here is a compile-time constant; run-time knobs live in options.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "platform/cold_bss.h"

#define FW_LIKELY(x) __builtin_expect(!!(x), 1)
#define FW_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FW_INLINE inline __attribute__((always_inline))
#define FW_NOINLINE __attribute__((noinline))
#define FW_COLD __attribute__((noinline, cold))
#define FW_EXPORT __attribute__((visibility("default")))
// On the declarations of the core's globals: -fvisibility=hidden marks only
// definitions, so code in another file would reach an extern global through
// the GOT (which the linker turns into a lea, then the load); declared hidden,
// it is one RIP-relative access. PE has no visibility.
#if defined(_WIN32)
#define FW_HIDDEN
#else
#define FW_HIDDEN __attribute__((visibility("hidden")))
#endif

// The first instruction of a function written in assembly that is reached by
// an indirect jump (the PLT's), where the code is built for CET
// (-fcf-protection): shim/deepbind.cpp's dlopen, shim/dlsym.cpp's dlsym.
#if defined(__CET__)
#define FW_ASM_ENDBR "endbr64\n"
#else
#define FW_ASM_ENDBR ""
#endif

// FREEWAY_HARDENING=0 compiles out the per-free checks of secure.h (only to
// measure what they cost; the product always ships with them).
#ifndef FREEWAY_HARDENING
#define FREEWAY_HARDENING 1
#endif

// ThreadSanitizer builds (GCC defines the first, Clang answers the second).
#if defined(__SANITIZE_THREAD__)
#define FW_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FW_TSAN 1
#endif
#endif

namespace fw {

// Whether calloc zeroes the whole usable block, not just the bytes asked for:
// on Windows, where _msize reports the usable size and _recalloc zeroes only
// past it, so that a calloc'd block grown in place by _recalloc reads zero up
// to its new size, as under the UCRT (whose _msize is the size asked for).
#if defined(_WIN32)
constexpr bool kCallocZeroesUsable = true;
#else
constexpr bool kCallocZeroesUsable = false;
#endif

// v rounded up to a multiple of a (a power of two).
constexpr uintptr_t round_up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
// Whether a is a power of two (0 is not): the alignments the entry points accept.
constexpr bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

// Virtual spans (scalloc §3.2): the arena is cut into aligned virtual spans of
// kVspanSize; a span's real size (what it commits) is at most that. Masking a
// block's address with kVspanSize-1 gives its span.
constexpr unsigned kVspanShift = 18;  // 256 KiB
constexpr size_t kVspanSize = size_t(1) << kVspanShift;

// Regions: each arena reservation is kRegionSize, aligned to kRegionSize. The
// region map has one entry per kRegionSize of address space.
constexpr unsigned kRegionShift = 30;  // 1 GiB
constexpr size_t kRegionSize = size_t(1) << kRegionShift;
constexpr uint32_t kVspansPerRegion = uint32_t(kRegionSize / kVspanSize);  // 4096
constexpr uint32_t kMaxRegions = 1024;                                      // 1 TiB of arena
constexpr unsigned kAddressBits = 48;
constexpr size_t kRegionMapEntries = size_t(1) << (kAddressBits - kRegionShift);

// Small blocks: size classes up to kSmallMax bytes live in spans; anything
// larger is a large object (a run of virtual spans) or, above kLargeMax, a huge
// object with a region of its own.
constexpr size_t kMinAlign = 16;
constexpr size_t kSmallMax = 128 * 1024;
constexpr size_t kLargeMaxVspans = 1024;  // 256 MiB
constexpr size_t kLargeMax = kLargeMaxVspans * kVspanSize;

constexpr uint32_t kMaxLabs = 1u << 16;  // thread caches alive at once

}  // namespace fw
