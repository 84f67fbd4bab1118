// shim/windows/dll.cpp: freeway.dll, which takes over the C runtimes of the
// process it is loaded into (freeway-inject.exe loads it before main).
//
// On load it patches the entries of the allocation functions of msvcrt.dll and
// ucrtbase.dll (patch.h), so that every caller reaches freeway: the program,
// every other DLL, and the CRT's own internal calls (_strdup, fopen, _getcwd
// call the CRT's malloc). A CRT loaded later is patched when the loader maps
// it (LdrRegisterDllNotification), before its own initialisation runs.
// Blocks the CRT handed out before the patch stay the CRT's: freeway's region
// map says they are not freeway's, and free, realloc, _msize, _expand and the
// _aligned_ functions pass them to the original functions, reached through
// the trampolines (crt.h). Aliases (an export at the same address as one
// already patched, such as _o_malloc or _malloc_base where the CRT makes them
// one function) are patched once. The DLL pins itself: its blocks outlive any
// FreeLibrary. It imports kernel32 alone: dll_runtime.cpp is its C runtime.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <winternl.h>

#include <cstring>  // memcpy (dll_runtime.cpp's)

#include "core/options.h"
#include "core/report.h"
#include "freeway.h"
#include "shim/windows/crt.h"
#include "shim/windows/patch.h"

extern "C" {
size_t __cdecl _msize(void*);
void* __cdecl _expand(void*, size_t);
void* __cdecl _recalloc(void*, size_t, size_t);
void* __cdecl _aligned_malloc(size_t, size_t);
void __cdecl _aligned_free(void*);
void* __cdecl _aligned_realloc(void*, size_t, size_t);
void* __cdecl _aligned_recalloc(void*, size_t, size_t, size_t);
size_t __cdecl _aligned_msize(void*, size_t, size_t);
void* __cdecl _aligned_offset_malloc(size_t, size_t, size_t);
void* __cdecl _aligned_offset_realloc(void*, size_t, size_t, size_t);
void* __cdecl _aligned_offset_recalloc(void*, size_t, size_t, size_t, size_t);
}

namespace {

// msvcrt's own operator new and delete (MSVC names): new returns NULL when
// out of memory, as msvcrt's does when no new handler is installed.
void* __cdecl crt_new(size_t n) { return fw_malloc(n == 0 ? 1 : n); }
void __cdecl crt_delete(void* p) { fw_free(p); }

struct Target {
  const char* name;
  void* replacement;
};

// Every name patched in each CRT that exports it. _base and _o_ forms follow.
const Target kTargets[] = {
    {"malloc", reinterpret_cast<void*>(&malloc)},
    {"free", reinterpret_cast<void*>(&free)},
    {"calloc", reinterpret_cast<void*>(&calloc)},
    {"realloc", reinterpret_cast<void*>(&realloc)},
    {"_msize", reinterpret_cast<void*>(&_msize)},
    {"_expand", reinterpret_cast<void*>(&_expand)},
    {"_recalloc", reinterpret_cast<void*>(&_recalloc)},
    {"_aligned_malloc", reinterpret_cast<void*>(&_aligned_malloc)},
    {"_aligned_free", reinterpret_cast<void*>(&_aligned_free)},
    {"_aligned_realloc", reinterpret_cast<void*>(&_aligned_realloc)},
    {"_aligned_recalloc", reinterpret_cast<void*>(&_aligned_recalloc)},
    {"_aligned_msize", reinterpret_cast<void*>(&_aligned_msize)},
    {"_aligned_offset_malloc", reinterpret_cast<void*>(&_aligned_offset_malloc)},
    {"_aligned_offset_realloc", reinterpret_cast<void*>(&_aligned_offset_realloc)},
    {"_aligned_offset_recalloc", reinterpret_cast<void*>(&_aligned_offset_recalloc)},
    // ucrtbase: the _base variants (what the debug CRT's wrappers call).
    {"_malloc_base", reinterpret_cast<void*>(&malloc)},
    {"_free_base", reinterpret_cast<void*>(&free)},
    {"_calloc_base", reinterpret_cast<void*>(&calloc)},
    {"_realloc_base", reinterpret_cast<void*>(&realloc)},
    {"_msize_base", reinterpret_cast<void*>(&_msize)},
    {"_expand_base", reinterpret_cast<void*>(&_expand)},
    {"_recalloc_base", reinterpret_cast<void*>(&_recalloc)},
    // msvcrt: operator new, delete, new[], delete[].
    {"??2@YAPEAX_K@Z", reinterpret_cast<void*>(&crt_new)},
    {"??3@YAXPEAX@Z", reinterpret_cast<void*>(&crt_delete)},
    {"??_U@YAPEAX_K@Z", reinterpret_cast<void*>(&crt_new)},
    {"??_V@YAXPEAX@Z", reinterpret_cast<void*>(&crt_delete)},
};
constexpr int kTargetCount = int(sizeof kTargets / sizeof kTargets[0]);
constexpr int kMaxPatches = 2 * kTargetCount;  // each name, and its _o_ twin

// The system CRT (msvcrt), the universal CRT (ucrtbase), and the Visual
// Studio 2008-2013 CRTs that programs of those years carry.
constexpr const wchar_t* kCrtNames[] = {L"msvcrt.dll",   L"ucrtbase.dll", L"msvcr90.dll",
                                        L"msvcr100.dll", L"msvcr110.dll", L"msvcr120.dll"};

// What was patched so far (one entry per CRT module), for crt_use and for the
// late-load callback, which must not patch a module twice.
struct Module {
  HMODULE base;
  fw::win::CrtOriginals originals;
};
Module g_modules[fw::win::kMaxCrts];
int g_module_count = 0;

// Names for messages: "msvcrt.dll!malloc" (no allocation: a static buffer per patch).
char g_names[kMaxPatches][64];

void say(const char* a, const char* b, const char* c) {
  fw::Line l;
  l.str("freeway: ").str(a).str(b).str(c).str("\n");
  l.write(2);
}

struct Batch {
  Module* module;
  fw::win::Patch* patches;
  int count;
};

// Before the first write: the module's originals are its trampolines (or,
// where a function could not be patched, the function itself).
void hand_over(void* arg) {
  Batch* b = static_cast<Batch*>(arg);
  HMODULE m = b->module->base;
  auto original = [&](const char* name) -> void* {
    void* entry = reinterpret_cast<void*>(GetProcAddress(m, name));
    for (int i = 0; i < b->count; i++)
      if (b->patches[i].target == entry && b->patches[i].trampoline != nullptr) return b->patches[i].trampoline;
    return entry;
  };
  fw::win::CrtOriginals& o = b->module->originals;
  auto heap_handle = reinterpret_cast<intptr_t(__cdecl*)()>(original("_get_heap_handle"));
  HANDLE heap = heap_handle != nullptr ? reinterpret_cast<HANDLE>(heap_handle()) : nullptr;
  o.heap = heap != nullptr ? heap : GetProcessHeap();  // a CRT not yet initialised: the process heap
  // ucrtbase's free, _msize and _expand only call _free_base, _msize_base and
  // _expand_base, which are patched too: through free's trampoline a CRT block
  // would come back to freeway's free, again and again. Where the CRT exports
  // the _base form, the original is that one's (msvcrt has none).
  auto base_original = [&](const char* base, const char* name) {
    return GetProcAddress(m, base) != nullptr ? original(base) : original(name);
  };
  o.free = reinterpret_cast<fw::win::FreeFn>(base_original("_free_base", "free"));
  o.msize = reinterpret_cast<fw::win::MsizeFn>(base_original("_msize_base", "_msize"));
  o.expand = reinterpret_cast<fw::win::ExpandFn>(base_original("_expand_base", "_expand"));
  o.aligned_free = reinterpret_cast<fw::win::AlignedFreeFn>(original("_aligned_free"));
  o.aligned_msize = reinterpret_cast<fw::win::AlignedMsizeFn>(original("_aligned_msize"));
  fw::win::CrtOriginals all[fw::win::kMaxCrts];
  for (int i = 0; i < g_module_count; i++) all[i] = g_modules[i].originals;
  fw::win::crt_use(all, g_module_count);
}

void patch_module(HMODULE m, const wchar_t* name) {
  for (int i = 0; i < g_module_count; i++)
    if (g_modules[i].base == m) return;
  if (g_module_count == fw::win::kMaxCrts) return;
  static fw::win::Patch patches[kMaxPatches];
  int n = 0;
  char module_name[32];
  size_t k = 0;
  for (; name[k] != 0 && k + 1 < sizeof module_name; k++) module_name[k] = char(name[k]);
  module_name[k] = 0;
  for (int t = 0; t < kTargetCount; t++)
    for (int twin = 0; twin < 2; twin++) {
      char export_name[64] = "_o_";
      size_t at = twin ? 3 : 0;
      for (const char* c = kTargets[t].name; *c != 0 && at + 1 < sizeof export_name; c++) export_name[at++] = *c;
      export_name[at] = 0;
      void* entry = reinterpret_cast<void*>(GetProcAddress(m, export_name));
      if (entry == nullptr) continue;
      bool alias = false;
      for (int i = 0; i < n; i++) alias |= patches[i].target == entry;
      if (alias) continue;
      fw::Line l;
      l.str(module_name).str("!").str(export_name);
      std::memcpy(g_names[n], l.data(), l.size() < 63 ? l.size() : 63);
      g_names[n][l.size() < 63 ? l.size() : 63] = 0;
      patches[n] = {g_names[n], entry, kTargets[t].replacement, nullptr, 0, nullptr};
      n++;
    }
  Module* mod = &g_modules[g_module_count++];
  mod->base = m;
  Batch batch{mod, patches, n};
  int written = fw::win::patch_apply(patches, n, &hand_over, &batch);
  bool verbose = fw::option(fw::Option::verbose) > 0;
  for (int i = 0; i < n; i++) {
    if (patches[i].failure != nullptr) {
      say("cannot patch ", patches[i].name, "; left as it is: ");
      say("  ", patches[i].failure, "");
    } else if (verbose) {
      say("patched ", patches[i].name, "");
    }
  }
  if (verbose) {
    fw::Line l;
    l.str("freeway: ").str(module_name).str(": ").dec(uint64_t(written)).str(" of ").dec(uint64_t(n))
        .str(" functions patched\n");
    l.write(2);
  }
}

// --- CRTs loaded later ------------------------------------------------------
struct DllLoaded {
  ULONG flags;
  const UNICODE_STRING* full_name;
  const UNICODE_STRING* base_name;
  void* base;
  ULONG size;
};
using NotificationFn = VOID(CALLBACK*)(ULONG reason, const DllLoaded* data, void* ctx);
using RegisterFn = LONG(NTAPI*)(ULONG flags, NotificationFn fn, void* ctx, void** cookie);

bool same_name(const UNICODE_STRING* s, const wchar_t* name) {
  size_t n = s->Length / sizeof(wchar_t), len = 0;
  while (name[len] != 0) len++;
  if (len != n) return false;
  for (size_t i = 0; i < n; i++) {
    wchar_t a = s->Buffer[i], b = name[i];
    if (a >= L'A' && a <= L'Z') a = wchar_t(a + 32);
    if (a != b) return false;
  }
  return true;
}

VOID CALLBACK on_dll_event(ULONG reason, const DllLoaded* data, void*) {
  if (reason != 1 /* LDR_DLL_NOTIFICATION_REASON_LOADED */ || data == nullptr) return;
  for (const wchar_t* name : kCrtNames)
    if (same_name(data->base_name, name)) patch_module(static_cast<HMODULE>(data->base), name);
}

extern "C" int* (__cdecl* fw_crt_errno)();  // dll_runtime.cpp

void take_over(HMODULE self) {
  HMODULE pinned;
  GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                     reinterpret_cast<LPCWSTR>(&take_over), &pinned);
  (void)self;
  // errno is the program's CRT's (its _errno is not patched): the one its
  // .exe imports (fw::win::program_crt: advapi32 loads msvcrt into
  // universal-CRT programs too).
  if (HMODULE m = fw::win::program_crt())
    if (auto e = reinterpret_cast<int* (__cdecl*)()>(reinterpret_cast<void*>(GetProcAddress(m, "_errno"))))
      fw_crt_errno = e;
  for (const wchar_t* name : kCrtNames)
    if (HMODULE m = GetModuleHandleW(name)) patch_module(m, name);
  auto reg = reinterpret_cast<RegisterFn>(
      reinterpret_cast<void*>(GetProcAddress(GetModuleHandleW(L"ntdll.dll"), "LdrRegisterDllNotification")));
  static void* cookie;
  if (reg == nullptr || reg(0, &on_dll_event, nullptr, &cookie) < 0)
    say("cannot watch for CRTs loaded later (LdrRegisterDllNotification)", "", "");
}

}  // namespace

// Called by the DLL's entry point (dll_runtime.cpp) after its constructors.
BOOL fw_dll_attach(HINSTANCE self) {
  take_over(self);
  return TRUE;
}
