// shim/override.cpp: the C allocation functions, replaced. One forward each.
// In libfreeway.so these interpose on the C library's (LD_PRELOAD or linking);
// in libfreeway.a they replace them in the program that links it. All of them
// are in this one object file, and it and glibc.cpp's refer to each other (the
// anchors below), so that a static link takes all or none.
#if defined(__linux__)
#include <features.h>
#endif
#include <cstddef>

#include "core/alloc.h"
#include "core/free.h"
#include "freeway.h"

// Each starts on a 64-byte boundary: code added anywhere else in the library
// then cannot move the fast paths against the CPU's fetch windows (a 16-byte
// shift of malloc cost mmicro 6-7%, docs/benchmarks.md, Stop 38).
#define FW_OVERRIDE extern "C" __attribute__((visibility("default"), used, aligned(64)))

FW_OVERRIDE void* malloc(size_t n) { return fw::alloc_small(n); }
FW_OVERRIDE void free(void* p) { fw::free_block(p); }
FW_OVERRIDE void* calloc(size_t c, size_t n) { return fw::fw_alloc_zeroed(c, n); }
FW_OVERRIDE void* realloc(void* p, size_t n) { return fw::fw_realloc_impl(p, n); }
FW_OVERRIDE void* reallocarray(void* p, size_t c, size_t n) { return fw_reallocarray(p, c, n); }
FW_OVERRIDE int posix_memalign(void** out, size_t a, size_t n) { return fw_posix_memalign(out, a, n); }
FW_OVERRIDE void* aligned_alloc(size_t a, size_t n) { return fw_aligned_alloc(a, n); }
FW_OVERRIDE void* memalign(size_t a, size_t n) { return fw_memalign(a, n); }
FW_OVERRIDE void* valloc(size_t n) { return fw_valloc(n); }
FW_OVERRIDE void* pvalloc(size_t n) { return fw_pvalloc(n); }
FW_OVERRIDE size_t malloc_usable_size(void* p) { return fw_usable_size(p); }
FW_OVERRIDE void free_sized(void* p, size_t n) { fw_free_sized(p, n); }
FW_OVERRIDE void free_aligned_sized(void* p, size_t a, size_t n) { fw_free_aligned_sized(p, a, n); }
FW_OVERRIDE void cfree(void* p) { fw_free(p); }

// Referenced by new.cpp so that a static link that needs only operator new
// still brings in this file, and malloc and new never come from two heaps.
extern "C" __attribute__((visibility("default"))) int freeway_override_anchor;
int freeway_override_anchor = 1;

#if defined(__GLIBC__)
// And glibc's other allocator names (shim/glibc.cpp): a static link that
// took malloc from here but one of those from libc.a's malloc.o would define
// malloc twice.
extern "C" int freeway_glibc_anchor;
__attribute__((used)) static int* const g_pull_glibc = &freeway_glibc_anchor;
#endif

#if defined(_WIN32)
// And a program that links malloc from here also links the CRT's own names
// and the foreign-heap registration (shim/windows/crt.cpp): without it, blocks
// the CRT allocated inside itself would reach free() as unknown pointers.
extern "C" int freeway_crt_anchor;
__attribute__((used)) static int* const g_pull_crt = &freeway_crt_anchor;
#endif
