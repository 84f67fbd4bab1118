// The inspector's model (inspector/model): reading segments, derived figures,
// history and recordings, on synthetic segments laid out by
// tests/inspector_model/segment_builder.h. No libfreeway here: the segments
// are built by hand, so every expected number is worked out below.
#include <algorithm>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "inspector/model/derive.h"
#include "inspector/model/history.h"
#include "inspector/model/recording.h"
#include "inspector/model/segment.h"
#include "tests/inspector_model/segment_builder.h"

using fwitest::header_of;
using fwitest::SegmentBuilder;
using fwitest::small_heap;

namespace {

// A fresh directory under TMPDIR (or /tmp), removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/fwi-model-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    REQUIRE(p != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  REQUIRE(f.good());
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// from_bytes, then take: the error of whichever failed, or "".
std::string take_error(std::vector<uint8_t> b, fwi::Snapshot* out = nullptr) {
  std::string err;
  auto seg = fwi::Segment::from_bytes(std::move(b), &err);
  if (!seg) return err;
  fwi::Snapshot s;
  if (!seg->take(&s, &err)) return err;
  if (out) *out = s;
  return "";
}

template <class T>
bool same_table(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_snapshot(const fwi::Snapshot& a, const fwi::Snapshot& b) {
  return a.pid == b.pid && a.process_start_ticks == b.process_start_ticks && a.exe == b.exe &&
         a.version_major == b.version_major && a.version_minor == b.version_minor &&
         a.vspans_per_region == b.vspans_per_region && a.vspan_shift == b.vspan_shift && a.page_size == b.page_size &&
         a.hz == b.hz && std::memcmp(&a.process, &b.process, sizeof a.process) == 0 && same_table(a.classes, b.classes) &&
         same_table(a.regions, b.regions) && same_table(a.spans, b.spans) && same_table(a.labs, b.labs) &&
         same_table(a.events, b.events) && a.events_missed == b.events_missed && a.events_dropped == b.events_dropped;
}

// A segment file in dir for this very process (so attach() finds it alive),
// and a writable shared mapping of it to play the writer.
struct LiveFile {
  std::string path;
  int fd = -1;
  uint8_t* map = nullptr;
  size_t size = 0;
  LiveFile(const std::string& dir, SegmentBuilder sb) {
    sb.pid = uint64_t(getpid());
    REQUIRE(fwi::process_start_ticks(sb.pid, &sb.start_ticks));
    std::vector<uint8_t> b = sb.build();
    path = dir + "/freeway." + std::to_string(getpid());
    write_file(path, b);
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    size = b.size();
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    map = static_cast<uint8_t*>(m);
  }
  ~LiveFile() {
    munmap(map, size);
    close(fd);
  }
  fwt_header* header() { return reinterpret_cast<fwt_header*>(map); }
  void store_seq(uint64_t v) { __atomic_store_n(&header()->snapshot_seq, v, __ATOMIC_RELEASE); }
  fwt_event* slot(uint64_t n) {
    return reinterpret_cast<fwt_event*>(map + header()->events_offset + (n % header()->event_capacity) * header()->event_size);
  }
  // Writes event n the way the allocator does, and advances event_next past it.
  void write_event(uint64_t n, uint32_t kind, uint32_t arg, bool complete = true) {
    fwt_event* e = slot(n);
    e->time_ns = 3'000'000'000ull + n;
    e->kind = kind;
    e->arg = arg;
    __atomic_store_n(&e->seq, complete ? 2 * n + 2 : 2 * n + 1, __ATOMIC_RELEASE);
    if (header()->event_next < n + 1) __atomic_store_n(&header()->event_next, n + 1, __ATOMIC_RELEASE);
  }
};

// This process's segment in dir (a LiveFile's), attached, and its first
// snapshot taken into *s.
std::unique_ptr<fwi::Segment> attach_and_take(const TempDir& dir, fwi::Snapshot* s) {
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  REQUIRE_MESSAGE(seg, err);
  REQUIRE(seg->take(s, &err));
  return seg;
}

// A pid that runs no process: a child that has exited and been reaped.
uint64_t dead_pid() {
  pid_t c = fork();
  if (c == 0) _exit(0);
  int st = 0;
  waitpid(c, &st, 0);
  return uint64_t(c);
}

}  // namespace

// ---------------------------------------------------------------------------
TEST_SUITE("segment header") {

TEST_CASE("a valid synthetic segment gives back exactly its tables") {
  SegmentBuilder sb = small_heap();
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(s.pid == 4242);
  CHECK(s.exe == "synthetic");
  CHECK(s.version_major == FWT_VERSION_MAJOR);
  CHECK(s.vspans_per_region == 8);
  CHECK(same_table(s.classes, sb.classes));
  CHECK(same_table(s.regions, sb.regions));
  CHECK(same_table(s.spans, sb.spans));
  CHECK(same_table(s.labs, sb.labs));
  CHECK(std::memcmp(&s.process, &sb.process, sizeof s.process) == 0);
  REQUIRE(s.events.size() == 3);
  CHECK(s.events[2].kind == FWT_EV_COMMIT);
}

TEST_CASE("bad magic is refused") {
  auto b = small_heap().build();
  header_of(b)->magic ^= 1;
  CHECK(take_error(b) == "segment: not a freeway telemetry segment (bad magic)");
}

TEST_CASE("another major version is refused, naming both versions") {
  auto b = small_heap().build();
  header_of(b)->version_major = 2;
  header_of(b)->version_minor = 0;
  CHECK(take_error(b) == "segment: telemetry format 2.0, this inspector reads 1.x");
}

TEST_CASE("a newer minor with bigger records and header is read at the old field places") {
  SegmentBuilder sb = small_heap();
  sb.minor = 9;
  sb.extra = 24;  // every record and the header grow by 24 bytes of unknown fields
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(s.version_minor == 9);
  CHECK(same_table(s.classes, sb.classes));
  CHECK(same_table(s.spans, sb.spans));
  CHECK(same_table(s.labs, sb.labs));
  CHECK(s.process.live_bytes == 1'000'000);
  CHECK(s.events.size() == 3);
}

TEST_CASE("each malformed header field is refused with its own message") {
  struct Case {
    const char* name;
    void (*mutate)(fwt_header*);
    const char* expect;  // a part of the error
  } cases[] = {
      {"header size", [](fwt_header* h) { h->header_size = 100; }, "header size 100 is smaller"},
      {"span record", [](fwt_header* h) { h->span_size = 32; }, "span record size 32 is smaller"},
      {"huge record", [](fwt_header* h) { h->lab_size = 1u << 20; }, "lab record size 1048576 is absurd"},
      {"segment size", [](fwt_header* h) { h->segment_size += 4096; }, "is larger than the"},
      {"classes", [](fwt_header* h) { h->class_capacity = 65; }, "class capacity 65 over 64"},
      {"regions", [](fwt_header* h) { h->region_capacity = (1u << 20) + 1; }, "region capacity"},
      {"vspans", [](fwt_header* h) { h->vspans_per_region = 6; }, "vspans per region 6 is not a power of two"},
      {"vspans 0", [](fwt_header* h) { h->vspans_per_region = 0; }, "vspans per region 0"},
      {"shift", [](fwt_header* h) { h->vspan_shift = 63; }, "vspan shift 63"},
      {"spans", [](fwt_header* h) { h->span_capacity = h->region_capacity * h->vspans_per_region + 1; },
       "span capacity"},
      {"labs", [](fwt_header* h) { h->lab_capacity = (1u << 20) + 1; }, "lab capacity"},
      {"events", [](fwt_header* h) { h->event_capacity = 12; }, "event capacity 12 is not a power of two"},
      {"events 0", [](fwt_header* h) { h->event_capacity = 0; }, "event capacity 0"},
      {"table outside", [](fwt_header* h) { h->labs_offset = h->segment_size - 8; }, "labs table"},
      {"offset overflow", [](fwt_header* h) { h->spans_offset = UINT64_MAX - 15; }, "spans table"},
      {"unaligned", [](fwt_header* h) { h->regions_offset += 4; }, "not 8-byte aligned"},
      {"overlaps header", [](fwt_header* h) { h->process_offset = 0; }, "overlaps the header"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto b = small_heap().build();
    c.mutate(header_of(b));
    std::string e = take_error(b);
    CHECK(e.find(c.expect) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("a buffer shorter than a header is refused") {
  std::vector<uint8_t> b(100, 0);
  CHECK(take_error(b).find("smaller than a header") != std::string::npos);
}

TEST_CASE("counts beyond their capacity are refused") {
  SegmentBuilder sb = small_heap();
  sb.process.class_count = sb.class_capacity + 1;
  CHECK(take_error(sb.build()) == "segment: class count 9 over capacity 8");
  sb = small_heap();
  sb.process.lab_count = 9;
  CHECK(take_error(sb.build()) == "segment: lab count 9 over capacity 8");
  sb = small_heap();
  sb.process.span_count = 7;  // must be region_count * vspans_per_region
  CHECK(take_error(sb.build()).find("span count 7 is not region count") != std::string::npos);
  sb = small_heap();
  sb.process.region_count = 5;
  CHECK(take_error(sb.build()).find("region count 5 over capacity 4") != std::string::npos);
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("snapshot contents") {

TEST_CASE("each corrupt record is refused, naming it") {
  struct Case {
    const char* name;
    void (*mutate)(SegmentBuilder*);
    const char* expect;
  } cases[] = {
      {"state", [](SegmentBuilder* s) { s->spans[6].state = 9; }, "span 6: unknown state 9"},
      {"class", [](SegmentBuilder* s) { s->spans[2].cls = 2; }, "span 2: class 2 over class count 2"},
      {"carved", [](SegmentBuilder* s) { s->spans[0].carved = 5000; }, "span 0: carved 5000 over capacity 4096"},
      {"remote", [](SegmentBuilder* s) { s->spans[1].remote_count = 4097; }, "span 1: remote count 4097"},
      {"tail", [](SegmentBuilder* s) { s->spans[5].run_len = 8; }, "span 5: large tail names head 8"},
      {"owner", [](SegmentBuilder* s) { s->spans[0].owner = 9; }, "span 0: owner 9 over lab capacity 8"},
      {"region kind", [](SegmentBuilder* s) { s->regions[0].kind = 3; }, "region 0: unknown kind 3"},
      {"next vspan", [](SegmentBuilder* s) { s->regions[0].next_vspan = 9; }, "region 0: next vspan 9 over 8"},
      {"block size", [](SegmentBuilder* s) { s->classes[1].block_size = 0; }, "class 1: block size 0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    SegmentBuilder sb = small_heap();
    c.mutate(&sb);
    std::string e = take_error(sb.build());
    CHECK(e.find(std::string("segment: ") + c.expect) == 0);
  }
}

TEST_CASE("bytes frozen mid-write (odd sequence) never give a snapshot") {
  SegmentBuilder sb = small_heap();
  sb.snapshot_seq = 5;
  CHECK(take_error(sb.build()) == "segment: could not get a consistent snapshot (the writer kept changing it)");
}

TEST_CASE("take retries while the writer holds the sequence lock, then succeeds") {
  TempDir dir;
  LiveFile f(dir.path, small_heap());
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  REQUIRE_MESSAGE(seg, err);
  f.store_seq(7);  // a write in progress
  f.header();
  std::atomic<bool> started{false};
  std::thread writer([&] {
    started.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reinterpret_cast<fwt_process*>(f.map + f.header()->process_offset)->live_bytes = 123456;
    f.store_seq(8);
  });
  while (!started.load(std::memory_order_acquire)) {
  }
  fwi::Snapshot s;
  bool ok = seg->take(&s, &err);
  writer.join();
  REQUIRE_MESSAGE(ok, err);
  CHECK(s.process.live_bytes == 123456);  // only the completed write is seen
}

TEST_CASE("take gives up with one line when the sequence stays odd") {
  TempDir dir;
  LiveFile f(dir.path, small_heap());
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  REQUIRE_MESSAGE(seg, err);
  f.store_seq(9);
  fwi::Snapshot s;
  CHECK_FALSE(seg->take(&s, &err));
  CHECK(err == "process " + std::to_string(getpid()) +
                   ": could not get a consistent snapshot (the writer kept changing it)");
}

TEST_CASE("a truncated segment file is reported, not read past its end") {
  TempDir dir;
  LiveFile f(dir.path, small_heap());
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  REQUIRE_MESSAGE(seg, err);
  REQUIRE(ftruncate(f.fd, 1024) == 0);  // the writer's tables end past 3 KiB
  fwi::Snapshot s;
  CHECK_FALSE(seg->take(&s, &err));
  CHECK(err.find("truncated") != std::string::npos);
}

TEST_CASE("a segment owned by another user than the process's is refused, and not listed as alive") {
  if (geteuid() != 0) {
    MESSAGE("skipped: giving a file to another user needs root");
    return;
  }
  TempDir dir;
  LiveFile f(dir.path, small_heap());
  REQUIRE(fchown(f.fd, 65534, 65534) == 0);  // nobody: this process runs as root
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  CHECK_FALSE(seg);
  CHECK_MESSAGE(err.find("belongs to user 65534") != std::string::npos, err);
  bool listed_alive = false;
  for (const fwi::ProcessEntry& e : fwi::list_processes(false, dir.path))
    if (e.pid == uint64_t(getpid())) listed_alive = e.alive;
  CHECK_FALSE(listed_alive);
  REQUIRE(fchown(f.fd, 0, 0) == 0);
  seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  CHECK_MESSAGE(seg, err);
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("events") {

TEST_CASE("complete events are read once, oldest first") {
  TempDir dir;
  SegmentBuilder sb = small_heap();
  LiveFile f(dir.path, sb);
  std::string err;
  fwi::Snapshot s;
  auto seg = attach_and_take(dir, &s);
  REQUIRE(s.events.size() == 3);
  CHECK(s.events[0].kind == FWT_EV_TELEMETRY_START);
  CHECK(s.events[1].kind == FWT_EV_REGION_RESERVE);
  CHECK(s.events[2].kind == FWT_EV_COMMIT);
  REQUIRE(seg->take(&s, &err));
  CHECK(s.events.empty());  // nothing new
  f.write_event(3, FWT_EV_THREAD_START, 7);
  REQUIRE(seg->take(&s, &err));
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].arg == 7);
  CHECK(s.events_missed == 0);
}

TEST_CASE("an event still being written stops the read until it completes") {
  TempDir dir;
  LiveFile f(dir.path, small_heap());
  std::string err;
  fwi::Snapshot s;
  auto seg = attach_and_take(dir, &s);
  f.write_event(3, FWT_EV_COMMIT, 1, /*complete=*/false);
  f.write_event(4, FWT_EV_COMMIT, 2);
  REQUIRE(seg->take(&s, &err));
  CHECK(s.events.empty());  // event 3 is odd: nothing past it either
  f.write_event(3, FWT_EV_COMMIT, 1);
  REQUIRE(seg->take(&s, &err));
  REQUIRE(s.events.size() == 2);
  CHECK(s.events[0].arg == 1);
  CHECK(s.events[1].arg == 2);
  CHECK(s.events_missed == 0);
}

TEST_CASE("an event whose slot stays short of complete while later ones complete is passed after a while") {
  // Event 3's writer froze in its slot (odd seq of this lap), or the writer of
  // event 3 dropped it because a writer of the lap before had frozen there
  // (the slot keeps that older seq): either way the read must not stop there
  // for a whole lap of the ring.
  for (bool frozen_here : {true, false}) {
    CAPTURE(frozen_here);
    TempDir dir;
    LiveFile f(dir.path, small_heap());
    std::string err;
    fwi::Snapshot s;
    auto seg = attach_and_take(dir, &s);
    if (frozen_here) {
      f.write_event(3, FWT_EV_COMMIT, 1, /*complete=*/false);
    } else {
      __atomic_store_n(&f.slot(3)->seq, uint64_t(1), __ATOMIC_RELEASE);  // an older lap's writer, frozen
      __atomic_fetch_add(&f.header()->event_dropped, 1, __ATOMIC_RELAXED);
    }
    f.write_event(4, FWT_EV_COMMIT, 2);
    f.write_event(5, FWT_EV_COMMIT, 3);
    REQUIRE(seg->take(&s, &err));
    CHECK(s.events.empty());  // at first, 3 may still be on its way
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    REQUIRE(seg->take(&s, &err));
    REQUIRE(s.events.size() == 2);
    CHECK(s.events[0].arg == 2);
    CHECK(s.events[1].arg == 3);
    // Counted once: as missed when its writer is in it, as dropped by the writer otherwise.
    CHECK(s.events_missed + s.events_dropped == 1);
    f.write_event(6, FWT_EV_COMMIT, 4);
    REQUIRE(seg->take(&s, &err));
    REQUIRE(s.events.size() == 1);
    CHECK(s.events[0].arg == 4);
  }
}

TEST_CASE("events overwritten before the reader got to them are counted as missed") {
  TempDir dir;
  SegmentBuilder sb = small_heap();
  sb.event_capacity = 4;
  LiveFile f(dir.path, sb);
  std::string err;
  fwi::Snapshot s;
  auto seg = attach_and_take(dir, &s);
  CHECK(s.events.size() == 3);
  for (uint64_t n = 3; n < 13; n++) f.write_event(n, FWT_EV_COMMIT, uint32_t(n));
  REQUIRE(seg->take(&s, &err));
  // Events 3..12 were written into a ring of 4: 3..8 are gone, 9..12 remain.
  CHECK(s.events_missed == 6);
  REQUIRE(s.events.size() == 4);
  CHECK(s.events[0].arg == 9);
  CHECK(s.events[3].arg == 12);
  // A slot whose seq moved past the one wanted (a writer a lap ahead) is missed too.
  f.write_event(13, FWT_EV_COMMIT, 13);
  f.write_event(17, FWT_EV_COMMIT, 17);  // lands in 13's slot before the reader came
  __atomic_store_n(&f.header()->event_next, 14, __ATOMIC_RELEASE);
  REQUIRE(seg->take(&s, &err));
  CHECK(s.events.empty());
  CHECK(s.events_missed == 7);
}

TEST_CASE("attaching starts at most one ring's length back") {
  SegmentBuilder sb = small_heap();
  sb.event_capacity = 4;
  sb.events.clear();
  sb.event_next = 0;
  for (int i = 0; i < 10; i++) sb.add_event(FWT_EV_COMMIT, uint32_t(i), 0, 4096, 3'000'000'000ull + i);
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  REQUIRE(s.events.size() == 4);
  CHECK(s.events[0].arg == 6);
  CHECK(s.events_missed == 0);  // older than the ring when we came: not ours to miss
}

TEST_CASE("describe_event says what happened, in seconds since the start") {
  fwt_event e{};
  e.time_ns = 14'845'000'000ull;
  e.kind = FWT_EV_COMMIT;
  e.arg = 17;
  e.size = 65536;
  CHECK(fwi::describe_event(e, 2'500'000'000ull) == "12.345 s  commit span 17  64 KiB");
  e.kind = FWT_EV_THREAD_EXIT;
  e.arg = 3;
  CHECK(fwi::describe_event(e, 2'500'000'000ull) == "12.345 s  thread exit  cache 3");
  e.kind = 99;
  CHECK(fwi::describe_event(e, 2'500'000'000ull).find("event kind 99") != std::string::npos);
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("attach and list") {

TEST_CASE("attach explains why it cannot") {
  TempDir dir;
  std::string err;
  uint64_t dead = dead_pid();
  CHECK_FALSE(fwi::Segment::attach(dead, &err, dir.path));
  CHECK(err == "no process " + std::to_string(dead));
  uint64_t me = uint64_t(getpid());
  CHECK_FALSE(fwi::Segment::attach(me, &err, dir.path));
  CHECK(err == "process " + std::to_string(me) + " publishes no telemetry (start it with FREEWAY_TELEMETRY=1)");

  // A segment left by a dead process.
  SegmentBuilder sb = small_heap();
  sb.pid = dead;
  write_file(dir.path + "/freeway." + std::to_string(dead), sb.build());
  CHECK_FALSE(fwi::Segment::attach(dead, &err, dir.path));
  CHECK(err == "process " + std::to_string(dead) + ": stale segment (the process has exited)");

  // Our pid, but another start time: a recycled pid.
  sb.pid = me;
  sb.start_ticks = 1;
  write_file(dir.path + "/freeway." + std::to_string(me), sb.build());
  CHECK_FALSE(fwi::Segment::attach(me, &err, dir.path));
  CHECK(err == "process " + std::to_string(me) + ": stale segment (the process has exited)");

  // Another major version, from a live process.
  REQUIRE(fwi::process_start_ticks(me, &sb.start_ticks));
  auto b = sb.build();
  header_of(b)->version_major = 2;
  header_of(b)->version_minor = 0;
  write_file(dir.path + "/freeway." + std::to_string(me), b);
  CHECK_FALSE(fwi::Segment::attach(me, &err, dir.path));
  CHECK(err == "process " + std::to_string(me) + ": telemetry format 2.0, this inspector reads 1.x");

  // A symbolic link is never followed.
  std::string target = dir.path + "/elsewhere";
  write_file(target, sb.build());
  std::filesystem::remove(dir.path + "/freeway." + std::to_string(me));
  std::filesystem::create_symlink(target, dir.path + "/freeway." + std::to_string(me));
  CHECK_FALSE(fwi::Segment::attach(me, &err, dir.path));
  CHECK(err.find("symbolic link") != std::string::npos);
}

TEST_CASE("a process that exited but was not reaped yet (a zombie) has a stale segment") {
  TempDir dir;
  pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  // Wait (up to 10 s) for the child to become a zombie: every one of its
  // threads exited, not only the main one. A thread the runtime started in the
  // child (ThreadSanitizer's) can still be exiting when the main thread's
  // state reads Z, and the inspector rightly counts such a process as alive.
  auto exited = [](const std::string& stat_path) {
    std::ifstream st(stat_path);
    std::string line;
    std::getline(st, line);
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos || line.size() <= close_paren + 2) return !st.is_open();
    return line[close_paren + 2] == 'Z' || line[close_paren + 2] == 'X';
  };
  const std::string proc = "/proc/" + std::to_string(child);
  uint64_t ticks = 0;
  bool zombie = false;
  for (int i = 0; i < 1000 && !zombie; i++) {
    zombie = exited(proc + "/stat");
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(proc + "/task", ec))
      zombie = zombie && exited(task.path().string() + "/stat");
    if (!zombie) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(zombie);
  REQUIRE(fwi::process_start_ticks(uint64_t(child), &ticks));
  SegmentBuilder sb = small_heap();
  sb.pid = uint64_t(child);
  sb.start_ticks = ticks;
  write_file(dir.path + "/freeway." + std::to_string(child), sb.build());
  std::string err;
  CHECK_FALSE(fwi::Segment::attach(uint64_t(child), &err, dir.path));
  CHECK(err == "process " + std::to_string(child) + ": stale segment (the process has exited)");
  auto l = fwi::list_processes(false, dir.path);
  REQUIRE(l.size() == 1);
  CHECK_FALSE(l[0].alive);
  int status = 0;
  waitpid(child, &status, 0);
}

TEST_CASE("list shows live and stale segments: prune removes only the stale ones") {
  TempDir dir;
  uint64_t me = uint64_t(getpid()), dead = dead_pid();
  SegmentBuilder sb = small_heap();
  // Alive: this process's, mapped by it as a publishing process maps its own.
  LiveFile mine(dir.path, sb);
  sb.pid = dead;
  write_file(dir.path + "/freeway." + std::to_string(dead), sb.build());
  write_file(dir.path + "/freeway.notapid", sb.build());
  write_file(dir.path + "/unrelated", sb.build());
  std::filesystem::create_symlink(dir.path + "/unrelated", dir.path + "/freeway.1");

  auto l = fwi::list_processes(false, dir.path);
  REQUIRE(l.size() == 2);
  const fwi::ProcessEntry& live = l[0].pid == me ? l[0] : l[1];
  const fwi::ProcessEntry& stale = l[0].pid == me ? l[1] : l[0];
  CHECK(live.alive);
  CHECK(live.exe == "synthetic");
  CHECK(live.live_bytes == 1'000'000);
  CHECK(live.committed_bytes == 3'000'000);
  CHECK_FALSE(stale.alive);
  CHECK(stale.pid == dead);

  l = fwi::list_processes(true, dir.path);
  REQUIRE(l.size() == 1);
  CHECK(l[0].pid == me);
  CHECK(std::filesystem::exists(dir.path + "/freeway." + std::to_string(me)));
  CHECK_FALSE(std::filesystem::exists(dir.path + "/freeway." + std::to_string(dead)));
  CHECK(std::filesystem::exists(dir.path + "/unrelated"));  // the link's target is untouched
  CHECK(std::filesystem::is_symlink(dir.path + "/freeway.1"));
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("derived figures") {

TEST_CASE("derive on a hand-built heap gives the figures worked out by hand") {
  fwi::Snapshot s;
  REQUIRE(take_error(small_heap().build(), &s) == "");
  fwi::Figures f = fwi::derive(s);
  CHECK(f.time_s == doctest::Approx(10.0));
  CHECK(f.live == 1'000'000);
  CHECK(f.blowup == doctest::Approx(3.0));        // 3,000,000 / 1,000,000
  CHECK(f.blowup_peak == doctest::Approx(1.5));   // 3,000,000 / 2,000,000
  // Free in small spans: committed - (carved - remote) * block size, per span:
  //   span 0 (HOT, 16 B):    65536 - 2900 * 16   = 19136
  //   span 1 (FULL, 16 B):   65536 - 3596 * 16   =  8000
  //   span 2 (PARTIAL, 1 KiB): 65536 - 10 * 1024 = 55296
  CHECK(f.frag_free_in_spans == 19136 + 8000 + 55296);
  CHECK(f.frag_pooled == 65536);                  // span 3 (FREE, committed); span 6 has none
  CHECK(f.frag_large_slack == 1572864 - 1500000); // span 4 (LARGE)
  CHECK(f.metadata == 65536);
  CHECK(f.spans_by_state[FWT_SPAN_FREE] == 2);
  CHECK(f.spans_by_state[FWT_SPAN_HOT] == 1);
  CHECK(f.spans_by_state[FWT_SPAN_FULL] == 1);
  CHECK(f.spans_by_state[FWT_SPAN_PARTIAL] == 1);
  CHECK(f.spans_by_state[FWT_SPAN_LARGE] == 1);
  CHECK(f.spans_by_state[FWT_SPAN_LARGE_TAIL] == 1);
  CHECK(f.spans_by_state[FWT_SPAN_HUGE] == 0);
  CHECK(f.spans_by_state[FWT_SPAN_UNUSED] == 1);

  REQUIRE(f.classes.size() == 2);
  const fwi::ClassFigures& c0 = f.classes[0];
  CHECK(c0.block_size == 16);
  CHECK(c0.live_blocks == 4000);
  CHECK(c0.live_bytes == 64000);
  CHECK(c0.spans_hot == 1);
  CHECK(c0.spans_full == 1);
  CHECK(c0.spans_partial == 0);
  CHECK(c0.committed_bytes == 131072);
  CHECK(c0.fullness == doctest::Approx(4000.0 / (2 * 4096)));
  // Occupancy: 2900/4096 = 70.8% (bucket 7), 3596/4096 = 87.8% (bucket 8).
  CHECK(c0.occupancy[7] == 1);
  CHECK(c0.occupancy[8] == 1);
  const fwi::ClassFigures& c1 = f.classes[1];
  CHECK(c1.spans_partial == 1);
  CHECK(c1.fullness == doctest::Approx(10.0 / 64));
  CHECK(c1.occupancy[1] == 1);  // 10/64 = 15.6%

  REQUIRE(f.labs.size() == 2);
  CHECK(f.labs[0].alive);
  CHECK(f.labs[0].hot_spans == 1);
  CHECK(f.labs[0].bytes_held == 65536);
  CHECK(f.labs[0].free_bytes_held == (4096 - 3000 + 100) * 16);
  CHECK(f.labs[0].pending == 3);
  CHECK_FALSE(f.labs[1].alive);
  CHECK(f.labs[1].hot_spans == 0);
  CHECK(f.threads_live == 1);
}

TEST_CASE("derive reports no blowup for an empty heap and skips classes never used") {
  SegmentBuilder sb = small_heap();
  sb.process.live_bytes = 0;
  sb.process.peak_live_bytes = 0;
  sb.classes.push_back(fwt_class{2048, 65536, 32, 8, 0, 0, 0});
  sb.sync_counts();
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  fwi::Figures f = fwi::derive(s);
  CHECK(f.blowup == 0);
  CHECK(f.blowup_peak == 0);
  CHECK(f.classes.size() == 2);
}

TEST_CASE("derive tells a CPU cache in a slot from one a slow path holds (format 1.1)") {
  SegmentBuilder sb = small_heap();
  sb.labs.clear();
  sb.labs.push_back(fwt_lab{0, FWT_LAB_CPU, 700, 600, 0, 2});  // in CPU 1's slot
  sb.labs.push_back(fwt_lab{1, FWT_LAB_CPU, 10, 9, 0, 0});     // out of every slot
  sb.labs.push_back(fwt_lab{2, FWT_LAB_IDLE, 0, 0, 0, 0});
  sb.sync_counts();
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  fwi::Figures f = fwi::derive(s);
  REQUIRE(f.labs.size() == 3);
  CHECK(f.labs[0].cpu == 1);
  CHECK(f.labs[0].alive);
  CHECK(f.labs[1].cpu == -1);
  CHECK(f.labs[1].alive);
  CHECK(f.labs[2].cpu == -1);
  CHECK_FALSE(f.labs[2].alive);
  CHECK(f.caches_in_cpu_slots == 1);
}

TEST_CASE("a kept span's own list counts as free in its occupancy and its cache's free bytes (format 1.2)") {
  SegmentBuilder sb = small_heap();
  size_t hot = sb.spans.size();
  for (size_t i = 0; i < sb.spans.size(); i++)
    if (sb.spans[i].state == FWT_SPAN_HOT && sb.spans[i].owner != 0) hot = i;
  REQUIRE(hot < sb.spans.size());
  fwi::Snapshot s0;
  REQUIRE(take_error(sb.build(), &s0) == "");
  fwi::Figures before = fwi::derive(s0);
  fwt_span& sp = sb.spans[hot];
  REQUIRE(sp.carved >= sp.remote_count + 4);
  sp.own_free = 4;
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(s.spans[hot].own_free == 4);
  fwi::Figures after = fwi::derive(s);
  const uint64_t bs = sb.classes[sp.cls].block_size;
  uint64_t held_before = 0, held_after = 0;
  for (const auto& l : before.labs) held_before += l.free_bytes_held;
  for (const auto& l : after.labs) held_after += l.free_bytes_held;
  CHECK(held_after == held_before + 4 * bs);
  CHECK(fwi::check_spans(s).empty());
  sp.own_free = sp.carved;  // more free than carved: a broken mirror
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK_FALSE(fwi::check_spans(s).empty());
}

TEST_CASE("span records of a 1.1 writer (40 bytes) are read, with own_free 0") {
  SegmentBuilder sb = small_heap();
  sb.minor = 1;
  sb.span_bytes = FWT_SPAN_SIZE_1_0;
  for (auto& sp : sb.spans) sp.own_free = 7;  // not written: a 1.1 record ends before it
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  REQUIRE(s.spans.size() == sb.spans.size());
  for (size_t i = 0; i < s.spans.size(); i++) {
    CHECK(s.spans[i].own_free == 0);
    CHECK(s.spans[i].carved == sb.spans[i].carved);
    CHECK(s.spans[i].large_size == sb.spans[i].large_size);
  }
}

TEST_CASE("check_spans finds nothing on a sound heap") {
  fwi::Snapshot s;
  REQUIRE(take_error(small_heap().build(), &s) == "");
  CHECK(fwi::check_spans(s).empty());
}

TEST_CASE("check_spans accepts a secure-mode span whose last page is its guard page, and no other capacity") {
  SegmentBuilder sb = small_heap();
  sb.spans[2].flags |= FWT_SPAN_GUARD;  // class 1: 1024-byte blocks in 64 KiB, less a 4 KiB page
  sb.spans[2].capacity = 60;
  sb.spans[2].carved = 60;
  sb.spans[2].remote_count = 50;
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  REQUIRE(s.page_size == 4096);
  CHECK(fwi::check_spans(s).empty());
  sb.spans[2].capacity = 64;  // the class's capacity is wrong for a guarded span
  sb.spans[2].carved = 64;
  REQUIRE(take_error(sb.build(), &s) == "");
  auto v = fwi::check_spans(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].find("less a guard page") != std::string::npos);
}

TEST_CASE("check_spans accepts a span whose blocks start at a colour and hold one block fewer, and no other "
          "capacity or colour") {
  SegmentBuilder sb = small_heap();
  sb.spans[2].colour = 512;  // class 1: 1024-byte blocks in 64 KiB, 63 past a colour of 512 bytes
  sb.spans[2].capacity = 63;
  sb.spans[2].carved = 63;
  sb.spans[2].remote_count = 50;
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(fwi::check_spans(s).empty());
  // The class's capacity is wrong past a colour (and its last block would end
  // past the span's committed bytes).
  sb.spans[2].capacity = 64;
  sb.spans[2].carved = 64;
  REQUIRE(take_error(sb.build(), &s) == "");
  auto v = fwi::check_spans(s);
  REQUIRE(v.size() == 2);
  CHECK(v[0].find("past its colour") != std::string::npos);
  CHECK(v[1].find("blocks beyond committed memory") != std::string::npos);
  sb.spans[2].colour = 1024;  // a colour is below the block size
  sb.spans[2].capacity = 63;
  sb.spans[2].carved = 63;
  REQUIRE(take_error(sb.build(), &s) == "");
  v = fwi::check_spans(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].find("colour not below its block size") != std::string::npos);
}

namespace {
// Builds sb into s and checks that check_spans finds exactly one violation:
// span 1 (FULL, class 0) past its reuse threshold.
void only_span1_past_threshold(const SegmentBuilder& sb, fwi::Snapshot* s) {
  REQUIRE(take_error(sb.build(), s) == "");
  auto v = fwi::check_spans(*s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].find("span 1 (FULL, class 0)") == 0);
  CHECK(v[0].find("reuse threshold") != std::string::npos);
}
}  // namespace

TEST_CASE("check_spans flags a FULL span above its reuse threshold, unless UNSTABLE") {
  SegmentBuilder sb = small_heap();
  sb.spans[1].remote_count = 1024;  // 1024 + (4096 - 4096) >= reuse threshold 1024 (25% of 4096)
  fwi::Snapshot s;
  only_span1_past_threshold(sb, &s);
  sb.spans[1].flags |= FWT_SPAN_UNSTABLE;
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(fwi::check_spans(s).empty());
}

TEST_CASE("a span with a guard page is held to its own reuse threshold and counts its own capacity in fullness") {
  // Class 0: 16-byte blocks, 4096 to a 64 KiB span, reuse threshold 1024 at
  // 25%. With a 4 KiB guard page a span holds 3840, and the allocator's
  // threshold for it is 960 (core/span.cpp reuse_threshold).
  SegmentBuilder sb = small_heap();
  sb.spans[1].flags |= FWT_SPAN_GUARD;
  sb.spans[1].capacity = 3840;
  sb.spans[1].carved = 3840;
  sb.spans[1].remote_count = 1000;  // past 960, short of the class's 1024
  fwi::Snapshot s;
  only_span1_past_threshold(sb, &s);
  sb.spans[1].remote_count = 959;  // below it: sound
  REQUIRE(take_error(sb.build(), &s) == "");
  CHECK(fwi::check_spans(s).empty());
  // Fullness: live blocks over the blocks its spans hold, 4096 + 3840.
  const fwi::Figures f = fwi::derive(s);
  const auto c0 = std::find_if(f.classes.begin(), f.classes.end(), [](const fwi::ClassFigures& c) { return c.cls == 0; });
  REQUIRE(c0 != f.classes.end());
  CHECK(c0->block_slots == 4096 + 3840);
  CHECK(c0->fullness == doctest::Approx(double(c0->live_blocks) / (4096 + 3840)));
}

TEST_CASE("check_spans flags each broken equation of a small span") {
  struct Case {
    const char* name;
    void (*mutate)(SegmentBuilder*);
    const char* expect;
  } cases[] = {
      {"remote > carved", [](SegmentBuilder* s) { s->spans[0].remote_count = 3001; }, "more free blocks than carved"},
      {"empty partial", [](SegmentBuilder* s) { s->spans[2].remote_count = 64; }, "empty span not returned"},
      {"capacity", [](SegmentBuilder* s) { s->classes[1].capacity = 65; }, "capacity differs"},
      {"committed", [](SegmentBuilder* s) { s->spans[1].committed = 4096; }, "blocks beyond committed memory"},
      {"beyond vspan", [](SegmentBuilder* s) { s->spans[1].committed = 2 << 20; }, "beyond its virtual span"},
      {"owner", [](SegmentBuilder* s) { s->spans[2].owner = 1; }, "names an owner"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    SegmentBuilder sb = small_heap();
    c.mutate(&sb);
    fwi::Snapshot s;
    REQUIRE(take_error(sb.build(), &s) == "");
    auto v = fwi::check_spans(s);
    REQUIRE(v.size() == 1);
    CHECK(v[0].find(c.expect) != std::string::npos);
  }
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("history") {

TEST_CASE("history keeps at most its bound of samples and stays within its budget") {
  fwi::Snapshot s;
  REQUIRE(take_error(small_heap().build(), &s) == "");
  const size_t kMax = 12000, kBudget = 64 << 10;  // 64 KiB of keyframes: a few snapshots
  fwi::History h(kMax, kBudget);
  int dropped = 0, first_drop = -1;
  for (int i = 0; i < 20000; i++) {
    s.process.time_ns = s.process.start_ns + uint64_t(i) * 50'000'000ull;  // 20 Hz
    s.process.live_bytes = uint64_t(i);
    if (h.add(s, fwi::derive(s))) {  // says when the oldest went (a paused view steps back with it)
      dropped++;
      if (first_drop < 0) first_drop = i;
    }
  }
  CHECK(first_drop == int(kMax));
  CHECK(dropped == 20000 - int(kMax));
  CHECK(h.size() == kMax);
  CHECK(h.at(0).live == 20000 - kMax);  // the oldest kept
  CHECK(h.at(kMax - 1).live == 19999);
  CHECK(h.memory_bytes() <= kMax * sizeof(fwi::Sample) + kBudget + 64 * 1024);
  auto k = h.snapshot_near(kMax - 1);
  REQUIRE(k != nullptr);
  // The nearest keyframe is within a second of the newest sample.
  CHECK(double(k->process.time_ns - s.process.start_ns) / 1e9 >= h.at(kMax - 1).time_s - 1.0);
  CHECK(k->events.empty());
  h.clear();
  CHECK(h.size() == 0);
  CHECK(h.snapshot_near(0) == nullptr);
}

TEST_CASE("history keeps a keyframe about every second of sample time") {
  fwi::Snapshot s;
  REQUIRE(take_error(small_heap().build(), &s) == "");
  fwi::History h;
  for (int i = 0; i < 100; i++) {  // 5 s at 20 Hz
    s.process.time_ns = s.process.start_ns + uint64_t(i) * 50'000'000ull;
    s.process.live_bytes = uint64_t(i);
    h.add(s, fwi::derive(s));
  }
  // Keyframes at samples 0, 20, 40, 60, 80: sample 45 is nearest 40.
  auto k = h.snapshot_near(45);
  REQUIRE(k);
  CHECK(k->process.live_bytes == 40);
  k = h.snapshot_near(99);
  CHECK(k->process.live_bytes == 80);
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------
TEST_SUITE("recording") {

// A stream of snapshots: a heap that changes a little each frame.
std::vector<fwi::Snapshot> stream(int n) {
  SegmentBuilder sb = small_heap();
  std::vector<fwi::Snapshot> v;
  fwi::Snapshot s;
  REQUIRE(take_error(sb.build(), &s) == "");
  for (int i = 0; i < n; i++) {
    s.process.time_ns += 50'000'000;
    s.process.snapshots++;
    if (i % 3 == 0) {
      s.spans[0].carved = uint32_t(3000 + i % 1000);
      s.process.live_bytes += 4096;
    }
    if (i % 7 == 0) s.labs[0].allocs += 11;
    if (i == n / 2) {  // the heap grows a region
      s.regions.push_back(fwt_region{0x7f0040000000ull, uint64_t(1) << 30, FWT_REGION_ARENA, 1});
      fwt_span u{};
      u.state = FWT_SPAN_UNUSED;
      s.spans.resize(s.regions.size() * s.vspans_per_region, u);
      s.spans[8].state = FWT_SPAN_FREE;
      s.process.region_count = 2;
      s.process.span_count = uint32_t(s.spans.size());
    }
    s.events.clear();
    if (i % 5 == 0) {
      fwt_event e{uint64_t(2 * i + 2), s.process.time_ns, FWT_EV_COMMIT, uint32_t(i), 0x1000, 65536};
      s.events.push_back(e);
    }
    s.events_missed = uint64_t(i / 10);
    v.push_back(s);
  }
  return v;
}

TEST_CASE("a recording reads back every frame identical") {
  TempDir dir;
  std::string path = dir.path + "/rec.fwrec", err;
  auto frames = stream(200);
  auto w = fwi::RecordingWriter::create(path, &err);
  REQUIRE_MESSAGE(w, err);
  for (const auto& f : frames) REQUIRE_MESSAGE(w->append(f, &err), err);
  uint64_t written = w->bytes_written();
  w.reset();
  CHECK(read_file(path).size() == written);
  auto r = fwi::RecordingReader::open(path, &err);
  REQUIRE_MESSAGE(r, err);
  fwi::Snapshot s;
  size_t n = 0;
  while (r->next(&s, &err)) {
    REQUIRE(n < frames.size());
    CHECK_MESSAGE(same_snapshot(s, frames[n]), "frame ", n);
    n++;
  }
  CHECK(err == "");
  CHECK(n == frames.size());
}

TEST_CASE("an idle heap costs a few bytes per frame") {
  TempDir dir;
  std::string path = dir.path + "/idle.fwrec", err;
  fwi::Snapshot s;
  REQUIRE(take_error(small_heap().build(), &s) == "");
  s.events.clear();
  auto w = fwi::RecordingWriter::create(path, &err);
  REQUIRE(w->append(s, &err));
  uint64_t first = w->bytes_written();
  for (int i = 0; i < 1200; i++) {  // one minute at 20 Hz: only the clock and counters move
    s.process.time_ns += 50'000'000;
    s.process.snapshots++;
    s.process.publish_ns = 20'000 + uint64_t(i % 50);
    REQUIRE(w->append(s, &err));
  }
  double per_frame = double(w->bytes_written() - first) / 1200;
  MESSAGE("idle frame: ", per_frame, " bytes; first frame ", first, " bytes");
  CHECK(per_frame < 16);
}

TEST_CASE("truncated and corrupted recordings give one-line errors") {
  TempDir dir;
  std::string path = dir.path + "/rec.fwrec", err;
  {
    auto w = fwi::RecordingWriter::create(path, &err);
    for (const auto& f : stream(20)) REQUIRE(w->append(f, &err));
  }
  const std::vector<uint8_t> good = read_file(path);
  auto read_all = [&](const std::vector<uint8_t>& b, size_t* frames) {
    write_file(path, b);
    std::string e;
    *frames = 0;
    auto r = fwi::RecordingReader::open(path, &e);
    if (!r) return e;
    fwi::Snapshot s;
    while (r->next(&s, &e)) ++*frames;
    return e;
  };
  size_t frames = 0;
  CHECK(read_all(good, &frames) == "");
  CHECK(frames == 20);

  auto b = good;
  b.resize(b.size() - 3);  // cut inside the last frame
  std::string e = read_all(b, &frames);
  CHECK(frames == 19);
  CHECK(e.find("frame 19: truncated") != std::string::npos);

  b = good;
  b[0] = 'X';
  CHECK(read_all(b, &frames).find("not a freeway recording") != std::string::npos);

  b = good;
  b[6] = 2;  // telemetry major 2 (bytes: "FWREC", format version, major, minor)
  b[7] = 0;
  CHECK(read_all(b, &frames).find("telemetry format 2.0") != std::string::npos);

  b = good;
  b[8] = 0xff;  // the first frame's length: beyond the file
  b[9] = 0xff;
  b[10] = 0x7f;
  e = read_all(b, &frames);
  CHECK(frames == 0);
  CHECK(e.find("frame 0:") != std::string::npos);

  b = std::vector<uint8_t>(good.begin(), good.begin() + 5);
  CHECK(read_all(b, &frames).find("truncated file header") != std::string::npos);

  // Every single-byte corruption past the file header: an error or a valid
  // frame, never a crash (the fuzz replay test does many more).
  for (size_t i = 8; i < good.size(); i += 7) {
    b = good;
    b[i] ^= 0x5c;
    e = read_all(b, &frames);
    CHECK(e.find('\n') == std::string::npos);
  }
}

}  // TEST_SUITE

TEST_CASE("a segment truncated while it is read gives errors, never SIGBUS") {
  // The file shrinks to nothing and grows back over and over while take()
  // copies it: the size check before the copy cannot close that window, the
  // SIGBUS guard must. Each take either succeeds or fails with one line.
  TempDir dir;
  SegmentBuilder sb = small_heap();
  sb.region_capacity = 64;  // several pages, so the copies take a while
  LiveFile f(dir.path, sb);
  const off_t full = off_t(f.size);
  std::string err;
  auto seg = fwi::Segment::attach(uint64_t(getpid()), &err, dir.path);
  REQUIRE_MESSAGE(seg, err);
  std::vector<uint8_t> saved(f.map, f.map + f.size);
  std::atomic<bool> stop{false};
  std::thread shrinker([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      REQUIRE(ftruncate(f.fd, 0) == 0);
      REQUIRE(ftruncate(f.fd, full) == 0);
      REQUIRE(pwrite(f.fd, saved.data(), saved.size(), 0) == ssize_t(saved.size()));
    }
  });
  unsigned ok = 0, failed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
  while (std::chrono::steady_clock::now() < until) {
    fwi::Snapshot s;
    std::string e;
    if (seg->take(&s, &e)) {
      ok++;
    } else {
      failed++;
      CHECK(e.find('\n') == std::string::npos);
    }
  }
  stop.store(true);
  shrinker.join();
  MESSAGE("takes: " << ok << " ok, " << failed << " failed while the file shrank");
  CHECK(ok + failed > 100);
}
