// shim/windows/crt.h: the Microsoft C runtimes freeway stands in for, and
// their original functions for blocks that are theirs (see crt.cpp).
//
// Static link (libfreeway.a): crt.cpp looks up the CRT the program imports.
// Injected (freeway.dll): the patcher hands over the trampolines of the
// functions it patched, for each CRT it patched (crt_use), before the first
// patch is written, so a foreign block never reaches a patched entry.
#pragma once
#include <cstddef>

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

namespace fw::win {

using FreeFn = void(__cdecl*)(void*);
using MsizeFn = size_t(__cdecl*)(void*);
using ExpandFn = void*(__cdecl*)(void*, size_t);
using AlignedFreeFn = void(__cdecl*)(void*);
using AlignedMsizeFn = size_t(__cdecl*)(void*, size_t, size_t);

struct CrtOriginals {
  HANDLE heap;  // the CRT's heap (_get_heap_handle), for HeapValidate
  FreeFn free;
  MsizeFn msize;
  ExpandFn expand;                // may be null
  AlignedFreeFn aligned_free;     // may be null
  AlignedMsizeFn aligned_msize;   // may be null
};
constexpr int kMaxCrts = 8;

// Sets the CRTs (at most kMaxCrts): the first call replaces what a lookup
// found, and no lookup happens afterwards; each later call passes the same
// CRTs in the same order plus those loaded since, and only those are added.
void crt_use(const CrtOriginals* crts, int n);
// The CRT whose heap holds the block that starts at p, or nullptr.
const CrtOriginals* crt_owner(const void* p);
// The first CRT (for _aligned_ blocks, which do not start at a heap block).
const CrtOriginals* crt_first();
// The C runtime the program (its .exe) imports: msvcrt.dll, or ucrtbase.dll
// for a universal-CRT program (api-ms-win-crt-*.dll imports). Other modules
// may load the other one (advapi32 loads msvcrt), so "whichever is loaded" is
// not the program's. For a program that imports neither, msvcrt.dll if
// loaded, else ucrtbase.dll; nullptr if neither is loaded.
HMODULE program_crt();

}  // namespace fw::win
