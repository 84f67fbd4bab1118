// tools/windows/freeway-inject.cpp: runs a Windows program with freeway.dll
// loaded before its main, or loads freeway.dll into a running process.
//
//   freeway-inject.exe [--dll PATH] -- PROGRAM [ARGS...]   exit code: the program's
//   freeway-inject.exe [--dll PATH] --pid N                exit code: 0 when loaded
//
// The program starts suspended; a thread created in it runs LoadLibraryW on
// freeway.dll, whose DllMain patches the C runtimes (shim/windows/dll.cpp);
// then the program's main thread resumes. kernel32 is at the same address in
// every process of a session, so LoadLibraryW's address here is its address
// there. Errors are one line `freeway-inject: ...` and exit code 2 (before the
// program runs).
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <psapi.h>

#include <cstdio>
#include <cstdlib>
#include <cwchar>
#include <string>

namespace {

[[noreturn]] void fail(const wchar_t* what, const std::wstring& detail = L"") {
  std::fwprintf(stderr, L"freeway-inject: %ls%ls\n", what, detail.c_str());
  std::exit(2);
}

std::wstring last_error() {
  DWORD e = GetLastError();
  wchar_t buf[256] = L"";
  FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, e, 0, buf, 256, nullptr);
  size_t n = std::wcslen(buf);
  while (n > 0 && (buf[n - 1] == L'\n' || buf[n - 1] == L'\r' || buf[n - 1] == L'.')) buf[--n] = 0;
  return L" (error " + std::to_wstring(e) + (n ? L": " + std::wstring(buf) : L"") + L")";
}

// Paths of any length (over MAX_PATH too): each call asks for the length it
// needs, then fills a string of that length. Empty when the call fails.
std::wstring own_path() {
  std::wstring buf(MAX_PATH, L'\0');
  for (;;) {
    DWORD n = GetModuleFileNameW(nullptr, &buf[0], DWORD(buf.size()));
    if (n == 0) return {};
    if (n < buf.size()) return buf.substr(0, n);
    buf.resize(buf.size() * 2);  // truncated
  }
}
std::wstring full_path(const std::wstring& path) {
  DWORD need = GetFullPathNameW(path.c_str(), 0, nullptr, nullptr);
  if (need == 0) return {};
  std::wstring out(need, L'\0');
  DWORD n = GetFullPathNameW(path.c_str(), need, &out[0], nullptr);
  return n == 0 || n >= need ? std::wstring() : out.substr(0, n);
}
// The program as CreateProcess would find it: on the PATH, ".exe" added.
std::wstring search_program(const std::wstring& name) {
  DWORD need = SearchPathW(nullptr, name.c_str(), L".exe", 0, nullptr, nullptr);
  if (need == 0) return {};
  std::wstring out(need, L'\0');
  DWORD n = SearchPathW(nullptr, name.c_str(), L".exe", need, &out[0], nullptr);
  return n == 0 || n >= need ? std::wstring() : out.substr(0, n);
}

void usage() {
  std::fwprintf(stderr,
                L"usage: freeway-inject.exe [--dll PATH] -- PROGRAM [ARGS...]\n"
                L"       freeway-inject.exe [--dll PATH] --pid N\n"
                L"Runs PROGRAM with freeway.dll replacing its C runtime's malloc (or loads it\n"
                L"into the running process N). freeway.dll is looked for beside this program.\n");
  std::exit(2);
}

// Quoting of one argument for CommandLineToArgvW / the CRT's parser.
std::wstring quote(const std::wstring& a) {
  if (!a.empty() && a.find_first_of(L" \t\n\v\"") == std::wstring::npos) return a;
  std::wstring q = L"\"";
  for (size_t i = 0;; i++) {
    size_t slashes = 0;
    while (i < a.size() && a[i] == L'\\') i++, slashes++;
    if (i == a.size()) {
      q.append(slashes * 2, L'\\');
      break;
    }
    if (a[i] == L'"') {
      q.append(slashes * 2 + 1, L'\\');
      q += L'"';
    } else {
      q.append(slashes, L'\\');
      q += a[i];
    }
  }
  return q + L"\"";
}

// The machine a PE file is built for (0 if it is not one).
WORD pe_machine(const std::wstring& path) {
  HANDLE f = CreateFileW(path.c_str(), GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING, 0, nullptr);
  if (f == INVALID_HANDLE_VALUE) return 0;
  IMAGE_DOS_HEADER dos{};
  IMAGE_NT_HEADERS64 nt{};
  DWORD got = 0;
  WORD machine = 0;
  if (ReadFile(f, &dos, sizeof dos, &got, nullptr) && got == sizeof dos && dos.e_magic == IMAGE_DOS_SIGNATURE &&
      SetFilePointer(f, dos.e_lfanew, nullptr, FILE_BEGIN) != INVALID_SET_FILE_POINTER &&
      ReadFile(f, &nt, sizeof nt.Signature + sizeof nt.FileHeader, &got, nullptr) && nt.Signature == IMAGE_NT_SIGNATURE)
    machine = nt.FileHeader.Machine;
  CloseHandle(f);
  return machine;
}

// Whether process p has loaded a module whose file name (without its
// directory) is dll's.
bool has_module(HANDLE p, const std::wstring& dll) {
  const size_t slash = dll.find_last_of(L"\\/");
  const std::wstring want = slash == std::wstring::npos ? dll : dll.substr(slash + 1);
  HMODULE mods[1024];
  DWORD bytes = 0;
  if (!K32EnumProcessModules(p, mods, sizeof mods, &bytes)) return false;
  for (DWORD i = 0; i < bytes / sizeof(HMODULE) && i < 1024; i++) {
    wchar_t name[MAX_PATH];
    if (K32GetModuleBaseNameW(p, mods[i], name, MAX_PATH) != 0 && lstrcmpiW(name, want.c_str()) == 0) return true;
  }
  return false;
}

// LoadLibraryW(dll) in process p, by a thread of its own; false with a reason.
bool load_into(HANDLE p, const std::wstring& dll, std::wstring* why) {
  size_t bytes = (dll.size() + 1) * sizeof(wchar_t);
  void* remote = VirtualAllocEx(p, nullptr, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
  if (remote == nullptr) {
    *why = L"cannot allocate in the process" + last_error();
    return false;
  }
  if (!WriteProcessMemory(p, remote, dll.c_str(), bytes, nullptr)) {
    *why = L"cannot write into the process" + last_error();
    return false;
  }
  auto load = reinterpret_cast<LPTHREAD_START_ROUTINE>(
      reinterpret_cast<void*>(GetProcAddress(GetModuleHandleW(L"kernel32.dll"), "LoadLibraryW")));
  HANDLE t = CreateRemoteThread(p, nullptr, 0, load, remote, 0, nullptr);
  if (t == nullptr) {
    *why = L"cannot start a thread in the process" + last_error();
    return false;
  }
  if (WaitForSingleObject(t, 60000) != WAIT_OBJECT_0) {
    CloseHandle(t);
    *why = L"LoadLibraryW did not return within 60 s";
    return false;
  }
  // The thread's exit code is the low 32 bits of LoadLibraryW's HMODULE, 0
  // for a failure and, rarely, for a module loaded at such an address; or
  // the process's exit code if it ended meanwhile. So 0 is checked against
  // the process itself.
  DWORD module = 0;
  GetExitCodeThread(t, &module);
  CloseHandle(t);
  VirtualFreeEx(p, remote, 0, MEM_RELEASE);
  DWORD code = 0;
  if (WaitForSingleObject(p, 0) == WAIT_OBJECT_0 && GetExitCodeProcess(p, &code)) {
    *why = L"the program ended (exit code " + std::to_wstring(code) + L") while freeway.dll was being loaded into it";
    return false;
  }
  if (module == 0 && !has_module(p, dll)) {
    *why = L"LoadLibraryW failed in the process (is freeway.dll an x86-64 DLL with its dependencies present?)";
    return false;
  }
  return true;
}

}  // namespace

int wmain(int argc, wchar_t** argv) {
  std::wstring dll;
  DWORD pid = 0;
  int program = -1;
  for (int i = 1; i < argc; i++) {
    std::wstring a = argv[i];
    if (a == L"--") {
      program = i + 1;
      break;
    } else if (a == L"--dll" && i + 1 < argc) {
      dll = argv[++i];
    } else if (a == L"--pid" && i + 1 < argc) {
      wchar_t* end;
      unsigned long v = std::wcstoul(argv[++i], &end, 10);
      if (*end != 0 || v == 0) fail(L"--pid needs a process id, not ", argv[i]);
      pid = DWORD(v);
    } else if (a == L"-h" || a == L"--help") {
      usage();
    } else {
      fail(L"unknown option ", a + L" (a program goes after --)");
    }
  }
  if ((pid == 0) == (program < 0 || program >= argc)) usage();

  if (dll.empty()) {
    const std::wstring self = own_path();
    if (self.empty()) fail(L"cannot find freeway-inject.exe's own path", last_error());
    dll = self.substr(0, self.find_last_of(L"\\/") + 1) + L"freeway.dll";
  }
  const std::wstring full = full_path(dll);
  if (full.empty()) fail(L"bad DLL path ", dll);
  dll = full;
  if (GetFileAttributesW(dll.c_str()) == INVALID_FILE_ATTRIBUTES) fail(L"cannot find ", dll);
  if (pe_machine(dll) != IMAGE_FILE_MACHINE_AMD64) fail(L"not an x86-64 DLL: ", dll);

  std::wstring why;
  if (pid != 0) {
    HANDLE p = OpenProcess(PROCESS_CREATE_THREAD | PROCESS_QUERY_INFORMATION | PROCESS_VM_OPERATION |
                               PROCESS_VM_WRITE | PROCESS_VM_READ | SYNCHRONIZE,
                           FALSE, pid);
    if (p == nullptr) {
      if (GetLastError() == ERROR_ACCESS_DENIED) fail(L"access denied to process ", std::to_wstring(pid));
      fail(L"no process ", std::to_wstring(pid) + last_error());
    }
    BOOL wow64 = FALSE;
    if (IsWow64Process(p, &wow64) && wow64) fail(L"process ", std::to_wstring(pid) + L" is 32-bit; freeway is x86-64 only");
    if (!load_into(p, dll, &why)) fail(L"", why);
    CloseHandle(p);
    return 0;
  }

  std::wstring prog = argv[program];
  const std::wstring found = search_program(prog);
  if (found.empty()) fail(L"cannot find program ", prog);
  WORD machine = pe_machine(found);
  if (machine == 0) fail(L"not a Windows program: ", found);
  if (machine != IMAGE_FILE_MACHINE_AMD64) {
    wchar_t m[16];
    std::swprintf(m, 16, L"0x%04x", machine);
    fail(L"wrong architecture: freeway is x86-64 only, and ", found + L" is machine " + m);
  }
  std::wstring cmd = quote(prog);
  for (int i = program + 1; i < argc; i++) cmd += L" " + quote(argv[i]);
  STARTUPINFOW si{};
  si.cb = sizeof si;
  PROCESS_INFORMATION pi{};
  if (!CreateProcessW(found.c_str(), cmd.data(), nullptr, nullptr, TRUE, CREATE_SUSPENDED, nullptr, nullptr, &si, &pi)) {
    if (GetLastError() == ERROR_ACCESS_DENIED) fail(L"access denied starting ", found);
    fail(L"cannot start ", found + last_error());
  }
  if (!load_into(pi.hProcess, dll, &why)) {
    TerminateProcess(pi.hProcess, 2);
    fail(L"", why);
  }
  ResumeThread(pi.hThread);
  WaitForSingleObject(pi.hProcess, INFINITE);
  DWORD code = 0;
  GetExitCodeProcess(pi.hProcess, &code);
  CloseHandle(pi.hThread);
  CloseHandle(pi.hProcess);
  return int(code);
}
