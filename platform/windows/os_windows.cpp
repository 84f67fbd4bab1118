// platform/windows/os_windows.cpp: the platform contract (platform/os.h) on
// Windows x86-64, with VirtualAlloc. See docs/porting.md.
//
// Windows differs from POSIX where the core can notice:
//  - memory is reserved, then committed: reserve is PAGE_NOACCESS address space,
//    commit charges the commit limit, decommit (MEM_DECOMMIT) gives pages back
//    and reads as zero once committed again; features().commit_is_noop is false
//    so the core commits exactly what it uses;
//  - a reservation is released whole (VirtualFree MEM_RELEASE takes only the
//    base it was made at), and the allocation granularity is 64 KiB: the core
//    never releases part of a reservation (os.h);
//  - thread exit runs through a fiber-local-storage callback (FlsAlloc), which
//    runs before the thread's TLS is torn down;
//  - there is no fork and there are no asynchronous signals.
// Every function keeps os.h's rules: no malloc, no lock the allocator needs.
#include "platform/os.h"
#include "platform/read_once.h"

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <bcrypt.h>
#include <io.h>
#include <psapi.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fw::os {
namespace {

constexpr Features kFeatures = {
    .commit_is_noop = false,
    .decommit_zeroes = true,
    .has_cpu_id = true,
    .reserve_extends = false,
};

// The FLS index + 1 of the thread-exit callback; 0 until created.
std::atomic<DWORD> g_fls{0};

// GetLastError is the program's, not ours: a malloc that succeeds must leave it
// as it was (the CRT's malloc does), so calls that may set it restore it.
struct KeepLastError {
  DWORD saved = GetLastError();
  ~KeepLastError() { SetLastError(saved); }
};

}  // namespace

const Features& features() { return kFeatures; }

size_t page_size() {
  static std::atomic<size_t> cached{0};
  return read_once(cached, [] {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize ? size_t(si.dwPageSize) : size_t(4096);
  });
}

size_t cpu_count() {
  static std::atomic<size_t> cached{0};
  return read_once(cached, [] {
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n > 0 ? size_t(n) : size_t(1);
  });
}

// Aligned reservations without partial release: reserve exactly `size` and
// keep it if the OS happened to align it; otherwise reserve size + align to
// find an aligned hole, release that whole, and reserve exactly the aligned
// part of it. Another thread may take the hole in between, so this retries.
void* reserve_aligned(size_t size, size_t align) {
  KeepLastError keep;
  void* p = VirtualAlloc(nullptr, size, MEM_RESERVE, PAGE_NOACCESS);
  if (p == nullptr) return nullptr;
  if ((reinterpret_cast<uintptr_t>(p) & (align - 1)) == 0) return p;
  VirtualFree(p, 0, MEM_RELEASE);
  if (size + align < size) return nullptr;
  for (int attempt = 0; attempt < 16; attempt++) {
    void* hole = VirtualAlloc(nullptr, size + align, MEM_RESERVE, PAGE_NOACCESS);
    if (hole == nullptr) return nullptr;
    uintptr_t a = (reinterpret_cast<uintptr_t>(hole) + align - 1) & ~(uintptr_t(align) - 1);
    VirtualFree(hole, 0, MEM_RELEASE);
    p = VirtualAlloc(reinterpret_cast<void*>(a), size, MEM_RESERVE, PAGE_NOACCESS);
    if (p != nullptr) return p;
  }
  return nullptr;
}

Reserve reserve_at(void* addr, size_t size) {
  KeepLastError keep;
  void* p = VirtualAlloc(addr, size, MEM_RESERVE, PAGE_NOACCESS);
  if (p == addr) return Reserve::kDone;
  if (p != nullptr) {
    VirtualFree(p, 0, MEM_RELEASE);
    return Reserve::kTaken;
  }
  // ERROR_INVALID_ADDRESS: part of the range is in use; ERROR_INVALID_PARAMETER:
  // the range lies past the user address space (8 TiB before Windows 8.1), where
  // a lower address may still work; anything else (commit limit, no memory) is
  // a refusal.
  const DWORD e = GetLastError();
  return e == ERROR_INVALID_ADDRESS || e == ERROR_INVALID_PARAMETER ? Reserve::kTaken : Reserve::kRefused;
}

void release(void* p, size_t) {
  KeepLastError keep;
  VirtualFree(p, 0, MEM_RELEASE);
}

bool commit(void* p, size_t size) {
  KeepLastError keep;
  return VirtualAlloc(p, size, MEM_COMMIT, PAGE_READWRITE) != nullptr;
}

bool decommit(void* p, size_t size) {
  KeepLastError keep;
  return VirtualFree(p, size, MEM_DECOMMIT) != 0;
}

// Windows cannot move committed pages between reservations (no counterpart
// of mremap): the caller copies.
bool move_pages(void*, void*, size_t) { return false; }

bool protect(void* p, size_t size, bool accessible) {
  KeepLastError keep;
  DWORD old;
  return VirtualProtect(p, size, accessible ? PAGE_READWRITE : PAGE_NOACCESS, &old) != 0;
}

// VirtualProtect splits an allocation's regions with no per-process count to run out of.
size_t map_count_limit() { return 0; }

void* alloc_metadata(size_t size) {
  KeepLastError keep;
  return VirtualAlloc(nullptr, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);  // zeroed
}

unsigned cpu_id() { return unsigned(GetCurrentProcessorNumber()); }

// Windows has no restartable sequences: freeway keeps per-thread caches there.
bool rseq_offset(ptrdiff_t*) { return false; }
size_t cpu_count_possible() { return cpu_count(); }
// Only per-CPU mode (Linux) uses these.
bool affinity_get(Affinity*) { return false; }
bool affinity_set(const Affinity&) { return false; }
bool affinity_set_one(unsigned) { return false; }

// BCryptGenRandom, found at first use: freeway.dll then depends on kernel32
// alone at load (bcrypt.dll is a system DLL, loaded from System32 only).
uint64_t random_u64() {
  KeepLastError keep;
  using GenRandom = LONG(WINAPI*)(void*, PUCHAR, ULONG, ULONG);
  static std::atomic<GenRandom> gen{nullptr};
  GenRandom f = gen.load(std::memory_order_acquire);
  if (f == nullptr) {
    HMODULE m = LoadLibraryExW(L"bcrypt.dll", nullptr, LOAD_LIBRARY_SEARCH_SYSTEM32);
    if (m != nullptr) f = reinterpret_cast<GenRandom>(reinterpret_cast<void*>(GetProcAddress(m, "BCryptGenRandom")));
    gen.store(f, std::memory_order_release);
  }
  uint64_t v = 0;
  if (f != nullptr && f(nullptr, reinterpret_cast<PUCHAR>(&v), sizeof v, BCRYPT_USE_SYSTEM_PREFERRED_RNG) >= 0) return v;
  LARGE_INTEGER t;
  QueryPerformanceCounter(&t);
  uint64_t x = uint64_t(t.QuadPart) ^ reinterpret_cast<uintptr_t>(&v) ^ (uint64_t(GetCurrentThreadId()) << 32);
  x ^= x >> 33;  // a mix of the clock and addresses (weak; BCrypt failed)
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 33);
}

uint64_t now_ns() {
  static std::atomic<int64_t> freq{0};
  int64_t f = freq.load(std::memory_order_relaxed);
  if (f == 0) {
    LARGE_INTEGER q;
    QueryPerformanceFrequency(&q);
    f = q.QuadPart > 0 ? q.QuadPart : 1;
    freq.store(f, std::memory_order_relaxed);
  }
  LARGE_INTEGER t;
  QueryPerformanceCounter(&t);
  uint64_t c = uint64_t(t.QuadPart), uf = uint64_t(f);
  return c / uf * 1000000000ull + c % uf * 1000000000ull / uf;  // no overflow for centuries
}

// Milliseconds since boot, in steps of the system tick (10-16 ms); one read of
// a shared page, no QueryPerformanceCounter.
uint64_t now_ms_coarse() { return GetTickCount64(); }

// FLS callbacks run when a thread exits (and when the index is freed), with
// the thread's value, before its TLS goes away: the core releases the LAB.
bool thread_exit_init(void (*fn)(void*)) {
  if (g_fls.load(std::memory_order_acquire) != 0) return true;
  KeepLastError keep;
  DWORD i = FlsAlloc(reinterpret_cast<PFLS_CALLBACK_FUNCTION>(fn));
  if (i == FLS_OUT_OF_INDEXES) return g_fls.load(std::memory_order_acquire) != 0;
  DWORD expected = 0;
  if (!g_fls.compare_exchange_strong(expected, i + 1, std::memory_order_acq_rel, std::memory_order_acquire))
    FlsFree(i);  // another thread won; it holds the same callback
  return true;
}

bool thread_exit_register(void* arg) {
  DWORD i = g_fls.load(std::memory_order_acquire);
  if (i == 0) return false;
  KeepLastError keep;
  return FlsSetValue(i - 1, arg) != 0;
}

void* thread_exit_registered() {
  DWORD i = g_fls.load(std::memory_order_acquire);
  if (i == 0) return nullptr;
  KeepLastError keep;
  return FlsGetValue(i - 1);
}

void write_stderr(const char* s, size_t n) { write_fd(2, s, n); }

void write_fd(int fd, const char* s, size_t n) {
  KeepLastError keep;
  HANDLE h = fd == 1 ? GetStdHandle(STD_OUTPUT_HANDLE)
           : fd == 2 ? GetStdHandle(STD_ERROR_HANDLE)
                     : reinterpret_cast<HANDLE>(_get_osfhandle(fd));
  if (h == nullptr || h == INVALID_HANDLE_VALUE) return;
  while (n > 0) {
    DWORD wrote = 0;
    if (!WriteFile(h, s, n > 0x40000000 ? 0x40000000 : DWORD(n), &wrote, nullptr) || wrote == 0) return;
    s += wrote;
    n -= wrote;
  }
}

[[noreturn]] void abort_process() {
  // What the Windows heap does on corruption: a fail-fast exception that no
  // handler can swallow (STATUS_STACK_BUFFER_OVERRUN, code 7 = heap metadata).
#if defined(_MSC_VER) && !defined(__clang__)
  __fastfail(7);
#else
  asm volatile("int $0x29" : : "c"(7) : "memory");  // __fastfail(7), which mingw lacks
#endif
  TerminateProcess(GetCurrentProcess(), 3);  // if fail-fast is not available
  for (;;) {
  }
}

// GetEnvironmentVariableW reads the process's environment block without the
// CRT (whose getenv may allocate a converted copy). The value is kept in one
// of a ring of buffers; the caller (options.cpp) reads it at once.
const char* getenv(const char* name) {
  // A ring of buffers: a value stays valid until 64 more calls. The options
  // (core/options.cpp, ten names) are read when the library loads, before
  // another thread calls into it; were several threads to read them at once,
  // it would take seven of them to wrap the ring under one.
  static char values[64][512];
  static std::atomic<unsigned> next{0};
  KeepLastError keep;
  wchar_t wname[128], wvalue[512];
  size_t n = 0;
  for (; name[n] != 0; n++) {
    if (n + 1 >= sizeof wname / sizeof wname[0]) return nullptr;
    wname[n] = wchar_t(static_cast<unsigned char>(name[n]));
  }
  wname[n] = 0;
  DWORD len = GetEnvironmentVariableW(wname, wvalue, DWORD(sizeof wvalue / sizeof wvalue[0]));
  if (len == 0 || len >= sizeof wvalue / sizeof wvalue[0]) return nullptr;  // unset, or too long for an option
  char* out = values[next.fetch_add(1, std::memory_order_relaxed) % 64];
  for (DWORD i = 0; i <= len; i++) out[i] = wvalue[i] < 128 ? char(wvalue[i]) : '?';
  return out;
}

void set_errno_nomem() { errno = ENOMEM; }
void set_errno_inval() { errno = EINVAL; }

// --- Telemetry -------------------------------------------------------------
// A named, pagefile-backed section `Local\<name>` (this session's namespace)
// whose DACL has one entry: full access for the process's user. The name
// lives as long as a handle is open: the writer keeps one until shared_unlink.
namespace {
HANDLE g_section = nullptr;

// The security functions live in advapi32.dll, which freeway.dll does not
// import: they are found when telemetry starts (never on a malloc path).
struct Advapi {
  BOOL(WINAPI* open_token)(HANDLE, DWORD, PHANDLE);
  BOOL(WINAPI* token_info)(HANDLE, TOKEN_INFORMATION_CLASS, LPVOID, DWORD, PDWORD);
  BOOL(WINAPI* init_acl)(PACL, DWORD, DWORD);
  BOOL(WINAPI* add_allowed)(PACL, DWORD, DWORD, PSID);
  BOOL(WINAPI* init_sd)(PSECURITY_DESCRIPTOR, DWORD);
  BOOL(WINAPI* set_dacl)(PSECURITY_DESCRIPTOR, BOOL, PACL, BOOL);
};

template <class F>
bool find(HMODULE m, const char* name, F* out) {
  *out = reinterpret_cast<F>(reinterpret_cast<void*>(GetProcAddress(m, name)));
  return *out != nullptr;
}

// Fills sa with a descriptor whose DACL allows the process's user alone
// (storage: sd, and acl of acl_size bytes). False if any step fails.
bool user_only(SECURITY_ATTRIBUTES* sa, SECURITY_DESCRIPTOR* sd, ACL* acl, DWORD acl_size) {
  HMODULE m = LoadLibraryExW(L"advapi32.dll", nullptr, LOAD_LIBRARY_SEARCH_SYSTEM32);
  Advapi a;
  if (m == nullptr || !find(m, "OpenProcessToken", &a.open_token) || !find(m, "GetTokenInformation", &a.token_info) ||
      !find(m, "InitializeAcl", &a.init_acl) || !find(m, "AddAccessAllowedAce", &a.add_allowed) ||
      !find(m, "InitializeSecurityDescriptor", &a.init_sd) || !find(m, "SetSecurityDescriptorDacl", &a.set_dacl))
    return false;
  HANDLE token;
  if (!a.open_token(GetCurrentProcess(), TOKEN_QUERY, &token)) return false;
  alignas(8) unsigned char user_buf[256];
  DWORD got = 0;
  bool ok = a.token_info(token, TokenUser, user_buf, sizeof user_buf, &got) != 0;
  CloseHandle(token);
  if (!ok) return false;
  PSID sid = reinterpret_cast<TOKEN_USER*>(user_buf)->User.Sid;
  if (!a.init_acl(acl, acl_size, ACL_REVISION) || !a.add_allowed(acl, ACL_REVISION, GENERIC_ALL, sid) ||
      !a.init_sd(sd, SECURITY_DESCRIPTOR_REVISION) || !a.set_dacl(sd, TRUE, acl, FALSE))
    return false;
  *sa = SECURITY_ATTRIBUTES{sizeof *sa, sd, FALSE};
  return true;
}
}  // namespace

void* shared_create(const char* name, size_t size, const char** why) {
  KeepLastError keep;
  wchar_t wname[128] = L"Local\\";
  size_t n = 6;
  for (const char* p = name; *p != 0; p++) {
    if (n + 1 >= sizeof wname / sizeof wname[0]) {
      *why = "segment name too long";
      return nullptr;
    }
    wname[n++] = wchar_t(static_cast<unsigned char>(*p));
  }
  wname[n] = 0;
  SECURITY_ATTRIBUTES sa;
  SECURITY_DESCRIPTOR sd;
  alignas(8) unsigned char acl[256];
  if (!user_only(&sa, &sd, reinterpret_cast<ACL*>(acl), sizeof acl)) {
    *why = "cannot build a security descriptor for this user";
    return nullptr;
  }
  HANDLE h = CreateFileMappingW(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, DWORD(uint64_t(size) >> 32),
                                DWORD(size), wname);
  if (h == nullptr) {
    *why = "CreateFileMapping failed";
    return nullptr;
  }
  if (GetLastError() == ERROR_ALREADY_EXISTS) {  // never write into someone else's section
    CloseHandle(h);
    *why = "a section of that name exists already";
    return nullptr;
  }
  void* p = MapViewOfFile(h, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, size);
  if (p == nullptr) {
    CloseHandle(h);
    *why = "MapViewOfFile failed";
    return nullptr;
  }
  g_section = h;
  return p;
}

void shared_unlink(const char*) {
  if (g_section != nullptr) {
    KeepLastError keep;
    CloseHandle(g_section);  // the view stays valid; readers keep their own handles
    g_section = nullptr;
  }
}

// A view of a section cannot give its pages back while mapped, and zeroing
// them would touch every page of the 194 MiB, written or not: the pages stay
// as they are until the process exits (os.h). Readers that still hold a view
// see the segment stopped by its header (telemetry_stop zeroes the magic).
void shared_discard(void*, size_t) {}

void shared_detach(void*, size_t) {}  // no fork on Windows

namespace {
struct ThreadStart {
  void (*fn)(void*);
  void* arg;
};
DWORD WINAPI thread_trampoline(void* raw) {
  ThreadStart* t = static_cast<ThreadStart*>(raw);
  void (*fn)(void*) = t->fn;
  void* arg = t->arg;
  VirtualFree(t, 0, MEM_RELEASE);
  fn(arg);
  return 0;
}
}  // namespace

bool thread_start(void (*fn)(void*), void* arg, uintptr_t* handle) {
  KeepLastError keep;
  auto* t = static_cast<ThreadStart*>(alloc_metadata(sizeof(ThreadStart)));
  if (t == nullptr) return false;
  t->fn = fn;
  t->arg = arg;
  HANDLE h = CreateThread(nullptr, 0, &thread_trampoline, t, 0, nullptr);
  if (h == nullptr) {
    VirtualFree(t, 0, MEM_RELEASE);
    return false;
  }
  *handle = reinterpret_cast<uintptr_t>(h);
  return true;
}

void thread_join(uintptr_t handle) {
  KeepLastError keep;
  HANDLE h = reinterpret_cast<HANDLE>(handle);
  WaitForSingleObject(h, INFINITE);
  CloseHandle(h);
}

uintptr_t thread_self() { return uintptr_t(GetCurrentThreadId()); }

void sleep_ns(uint64_t ns) { Sleep(DWORD((ns + 999999) / 1000000)); }

uint64_t process_id() { return uint64_t(GetCurrentProcessId()); }

// Wine's FlushProcessWriteBuffers is a stub in the wine of Debian 12 (8.0: it
// returns at once), and later versions that implement it cannot be told apart
// by a test that passes: the store-buffering litmus test (tests/litmus.h) saw
// both loads miss with it in 1 round of 20,000 (Stop 63's CI), where it had
// seen none in Stop 62. So under wine (its ntdll exports wine_get_version) the
// barrier is refused, and a caller does without it, as on an OS that has none.
// 0: not looked yet, 1: Windows, 2: wine. Racing first callers look alike.
namespace {
std::atomic<int> g_barrier_os{0};
}  // namespace
bool process_barrier() {
  int os_kind = g_barrier_os.load(std::memory_order_relaxed);
  if (os_kind == 0) {
    HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
    os_kind = ntdll != nullptr && GetProcAddress(ntdll, "wine_get_version") != nullptr ? 2 : 1;
    g_barrier_os.store(os_kind, std::memory_order_relaxed);
  }
  if (os_kind == 2) return false;
  FlushProcessWriteBuffers();  // Vista and later; it cannot fail
  return true;
}

bool read_word_nofault(const void* addr, uintptr_t* out) {
  KeepLastError keep;
  uintptr_t v = 0;
  SIZE_T n = 0;
  if (!ReadProcessMemory(GetCurrentProcess(), addr, &v, sizeof v, &n) || n != sizeof v) return false;
  *out = v;
  return true;
}

bool address_space_limited() { return false; }  // no per-process cap on reservations
bool reserve_is_charged() { return false; }     // MEM_RESERVE commits nothing

uint64_t resident_bytes() {
  KeepLastError keep;
  PROCESS_MEMORY_COUNTERS c;
  if (!K32GetProcessMemoryInfo(GetCurrentProcess(), &c, sizeof c)) return 0;
  return uint64_t(c.WorkingSetSize);
}

// The creation time (100 ns units since 1601): with the pid, names one process.
uint64_t process_start_ticks() {
  KeepLastError keep;
  FILETIME created, exited, kernel, user;
  if (!GetProcessTimes(GetCurrentProcess(), &created, &exited, &kernel, &user)) return 0;
  return (uint64_t(created.dwHighDateTime) << 32) | created.dwLowDateTime;
}

void program_name(char* buf, size_t size) {
  if (size == 0) return;
  buf[0] = 0;
  KeepLastError keep;
  wchar_t path[MAX_PATH];
  DWORD n = GetModuleFileNameW(nullptr, path, MAX_PATH);
  if (n == 0 || n >= MAX_PATH) return;
  DWORD start = 0;
  for (DWORD i = 0; i < n; i++)
    if (path[i] == L'\\' || path[i] == L'/') start = i + 1;
  size_t o = 0;
  for (DWORD i = start; i < n && o + 1 < size; i++) buf[o++] = path[i] < 128 ? char(path[i]) : '?';
  buf[o] = 0;
}

bool at_fork_child(void (*)()) { return true; }  // no fork: nothing to run

bool at_exit(void (*fn)()) { return std::atexit(fn) == 0; }

}  // namespace fw::os
