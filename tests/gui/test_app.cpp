// The GUI's source of snapshots (inspector/gui/app.h) on a stored recording
// (tests/inspector_cli/windows.fwrec): no window, no ImGui.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "inspector/gui/app.h"
#include "inspector/model/derive.h"

using namespace fwi;

namespace {
std::string stored() { return std::string(FW_TEST_SOURCE_DIR) + "/inspector_cli/windows.fwrec"; }

// A recording made from the stored one as `record --hz 5` of a process that
// publishes at 50 Hz would be: frames 200 ms apart, each saying hz 50, and
// events in many frames (the stored one has them all in its first frame):
// frame i keeps the stored events i, i + 7, i + 14, ...
std::string recording() {
  static const std::string path = [] {
    std::string err;
    auto r = RecordingReader::open(stored(), &err);
    REQUIRE(r != nullptr);
    std::vector<Snapshot> frames;
    Snapshot s;
    while (r->next(&s, &err)) frames.push_back(s);
    REQUIRE(frames.size() > 10);
    const std::vector<fwt_event> all = frames[0].events;
    REQUIRE(all.size() > 7);
    // One file per process: ctest runs the cases at once.
    const std::string out = std::string(FW_TEST_BINARY_DIR) + "/test_gui_app." + std::to_string(getpid()) + ".fwr";
    static struct Remove {
      std::string path;
      ~Remove() { std::remove(path.c_str()); }
    } remove_at_exit{out};
    auto w = RecordingWriter::create(out, &err);
    REQUIRE(w != nullptr);
    for (size_t i = 0; i < frames.size(); i++) {
      Snapshot f = frames[i];
      f.hz = 50;
      f.process.time_ns = f.process.start_ns + (i + 1) * 200000000ull;
      f.events.clear();
      for (size_t e = i; i < 7 && e < all.size(); e += 7) f.events.push_back(all[e]);
      REQUIRE(w->append(f, &err));
    }
    return out;
  }();
  return path;
}

// The event lines frames 0..k of the recording hold, in order.
std::vector<std::string> lines_to(size_t k) {
  std::string err;
  auto r = RecordingReader::open(recording(), &err);
  REQUIRE(r != nullptr);
  std::vector<std::string> out;
  Snapshot s;
  for (size_t i = 0; i <= k && r->next(&s, &err); i++)
    for (const fwt_event& e : s.events) out.push_back(describe_event(e, s.process.start_ns));
  return out;
}
}  // namespace

TEST_CASE("replay: a scrub shows the events of the frames up to the cursor, each once") {
  App app;
  std::string err;
  REQUIRE(app.open_replay(recording(), &err));
  REQUIRE(app.history.size() > 10);
  const size_t last = app.history.size() - 1;
  for (size_t k : {last, size_t(3), size_t(0), last / 2, last}) {
    app.set_cursor(k);
    const std::vector<std::string> want = lines_to(k);
    CHECK_MESSAGE(std::vector<std::string>(app.events.begin(), app.events.end()) == want, "cursor at frame ", k);
  }
}

TEST_CASE("replay: plays at the rate the frames were recorded, which the frames' times tell") {
  App app;
  std::string err;
  REQUIRE(app.open_replay(recording(), &err));
  const Figures first = derive(*app.current), last_f = [&] {
    app.set_cursor(app.history.size() - 1);
    return derive(*app.current);
  }();
  const double rate = double(app.history.size() - 1) / (last_f.time_s - first.time_s);
  CHECK(rate == doctest::Approx(5.0));
  CHECK(app.hz == 5);  // not the 50 Hz the frames carry
}
