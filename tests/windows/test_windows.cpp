// tests/windows/test_windows.cpp: freeway on Windows, run under wine by
// `make test-windows` (one ctest entry per test case).
//
// The program links libfreeway.a, so this file is also the static-link test:
// malloc, the CRT's own names and operator new in it are freeway's, while the
// CRT (msvcrt.dll) still allocates inside itself from its own heap.
// Mode "--child <what>" runs one misuse (or publishes telemetry) in a child process.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <windows.h>
#include <psapi.h>
#include <aclapi.h>
#include <direct.h>
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "freeway.h"
#include "freeway_telemetry.h"
#include "platform/os.h"
#include "shim/windows/patch.h"
#include "tests/litmus.h"
#include "tests/rng.h"

// msvcrt exports it; mingw's headers declare it only for newer CRT versions.
extern "C" size_t __cdecl _aligned_msize(void* p, size_t alignment, size_t offset);

namespace {

using fwtest::Rng;

bool aligned_to(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

template <class F>
HANDLE start_thread(F* f) {
  return CreateThread(nullptr, 0, [](void* a) -> DWORD { (*static_cast<F*>(a))(); return 0; }, f, 0, nullptr);
}

uint64_t threads_live() {
  static fw_stats_t st;  // large: not on a thread's stack
  fw_stats(&st);
  return st.threads_live;
}

// This program's directory, where the build puts freeway.dll, freeway-inject.exe
// and the programs injected into (tests/windows/CMakeLists.txt).
std::wstring here() {
  wchar_t self[MAX_PATH];
  DWORD n = GetModuleFileNameW(nullptr, self, MAX_PATH);
  std::wstring s(self, n);
  return s.substr(0, s.find_last_of(L"\\/") + 1);
}

struct Child {
  HANDLE process = nullptr, in = nullptr, out = nullptr, err = nullptr;
  DWORD pid = 0;
  DWORD start_error = 0;  // GetLastError of the last CreateProcessW that failed
};

Child start(const std::wstring& cmd) {
  Child c;
  SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
  HANDLE in_r, out_w, err_w;
  CreatePipe(&in_r, &c.in, &sa, 0);
  CreatePipe(&c.out, &out_w, &sa, 1 << 20);
  CreatePipe(&c.err, &err_w, &sa, 1 << 20);
  for (HANDLE h : {c.in, c.out, c.err}) SetHandleInformation(h, HANDLE_FLAG_INHERIT, 0);
  STARTUPINFOW si{};
  si.cb = sizeof si;
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdInput = in_r;
  si.hStdOutput = out_w;
  si.hStdError = err_w;
  PROCESS_INFORMATION pi{};
  std::wstring dir = here();
  // A plain test program once never started under wine (Stop 53's CI: no
  // output, the exit code still Ran's initial -1), and reruns did not repeat
  // it. A refused start is tried again, up to three times, each refusal
  // printed with its error, so that a test fails on what the program did, not
  // on whether the harness could launch it.
  for (int attempt = 0; attempt < 3 && c.process == nullptr; ++attempt) {
    std::wstring line = cmd;
    if (CreateProcessW(nullptr, line.data(), nullptr, nullptr, TRUE, 0, nullptr, dir.c_str(), &si, &pi)) {
      c.process = pi.hProcess;
      c.pid = pi.dwProcessId;
      CloseHandle(pi.hThread);
    } else {
      c.start_error = GetLastError();
      std::fprintf(stderr, "CreateProcessW refused a start (error %lu), attempt %d of 3\n",
                   static_cast<unsigned long>(c.start_error), attempt + 1);
      Sleep(250);
    }
  }
  CloseHandle(in_r);
  CloseHandle(out_w);
  CloseHandle(err_w);
  return c;
}

std::string read_all(HANDLE h) {
  std::string s;
  char buf[4096];
  DWORD n;
  while (ReadFile(h, buf, sizeof buf, &n, nullptr) && n > 0) s.append(buf, n);
  return s;
}

struct Ran {
  DWORD code = DWORD(-1);
  std::string out, err;
  DWORD start_error = 0;  // nonzero when the program never started
};

Ran finish(Child& c) {
  Ran r;
  if (c.process == nullptr) r.start_error = c.start_error;
  CloseHandle(c.in);
  r.out = read_all(c.out);
  r.err = read_all(c.err);
  if (c.process != nullptr) {
    WaitForSingleObject(c.process, 120000);
    GetExitCodeProcess(c.process, &r.code);
    CloseHandle(c.process);
  }
  CloseHandle(c.out);
  CloseHandle(c.err);
  return r;
}

Ran run(const std::wstring& cmd, const char* input = nullptr) {
  Child c = start(cmd);
  DWORD wrote;
  if (input != nullptr) WriteFile(c.in, input, DWORD(std::strlen(input)), &wrote, nullptr);
  return finish(c);
}

std::wstring injected(const std::wstring& program) { return L"\"" + here() + L"freeway-inject.exe\" -- " + program; }

bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// Runs program alone and under freeway-inject.exe: both exit 0 with the same
// stdout, and alone it reports nothing (it reports only with freeway.dll in
// it). Returns the injected run, whose stderr says what freeway served.
Ran plain_and_injected(const std::wstring& program) {
  Ran plain = run(program);
  Ran inj = run(injected(program));
  CAPTURE(plain.out);
  CAPTURE(inj.err);
  CAPTURE(plain.start_error);
  CAPTURE(inj.start_error);
  CHECK(plain.code == 0);
  CHECK(inj.code == 0);
  CHECK(!plain.out.empty());
  CHECK(plain.out == inj.out);
  CHECK(plain.err.empty());
  return inj;
}


// The misuses a child commits; each must stop it with freeway's message.
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
int child(const char* what) {
  volatile char* p = static_cast<char*>(malloc(48));
  if (std::strcmp(what, "double-free") == 0) {
    free(const_cast<char*>(p));
    free(const_cast<char*>(p));
  } else if (std::strcmp(what, "invalid-free") == 0) {
    free(const_cast<char*>(p + 16));
  } else if (std::strcmp(what, "stack-free") == 0) {
    char local[64];
    free(local + *p % 1);
  } else if (std::strcmp(what, "aligned-double-free") == 0) {
    void* a = _aligned_malloc(100, 64);
    _aligned_free(a);
    _aligned_free(a);
  } else if (std::strcmp(what, "offset-double-free") == 0) {
    void* a = _aligned_offset_malloc(100, 64, 8);
    _aligned_free(a);
    _aligned_free(a);
  } else if (std::strcmp(what, "offset-interior-free") == 0) {
    char* a = static_cast<char*>(_aligned_offset_malloc(100, 64, 8));
    _aligned_free(a + 16);  // inside the block, but not what was handed out
  } else if (std::strcmp(what, "publish") == 0) {
    // Publishes telemetry with some blocks live, until a line arrives on stdin.
    if (fw_telemetry_start() != 0) return 5;
    static void* keep[5000];
    for (int i = 0; i < 5000; i++) keep[i] = malloc(size_t(16) << (i % 9));
    std::printf("ready\n");
    std::fflush(stdout);
    char line[16];
    if (std::fgets(line, sizeof line, stdin) == nullptr) return 6;
    for (void* k : keep) free(k);
    return 0;
  } else if (std::strcmp(what, "sized-delete") == 0) {
    ::operator delete(const_cast<char*>(p), size_t(4096));
  }
  return 0;  // not stopped: the parent reports it
}

}  // namespace

// --- The platform contract (platform/windows/os_windows.cpp) ---------------

TEST_CASE("platform: aligned reservations, commit, decommit reads zero, guard pages") {
  using namespace fw::os;
  CHECK(!features().commit_is_noop);
  CHECK(page_size() == 4096);
  CHECK(cpu_count() >= 1);
  for (size_t align : {size_t(64) << 10, size_t(1) << 20, size_t(1) << 30}) {
    void* r = reserve_aligned(size_t(4) << 20, align);
    REQUIRE(r != nullptr);
    CHECK(aligned_to(r, align));
    REQUIRE(commit(r, 65536));
    std::memset(r, 0xab, 65536);
    CHECK(decommit(r, 65536));
    REQUIRE(commit(r, 65536));
    CHECK(static_cast<unsigned char*>(r)[100] == 0);  // decommit_zeroes
    CHECK(protect(static_cast<char*>(r) + 4096, 4096, false));
    MEMORY_BASIC_INFORMATION mi;
    VirtualQuery(static_cast<char*>(r) + 4096, &mi, sizeof mi);
    CHECK(mi.Protect == PAGE_NOACCESS);
    CHECK(protect(static_cast<char*>(r) + 4096, 4096, true));
    release(r, size_t(4) << 20);
    VirtualQuery(r, &mi, sizeof mi);
    CHECK(mi.State == MEM_FREE);  // released whole
  }
}

TEST_CASE("platform: randomness, time, environment, names; GetLastError is kept") {
  using namespace fw::os;
  CHECK(random_u64() != random_u64());
  uint64_t t0 = now_ns(), m0 = now_ms_coarse();
  Sleep(100);
  uint64_t dt = now_ns() - t0, dm = now_ms_coarse() - m0;
  CHECK(dt >= 95'000'000);
  CHECK(dt < 5'000'000'000ull);
  // The coarse clock moves by ticks of up to 16 ms: within two of the fine one.
  CHECK(dm + 32 >= dt / 1'000'000);
  CHECK(dm <= dt / 1'000'000 + 32);
  SetEnvironmentVariableW(L"FREEWAY_TEST_VALUE", L"12345");
  REQUIRE(fw::os::getenv("FREEWAY_TEST_VALUE") != nullptr);
  CHECK(std::strcmp(fw::os::getenv("FREEWAY_TEST_VALUE"), "12345") == 0);
  CHECK(fw::os::getenv("FREEWAY_TEST_UNSET_NAME") == nullptr);
  char name[64];
  program_name(name, sizeof name);
  CHECK(std::strstr(name, "test_windows") != nullptr);
  CHECK(process_id() == GetCurrentProcessId());
  CHECK(resident_bytes() > 0);
  // A malloc that succeeds leaves the program's last error as it was, even
  // when it binds a new thread's cache (FLS) or takes memory (VirtualAlloc).
  struct Probe {
    DWORD seen = 0;
    void operator()() {
      SetLastError(1234);
      void* p = malloc(3 << 20);
      void* q = malloc(40);
      free(q);
      free(p);
      seen = GetLastError();
    }
  } probe;
  HANDLE h = start_thread(&probe);
  WaitForSingleObject(h, INFINITE);
  CloseHandle(h);
  CHECK(probe.seen == 1234);
}

TEST_CASE("platform: read_word_nofault reads a committed word, never faults, and keeps GetLastError") {
  using namespace fw::os;
  auto* page = static_cast<uintptr_t*>(VirtualAlloc(nullptr, 4096, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE));
  REQUIRE(page != nullptr);
  page[5] = 0x5eed1234abcdull;
  uintptr_t v = 0;
  SetLastError(4321);
  bool ok = read_word_nofault(page + 5, &v);
  DWORD e = GetLastError();
  REQUIRE(ok);
  CHECK(v == 0x5eed1234abcdull);
  CHECK(e == 4321);
  // Released: Windows refuses the read, wine reads zeros (platform/os.h). Either
  // way no fault, and no stale word.
  REQUIRE(VirtualFree(page, 0, MEM_RELEASE));
  v = 5;
  SetLastError(4321);
  ok = read_word_nofault(page + 5, &v);
  e = GetLastError();
  CHECK(e == 4321);
  if (ok) CHECK(v == 0);
  else CHECK(v == 5);
  // The first 64 KiB are never mapped: refused everywhere.
  v = 5;
  CHECK_FALSE(read_word_nofault(nullptr, &v));
  CHECK_FALSE(read_word_nofault(reinterpret_cast<void*>(uintptr_t(0x8000)), &v));
  CHECK(v == 5);
}

// The store-buffering litmus test (tests/litmus.h) with
// FlushProcessWriteBuffers as the barrier: never may both loads miss. Under
// wine the barrier is refused (os_windows.cpp: its FlushProcessWriteBuffers is
// a stub), and only that is checked there.
TEST_CASE("platform: process_barrier orders another thread's store before its load, for the caller") {
  HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
  if (ntdll != nullptr && GetProcAddress(ntdll, "wine_get_version") != nullptr) {
    CHECK_FALSE(fw::os::process_barrier());
    MESSAGE("wine: process_barrier is refused; the ordering is checked on Windows only");
    return;
  }
  uint32_t refused = 0;  // barriers that returned false, checked after the join (not a REQUIRE in the loop)
  auto run = [&refused](uint32_t rounds, bool barrier) {
    auto* t = new fwtest::StoreBuffering(rounds);  // aligned members: not on a thread's stack
    HANDLE h = start_thread(t);
    const uint32_t both_missed = t->run(barrier ? &fw::os::process_barrier : nullptr, &refused);
    WaitForSingleObject(h, INFINITE);
    CloseHandle(h);
    delete t;
    return both_missed;
  };
  const uint32_t control = run(100000, false);
  MESSAGE("rounds where both loads missed without the barrier: " << control << " of 100000");
  CHECK(run(20000, true) == 0);
  CHECK(refused == 0);
}

// --- The API with Windows semantics, in a statically linked program --------

TEST_CASE("static link: malloc, calloc, realloc, new and the CRT names are freeway's") {
  void* p = malloc(100);
  CHECK(fw_owns(p));
  CHECK(_msize(p) >= 100);
  void* q = realloc(p, 5000);
  CHECK(fw_owns(q));
  free(q);
  int* z = static_cast<int*>(calloc(1000, sizeof(int)));
  CHECK(fw_owns(z));
  bool zero = true;
  for (int i = 0; i < 1000; i++) zero &= z[i] == 0;
  CHECK(zero);
  free(z);
  auto* s = new std::string(200, 'x');
  CHECK(fw_owns(s));
  CHECK(fw_owns(s->data()));
  delete s;
  auto* arr = new double[1000];
  CHECK(fw_owns(arr));
  delete[] arr;
  errno = 0;
  CHECK(calloc(SIZE_MAX / 2, 4) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(malloc(SIZE_MAX - 4096) == nullptr);
  CHECK(errno == ENOMEM);
  CHECK(realloc(malloc(10), 0) == nullptr);  // frees, as the CRT does
}

TEST_CASE("CRT names: _msize, _expand, _recalloc") {
  char* p = static_cast<char*>(malloc(100));
  size_t holds = _msize(p);
  CHECK(holds >= 100);
  CHECK(_expand(p, holds) == p);        // within the block: in place
  errno = 0;
  CHECK(_expand(p, holds * 64) == nullptr);  // no room: fails, block intact
  CHECK(errno == ENOMEM);
  std::memset(p, 0x5a, 100);
  char* r = static_cast<char*>(_recalloc(p, 10, 100));
  REQUIRE(r != nullptr);
  CHECK(fw_owns(r));
  CHECK(r[99] == 0x5a);
  bool zero = true;
  for (size_t i = holds; i < 1000; i++) zero &= r[i] == 0;
  CHECK(zero);
  errno = 0;
  CHECK(_recalloc(r, SIZE_MAX / 2, 4) == nullptr);
  CHECK(errno == ENOMEM);
  free(r);
  errno = 0;
  CHECK(_msize(nullptr) == size_t(-1));
  CHECK(errno == EINVAL);
}

TEST_CASE("CRT names: _recalloc and _aligned_recalloc leave no stale byte up to the new block's _msize") {
  // Blocks freed dirty, then taken again by _recalloc: a block of 40 bytes
  // holds 48, and growing it to its _msize must read zeros throughout (the
  // UCRT zeroes every byte past the old block's _msize).
  std::vector<void*> dirty;
  for (int i = 0; i < 512; i++) {
    void* d = malloc(40);
    std::memset(d, 0xd1, _msize(d));
    dirty.push_back(d);
  }
  for (void* d : dirty) free(d);
  int stale = 0, stale_aligned = 0;
  for (int i = 0; i < 512; i++) {
    auto* p = static_cast<unsigned char*>(_recalloc(nullptr, 1, 40));
    REQUIRE(p != nullptr);
    size_t holds = _msize(p);
    p = static_cast<unsigned char*>(_recalloc(p, 1, holds));
    REQUIRE(p != nullptr);
    for (size_t k = 0; k < holds; k++) stale += p[k] != 0;
    free(p);
    auto* q = static_cast<unsigned char*>(_aligned_recalloc(nullptr, 1, 40, 16));
    REQUIRE(q != nullptr);
    holds = _aligned_msize(q, 16, 0);
    q = static_cast<unsigned char*>(_aligned_recalloc(q, 1, holds, 16));
    REQUIRE(q != nullptr);
    for (size_t k = 0; k < holds; k++) stale_aligned += q[k] != 0;
    _aligned_free(q);
  }
  CHECK(stale == 0);
  CHECK(stale_aligned == 0);
}

TEST_CASE("CRT names: a calloc'd block grown in place by _recalloc reads zero up to its new size") {
  // The UCRT's _msize of calloc(1, 40) is 40, so _recalloc to 48 zeroes bytes
  // 40..47. Here _msize is the usable size (48): calloc must have zeroed them.
  // Small blocks from dirty ones, and a large block from a dirty run.
  for (size_t asked : {size_t(40), size_t(100), size_t(300000)}) {
    std::vector<void*> dirty;
    for (int i = 0; i < 64; i++) {
      void* d = malloc(asked);
      std::memset(d, 0xd1, _msize(d));
      dirty.push_back(d);
    }
    for (void* d : dirty) free(d);
    int stale = 0;
    for (int i = 0; i < 64; i++) {
      auto* p = static_cast<unsigned char*>(calloc(1, asked));
      REQUIRE(p != nullptr);
      size_t holds = _msize(p);
      p = static_cast<unsigned char*>(_recalloc(p, 1, holds));
      REQUIRE(p != nullptr);
      for (size_t k = 0; k < holds; k++) stale += p[k] != 0;
      dirty[i] = p;
    }
    for (void* d : dirty) free(d);
    CHECK_MESSAGE(stale == 0, "calloc(1, ", asked, ")");
  }
}

TEST_CASE("CRT names: _aligned_ edge cases as the UCRT's align.cpp") {
  errno = 0;
  CHECK(_aligned_offset_malloc(0, 16, 8) == nullptr);  // offset not inside an empty block
  CHECK(errno == EINVAL);
  void* p = _aligned_malloc(100, 32);
  REQUIRE(p != nullptr);
  errno = 0;
  CHECK(_aligned_realloc(p, 0, 48) == nullptr);  // size 0 frees, whatever the alignment
  CHECK(errno == 0);
}

TEST_CASE("CRT names: the _aligned_ family") {
  for (size_t a : {size_t(1), size_t(8), size_t(16), size_t(64), size_t(4096), size_t(1) << 21}) {
    void* p = _aligned_malloc(1000, a);
    REQUIRE(p != nullptr);
    CHECK(fw_owns(p));
    CHECK(aligned_to(p, a));
    CHECK(_aligned_msize(p, a, 0) >= 1000);
    std::memset(p, 0x11, 1000);
    void* q = _aligned_realloc(p, 100000, a);
    REQUIRE(q != nullptr);
    CHECK(aligned_to(q, a));
    CHECK(static_cast<unsigned char*>(q)[999] == 0x11);
    void* r = _aligned_recalloc(q, 2, 100000, a);
    REQUIRE(r != nullptr);
    CHECK(static_cast<unsigned char*>(r)[999] == 0x11);
    CHECK(static_cast<unsigned char*>(r)[150000] == 0);
    _aligned_free(r);
  }
  errno = 0;
  CHECK(_aligned_malloc(100, 48) == nullptr);  // not a power of two
  CHECK(errno == EINVAL);
  _aligned_free(nullptr);
  CHECK(_aligned_realloc(_aligned_malloc(10, 32), 0, 32) == nullptr);
}

TEST_CASE("CRT names: the _aligned_offset_ forms put p + offset on the alignment") {
  for (size_t a : {size_t(16), size_t(64), size_t(4096), size_t(1) << 20})
    for (size_t off : {size_t(0), size_t(1), size_t(8), size_t(24), size_t(100), size_t(4000)}) {
      CAPTURE(a);
      CAPTURE(off);
      size_t size = 5000;
      auto* p = static_cast<unsigned char*>(_aligned_offset_malloc(size, a, off));
      REQUIRE(p != nullptr);
      CHECK(fw_owns(p));
      CHECK(aligned_to(p + off, a));
      CHECK(_aligned_msize(p, a, off) >= size);
      std::memset(p, 0x3c, size);
      auto* q = static_cast<unsigned char*>(_aligned_offset_realloc(p, 3 * size, a, off));
      REQUIRE(q != nullptr);
      CHECK(aligned_to(q + off, a));
      CHECK(q[0] == 0x3c);
      CHECK(q[size - 1] == 0x3c);
      auto* r = static_cast<unsigned char*>(_aligned_offset_recalloc(q, 4, size, a, off));
      REQUIRE(r != nullptr);
      CHECK(aligned_to(r + off, a));
      CHECK(r[size - 1] == 0x3c);
      CHECK(r[4 * size - 1] == 0);
      _aligned_free(r);
    }
  errno = 0;
  CHECK(_aligned_offset_malloc(100, 64, 100) == nullptr);  // offset must be inside the block
  CHECK(errno == EINVAL);
  CHECK(fw_check_heap() == 0);
}

// --- The patcher (shim/windows/patch.cpp) on prologues made to test it -------

// Functions whose first bytes hold what a patch must relocate (Windows x64:
// argument in rcx, result in rax). Each is followed by what it returns.
asm(R"(
  .text
  .globl fwt_rip
fwt_rip:                        # mov rax, [rip+fwt_rip_data]; add rax, rcx; ret
  movq fwt_rip_data(%rip), %rax
  addq %rcx, %rax
  ret
  .globl fwt_jcc
fwt_jcc:                        # test rcx, rcx; je 1f (rel8, leaves the prologue)
  testq %rcx, %rcx
  je 1f
  movl $1, %eax
  ret
1:
  movl $2, %eax
  ret
  .globl fwt_call
fwt_call:                       # call (rel32) in the prologue
  subq $40, %rsp
  call fwt_helper
  addq $40, %rsp
  addl $5, %eax
  ret
fwt_helper:
  movl $10, %eax
  ret
  .globl fwt_short
fwt_short:                      # too short for the 5-byte jump
  ret
  nop
  nop
  nop
  nop
  .globl fwt_unknown
fwt_unknown:                    # ud2: not relocatable
  ud2
  nop
  nop
  nop
  ret
  .globl fwt_inside
fwt_inside:                     # jmp to the next byte, inside the displaced bytes
  jmp 2f
2:
  nop
  nop
  nop
  movl $3, %eax
  ret
  .data
  .p2align 3
fwt_rip_data:
  .quad 1000
  .text
)");
extern "C" long long fwt_rip(long long), fwt_jcc(long long), fwt_call(long long), fwt_short(long long),
    fwt_unknown(long long), fwt_inside(long long);

namespace {
using Fn = long long (*)(long long);
Fn g_original[3];
long long repl_rip(long long x) { return g_original[0](x) + 1; }
long long repl_jcc(long long x) { return g_original[1](x) * 100; }
long long repl_call(long long x) { return -g_original[2](x); }
long long repl_never(long long) { return -1; }
}  // namespace

TEST_CASE("patcher: x86-64 instruction lengths") {
  struct {
    std::vector<uint8_t> code;
    int len;
  } cases[] = {
      {{0x55}, 1},                                       // push rbp
      {{0x48, 0x89, 0xe5}, 3},                           // mov rbp, rsp
      {{0x48, 0x83, 0xec, 0x28}, 4},                     // sub rsp, 0x28
      {{0x48, 0x81, 0xec, 0x00, 0x01, 0x00, 0x00}, 7},   // sub rsp, 0x100
      {{0x48, 0x8b, 0x05, 1, 2, 3, 4}, 7},               // mov rax, [rip+x]
      {{0x4c, 0x8d, 0x44, 0x24, 0x08}, 5},               // lea r8, [rsp+8]
      {{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, 10},        // mov rax, imm64
      {{0xe9, 1, 2, 3, 4}, 5},                           // jmp rel32
      {{0x0f, 0x84, 1, 2, 3, 4}, 6},                     // je rel32
      {{0xf3, 0x0f, 0x1e, 0xfa}, 4},                     // endbr64
      {{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, 6},         // nopw 0(rax,rax)
      {{0xff, 0x25, 0, 0, 0, 0}, 6},                     // jmp [rip]
      {{0xf7, 0xc1, 1, 0, 0, 0}, 6},                     // test ecx, 1
      {{0x0f, 0x0b}, 0},                                 // ud2: unknown
  };
  for (auto& c : cases) {
    uint8_t buf[16] = {};
    std::memcpy(buf, c.code.data(), c.code.size());
    CAPTURE(int(buf[0]));
    CHECK(fw::win::instruction_length(buf) == c.len);
  }
}

TEST_CASE("patcher: relocated prologues run the original; bad ones are left whole") {
  CHECK(fwt_rip(5) == 1005);
  CHECK(fwt_jcc(0) == 2);
  CHECK(fwt_jcc(7) == 1);
  CHECK(fwt_call(0) == 15);
  uint8_t before_unknown[8], before_short[8], before_inside[8];
  std::memcpy(before_unknown, reinterpret_cast<void*>(&fwt_unknown), 8);
  std::memcpy(before_short, reinterpret_cast<void*>(&fwt_short), 8);
  std::memcpy(before_inside, reinterpret_cast<void*>(&fwt_inside), 8);
  fw::win::Patch p[] = {
      {"fwt_rip", reinterpret_cast<void*>(&fwt_rip), reinterpret_cast<void*>(&repl_rip), nullptr, 0, nullptr},
      {"fwt_jcc", reinterpret_cast<void*>(&fwt_jcc), reinterpret_cast<void*>(&repl_jcc), nullptr, 0, nullptr},
      {"fwt_call", reinterpret_cast<void*>(&fwt_call), reinterpret_cast<void*>(&repl_call), nullptr, 0, nullptr},
      {"fwt_short", reinterpret_cast<void*>(&fwt_short), reinterpret_cast<void*>(&repl_never), nullptr, 0, nullptr},
      {"fwt_unknown", reinterpret_cast<void*>(&fwt_unknown), reinterpret_cast<void*>(&repl_never), nullptr, 0, nullptr},
      {"fwt_inside", reinterpret_cast<void*>(&fwt_inside), reinterpret_cast<void*>(&repl_never), nullptr, 0, nullptr},
  };
  int written = fw::win::patch_apply(p, 6, [](void* arg) {
    auto* q = static_cast<fw::win::Patch*>(arg);
    for (int i = 0; i < 3; i++) g_original[i] = reinterpret_cast<Fn>(q[i].trampoline);
  }, p);
  CHECK(written == 3);
  for (int i = 0; i < 3; i++) {
    CAPTURE(p[i].name);
    CHECK(p[i].failure == nullptr);
    CHECK(p[i].displaced >= 5);
  }
  CHECK(p[0].displaced == 7);   // the whole RIP-relative mov
  CHECK(p[1].displaced == 5);   // test (3) + je rel8 (2)
  CHECK(p[2].displaced == 9);   // sub (4) + call (5)
  // Through the patch: the replacement, which calls the original by its trampoline.
  CHECK(fwt_rip(5) == 1006);
  CHECK(fwt_jcc(0) == 200);
  CHECK(fwt_jcc(7) == 100);
  CHECK(fwt_call(0) == -15);
  // Not patchable: reported, and not one byte changed.
  CHECK(p[3].failure != nullptr);
  CHECK(p[4].failure != nullptr);
  CHECK(p[5].failure != nullptr);
  CHECK(std::memcmp(before_short, reinterpret_cast<void*>(&fwt_short), 8) == 0);
  CHECK(std::memcmp(before_unknown, reinterpret_cast<void*>(&fwt_unknown), 8) == 0);
  CHECK(std::memcmp(before_inside, reinterpret_cast<void*>(&fwt_inside), 8) == 0);
  CHECK(fwt_inside(0) == 3);
}

// --- Blocks the CRT allocated inside itself ----------------------------------

TEST_CASE("foreign blocks: what msvcrt allocates itself goes back to msvcrt") {
  char* s = _strdup("freeway");
  REQUIRE(s != nullptr);
  CHECK(!fw_owns(s));          // msvcrt's _strdup calls its own malloc
  CHECK(_msize(s) >= 8);       // the CRT's _msize answers
  char* t = static_cast<char*>(realloc(s, 4000));  // moves into freeway
  REQUIRE(t != nullptr);
  CHECK(fw_owns(t));
  CHECK(std::strcmp(t, "freeway") == 0);
  free(t);
  char* cwd = _getcwd(nullptr, 0);
  REQUIRE(cwd != nullptr);
  free(cwd);                   // no report: handed to msvcrt's free
  char* full = _fullpath(nullptr, "x.txt", 0);
  REQUIRE(full != nullptr);
  free(full);
  for (int i = 0; i < 10000; i++) free(_strdup("a string the CRT copies"));
  FILE* f = std::fopen("freeway-test-file.txt", "w");
  REQUIRE(f != nullptr);
  std::fputs("hello", f);
  std::fclose(f);
  std::remove("freeway-test-file.txt");
  CHECK(fw_check_heap() == 0);
}

// --- Threads ---------------------------------------------------------------

TEST_CASE("threads: stress with cross-thread frees") {
  constexpr int kThreads = 8, kRounds = 20000;
  struct Shared {
    std::atomic<void*> slots[256];
  } shared{};
  struct Worker {
    Shared* sh;
    uint64_t seed;
    uint64_t bad = 0;
    void operator()() {
      Rng r{seed};
      for (int i = 0; i < kRounds; i++) {
        size_t n = r.next() % 2048 + 1;
        auto* p = static_cast<unsigned char*>(malloc(n));
        p[0] = static_cast<unsigned char>(n);
        p[n - 1] = static_cast<unsigned char>(n);
        // Swap into a shared slot: whatever was there was made by any thread.
        void* old = sh->slots[r.next() % 256].exchange(p, std::memory_order_acq_rel);
        if (old != nullptr) {
          if (!fw_owns(old)) bad++;
          free(old);
        }
      }
    }
  };
  std::vector<Worker> w;
  for (int i = 0; i < kThreads; i++) w.push_back(Worker{&shared, uint64_t(i) * 7919 + 1});
  HANDLE h[kThreads];
  for (int i = 0; i < kThreads; i++) h[i] = start_thread(&w[i]);
  WaitForMultipleObjects(kThreads, h, TRUE, INFINITE);
  for (HANDLE x : h) CloseHandle(x);
  for (auto& s : shared.slots) free(s.exchange(nullptr));
  for (auto& x : w) CHECK(x.bad == 0);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("threads: churn; each exit releases its cache through FLS") {
  uint64_t before = threads_live();
  constexpr int kRounds = 100, kPerRound = 16;
  std::vector<void*> handed;  // blocks each round leaves for the next to free
  for (int round = 0; round < kRounds; round++) {
    struct T {
      std::vector<void*>* from;
      void* out[64];
      void operator()() {
        for (int i = 0; i < 64; i++) out[i] = malloc(size_t(16) << (i % 10));
        for (void* p : *from) free(p);
      }
    };
    std::vector<T> ts(kPerRound);
    std::vector<std::vector<void*>> from(kPerRound);
    for (size_t i = 0; i < handed.size(); i++) from[i % kPerRound].push_back(handed[i]);
    HANDLE h[kPerRound];
    for (int i = 0; i < kPerRound; i++) {
      ts[i].from = &from[i];
      h[i] = start_thread(&ts[i]);
    }
    WaitForMultipleObjects(kPerRound, h, TRUE, INFINITE);
    for (HANDLE x : h) CloseHandle(x);
    handed.clear();
    for (auto& t : ts) handed.insert(handed.end(), t.out, t.out + 64);
  }
  for (void* p : handed) free(p);
  CHECK(threads_live() == before);  // every exited thread gave its cache back
  fw_stats_t* st = static_cast<fw_stats_t*>(malloc(sizeof(fw_stats_t)));
  fw_stats(st);
  CHECK(st->threads_created >= uint64_t(kRounds) * kPerRound);
  free(st);
  CHECK(fw_check_heap() == 0);
}

TEST_CASE("threads: a thread suspended forever in the middle of malloc blocks no other") {
  std::atomic<bool> stop{false};
  struct Busy {
    std::atomic<bool>* stop;
    void operator()() {
      Rng r{42};
      void* keep[64] = {};
      while (!stop->load(std::memory_order_relaxed)) {
        unsigned i = unsigned(r.next() % 64);
        free(keep[i]);
        keep[i] = malloc(r.next() % 4096 + 1);
      }
    }
  } busy{&stop};
  HANDLE victim = start_thread(&busy);
  Sleep(50);
  REQUIRE(SuspendThread(victim) != DWORD(-1));  // wherever it is: often inside malloc or free
  struct Worker {
    void* out[1000];
    void operator()() {
      for (int round = 0; round < 50; round++) {
        for (auto& p : out) p = malloc(64);
        for (auto& p : out) free(p);
      }
    }
  };
  std::vector<Worker> w(4);
  HANDLE h[4];
  for (int i = 0; i < 4; i++) h[i] = start_thread(&w[i]);
  DWORD r = WaitForMultipleObjects(4, h, TRUE, 60000);
  CHECK(r != WAIT_TIMEOUT);
  for (HANDLE x : h) CloseHandle(x);
  // The victim stays suspended for the rest of the program.
  CloseHandle(victim);
}

// --- Telemetry: the writer, in a named section Local\freeway.<pid> ---------

TEST_CASE("telemetry: the segment is published in Local\\freeway.<pid> and removed at stop") {
  wchar_t name[64];
  swprintf(name, 64, L"Local\\freeway.%lu", GetCurrentProcessId());
  REQUIRE(fw_telemetry_start() == 0);
  CHECK(fw_telemetry_active());
  HANDLE h = OpenFileMappingW(FILE_MAP_READ, FALSE, name);  // what a reader does
  REQUIRE(h != nullptr);
  {
    // Its DACL: one entry, allowing this process's user.
    PACL dacl = nullptr;
    PSECURITY_DESCRIPTOR sd = nullptr;
    HANDLE hs = OpenFileMappingW(READ_CONTROL, FALSE, name);
    REQUIRE(hs != nullptr);
    REQUIRE(GetSecurityInfo(hs, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, nullptr, nullptr, &dacl, nullptr, &sd) ==
            ERROR_SUCCESS);
    CloseHandle(hs);
    REQUIRE(dacl != nullptr);
    CHECK(dacl->AceCount == 1);
    ACCESS_ALLOWED_ACE* ace = nullptr;
    REQUIRE(GetAce(dacl, 0, reinterpret_cast<void**>(&ace)));
    CHECK(ace->Header.AceType == ACCESS_ALLOWED_ACE_TYPE);
    HANDLE token;
    REQUIRE(OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token));
    alignas(8) unsigned char buf[256];
    DWORD got;
    REQUIRE(GetTokenInformation(token, TokenUser, buf, sizeof buf, &got));
    CloseHandle(token);
    CHECK(EqualSid(reinterpret_cast<PSID>(&ace->SidStart), reinterpret_cast<TOKEN_USER*>(buf)->User.Sid));
    LocalFree(sd);
  }
  auto* hdr = static_cast<const fwt_header*>(MapViewOfFile(h, FILE_MAP_READ, 0, 0, 0));
  REQUIRE(hdr != nullptr);
  CHECK(hdr->magic == FWT_MAGIC);
  CHECK(hdr->version_major == FWT_VERSION_MAJOR);
  void* keep = malloc(1000);
  // The publisher thread writes snapshots: the sequence moves on.
  uint64_t seq0 = __atomic_load_n(&hdr->snapshot_seq, __ATOMIC_ACQUIRE);
  uint64_t seq = seq0;
  for (int i = 0; i < 200 && seq == seq0; i++) {
    Sleep(10);
    seq = __atomic_load_n(&hdr->snapshot_seq, __ATOMIC_ACQUIRE);
  }
  CHECK(seq > seq0);
  PROCESS_MEMORY_COUNTERS before{}, after{};
  REQUIRE(K32GetProcessMemoryInfo(GetCurrentProcess(), &before, sizeof before));
  fw_telemetry_stop();
  CHECK(!fw_telemetry_active());
  // Stopping touches no page it did not write (the segment is 194 MiB): a
  // reader's view sees the magic gone.
  REQUIRE(K32GetProcessMemoryInfo(GetCurrentProcess(), &after, sizeof after));
  CHECK(after.WorkingSetSize < before.WorkingSetSize + (16u << 20));
  CHECK(__atomic_load_n(&hdr->magic, __ATOMIC_ACQUIRE) == 0);
  UnmapViewOfFile(hdr);
  CloseHandle(h);
  CHECK(OpenFileMappingW(FILE_MAP_READ, FALSE, name) == nullptr);  // the name is gone
  free(keep);
}

// --- Injection: freeway-inject.exe and freeway.dll -------------------------

// Runs program alone and injected (plain_and_injected), and checks that the
// injected run's report names each of `served` as served by freeway and none
// as not. Returns that run.
Ran served_by_freeway(const wchar_t* program, std::initializer_list<const char*> served) {
  Ran inj = plain_and_injected(program);
  CAPTURE(inj.err);
  for (const char* what : served) CHECK_MESSAGE(has(inj.err, (std::string(what) + ": freeway").c_str()), what);
  CHECK(!has(inj.err, "not freeway"));
  return inj;
}

TEST_CASE("injection: an msvcrt C program; _strdup, _getcwd, fopen and malloc are served by freeway") {
  Ran inj = served_by_freeway(L"inject_c.exe", {"_strdup", "_getcwd", "malloc", "_aligned_malloc"});
  CAPTURE(inj.err);
  CHECK(has(inj.out, "huge malloc: null, errno ENOMEM: yes"));  // the program's errno
  CHECK(!has(inj.err, "cannot patch"));
}

TEST_CASE("injection: a C++ program; new, new[] and std::string are served by freeway") {
  served_by_freeway(L"inject_cpp.exe", {"new", "string data", "new[]"});
}

TEST_CASE("injection: ucrtbase and a CRT loaded after start (msvcr120) are patched too") {
  served_by_freeway(L"inject_crts.exe", {"ucrtbase.dll malloc", "ucrtbase.dll _strdup", "msvcr120.dll malloc",
                                         "msvcr120.dll _strdup"});
}

TEST_CASE("injection: a universal-CRT program with msvcrt.dll loaded too reads ENOMEM and EINVAL in its own errno") {
  Ran inj = plain_and_injected(L"inject_ucrt_errno.exe");
  CAPTURE(inj.out);
  CHECK(has(inj.out, "malloc(SIZE_MAX - 4096): NULL, errno ENOMEM"));
  CHECK(has(inj.out, "_aligned_malloc(100, 48): NULL, errno EINVAL"));
  CHECK(has(inj.err, "ucrtbase.dll malloc: freeway"));
}

TEST_CASE("injection: --pid into a running program; its earlier blocks go back to the CRT") {
  Ran plain = run(L"inject_c.exe wait", "go\n");
  CHECK(plain.code == 0);
  Child c = start(L"inject_c.exe wait");
  REQUIRE(c.process != nullptr);
  std::string first;
  char ch;
  DWORD n;
  while (first.find('\n') == std::string::npos && ReadFile(c.out, &ch, 1, &n, nullptr) && n == 1) first += ch;
  REQUIRE(first.rfind("ready", 0) == 0);  // "ready\r\n": stdout is in text mode
  Ran inj = run(L"\"" + here() + L"freeway-inject.exe\" --pid " + std::to_wstring(c.pid));
  CAPTURE(inj.err);
  CHECK(inj.code == 0);
  DWORD wrote;
  WriteFile(c.in, "go\n", 3, &wrote, nullptr);
  Ran after = finish(c);
  CAPTURE(after.err);
  CHECK(after.code == 0);
  CHECK(first + after.out == plain.out);
  CHECK(has(after.out, "early blocks intact: yes"));
  CHECK(has(after.err, "early block: not freeway"));           // the CRT's, freed by the CRT
  CHECK(has(after.err, "early block after realloc: freeway"));  // moved into freeway
  CHECK(has(after.err, "_strdup: freeway"));
}

TEST_CASE("injector: errors are one line and exit code 2") {
  Ran missing = run(injected(L"no-such-program.exe"));
  CHECK(missing.code == 2);
  CHECK(has(missing.err, "freeway-inject: cannot find program"));
  // A 32-bit program: a copy of a test program with its machine field changed.
  std::wstring src = here() + L"inject_c.exe", dst = here() + L"inject_c_i386.exe";
  REQUIRE(CopyFileW(src.c_str(), dst.c_str(), FALSE));
  HANDLE f = CreateFileW(dst.c_str(), GENERIC_READ | GENERIC_WRITE, 0, nullptr, OPEN_EXISTING, 0, nullptr);
  REQUIRE(f != INVALID_HANDLE_VALUE);
  IMAGE_DOS_HEADER dos;
  DWORD got;
  ReadFile(f, &dos, sizeof dos, &got, nullptr);
  SetFilePointer(f, dos.e_lfanew + 4, nullptr, FILE_BEGIN);
  WORD i386 = IMAGE_FILE_MACHINE_I386;
  WriteFile(f, &i386, 2, &got, nullptr);
  CloseHandle(f);
  Ran wrong = run(injected(L"inject_c_i386.exe"));
  DeleteFileW(dst.c_str());
  CHECK(wrong.code == 2);
  CHECK(has(wrong.err, "freeway-inject: wrong architecture"));
  Ran nopid = run(L"\"" + here() + L"freeway-inject.exe\" --pid 999999");
  CHECK(nopid.code == 2);
  CHECK(has(nopid.err, "freeway-inject: no process 999999"));
  Ran usage = run(L"\"" + here() + L"freeway-inject.exe\"");
  CHECK(usage.code == 2);
  CHECK(has(usage.err, "usage: freeway-inject.exe"));
  Ran exit_code = run(injected(L"cmd.exe /c exit 7"));
  CHECK(exit_code.code == 7);  // the program's own exit code comes back
  // Paths longer than MAX_PATH: named in full in a one-line error (the
  // Windows calls give the length they need, not a filled buffer).
  const std::wstring deep = L"no-such-folder-" + std::wstring(300, L'd') + L"\\freeway.dll";
  Ran long_dll = run(L"\"" + here() + L"freeway-inject.exe\" --dll " + deep + L" -- cmd.exe /c exit 0");
  CHECK(long_dll.code == 2);
  CHECK(has(long_dll.err, "freeway-inject: cannot find "));
  CHECK(has(long_dll.err, "ddd\\freeway.dll"));
  const std::wstring long_prog = L"no-such-program-" + std::wstring(300, L'p');
  Ran long_program = run(injected(long_prog));
  CHECK(long_program.code == 2);
  CHECK(has(long_program.err, "freeway-inject: cannot find program no-such-program-ppp"));
}

// --- freeway-inspect.exe: the CLI on Windows --------------------------------

TEST_CASE("freeway-inspect.exe: list, snapshot, check, record and replay a running program") {
  Child c = start(L"test_windows.exe --child publish");
  REQUIRE(c.process != nullptr);
  std::string first;
  char ch;
  DWORD n;
  while (first.find('\n') == std::string::npos && ReadFile(c.out, &ch, 1, &n, nullptr) && n == 1) first += ch;
  REQUIRE(first.rfind("ready", 0) == 0);
  std::wstring inspect = L"\"" + here() + L"freeway-inspect.exe\" ";
  std::string pid = std::to_string(c.pid);
  std::wstring wpid = std::to_wstring(c.pid);
  Ran list = run(inspect + L"list");
  CAPTURE(list.out);
  CAPTURE(list.err);
  CHECK(list.code == 0);
  CHECK(has(list.out, pid.c_str()));
  Ran snap = run(inspect + L"snapshot " + wpid);
  CAPTURE(snap.out);
  CAPTURE(snap.err);
  CHECK(snap.code == 0);
  CHECK(has(snap.out, "test_windows"));
  Ran json = run(inspect + L"snapshot --json " + wpid);
  CHECK(json.code == 0);
  CHECK(has(json.out, "\"schema\": \"freeway-inspect/snapshot/1\""));
  CHECK(has(json.out, ("\"pid\": " + pid).c_str()));
  Ran check = run(inspect + L"check " + wpid);
  CAPTURE(check.out);
  CHECK(check.code == 0);
  std::wstring rec = here() + L"windows-test.fwrec";
  Ran record = run(inspect + L"record " + wpid + L" --seconds 1 --quiet --out \"" + rec + L"\"");
  CAPTURE(record.err);
  CHECK(record.code == 0);
  Ran replay = run(inspect + L"replay --json \"" + rec + L"\"");
  CAPTURE(replay.err);
  CHECK(replay.code == 0);
  CHECK(has(replay.out, ("\"pid\": " + pid).c_str()));
  DeleteFileW(rec.c_str());
  DWORD wrote;
  WriteFile(c.in, "go\n", 3, &wrote, nullptr);
  Ran done = finish(c);
  CHECK(done.code == 0);
  Ran gone = run(inspect + L"snapshot " + wpid);
  CHECK(gone.code == 2);
  CHECK(has(gone.err, "freeway-inspect: "));
}

// --- Misuse: a child process must stop with freeway's message ----------------

TEST_CASE("misuse stops the process with a message") {
  struct Case {
    const char* what;
    const char* message;
  } cases[] = {
      {"double-free", "freeway: double free"},
      {"invalid-free", "freeway: "},
      {"stack-free", "freeway: free of a pointer freeway did not allocate"},
      {"aligned-double-free", "freeway: double free"},
      {"sized-delete", "freeway: sized free of 0x"},
      {"offset-double-free", "freeway: "},
      {"offset-interior-free", "freeway: "},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::wstring cmd = L"test_windows.exe --child ";
    for (const char* ch = c.what; *ch; ch++) cmd += wchar_t(*ch);
    Ran child = run(cmd);
    CAPTURE(child.err);
    CHECK(child.code != 0);
    CHECK(child.err.find(c.message) != std::string::npos);
  }
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return child(argv[2]);
  // Tells ctest's emulator (cmake/wine-run) that wine started this run: a
  // failed run without this file is wine's failure, and is run once more.
  if (const char* started = std::getenv("FW_WINE_STARTED"))
    if (FILE* f = std::fopen(started, "w")) std::fclose(f);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
