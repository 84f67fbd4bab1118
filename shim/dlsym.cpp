// shim/dlsym.cpp: dlsym through a library's handle finds the process's
// allocator, not the C library's own (libfreeway.so, glibc, x86-64).
//
// dlsym(handle, "free") looks the name up in that library and its
// dependencies, so through a handle of libc.so.6 (or of any library that
// does not define the name itself) it finds glibc's own free, not freeway's.
// Python's ctypes works so: ctypes.CDLL("libc.so.6").free(p) on a string
// glibc's strdup returned (allocated through the process's malloc, freeway's)
// stopped python with "free(): invalid pointer" under freeway and jemalloc,
// and with SIGSEGV under mimalloc and tcmalloc. Here a lookup through a
// handle that finds one of the C library's own functions of a name freeway
// replaces returns the process's function of that name instead (the global
// scope's: freeway's, or a wrapper's preloaded before it), or freeway's own
// when the caller is that wrapper (fw_dlsym_handle). Any other result,
// a lookup in the global scope (RTLD_DEFAULT) and one after the caller
// (RTLD_NEXT) are the C library's answer unchanged. FREEWAY_LIBC_DLSYM=1
// keeps the C library's own functions.
//
// RTLD_DEFAULT and RTLD_NEXT lookups depend on the caller (its scope, and
// the objects after it), which glibc reads from the return address, so they
// go on to the C library's dlsym with a jump, the caller's return address
// still on the stack (as dlopen does: deepbind.cpp). A lookup through a
// handle does not depend on the caller, so it is a plain function.
#if defined(__linux__)
#include <features.h>
#endif
#if defined(__GLIBC__) && defined(__x86_64__)
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/config.h"
#include "core/options.h"
#include "core/report.h"

using DlsymFn = void* (*)(void*, const char*);

// The C library's dlsym, resolved at the first call (dlvsym: the lookup of
// dlsym cannot go through dlsym). Invariant: once set it never changes;
// racing first calls store the same value. `used`: the assembly below refers
// to it, which link-time optimisation does not see.
extern "C" FW_HIDDEN std::atomic<DlsymFn> fw_next_dlsym;
__attribute__((used)) std::atomic<DlsymFn> fw_next_dlsym{nullptr};

// Sets and returns fw_next_dlsym; stops the process when there is none.
extern "C" FW_HIDDEN __attribute__((used)) DlsymFn fw_dlsym_next() {
  DlsymFn next = fw_next_dlsym.load(std::memory_order_acquire);
  if (next != nullptr) return next;
  // glibc 2.34 moved dlsym into libc.so.6 as dlsym@@GLIBC_2.34; before, it
  // was libdl's dlsym@@GLIBC_2.2.5. The process's own version is the one it
  // loaded, so ask for the newer first.
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
    next = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (next != nullptr) break;
  }
  if (next == nullptr) {
    fw::Line().str("freeway: dlsym: the C library's dlsym was not found\n").write(2);
    _exit(127);
  }
  fw_next_dlsym.store(next, std::memory_order_release);
  return next;
}

namespace {

// The names of the C library's allocator that freeway replaces (override.cpp,
// glibc.cpp). preload.dlsym_libc looks up through the C library's handle
// every function libfreeway.so defines, and fails on one this list lacks.
constexpr const char* kNames[] = {"malloc",
                                  "free",
                                  "calloc",
                                  "realloc",
                                  "reallocarray",
                                  "posix_memalign",
                                  "aligned_alloc",
                                  "memalign",
                                  "valloc",
                                  "pvalloc",
                                  "malloc_usable_size",
                                  "free_sized",
                                  "free_aligned_sized",
                                  "malloc_trim",
                                  "mallinfo",
                                  "mallinfo2",
                                  "mallopt",
                                  "malloc_stats",
                                  "malloc_info",
                                  "__libc_malloc",
                                  "__libc_free",
                                  "__libc_calloc",
                                  "__libc_realloc",
                                  "__libc_memalign",
                                  "__libc_valloc",
                                  "__libc_pvalloc",
                                  "__libc_mallinfo",
                                  "__libc_mallinfo2",
                                  "__libc_mallopt",
                                  "__posix_memalign"};
constexpr unsigned kNameCount = sizeof(kNames) / sizeof(kNames[0]);

// kNames' index of name, or -1.
int replaced_name(const char* name) {
  for (unsigned i = 0; i < kNameCount; i++)
    if (kNames[i][0] == name[0] && std::strcmp(kNames[i], name) == 0) return int(i);
  return -1;
}

// The object (its link map) that p lies in, or nullptr. _dl_find_object
// (glibc 2.35) is a lookup in a sorted table; dladdr, before it, searches
// the symbol tables too (5 us a call here). Neither touches dlerror().
const void* object_of(void* p) {
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
  dl_find_object found;
  return _dl_find_object(p, &found) == 0 ? found.dlfo_link_map : nullptr;
#else
  Dl_info info;
  link_map* map = nullptr;
  return dladdr1(p, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0 ? map : nullptr;
#endif
}

// Whether the object of link map m is the C library (libc.so.<n>).
bool is_libc(const void* m) {
  const char* path = m != nullptr ? static_cast<const link_map*>(m)->l_name : nullptr;
  if (path == nullptr) return false;
  const char* base = std::strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  return std::strncmp(base, "libc.so.", 8) == 0;
}

// For each name, once known: the C library's function that lookups found
// (base namespace), the global scope's binding and the object it lies in.
// Invariant: each field is written only with the one value it can have (the
// C library and the global scope's bindings do not change), binding and
// binding_object before libc_fn (release), so a reader that finds libc_fn
// equal to its result (acquire) reads the other two set.
struct Known {
  std::atomic<void*> libc_fn;
  std::atomic<void*> binding;
  std::atomic<const void*> binding_object;
};
Known g_known[kNameCount];

// The main program's handle, a link map (dlopen(NULL) returns the same):
// lookups through it search the global scope (the program, the preloaded
// libraries, then the rest, in load order). Read from the debugger's list
// rather than asked of dlopen, which asserts when called while the loader is
// mapping a library, and the loader's own malloc and free calls then can be
// a wrapper's first lookup through a handle.
void* main_handle() { return _r_debug.r_map; }

}  // namespace

// dlsym through a handle (neither RTLD_DEFAULT nor RTLD_NEXT): reached from
// the trampoline below with the caller's arguments and return address.
// Matched by name, not by address: glibc's aligned_alloc, memalign and
// __libc_memalign are one function, and freeway's differ (memalign takes any
// alignment). The replacement is the global scope's binding of the name, the
// process's: freeway's, or a wrapper's preloaded before it (glibc's
// libmemusage.so adds a header to each block, so its blocks need its free).
// Not when that binding is in the caller's own object: a wrapper that fetches
// the C library's malloc through a handle would get itself back, and
// recurse; it gets freeway's own instead (this library is linked -Bsymbolic,
// so a global lookup from here finds its own definitions first). A wrapper
// whose lookup a helper library of its own makes is not recognised, and
// recurses (docs/design.md).
extern "C" FW_HIDDEN __attribute__((used)) void* fw_dlsym_handle(void* handle, const char* name, void* caller) {
  DlsymFn next = fw_dlsym_next();
  void* found = next(handle, name);
  if (found == nullptr || name == nullptr || fw::option(fw::Option::libc_dlsym) != 0) return found;
  const int i = replaced_name(name);
  if (i < 0) return found;
  Known& k = g_known[i];
  if (k.libc_fn.load(std::memory_order_acquire) != found) {
    if (!is_libc(object_of(found))) return found;
    // A C library of another namespace (dlmopen) is that namespace's
    // allocator: its own calls use it, not the base namespace's.
    Lmid_t ns = LM_ID_BASE;
    if (dlinfo(handle, RTLD_DI_LMID, &ns) != 0 || ns != LM_ID_BASE) return found;
    void* binding = next(main_handle(), name);
    if (binding == nullptr) return found;
    k.binding.store(binding, std::memory_order_relaxed);
    k.binding_object.store(object_of(binding), std::memory_order_relaxed);
    k.libc_fn.store(found, std::memory_order_release);
  }
  void* process = k.binding.load(std::memory_order_relaxed);
  if (k.binding_object.load(std::memory_order_relaxed) == object_of(caller)) process = next(RTLD_DEFAULT, name);
  if (process == nullptr || process == found) return found;
  if (fw::option(fw::Option::verbose) > 0)
    fw::Line().str("freeway: dlsym(handle, \"").str(name).str("\"): the process's, not the C library's own\n").write(2);
  return process;
}

// dlsym(handle, name): handle + 1 is 0 for RTLD_NEXT ((void*)-1) and 1 for
// RTLD_DEFAULT (0); both jump to the C library's dlsym (resolving it first,
// with the arguments kept across the call and the stack aligned for it).
// Every other handle goes to fw_dlsym_handle with a jump, the caller's return
// address as a third argument. It starts with
// endbr64 where the library is built for CET (-fcf-protection).
asm(R"(
  .pushsection .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
)" FW_ASM_ENDBR R"(
  lea 1(%rdi), %rax
  cmp $1, %rax
  ja 2f
  mov fw_next_dlsym(%rip), %rax
  test %rax, %rax
  jz 1f
  jmp *%rax
1:
  push %rdi
  .cfi_adjust_cfa_offset 8
  push %rsi
  .cfi_adjust_cfa_offset 8
  sub $8, %rsp
  .cfi_adjust_cfa_offset 8
  call fw_dlsym_next
  add $8, %rsp
  .cfi_adjust_cfa_offset -8
  pop %rsi
  .cfi_adjust_cfa_offset -8
  pop %rdi
  .cfi_adjust_cfa_offset -8
  jmp *%rax
2:
  mov (%rsp), %rdx
  jmp fw_dlsym_handle
  .cfi_endproc
  .size dlsym, .-dlsym
  .popsection
)");
#endif
