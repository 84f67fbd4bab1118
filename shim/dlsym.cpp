// shim/dlsym.cpp: dlsym through a library's handle finds the process's
// allocator, not the C library's own (libfreeway.so, glibc, x86-64).
//
// dlsym(handle, "free") looks the name up in that library and its
// dependencies, so through a handle of libc.so.6 (or of any library that
// does not define the name itself) it finds glibc's own free, not the one
// the process binds to. Python's ctypes works so: ctypes.CDLL("libc.so.6").free(p)
// on a string glibc's strdup returned (allocated through the process's
// malloc, freeway's) stopped python with "free(): invalid pointer" under
// freeway and jemalloc, and with SIGSEGV under mimalloc and tcmalloc. Here a
// lookup through a handle that returns one of the C library's own allocator
// functions returns what the global scope binds that name to instead: the
// process's (freeway's when it is preloaded or linked). Any other result, a
// lookup in the global scope (RTLD_DEFAULT) and one after the caller
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
#include <unistd.h>

#include <atomic>

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

// The names of the C library's allocator that a process's allocator
// replaces (override.cpp, glibc.cpp). The C library defines every one of
// them that it exports; a name it lacks simply has no entry.
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
                                  "__libc_mallopt"};
constexpr unsigned kNameCount = sizeof(kNames) / sizeof(kNames[0]);

// The C library's own function of each name and the process's, where they
// differ. Invariant: published once complete (g_table_ready, release) and
// never changed: the C library is never unloaded, and the global scope's
// bindings of these names are fixed from the start.
struct Table {
  void* libc[kNameCount];
  void* process[kNameCount];
  unsigned n;
};
Table g_table;
std::atomic<int> g_table_state{0};  // 0 not built, 1 being built, 2 built

void build(Table& t, DlsymFn next) {
  t.n = 0;
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr) return;
  for (const char* name : kNames) {
    void* own = next(libc, name);
    // The process's binding: the global scope as libfreeway.so sees it.
    void* process = next(RTLD_DEFAULT, name);
    if (own != nullptr && process != nullptr && own != process) {
      t.libc[t.n] = own;
      t.process[t.n] = process;
      t.n++;
    }
  }
  dlclose(libc);  // NOLOAD took a reference; the C library stays loaded
  // The names the C library lacks left an error that would otherwise be the
  // caller's next dlerror() after a lookup that succeeded.
  (void)dlerror();
}

// The table, built at the first lookup that needs it. A call that finds
// another building it builds a copy in `local` rather than wait.
const Table& table(Table& local, DlsymFn next) {
  int state = g_table_state.load(std::memory_order_acquire);
  if (state == 2) return g_table;
  if (state == 0 && g_table_state.compare_exchange_strong(state, 1, std::memory_order_acquire)) {
    build(g_table, next);
    g_table_state.store(2, std::memory_order_release);
    return g_table;
  }
  build(local, next);
  return local;
}

}  // namespace

// dlsym through a handle (neither RTLD_DEFAULT nor RTLD_NEXT): reached from
// the trampoline below with the caller's arguments.
extern "C" FW_HIDDEN __attribute__((used)) void* fw_dlsym_handle(void* handle, const char* name) {
  DlsymFn next = fw_dlsym_next();
  void* found = next(handle, name);
  if (found == nullptr || fw::option(fw::Option::libc_dlsym) != 0) return found;
  Table local;
  const Table& t = table(local, next);
  for (unsigned i = 0; i < t.n; i++) {
    if (t.libc[i] != found) continue;
    if (fw::option(fw::Option::verbose) > 0)
      fw::Line()
          .str("freeway: dlsym(handle, \"")
          .str(name)
          .str("\"): the process's, not the C library's own\n")
          .write(2);
    return t.process[i];
  }
  return found;
}

// dlsym(handle, name): handle + 1 is 0 for RTLD_NEXT ((void*)-1) and 1 for
// RTLD_DEFAULT (0); both jump to the C library's dlsym (resolving it first,
// with the arguments kept across the call and the stack aligned for it).
// Every other handle goes to fw_dlsym_handle with a jump. It starts with
// endbr64 where the library is built for CET (-fcf-protection).
#if defined(__CET__)
#define FW_DLSYM_ENDBR "endbr64\n"
#else
#define FW_DLSYM_ENDBR ""
#endif
asm(R"(
  .pushsection .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
)" FW_DLSYM_ENDBR R"(
  lea 1(%rdi), %rax
  cmp $1, %rax
  ja fw_dlsym_handle
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
  .cfi_endproc
  .size dlsym, .-dlsym
  .popsection
)");
#endif
