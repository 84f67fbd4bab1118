// inspector/model/segment_windows.cpp: finding and mapping telemetry segments on
// Windows: the named section Local\freeway.<pid> (platform/windows), mapped
// read-only. A section cannot shrink under its views, so no fault guard is
// needed; the name disappears with the last handle, so nothing goes stale
// (list_processes has nothing to prune). The reading itself is segment.cpp's.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <tlhelp32.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "inspector/model/segment.h"
#include "inspector/model/segment_internal.h"

namespace fwi {

namespace {

std::wstring section_name(uint64_t pid) { return L"Local\\freeway." + std::to_wstring(pid); }

// The creation time of pid (100 ns units since 1601), what the writer
// publishes as process_start_ticks.
bool creation_time(uint64_t pid, uint64_t* ticks) {
  HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, DWORD(pid));
  if (p == nullptr) return false;
  FILETIME created, exited, kernel, user;
  bool ok = GetProcessTimes(p, &created, &exited, &kernel, &user) != 0;
  CloseHandle(p);
  if (ok) *ticks = (uint64_t(created.dwHighDateTime) << 32) | created.dwLowDateTime;
  return ok;
}

// Whether pid names a process that has not exited (another user's process,
// which cannot be opened, counts as running).
bool pid_runs(uint64_t pid) {
  if (pid == 0 || pid > 0xffffffffull) return false;
  HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, DWORD(pid));
  if (p == nullptr) return GetLastError() == ERROR_ACCESS_DENIED;
  DWORD code = 0;
  bool runs = GetExitCodeProcess(p, &code) && code == STILL_ACTIVE;
  CloseHandle(p);
  return runs;
}

// Maps pid's section read-only: the view and its size (whole pages).
bool map_section(uint64_t pid, HANDLE* section, const uint8_t** base, size_t* size) {
  HANDLE h = OpenFileMappingW(FILE_MAP_READ, FALSE, section_name(pid).c_str());
  if (h == nullptr) return false;
  void* v = MapViewOfFile(h, FILE_MAP_READ, 0, 0, 0);
  MEMORY_BASIC_INFORMATION mi;
  if (v == nullptr || VirtualQuery(v, &mi, sizeof mi) == 0) {
    if (v != nullptr) UnmapViewOfFile(v);
    CloseHandle(h);
    return false;
  }
  *section = h;
  *base = static_cast<const uint8_t*>(v);
  *size = mi.RegionSize;
  return true;
}

}  // namespace

bool process_start_ticks(uint64_t pid, uint64_t* ticks) { return creation_time(pid, ticks); }

namespace detail {

bool same_process(uint64_t pid, uint64_t start_ticks) {
  uint64_t t = 0;
  return pid_runs(pid) && creation_time(pid, &t) && t == start_ticks;
}

void os_view_close(OsView& v, const uint8_t* base, size_t) {
  UnmapViewOfFile(base);
  CloseHandle(reinterpret_cast<HANDLE>(v.handle));
  v.handle = -1;
}

bool os_view_intact(const OsView&, uint64_t) { return true; }
bool os_view_mapped_by(const OsView&, uint64_t) { return true; }

}  // namespace detail

// Every process with a section of ours. `dir` and `prune` are POSIX notions
// (a directory of files; files left by dead processes): unused here.
std::vector<ProcessEntry> list_processes(bool, const std::string&) {
  std::vector<ProcessEntry> out;
  HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
  if (snap == INVALID_HANDLE_VALUE) return out;
  PROCESSENTRY32W pe32;
  pe32.dwSize = sizeof pe32;
  for (BOOL ok = Process32FirstW(snap, &pe32); ok; ok = Process32NextW(snap, &pe32)) {
    uint64_t pid = pe32.th32ProcessID;
    HANDLE h;
    const uint8_t* base;
    size_t size;
    if (pid == 0 || !map_section(pid, &h, &base, &size)) continue;
    ProcessEntry pe;
    pe.pid = pid;
    pe.path = "Local\\freeway." + std::to_string(pid);
    fwt_header hd{};
    if (size >= sizeof hd) {
      std::memcpy(&hd, base, sizeof hd);
      hd.magic = load_acquire(base + offsetof(fwt_header, magic));
    }
    Layout L;
    if (hd.magic == FWT_MAGIC && hd.pid == pid && validate_header(hd, size, &L).empty()) {
      pe.exe = exe_of(hd);
      pe.alive = same_process(pid, hd.process_start_ticks);
      // Best-effort figures: the process record bracketed by the sequence word.
      const uint64_t seq_off = offsetof(fwt_header, snapshot_seq);
      for (int attempt = 0; attempt < 20; attempt++) {
        uint64_t s1 = load_acquire(base + seq_off);
        if ((s1 & 1) != 0) continue;
        fwt_process p;
        std::memcpy(&p, base + L.process.offset, sizeof p);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (load_relaxed(base + seq_off) != s1) continue;
        pe.live_bytes = p.live_bytes;
        pe.committed_bytes = p.committed_bytes;
        break;
      }
    } else {
      pe.alive = pid_runs(pid);
    }
    UnmapViewOfFile(base);
    CloseHandle(h);
    out.push_back(std::move(pe));
  }
  CloseHandle(snap);
  std::sort(out.begin(), out.end(), [](const ProcessEntry& a, const ProcessEntry& b) { return a.pid < b.pid; });
  return out;
}

std::unique_ptr<Segment> Segment::attach(uint64_t pid, std::string* err, const std::string&) {
  std::string label = fmt("process %llu", static_cast<unsigned long long>(pid));
  const bool runs = pid_runs(pid);
  HANDLE h;
  const uint8_t* base;
  size_t size;
  if (!map_section(pid, &h, &base, &size)) {
    DWORD e = GetLastError();
    if (!runs)
      *err = "no " + label;
    else if (e == ERROR_ACCESS_DENIED)
      *err = label + ": access denied to Local\\freeway." + std::to_string(pid) + " (another user's process?)";
    else
      *err = label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)";
    return nullptr;
  }
  auto I = std::make_unique<Impl>();
  I->os.handle = reinterpret_cast<intptr_t>(h);
  I->base = base;
  I->mapped = size;
  I->path = "Local\\freeway." + std::to_string(pid);
  I->label = label;
  I->pid = pid;
  return adopt(std::move(I), runs, err);
}

bool Segment::take(Snapshot* out, std::string* err) {
  Snapshot scratch;
  return impl_->take_guarded(&scratch, out, err);
}

}  // namespace fwi
