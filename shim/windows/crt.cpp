// shim/windows/crt.cpp: the Microsoft C runtime's own allocation names, and its
// heap registered as foreign (core/foreign.h).
//
// Linked statically (libfreeway.a), these definitions replace the CRT's in the
// program: malloc/free/calloc/realloc come from shim/override.cpp, and this
// file adds _msize, _expand, _recalloc and the _aligned_* family with its
// _aligned_offset_* forms. The CRT's
// headers declare most of them __declspec(dllimport), so calls compile to an
// indirect call through `__imp_<name>`; each name therefore also gets its
// `__imp_` pointer here, and the import library's entry for it is never
// pulled into the link.
//
// The CRT still allocates inside itself from its own heap (_strdup, _getcwd,
// _fullpath, stdio buffers, the argv it builds before main). Those blocks reach
// freeway's free, realloc and _msize from the program; no freeway region holds
// them, so the core offers them to the foreign heap registered here, which
// checks them with HeapValidate on the CRT's heap and hands them to the CRT's
// own free, _msize and realloc (found with GetProcAddress in the CRT module).
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <atomic>

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include "core/alloc.h"
#include "core/foreign.h"
#include "core/secure.h"
#include "freeway.h"
#include "shim/windows/crt.h"

namespace fw::win {

namespace {
CrtOriginals g_crts[kMaxCrts];
std::atomic<int> g_crt_count{0};
std::atomic<bool> g_crt_fixed{false};  // set by crt_use: no more lookups

// Makes crts[0, n) the set, replacing what was there.
void crt_replace(const CrtOriginals* crts, int n) {
  g_crt_count.store(0, std::memory_order_release);
  if (n > kMaxCrts) n = kMaxCrts;
  for (int i = 0; i < n; i++) g_crts[i] = crts[i];
  g_crt_count.store(n, std::memory_order_release);
}

template <class F>
F proc(HMODULE m, const char* name) {
  return reinterpret_cast<F>(reinterpret_cast<void*>(GetProcAddress(m, name)));
}

// Static link: the CRT the program imports (msvcrt.dll, or ucrtbase.dll),
// resolved once before freeway can see a block of the CRT's (the constructor
// below), and again, harmlessly, from a foreign path that finds none.
void crt_lookup() {
  if (g_crt_count.load(std::memory_order_acquire) != 0 || g_crt_fixed.load(std::memory_order_acquire)) return;
  DWORD saved = GetLastError();
  if (HMODULE m = program_crt()) {
    CrtOriginals c{};
    auto heap_handle = proc<intptr_t(__cdecl*)()>(m, "_get_heap_handle");
    c.heap = heap_handle != nullptr ? reinterpret_cast<HANDLE>(heap_handle()) : GetProcessHeap();
    c.free = proc<FreeFn>(m, "free");
    c.msize = proc<MsizeFn>(m, "_msize");
    c.expand = proc<ExpandFn>(m, "_expand");
    c.aligned_free = proc<AlignedFreeFn>(m, "_aligned_free");
    c.aligned_msize = proc<AlignedMsizeFn>(m, "_aligned_msize");
    if (c.free != nullptr && c.msize != nullptr) crt_replace(&c, 1);
  }
  SetLastError(saved);
}
}  // namespace

HMODULE program_crt() {
  // Whether the .exe imports the universal CRT: ucrtbase.dll itself, or the
  // api-ms-win-crt-*.dll sets that forward to it.
  bool ucrt = false;
  if (auto* base = reinterpret_cast<const uint8_t*>(GetModuleHandleW(nullptr))) {
    auto* dos = reinterpret_cast<const IMAGE_DOS_HEADER*>(base);
    auto* nt = reinterpret_cast<const IMAGE_NT_HEADERS*>(base + dos->e_lfanew);
    const IMAGE_DATA_DIRECTORY& dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    for (auto* d = reinterpret_cast<const IMAGE_IMPORT_DESCRIPTOR*>(base + dir.VirtualAddress);
         dir.VirtualAddress != 0 && d->Name != 0 && !ucrt; d++) {
      const char* name = reinterpret_cast<const char*>(base + d->Name);
      ucrt = lstrcmpiA(name, "ucrtbase.dll") == 0 ||
             CompareStringA(LOCALE_INVARIANT, NORM_IGNORECASE, name, 15, "api-ms-win-crt-", 15) == CSTR_EQUAL;
    }
  }
  // A program that imports msvcrt (or both, rarely: taken for the universal
  // CRT's) has it loaded; one that imports neither gets msvcrt, else ucrtbase.
  if (ucrt) return GetModuleHandleW(L"ucrtbase.dll");
  if (HMODULE m = GetModuleHandleW(L"msvcrt.dll")) return m;
  return GetModuleHandleW(L"ucrtbase.dll");
}

void crt_use(const CrtOriginals* crts, int n) {
  // The first call replaces what a lookup found: no patch is live yet, so no
  // free of another thread reads the set. Later ones (a CRT loaded later) run
  // while other threads free through the earlier CRTs' patches: the set then
  // only grows, each new entry written before the count that publishes it.
  if (!g_crt_fixed.exchange(true, std::memory_order_acq_rel)) return crt_replace(crts, n);
  if (n > kMaxCrts) n = kMaxCrts;
  const int have = g_crt_count.load(std::memory_order_relaxed);
  for (int i = have; i < n; i++) g_crts[i] = crts[i];
  if (n > have) g_crt_count.store(n, std::memory_order_release);
}

// The CRT whose heap holds the block p starts. HeapValidate with a block
// address checks that one block and is safe on any pointer (FALSE for one the
// heap does not hold).
const CrtOriginals* crt_first() {
  crt_lookup();
  return g_crt_count.load(std::memory_order_acquire) > 0 ? &g_crts[0] : nullptr;
}

const CrtOriginals* crt_owner(const void* p) {
  crt_lookup();
  int n = g_crt_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (g_crts[i].heap != nullptr && HeapValidate(g_crts[i].heap, 0, p) != 0) return &g_crts[i];
  return nullptr;
}

}  // namespace fw::win

namespace {
using fw::win::crt_owner;

bool crt_owns(const void* p) { return crt_owner(p) != nullptr; }
void crt_free(void* p) { crt_owner(p)->free(p); }
size_t crt_usable(const void* p) { return crt_owner(p)->msize(const_cast<void*>(p)); }

constexpr fw::ForeignHeap kCrtHeap = {&crt_owns, &crt_free, &crt_usable};

__attribute__((constructor(101))) void register_crt_heap() {
  fw::win::crt_lookup();
  fw::foreign_register(&kCrtHeap);
}

}  // namespace

extern "C" {

int freeway_crt_anchor = 1;  // referenced by override.cpp: see there

size_t __cdecl _msize(void* p) {
  if (p == nullptr) {
    errno = EINVAL;
    return size_t(-1);
  }
  return fw_usable_size(p);  // a CRT block: its own _msize (core/foreign.h)
}

// Resizes in place or fails: freeway blocks keep their size class, so a block
// can only "grow" within what it holds already.
void* __cdecl _expand(void* p, size_t n) {
  if (p == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (!fw_owns(p)) {
    const fw::win::CrtOriginals* c = crt_owner(p);
    if (c != nullptr && c->expand != nullptr) return c->expand(p, n);
    errno = EINVAL;
    return nullptr;
  }
  if (n <= fw_usable_size(p)) return p;
  errno = ENOMEM;
  return nullptr;
}

// realloc, then the bytes past the old block are zeroed (as the CRT's _recalloc).
void* __cdecl _recalloc(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t old = p != nullptr ? fw_usable_size(p) : 0;
  void* q = fw_realloc(p, total);
  // Every byte past the old block is zeroed, up to the new block's _msize
  // (its usable size, more than asked): a later _recalloc within it keeps
  // no stale bytes.
  size_t now = q != nullptr ? fw_usable_size(q) : 0;
  if (now > old) std::memset(static_cast<char*>(q) + old, 0, now - old);
  return q;
}

// The _aligned_ family. _aligned_offset_malloc(size, align, offset) returns q
// with q + offset aligned, so q is usually not the start of a block: the
// block is allocated aligned with room for a 16-byte tag before q, and its
// first word names q (keyed with the block's canary, secure.h). _aligned_free
// and the others find the block from q (fw_block_start) and accept an
// interior q only with its tag; any other interior pointer is passed to
// fw_free as it is, which reports it. Offset 0 (plain _aligned_malloc) returns
// the block's start and writes no tag.
namespace {
constexpr uint64_t kOffsetMark = 0x6f66667365742121ull;
uint64_t offset_tag(const void* start, const void* q) {
  return fw::canary_of(start) ^ reinterpret_cast<uintptr_t>(q) ^ kOffsetMark;
}

void* offset_alloc(size_t size, size_t alignment, size_t offset) {
  if (!fw::is_pow2(alignment) || (offset != 0 && offset >= size)) {  // as the UCRT: offset 0, or inside the block
    errno = EINVAL;
    return nullptr;
  }
  size_t a = alignment < 16 ? 16 : alignment;
  size_t shift = (a - offset % a) % a;  // start + shift + offset is aligned to a
  if (shift == 0) return fw_malloc_aligned(a, size == 0 ? 1 : size);
  if (shift < 16) shift += a;  // room for the tag (a >= 16)
  if (size > SIZE_MAX - shift) {
    errno = ENOMEM;
    return nullptr;
  }
  char* start = static_cast<char*>(fw_malloc_aligned(a, size + shift));
  if (start == nullptr) return nullptr;
  char* q = start + shift;
  *reinterpret_cast<uint64_t*>(start) = offset_tag(start, q);
  return q;
}

// The block start of q (freeway's): q itself, or the start whose tag names q.
// An untagged interior pointer comes back as is, for fw_free to report.
void* offset_start(void* q) {
  void* start = fw::fw_block_start(q);
  if (start == nullptr || start == q) return q;
  return *static_cast<uint64_t*>(start) == offset_tag(start, q) ? start : q;
}

size_t offset_usable(void* q) {
  void* start = offset_start(q);
  return fw_usable_size(start) - size_t(static_cast<char*>(q) - static_cast<char*>(start));
}
}  // namespace

void* __cdecl _aligned_offset_malloc(size_t size, size_t alignment, size_t offset) {
  return offset_alloc(size, alignment, offset);
}

void* __cdecl _aligned_malloc(size_t size, size_t alignment) { return offset_alloc(size, alignment, 0); }

void __cdecl _aligned_free(void* p) {
  if (p == nullptr) return;
  if (!fw_owns(p)) {
    // Made by the CRT's _aligned_malloc: its block starts before p (its own
    // header), so the heap is asked about the CRT's, not p.
    const fw::win::CrtOriginals* c = fw::win::crt_first();
    if (c != nullptr && c->aligned_free != nullptr) {
      c->aligned_free(p);
      return;
    }
  }
  fw_free(offset_start(p));
}

size_t __cdecl _aligned_msize(void* p, size_t alignment, size_t offset) {
  if (p == nullptr || !fw::is_pow2(alignment)) {
    errno = EINVAL;
    return size_t(-1);
  }
  if (!fw_owns(p)) {
    const fw::win::CrtOriginals* c = fw::win::crt_first();
    if (c != nullptr && c->aligned_msize != nullptr) return c->aligned_msize(p, alignment, offset);
  }
  return offset_usable(p);
}

void* __cdecl _aligned_offset_realloc(void* p, size_t size, size_t alignment, size_t offset) {
  // In the UCRT's order: NULL allocates (checking the alignment), size 0
  // frees, whatever the alignment; then the alignment is checked.
  if (p == nullptr) return offset_alloc(size, alignment, offset);
  if (size == 0) {
    _aligned_free(p);
    return nullptr;
  }
  if (!fw::is_pow2(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  bool ours = fw_owns(p) != 0;
  size_t old = _aligned_msize(p, alignment, offset);
  // Kept in place when aligned as asked and big enough, but not twice too big.
  if (ours && offset == 0 && offset_start(p) == p && (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0 &&
      size <= old && size > old / 2)
    return p;
  void* q = offset_alloc(size, alignment, offset);
  if (q == nullptr) return nullptr;  // the old block is intact
  std::memcpy(q, p, old < size ? old : size);
  _aligned_free(p);
  return q;
}

void* __cdecl _aligned_realloc(void* p, size_t size, size_t alignment) {
  return _aligned_offset_realloc(p, size, alignment, 0);
}

void* __cdecl _aligned_offset_recalloc(void* p, size_t count, size_t size, size_t alignment, size_t offset) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t old = p != nullptr ? _aligned_msize(p, alignment, offset) : 0;
  void* q = _aligned_offset_realloc(p, total, alignment, offset);
  size_t now = q != nullptr ? _aligned_msize(q, alignment, offset) : 0;  // as _recalloc
  if (now > old) std::memset(static_cast<char*>(q) + old, 0, now - old);
  return q;
}

void* __cdecl _aligned_recalloc(void* p, size_t count, size_t size, size_t alignment) {
  return _aligned_offset_recalloc(p, count, size, alignment, 0);
}

// The import-table pointers of the names the CRT headers declare dllimport,
// and of the four the program reaches by a plain call (for code compiled
// against dllimport declarations, such as MSVC's).
#define FW_IMP(name) __attribute__((used)) void* __imp_##name = reinterpret_cast<void*>(&name)
FW_IMP(_msize);
FW_IMP(_expand);
FW_IMP(_recalloc);
FW_IMP(_aligned_malloc);
FW_IMP(_aligned_free);
FW_IMP(_aligned_msize);
FW_IMP(_aligned_realloc);
FW_IMP(_aligned_recalloc);
FW_IMP(_aligned_offset_malloc);
FW_IMP(_aligned_offset_realloc);
FW_IMP(_aligned_offset_recalloc);
FW_IMP(malloc);
FW_IMP(free);
FW_IMP(calloc);
FW_IMP(realloc);

}  // extern "C"
