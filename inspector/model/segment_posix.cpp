// inspector/model/segment_posix.cpp: finding and mapping telemetry segments on
// POSIX systems: /dev/shm/freeway.<pid>, read-only shared mappings, and the
// SIGBUS guard for a file truncated while it is read. The reading itself is
// segment.cpp's.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <setjmp.h>

#include "inspector/model/segment.h"
#include "inspector/model/segment_internal.h"

namespace fwi {

namespace {

// A mapped file that shrinks while it is read (a writer, or a hostile
// process, truncating its segment) raises SIGBUS on the pages past its end.
// take() checks the size first, but the file can shrink between that check
// and the copy: while a copy runs, this thread's guard turns SIGBUS into an
// error. A SIGBUS outside a guarded copy goes to the previous disposition.
thread_local sigjmp_buf* t_bus_guard = nullptr;
struct sigaction g_prev_bus;

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* g = t_bus_guard) siglongjmp(*g, 1);
  if ((g_prev_bus.sa_flags & SA_SIGINFO) != 0 && g_prev_bus.sa_sigaction != nullptr) {
    g_prev_bus.sa_sigaction(sig, info, ctx);
    return;
  }
  if ((g_prev_bus.sa_flags & SA_SIGINFO) == 0 && g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN) {
    g_prev_bus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void install_bus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

}  // namespace

namespace {

// Fields 3 (state) and 22 (start time in clock ticks since boot) of a stat
// file of /proc: a process's or one of its threads'.
bool read_stat_file(const char* path, char* state, uint64_t* ticks) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  p++;
  while (*p == ' ') p++;
  *state = *p;
  // Field 3 is the first after ')'; field 22 is the 20th from there.
  for (int field = 3; field < 22; field++) {
    while (*p == ' ') p++;
    while (*p != ' ' && *p != '\0') p++;
    if (*p == '\0') return false;
  }
  while (*p == ' ') p++;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p || errno != 0) return false;
  *ticks = v;
  return true;
}

// The same of /proc/<pid>/stat.
bool read_proc_stat(uint64_t pid, char* state, uint64_t* ticks) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  return read_stat_file(path, state, ticks);
}

// Whether a thread of pid other than an exited one is left. A process whose
// main thread called pthread_exit shows the zombie state in /proc/<pid>/stat
// (the thread-group leader's) while its other threads run on, and publish.
bool other_thread_runs(uint64_t pid) {
  char dir[64];
  std::snprintf(dir, sizeof dir, "/proc/%llu/task", static_cast<unsigned long long>(pid));
  DIR* d = opendir(dir);
  if (d == nullptr) return false;
  bool runs = false;
  while (!runs) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[sizeof dir + sizeof e->d_name + 8];
    std::snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
    char state = 0;
    uint64_t t = 0;
    runs = read_stat_file(path, &state, &t) && state != 'Z' && state != 'X';
  }
  closedir(d);
  return runs;
}

// Whether pid names a process that has not exited: kill(pid, 0) succeeds (or
// is refused: another user's process), and it is not a zombie waiting for
// its parent (an exited process keeps its pid until then). A zombie main
// thread with other threads still running is a live process.
bool pid_runs(uint64_t pid) {
  if (pid == 0 || pid > uint64_t(INT32_MAX)) return false;
  if (kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
  char state = 0;
  uint64_t t = 0;
  if (!read_proc_stat(pid, &state, &t)) return true;  // no /proc: kill() is all there is
  return (state != 'Z' && state != 'X') || other_thread_runs(pid);
}

// Whether a file owned by `owner` may be pid's segment: the process creates it
// with its own user id, so owner must be one of its real, effective, saved or
// file-system user ids (/proc/<pid>/status). Another user's file at that name
// (planted for a process that publishes nothing, or outlived by its pid) is
// not that process's heap, whatever it says. false also when pid's status
// cannot be read.
bool owned_by_process(uint64_t pid, uid_t owner) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/status", static_cast<unsigned long long>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char line[256];
  bool ok = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long ids[4];
    if (std::sscanf(line, "Uid: %lu %lu %lu %lu", &ids[0], &ids[1], &ids[2], &ids[3]) == 4) {
      for (unsigned long id : ids) ok = ok || id == static_cast<unsigned long>(owner);
      break;
    }
  }
  std::fclose(f);
  return ok;
}

// Whether process pid maps the file st describes: a line of
// /proc/<pid>/maps with its device and inode. true when the maps cannot be
// read (another user's process, or a kernel that hides them): no way to tell.
bool maps_file(uint64_t pid, const struct stat& st) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/maps", static_cast<unsigned long long>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return true;
  char line[512];
  bool found = false, read_any = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    read_any = true;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(line, "%*s %*s %*s %x:%x %llu", &dev_major, &dev_minor, &inode) == 3)
      found = inode == static_cast<unsigned long long>(st.st_ino) && dev_major == major(st.st_dev) &&
              dev_minor == minor(st.st_dev);
    // A line longer than the buffer: skip the rest of it.
    while (std::strchr(line, '\n') == nullptr && std::fgets(line, sizeof line, f) != nullptr) {
    }
  }
  std::fclose(f);
  return found || !read_any;
}

// Parses "freeway.<digits>" into pid; false for any other name.
bool parse_segment_name(const char* name, uint64_t* pid) {
  static const char kPrefix[] = "freeway.";
  if (std::strncmp(name, kPrefix, sizeof kPrefix - 1) != 0) return false;
  const char* d = name + sizeof kPrefix - 1;
  if (*d == '\0' || std::strlen(d) > 10) return false;
  uint64_t v = 0;
  for (; *d; d++) {
    if (*d < '0' || *d > '9') return false;
    v = v * 10 + uint64_t(*d - '0');
  }
  if (v == 0 || v > uint64_t(INT32_MAX)) return false;
  *pid = v;
  return true;
}

bool pread_all(int fd, void* buf, size_t n, uint64_t off) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
    off += uint64_t(r);
  }
  return true;
}

}  // namespace

bool process_start_ticks(uint64_t pid, uint64_t* ticks) {
  char state = 0;
  return read_proc_stat(pid, &state, ticks);
}

namespace detail {

bool same_process(uint64_t pid, uint64_t start_ticks) {
  if (!pid_runs(pid)) return false;
  char state = 0;
  uint64_t t = 0;
  if (!read_proc_stat(pid, &state, &t)) return false;
  return t == start_ticks;
}

void os_view_close(OsView& v, const uint8_t* base, size_t mapped) {
  munmap(const_cast<uint8_t*>(base), mapped);
  close(int(v.handle));
  v.handle = -1;
}

bool os_view_intact(const OsView& v, uint64_t segment_size) {
  struct stat st;
  return fstat(int(v.handle), &st) == 0 && uint64_t(st.st_size) >= segment_size;
}

bool os_view_mapped_by(const OsView& v, uint64_t pid) {
  struct stat st;
  return fstat(int(v.handle), &st) != 0 || maps_file(pid, st);
}

}  // namespace detail

// ---------------------------------------------------------------------------
// list_processes

std::vector<ProcessEntry> list_processes(bool prune, const std::string& dir) {
  std::vector<ProcessEntry> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  int dfd = dirfd(d);
  while (dirent* e = readdir(d)) {
    uint64_t pid = 0;
    if (!parse_segment_name(e->d_name, &pid)) continue;
    int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;  // a symbolic link (ELOOP), another user's file, or gone
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      continue;
    }
    ProcessEntry pe;
    pe.pid = pid;
    pe.path = dir + "/" + e->d_name;
    fwt_header h{};
    bool have_header = uint64_t(st.st_size) >= sizeof h && pread_all(fd, &h, sizeof h, 0) &&
                       h.magic == FWT_MAGIC && h.pid == pid;
    if (have_header) {
      pe.exe = exe_of(h);
      pe.alive = same_process(pid, h.process_start_ticks) && owned_by_process(pid, st.st_uid) && maps_file(pid, st);
      // Best-effort figures: a copy of the process record bracketed by the
      // sequence word (pread, not a mapping: a truncated file cannot fault).
      Layout L;
      if (validate_header(h, uint64_t(st.st_size), &L).empty()) {
        for (int attempt = 0; attempt < 20; attempt++) {
          uint64_t s1 = 0, s2 = 0;
          fwt_process p{};
          const uint64_t seq_off = offsetof(fwt_header, snapshot_seq);
          if (!pread_all(fd, &s1, sizeof s1, seq_off) || (s1 & 1) != 0) continue;
          if (!pread_all(fd, &p, sizeof p, L.process.offset)) break;
          if (!pread_all(fd, &s2, sizeof s2, seq_off)) break;
          if (s1 != s2) continue;
          pe.live_bytes = p.live_bytes;
          pe.committed_bytes = p.committed_bytes;
          break;
        }
      }
    } else {
      // No header yet (a process starting to publish) or one that stopped:
      // the pid is all there is to go on.
      pe.alive = pid_runs(pid);
    }
    close(fd);
    if (!pe.alive && prune && st.st_uid == geteuid()) {
      if (unlinkat(dfd, e->d_name, 0) == 0) continue;
    }
    out.push_back(std::move(pe));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const ProcessEntry& a, const ProcessEntry& b) { return a.pid < b.pid; });
  return out;
}

std::unique_ptr<Segment> Segment::attach(uint64_t pid, std::string* err, const std::string& dir) {
  std::string label = fmt("process %llu", static_cast<unsigned long long>(pid));
  std::string path = dir + "/freeway." + std::to_string(pid);
  const bool runs = pid_runs(pid);
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)" : "no " + label;
    else if (e == ELOOP)
      *err = label + ": " + path + " is a symbolic link (refused)";
    else
      *err = label + ": cannot open " + path + ": " + std::strerror(e);
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *err = label + ": " + path + " is not a regular file";
    return nullptr;
  }
  if (uint64_t(st.st_size) < sizeof(fwt_header)) {
    close(fd);
    *err = runs ? label + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)"
                : label + ": stale segment (the process has exited)";
    return nullptr;
  }
  if (runs && !owned_by_process(pid, st.st_uid)) {
    close(fd);
    *err = label + ": " + path + fmt(" belongs to user %lu, not to the process (refused)",
                                     static_cast<unsigned long>(st.st_uid));
    return nullptr;
  }
  size_t len = size_t(st.st_size);
  void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    *err = label + ": cannot map " + path + ": " + std::strerror(e);
    return nullptr;
  }
  auto I = std::make_unique<Impl>();
  I->os.handle = fd;
  I->base = static_cast<const uint8_t*>(m);
  I->mapped = len;
  I->path = path;
  I->label = label;
  I->pid = pid;
  return adopt(std::move(I), runs, err);
}

bool Segment::take(Snapshot* out, std::string* err) {
  Impl& I = *impl_;
  // Every read of a mapped file runs under the SIGBUS guard (see on_sigbus).
  // The snapshot is built in *scratch, owned outside the guarded frame, so a
  // jump out of a copy leaks nothing.
  Snapshot scratch;
  sigjmp_buf guard;
  if (I.os.handle >= 0) {
    install_bus_guard();
    if (sigsetjmp(guard, 1) != 0) {
      t_bus_guard = nullptr;
      *err = I.err("the segment shrank while it was read (the process stopped publishing)");
      return false;
    }
    t_bus_guard = &guard;
  }
  struct Unguard {
    ~Unguard() { t_bus_guard = nullptr; }
  } unguard;
  return I.take_guarded(&scratch, out, err);
}

}  // namespace fwi
