// shim/windows/patch.h: redirecting a function's entry to another function
// (x86-64), for freeway.dll (dll.cpp).
//
// A patch overwrites the first 5 bytes of the target with `jmp rel32` to a
// stub near the target (within 2 GiB), which jumps to the replacement with an
// absolute `jmp [rip+0]`. The instructions the jmp displaces are copied into a
// trampoline beside the stub, relocated (RIP-relative operands get a new
// displacement, rel8/rel32 branches and calls become rel32 with a new
// target), and followed by a jump back to the first instruction not
// displaced: calling the trampoline runs the original function.
//
// A prologue that cannot be relocated (an instruction the decoder does not
// know, a return or int3 within the first 5 bytes, a branch back into the
// displaced bytes, an operand out of range) is reported and the function is
// left as it was: a patch is written whole or not at all. Writes happen with
// every other thread of the process suspended, and a thread whose instruction
// pointer is inside the bytes being replaced is moved to the same instruction
// in the trampoline.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fw::win {

struct Patch {
  const char* name;     // for messages
  void* target;         // the function's entry
  void* replacement;
  void* trampoline;     // out: calls the original function
  uint8_t displaced;    // out: bytes of prologue moved
  const char* failure;  // out: why it was not patched, or nullptr
};

// Prepares the trampolines and stubs of patches[0..n) (memory near each target)
// and then writes every patch that could be prepared, with the other threads
// suspended. Returns how many were written; each failure is in its `failure`.
// before_write(arg) runs after every trampoline exists and before the first
// write (dll.cpp hands the trampolines to crt.cpp there).
int patch_apply(Patch* patches, int n, void (*before_write)(void*), void* arg);

// Length of the x86-64 instruction at code (0 if not decodable); exposed for tests.
int instruction_length(const uint8_t* code);

}  // namespace fw::win
