// inspector/gui/app.h: what the GUI shows, and where it comes from.
//
// An App is fed either by a live process (a Segment polled at `hz`) or by a
// recording (every frame loaded at start, then played back). Each new
// snapshot is derived once (Figures) and added to the History; the views read
// the App and draw, and never parse telemetry themselves.
//
// Invariants:
//   - current/figures are the snapshot on screen: the newest one while live
//     and not paused, else the History keyframe nearest the cursor;
//   - cursor < history.size() whenever history is not empty;
//   - events holds at most kMaxEventLines lines, oldest first.
// Nothing here includes ImGui: the views (one file per window) do.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "inspector/model/derive.h"
#include "inspector/model/history.h"
#include "inspector/model/recording.h"
#include "inspector/model/segment.h"
#include "inspector/model/snapshot.h"

namespace fwi {

constexpr size_t kMaxEventLines = 5000;

enum class SourceKind { none, live, replay };

class App {
 public:
  using Clock = std::chrono::steady_clock;

  // Attaches to pid; false with *err (one line) on failure.
  bool attach(uint64_t pid, std::string* err);
  // Loads every frame of a recording; false with *err on failure.
  bool open_replay(const std::string& path, std::string* err);
  void detach();

  // Called every frame: takes a snapshot when one is due (live), or advances
  // playback (replay). Returns true when the snapshot on screen changed.
  bool poll();
  // Seconds until the next snapshot is due (for the event loop's wait).
  double seconds_to_next_poll() const;

  // Pause, resume, scrub.
  void set_paused(bool p);
  void set_cursor(size_t i);

  SourceKind kind = SourceKind::none;
  uint64_t pid = 0;
  std::string label;         // "process 123 (exe)" or "recording FILE"
  unsigned hz = 20;          // snapshots per second taken (live) or played (replay)
  bool paused = false;
  bool exited = false;       // the live process is gone; the last state stays on screen
  std::string error;         // the last error of the source, shown in the status bar
  History history;
  size_t cursor = 0;         // the sample on screen when paused or replaying
  std::shared_ptr<const Snapshot> current;
  Figures figures;
  std::vector<std::string> violations;  // check_spans of current
  std::deque<std::string> events;       // describe_event lines
  uint64_t snapshots_taken = 0;
  double last_take_ms = 0;              // time the last take() + derive() took
  Clock::time_point last_snapshot_at{};
  Clock::time_point attached_at{};

 private:
  void show(std::shared_ptr<const Snapshot> s);
  void add_events(const Snapshot& s);
  void replay_events_to(size_t frame);
  std::unique_ptr<Segment> segment_;
  std::vector<std::shared_ptr<const Snapshot>> frames_;  // replay: every frame
  std::shared_ptr<const Snapshot> latest_;               // live: the last snapshot taken
  Clock::time_point next_poll_{};
};

}  // namespace fwi
