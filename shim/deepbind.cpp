// shim/deepbind.cpp: dlopen without RTLD_DEEPBIND (libfreeway.so, glibc, x86-64).
//
// A library dlopened with RTLD_DEEPBIND looks its symbols up in itself and its
// own dependencies before the global scope, so its malloc and free bind to the
// C library's, not to the preloaded freeway's. A block then crosses between
// the two allocators, and the C library's free of a freeway block crashes in
// glibc (PHP loads every extension so: `php -r` under LD_PRELOAD stops with
// SIGSEGV in _int_free under freeway, mimalloc, jemalloc and tcmalloc alike;
// php-src issues 10670, 11133, 11564). freeway's dlopen drops the flag (FREEWAY_DEEPBIND=0,
// the default), so such a library uses the allocator every other one does;
// FREEWAY_DEEPBIND=1 keeps it. FREEWAY_VERBOSE=1 names each library it changed.
//
// dlopen finds the library relative to its caller (the caller's RUNPATH and
// $ORIGIN, and its namespace: glibc reads the return address), so the
// interposer must not become the caller: it ends in a jump to the C library's
// dlopen with the caller's return address still on the stack. That jump is
// written in assembly, as a compiler does not promise a tail call.
#if defined(__linux__)
#include <features.h>
#endif
#if defined(__GLIBC__) && defined(__x86_64__)  // RTLD_DEEPBIND is glibc's
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>

#include "core/config.h"
#include "core/options.h"
#include "core/report.h"

using DlopenFn = void* (*)(const char*, int);

// The C library's dlopen, resolved at the first call (dlsym, RTLD_NEXT).
// Invariant: once set it never changes; racing first calls store the same value.
// `used`, as is fw_dlopen_mode: only the assembly below refers to them, which
// link-time optimisation does not see.
extern "C" FW_HIDDEN std::atomic<DlopenFn> fw_next_dlopen;
__attribute__((used)) std::atomic<DlopenFn> fw_next_dlopen{nullptr};

// The mode dlopen passes on, with fw_next_dlopen set: called by the
// trampoline below with the caller's file and mode.
extern "C" FW_HIDDEN __attribute__((used)) int fw_dlopen_mode(const char* file, int mode) {
  if (fw_next_dlopen.load(std::memory_order_acquire) == nullptr) {
    auto next = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
    if (next == nullptr) {  // nothing to forward to: say so instead of jumping to 0
      fw::Line().str("freeway: dlopen: the C library's dlopen was not found\n").write(2);
      _exit(127);
    }
    fw_next_dlopen.store(next, std::memory_order_release);
  }
  if ((mode & RTLD_DEEPBIND) == 0 || fw::option(fw::Option::deepbind) != 0) return mode;
  if (fw::option(fw::Option::verbose) > 0)
    fw::Line()
        .str("freeway: dlopen(")
        .str(file ? file : "NULL")
        .str(") without RTLD_DEEPBIND: its malloc is freeway's\n")
        .write(2);
  return mode & ~RTLD_DEEPBIND;
}

// dlopen(file, mode): keeps file (rdi) across the call (one push, which also
// aligns the stack for it), then jumps with the new mode (esi). It starts with
// endbr64 where the library is built for CET (-fcf-protection), since it is
// reached by an indirect jump from the PLT.
asm(R"(
  .pushsection .text
  .globl dlopen
  .type dlopen, @function
  .p2align 4
dlopen:
  .cfi_startproc
)" FW_ASM_ENDBR R"(
  push %rdi
  .cfi_adjust_cfa_offset 8
  call fw_dlopen_mode
  mov %eax, %esi
  pop %rdi
  .cfi_adjust_cfa_offset -8
  jmp *fw_next_dlopen(%rip)
  .cfi_endproc
  .size dlopen, .-dlopen
  .popsection
)");
#endif
