// The telemetry publisher (core/telemetry.cpp), seen from outside as a reader
// sees it: the segment's name, mode and life time, the header, snapshots under
// the sequence lock, the event ring, a planted file at the segment's name, and
// fork. This program links libfreeway.so, so its malloc is freeway's. The
// inspector's own reader is tested in the inspector tests; this one reads the
// raw format with nothing but freeway_telemetry.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "doctest/doctest.h"
#include "freeway.h"
#include "freeway_telemetry.h"
#include "tests/test_util.h"

namespace {

std::string segment_path(pid_t pid) { return std::string(FWT_PATH_PREFIX) + std::to_string(pid); }

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A read-only view of a segment, as a reader maps it.
struct View {
  const uint8_t* base = nullptr;
  size_t size = 0;
  explicit View(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size >= off_t(sizeof(fwt_header))) {
      void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        base = static_cast<const uint8_t*>(p);
        size = size_t(st.st_size);
      }
    }
    close(fd);
  }
  ~View() {
    if (base != nullptr) munmap(const_cast<uint8_t*>(base), size);
  }
  const fwt_header& header() const { return *reinterpret_cast<const fwt_header*>(base); }
  uint64_t load(const uint64_t& w) const { return __atomic_load_n(&w, __ATOMIC_ACQUIRE); }
  template <class T>
  const T* table(uint64_t offset) const {
    return reinterpret_cast<const T*>(base + offset);
  }
  // A consistent copy of the process record and the span mirror (the reader's
  // protocol of docs/telemetry.md).
  bool snapshot(fwt_process* p, std::vector<fwt_span>* spans) const {
    const fwt_header& h = header();
    for (int tries = 0; tries < 1000; tries++) {
      uint64_t s1 = load(h.snapshot_seq);
      if (s1 & 1) {
        fwtest::sleep_ns(100000);
        continue;
      }
      std::memcpy(p, table<fwt_process>(h.process_offset), sizeof *p);
      if (p->span_count > h.span_capacity) continue;
      spans->resize(p->span_count);
      std::memcpy(spans->data(), table<fwt_span>(h.spans_offset), p->span_count * sizeof(fwt_span));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (__atomic_load_n(&h.snapshot_seq, __ATOMIC_RELAXED) == s1) return true;
    }
    return false;
  }
  // Every complete event in the ring, oldest first.
  std::vector<fwt_event> events() const {
    const fwt_header& h = header();
    std::vector<fwt_event> out;
    uint64_t next = load(h.event_next);
    uint64_t first = next > h.event_capacity ? next - h.event_capacity : 0;
    const fwt_event* ring = table<fwt_event>(h.events_offset);
    for (uint64_t n = first; n < next; n++) {
      const fwt_event& e = ring[n % h.event_capacity];
      if (load(e.seq) != 2 * n + 2) continue;
      fwt_event copy;
      std::memcpy(&copy, &e, sizeof copy);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (__atomic_load_n(&e.seq, __ATOMIC_RELAXED) == 2 * n + 2) out.push_back(copy);
    }
    return out;
  }
};

bool has_event(const View& v, uint32_t kind) {
  for (const fwt_event& e : v.events())
    if (e.kind == kind) return true;
  return false;
}

// Waits until the publisher has written `more` snapshots after the current one.
bool wait_snapshots(const View& v, uint64_t more) {
  uint64_t start = v.load(v.header().snapshot_seq);
  for (int i = 0; i < 400; i++) {
    if (v.load(v.header().snapshot_seq) >= start + 2 * more) return true;
    fwtest::sleep_ns(10000000);
  }
  return false;
}

}  // namespace

TEST_CASE("telemetry: the segment is 0600, valid, refreshed, and gone after stop") {
  REQUIRE(fw_telemetry_active() == 0);
  std::vector<void*> keep;
  for (int i = 0; i < 5000; i++) keep.push_back(std::malloc(16 + i % 3000));
  REQUIRE(fw_telemetry_start() == 0);
  CHECK(fw_telemetry_active() == 1);
  CHECK(fw_telemetry_start() == 0);  // idempotent
  std::string path = segment_path(getpid());
  struct stat st;
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == getuid());

  View v(path);
  REQUIRE(v.base != nullptr);
  const fwt_header& h = v.header();
  CHECK(v.load(h.magic) == FWT_MAGIC);
  CHECK(h.version_major == FWT_VERSION_MAJOR);
  CHECK(h.header_size == sizeof(fwt_header));
  CHECK(h.span_size == sizeof(fwt_span));
  CHECK(h.segment_size == v.size);
  CHECK(h.pid == uint64_t(getpid()));
  CHECK(h.process_start_ticks > 0);
  CHECK(std::string(h.exe).find("test_telemetry") != std::string::npos);
  CHECK(h.events_offset + uint64_t(h.event_capacity) * h.event_size <= h.segment_size);
  REQUIRE(wait_snapshots(v, 3));

  // Quiet heap: the published figures are fw_stats's.
  fw_stats_t s;
  fw_stats(&s);
  REQUIRE(wait_snapshots(v, 2));
  fwt_process p;
  std::vector<fwt_span> spans;
  REQUIRE(v.snapshot(&p, &spans));
  CHECK(p.live_bytes == s.live_bytes);
  CHECK(p.committed_bytes == s.committed_bytes);
  CHECK(p.spans_hot == s.spans_hot);
  CHECK(p.rss_bytes > 0);
  CHECK(p.span_count == p.region_count * h.vspans_per_region);
  uint64_t by_state[FWT_SPAN_STATE_COUNT] = {};
  for (const fwt_span& sp : spans) {
    REQUIRE(sp.state < FWT_SPAN_STATE_COUNT);
    by_state[sp.state]++;
  }
  // The mirror agrees with the descriptor walk of fw_stats.
  CHECK(by_state[FWT_SPAN_HOT] == s.spans_hot);
  CHECK(by_state[FWT_SPAN_FULL] == s.spans_full);
  CHECK(by_state[FWT_SPAN_PARTIAL] == s.spans_partial);
  CHECK(by_state[FWT_SPAN_UNUSED] > 0);

  for (void* b : keep) std::free(b);
  fw_telemetry_stop();
  CHECK(fw_telemetry_active() == 0);
  CHECK(!exists(path));
  CHECK(v.load(h.magic) == 0);  // a reader still attached sees the segment gone
  // And it can start again.
  REQUIRE(fw_telemetry_start() == 0);
  CHECK(exists(path));
  fw_telemetry_stop();
  CHECK(!exists(path));
}

TEST_CASE("telemetry: rare events reach the ring (threads in per-thread mode, commit, out of memory)") {
  REQUIRE(fw_telemetry_start() == 0);
  View v(segment_path(getpid()));
  REQUIRE(v.base != nullptr);
  CHECK(has_event(v, FWT_EV_TELEMETRY_START));
  std::thread t([] {
    void* b = std::malloc(100);
    std::free(b);
  });
  t.join();
  // Thread events mark a thread cache's binding and release: per-thread mode only.
  if (!fw_caches_per_cpu()) {
    CHECK(has_event(v, FWT_EV_THREAD_START));
    CHECK(has_event(v, FWT_EV_THREAD_EXIT));
  }
  // Large blocks live at once, more than the pool retains: some must commit.
  std::vector<void*> big;
  for (int i = 0; i < 6; i++) {
    big.push_back(std::malloc(16 << 20));
    std::memset(big.back(), 1, 4096);
  }
  for (void* b : big) std::free(b);
  CHECK(has_event(v, FWT_EV_COMMIT));
  errno = 0;
  void* impossible = std::malloc(size_t(1) << 62);
  CHECK(impossible == nullptr);
  CHECK(has_event(v, FWT_EV_OUT_OF_MEMORY));
  // Events carry increasing times and valid kinds.
  std::vector<fwt_event> ev = v.events();
  REQUIRE(ev.size() >= 4);
  for (size_t i = 0; i < ev.size(); i++) {
    CHECK(ev[i].kind < FWT_EV_KIND_COUNT);
    if (i > 0) CHECK(ev[i].time_ns + 1000000 >= ev[i - 1].time_ns);  // threads race within a ms
  }
  fw_telemetry_stop();
}

TEST_CASE("telemetry: a file planted at the segment's name is never written through") {
  std::string path = segment_path(getpid());
  char victim[] = "/tmp/fw_telemetry_victimXXXXXX";
  int fd = mkstemp(victim);
  REQUIRE(fd >= 0);
  const char text[] = "not the allocator's";
  REQUIRE(write(fd, text, sizeof text) == ssize_t(sizeof text));
  close(fd);

  SUBCASE("a symbolic link") { REQUIRE(symlink(victim, path.c_str()) == 0); }
  SUBCASE("a regular file left behind") {
    int f = open(path.c_str(), O_CREAT | O_WRONLY, 0644);
    REQUIRE(f >= 0);
    REQUIRE(write(f, text, sizeof text) == ssize_t(sizeof text));
    close(f);
  }
  REQUIRE(fw_telemetry_start() == 0);
  struct stat st;
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));  // a new segment, not the link
  CHECK((st.st_mode & 0777) == 0600);
  char back[sizeof text] = {};
  fd = open(victim, O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(read(fd, back, sizeof back) == ssize_t(sizeof text));
  close(fd);
  CHECK(std::memcmp(back, text, sizeof text) == 0);
  CHECK(lstat(victim, &st) == 0);
  CHECK(st.st_size == off_t(sizeof text));
  fw_telemetry_stop();
  unlink(victim);
}

TEST_CASE("telemetry: a forked child never writes its parent's segment, and publishes its own only when asked") {
  REQUIRE(fw_telemetry_start() == 0);
  View parent(segment_path(getpid()));
  REQUIRE(parent.base != nullptr);
  int to_parent[2];
  REQUIRE(pipe(to_parent) == 0);
  uint64_t events_before = parent.load(parent.header().event_next);
  pid_t child = fwtest::fork_flushed();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(to_parent[0]);
    // Rare events in the child (a thread, a large block) must not reach the parent's ring.
    int bad = 0;
    if (fw_telemetry_active() != 0) bad |= 1;
    std::thread t([] { std::free(std::malloc(64)); });
    t.join();
    void* big = std::malloc(16 << 20);
    std::memset(big, 1, 1 << 20);
    std::free(big);
    if (exists(segment_path(getpid()))) bad |= 2;
    if (fw_telemetry_start() != 0) bad |= 4;
    {
      View mine(segment_path(getpid()));
      if (mine.base == nullptr || mine.header().pid != uint64_t(getpid())) bad |= 8;
    }
    fwtest::write_fd(to_parent[1], &bad, sizeof bad);
    std::exit(bad);  // exit() removes the child's own segment
  }
  close(to_parent[1]);
  int bad = -1;
  CHECK(read(to_parent[0], &bad, sizeof bad) == ssize_t(sizeof bad));
  close(to_parent[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(bad == 0);
  CHECK(fwtest::exit_code(status) == 0);
  CHECK(!exists(segment_path(child)));  // removed at the child's exit
  // The parent's segment is intact: still published, still its own pid, and
  // no event of the child's thread or block landed in it.
  CHECK(exists(segment_path(getpid())));
  CHECK(parent.header().pid == uint64_t(getpid()));
  CHECK(parent.load(parent.header().magic) == FWT_MAGIC);
  for (const fwt_event& e : parent.events()) {
    if (e.kind == FWT_EV_THREAD_START || e.kind == FWT_EV_THREAD_EXIT) {
      // Any thread events after the fork would be the child's (the parent started none).
      uint64_t n = e.seq / 2 - 1;
      CHECK(n < events_before);
    }
  }
  CHECK(wait_snapshots(parent, 2));  // the parent's publisher still runs
  fw_telemetry_stop();
}

namespace {
// A fork handler of the program's, registered before telemetry starts: it runs
// in the child before or after freeway's own, by registration order.
void child_allocates() {
  void* big = std::malloc(24 << 20);  // a region of its own: an event if telemetry still pointed at the parent
  std::free(big);
  std::thread([] { std::free(std::malloc(64)); }).join();
}
}  // namespace

TEST_CASE("telemetry: a fork handler the program registered before telemetry started writes no event into the "
          "parent's segment") {
  REQUIRE(pthread_atfork(nullptr, nullptr, &child_allocates) == 0);
  REQUIRE(fw_telemetry_start() == 0);
  View parent(segment_path(getpid()));
  REQUIRE(parent.base != nullptr);
  const uint64_t events_before = parent.load(parent.header().event_next);
  pid_t child = fwtest::fork_flushed();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(fwtest::exit_code(status) == 0);
  // The parent did nothing meanwhile: every event after the fork would be the child's.
  CHECK(parent.load(parent.header().event_next) == events_before);
  fw_telemetry_stop();
}

TEST_CASE("telemetry: a process that exits removes its segment: one killed leaves it for the inspector to prune") {
  pid_t a = fwtest::fork_flushed();
  REQUIRE(a >= 0);
  if (a == 0) std::exit(fw_telemetry_start() == 0 ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(a, &status, 0) == a);
  CHECK(fwtest::exit_code(status) == 0);
  CHECK(!exists(segment_path(a)));

  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t b = fwtest::fork_flushed();
  REQUIRE(b >= 0);
  if (b == 0) {
    char ok = fw_telemetry_start() == 0 ? 'y' : 'n';
    fwtest::write_fd(ready[1], &ok, 1);
    for (;;) pause();
  }
  char ok = 0;
  CHECK(read(ready[0], &ok, 1) == 1);
  CHECK(ok == 'y');
  kill(b, SIGKILL);
  REQUIRE(waitpid(b, &status, 0) == b);
  CHECK(exists(segment_path(b)));  // SIGKILL runs no exit code
  unlink(segment_path(b).c_str());
  close(ready[0]);
  close(ready[1]);
}
