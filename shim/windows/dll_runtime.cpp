// shim/windows/dll_runtime.cpp: the little C runtime freeway.dll carries, so
// that it imports kernel32 alone and never the CRTs it patches.
//
// freeway.dll is linked with -nostdlib: no mingw start-up code and no msvcrt.
// This file provides what the rest of the DLL needs in their place:
//  - the entry point, which runs the constructors and destructors that
//    mingw's start-up code would (the .ctors/.dtors lists GNU ld builds), the
//    exit functions registered with atexit, and dll.cpp's take-over;
//  - the PE TLS directory, so that the loader gives each thread a copy of the
//    .tls section (platform/thread_slot.h's slot lives there);
//  - memcpy, memmove and memset, which the compiler may call for any copy;
//  - errno: the errno of the CRT the program uses (found by dll.cpp), since a
//    failed malloc must set the errno the program reads;
//  - _get_osfhandle for the three standard descriptors (stats to stderr).
// Built with -ffreestanding -fno-builtin -fno-tree-loop-distribute-patterns,
// so that the loops below are not themselves turned into calls to memset.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <cstddef>
#include <cstdint>

BOOL fw_dll_attach(HINSTANCE self);  // dll.cpp

extern "C" {

// --- Memory functions ---------------------------------------------------------
void* memcpy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  for (; n >= 8; n -= 8, d += 8, s += 8) {
    uint64_t w;
    __builtin_memcpy(&w, s, 8);  // expands inline: a constant 8-byte copy
    __builtin_memcpy(d, &w, 8);
  }
  while (n--) *d++ = *s++;
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  if (d <= s || d >= s + n) return memcpy(dst, src, n);
  while (n--) d[n] = s[n];
  return dst;
}

void* memset(void* dst, int c, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  uint64_t w = 0x0101010101010101ull * static_cast<unsigned char>(c);
  for (; n >= 8; n -= 8, d += 8) __builtin_memcpy(d, &w, 8);
  while (n--) *d++ = static_cast<unsigned char>(c);
  return dst;
}

// --- errno and descriptors ---------------------------------------------------
// dll.cpp sets this to the program's CRT's _errno before the first patch.
int* (__cdecl* fw_crt_errno)() = nullptr;
static int g_errno_fallback;
static int* __cdecl dll_errno() { return fw_crt_errno != nullptr ? fw_crt_errno() : &g_errno_fallback; }
__attribute__((used)) void* __imp__errno = reinterpret_cast<void*>(&dll_errno);

static intptr_t __cdecl dll_get_osfhandle(int fd) {
  DWORD which = fd == 0 ? STD_INPUT_HANDLE : fd == 1 ? STD_OUTPUT_HANDLE : fd == 2 ? STD_ERROR_HANDLE : 0;
  return which != 0 ? reinterpret_cast<intptr_t>(GetStdHandle(which)) : -1;
}
__attribute__((used)) void* __imp__get_osfhandle = reinterpret_cast<void*>(&dll_get_osfhandle);

// --- atexit: run when the process detaches the DLL ---------------------------
static void (*g_exit_fns[32])();
static volatile LONG g_exit_count = 0;
int __cdecl atexit(void (*fn)()) {
  LONG i = InterlockedIncrement(&g_exit_count) - 1;
  if (i >= 32) return -1;
  g_exit_fns[i] = fn;
  return 0;
}

// --- TLS directory -----------------------------------------------------------
// .tls (start) < .tls$FW (thread_slot.h) < .tls$ZZZ (end): the linker sorts the
// input sections by name; the loader copies [start, end) for every thread.
ULONG _tls_index = 0;
__attribute__((section(".tls"), used)) char _tls_start = 0;
__attribute__((section(".tls$ZZZ"), used)) char _tls_end = 0;
__attribute__((section(".CRT$XLA"), used)) PIMAGE_TLS_CALLBACK __xl_a = nullptr;
__attribute__((section(".CRT$XLZ"), used)) PIMAGE_TLS_CALLBACK __xl_z = nullptr;
extern const IMAGE_TLS_DIRECTORY64 _tls_used;  // const alone would be internal linkage
__attribute__((used)) const IMAGE_TLS_DIRECTORY64 _tls_used = {
    reinterpret_cast<ULONGLONG>(&_tls_start), reinterpret_cast<ULONGLONG>(&_tls_end),
    reinterpret_cast<ULONGLONG>(&_tls_index), reinterpret_cast<ULONGLONG>(&__xl_a + 1), 0, {0}};

// --- Constructors and destructors (GNU ld's lists: -1, entries..., 0) ---------
using Fn = void (*)();
extern Fn __CTOR_LIST__[];
extern Fn __DTOR_LIST__[];

static void run_constructors() {
  size_t n = 0;
  while (__CTOR_LIST__[n + 1] != nullptr) n++;
  for (size_t i = n; i >= 1; i--) __CTOR_LIST__[i]();  // the list is in reverse order
}

static void run_destructors() {
  LONG n = g_exit_count < 32 ? g_exit_count : 32;
  for (LONG i = n - 1; i >= 0; i--) g_exit_fns[i]();
  for (size_t i = 1; __DTOR_LIST__[i] != nullptr; i++) __DTOR_LIST__[i]();
}

BOOL WINAPI DllMainCRTStartup(HINSTANCE self, DWORD reason, LPVOID) {
  if (reason == DLL_PROCESS_ATTACH) {
    run_constructors();
    return fw_dll_attach(self);
  }
  if (reason == DLL_PROCESS_DETACH) run_destructors();  // the DLL is pinned: only at process exit
  return TRUE;
}

}  // extern "C"
