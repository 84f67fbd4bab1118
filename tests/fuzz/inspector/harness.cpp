// tests/fuzz/inspector/harness.cpp: the fuzz entry of the inspector's reader.
//
// Every input is read two ways, as a hostile process or file would present it:
//   1. as a telemetry segment: Segment::from_bytes, take, derive, check_spans,
//      describe_event on every event, History::add;
//   2. as a recording file: RecordingReader on every frame, then the same
//      figures on each frame.
// Nothing may crash, hang or allocate absurdly (sanitizers and libFuzzer's
// -rss_limit_mb watch that). One property is checked as well: a snapshot the
// reader accepted, written to a recording and read back, is the same
// snapshot; a difference aborts with a message.
//
// Built two ways: as a libFuzzer target (fwi_fuzz, -DFREEWAY_FUZZ=ON with
// clang) and linked with replay_main.cpp (fwi_fuzz_replay), which ctest runs
// on the seed corpus plus a fixed-seed mutation loop.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "inspector/model/derive.h"
#include "inspector/model/history.h"
#include "inspector/model/recording.h"
#include "inspector/model/segment.h"

namespace {

// An in-memory file the recording reader and writer can open by path.
struct MemFile {
  int fd = -1;
  std::string path;
  explicit MemFile(const char* name) {
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("inspector fuzz harness: memfd_create");
      std::abort();
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void set(const uint8_t* data, size_t size) {
    if (ftruncate(fd, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t w = pwrite(fd, data + done, size - done, off_t(done));
      if (w <= 0) std::abort();
      done += size_t(w);
    }
  }
};

void use_figures(const fwi::Snapshot& s, fwi::History* h) {
  fwi::Figures f = fwi::derive(s);
  std::vector<std::string> bad = fwi::check_spans(s);
  size_t chars = 0;
  for (const std::string& b : bad) chars += b.size();
  for (const fwt_event& e : s.events) chars += fwi::describe_event(e, s.process.start_ns).size();
  h->add(s, f);
  // Keep the results observable so nothing is optimised away.
  if (chars == SIZE_MAX || f.blowup < 0) std::abort();
}

template <class T>
bool same_table(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

[[noreturn]] void fail(const char* what, const std::string& err) {
  std::fprintf(stderr, "inspector fuzz harness: %s: %s\n", what, err.c_str());
  std::abort();
}

// A snapshot written to a recording and read back must come back unchanged.
void round_trip(const fwi::Snapshot& s, MemFile* file) {
  std::string err;
  {
    auto w = fwi::RecordingWriter::create(file->path, &err);
    if (!w) fail("cannot create the round-trip recording", err);
    if (!w->append(s, &err)) fail("cannot append to the round-trip recording", err);
  }
  auto r = fwi::RecordingReader::open(file->path, &err);
  if (!r) fail("round-trip recording does not open", err);
  fwi::Snapshot back;
  if (!r->next(&back, &err)) fail("round-trip frame does not read back", err);
  bool same = back.pid == s.pid && back.exe == s.exe && back.vspans_per_region == s.vspans_per_region &&
              std::memcmp(&back.process, &s.process, sizeof s.process) == 0 && same_table(back.classes, s.classes) &&
              same_table(back.regions, s.regions) && same_table(back.spans, s.spans) &&
              same_table(back.labs, s.labs) && same_table(back.events, s.events) &&
              back.events_missed == s.events_missed && back.events_dropped == s.events_dropped;
  if (!same) fail("round trip", "the frame read back differs from the snapshot written");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemFile recording("fwi-fuzz-recording");
  static MemFile scratch("fwi-fuzz-roundtrip");
  fwi::History history(64, size_t(1) << 20);
  std::string err;

  // 1. A segment.
  if (auto seg = fwi::Segment::from_bytes(std::vector<uint8_t>(data, data + size), &err)) {
    fwi::Snapshot s;
    if (seg->take(&s, &err)) {
      use_figures(s, &history);
      round_trip(s, &scratch);
    } else if (err.empty() || err.find('\n') != std::string::npos) {
      fail("take() failed without a one-line error", err);
    }
  } else if (err.empty() || err.find('\n') != std::string::npos) {
    fail("from_bytes() failed without a one-line error", err);
  }

  // 2. A recording.
  recording.set(data, size);
  err.clear();
  if (auto r = fwi::RecordingReader::open(recording.path, &err)) {
    fwi::Snapshot s;
    for (int frames = 0; frames < 100000 && r->next(&s, &err); frames++) use_figures(s, &history);
  }
  if (err.find('\n') != std::string::npos) fail("recording error is not one line", err);
  return 0;
}
