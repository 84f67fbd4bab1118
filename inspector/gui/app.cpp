// inspector/gui/app.cpp: the GUI's source of snapshots (live or replay).
#include "inspector/gui/app.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fwi {

namespace {
// A replay keeps every frame in memory up to this many bytes of tables.
constexpr size_t kReplayBudget = size_t(1) << 30;

size_t table_bytes(const Snapshot& s) {
  return sizeof(Snapshot) + s.classes.size() * sizeof(fwt_class) + s.regions.size() * sizeof(fwt_region) +
         s.spans.size() * sizeof(fwt_span) + s.labs.size() * sizeof(fwt_lab) + s.events.size() * sizeof(fwt_event);
}
}  // namespace

bool App::attach(uint64_t p, std::string* err) {
  auto seg = Segment::attach(p, err);
  if (!seg) return false;
  Snapshot first;
  if (!seg->take(&first, err)) return false;
  detach();
  segment_ = std::move(seg);
  kind = SourceKind::live;
  pid = p;
  label = "process " + std::to_string(p) + " (" + first.exe + ")";
  hz = unsigned(std::clamp<uint64_t>(first.hz, 1, 60));
  attached_at = Clock::now();
  history = History();
  auto s = std::make_shared<const Snapshot>(std::move(first));
  history.add(*s, derive(*s));
  add_events(*s);
  latest_ = s;
  show(s);
  snapshots_taken = 1;
  next_poll_ = Clock::now() + std::chrono::microseconds(1000000 / hz);
  return true;
}

bool App::open_replay(const std::string& path, std::string* err) {
  auto r = RecordingReader::open(path, err);
  if (!r) return false;
  std::vector<std::shared_ptr<const Snapshot>> frames;
  size_t bytes = 0;
  for (;;) {
    Snapshot s;
    if (!r->next(&s, err)) {
      if (!err->empty()) {
        *err += " (after " + std::to_string(frames.size()) + " frames)";
        return false;
      }
      break;
    }
    bytes += table_bytes(s);
    frames.push_back(std::make_shared<const Snapshot>(std::move(s)));
    if (bytes > kReplayBudget) {
      std::fprintf(stderr, "freeway-inspect: %s: showing the first %zu frames (%zu MiB in memory)\n", path.c_str(),
                   frames.size(), bytes >> 20);
      break;
    }
  }
  if (frames.empty()) {
    *err = "recording " + path + " holds no frame";
    return false;
  }
  detach();
  kind = SourceKind::replay;
  frames_ = std::move(frames);
  pid = frames_.front()->pid;
  label = "recording " + path + " (process " + std::to_string(pid) + ", " + frames_.front()->exe + ")";
  history = History(frames_.size(), 0);  // every sample; the frames are the keyframes
  for (const auto& f : frames_) history.add(*f, derive(*f));
  // Played at the rate it was recorded (record --hz), not the process's
  // publishing rate the frames carry, when the frames tell it.
  const double span_s = frames_.size() > 1 ? derive(*frames_.back()).time_s - derive(*frames_.front()).time_s : 0;
  const double rate = span_s > 0 ? double(frames_.size() - 1) / span_s : double(frames_.front()->hz);
  hz = unsigned(std::clamp(std::lround(rate), 1l, 60l));
  attached_at = Clock::now();
  cursor = 0;
  paused = false;
  show(frames_[0]);
  add_events(*frames_[0]);
  next_poll_ = Clock::now() + std::chrono::microseconds(1000000 / hz);
  return true;
}

void App::detach() {
  segment_.reset();
  frames_.clear();
  kind = SourceKind::none;
  pid = 0;
  label.clear();
  paused = exited = false;
  error.clear();
  history.clear();
  cursor = 0;
  current.reset();
  latest_.reset();
  figures = Figures();
  violations.clear();
  events.clear();
  snapshots_taken = 0;
}

void App::show(std::shared_ptr<const Snapshot> s) {
  if (!s) return;
  current = std::move(s);
  figures = derive(*current);
  violations = check_spans(*current);
  last_snapshot_at = Clock::now();
}

void App::add_events(const Snapshot& s) {
  for (const fwt_event& e : s.events) events.push_back(describe_event(e, s.process.start_ns));
  while (events.size() > kMaxEventLines) events.pop_front();
}

// The event log as playing up to `frame` would have left it: the events of
// frames 0..frame, the last kMaxEventLines of them (a scrub backwards must not
// show later events, nor one forwards leave out the frames skipped).
void App::replay_events_to(size_t frame) {
  events.clear();
  size_t first = frame + 1, lines = 0;
  while (first > 0 && lines < kMaxEventLines) lines += frames_[--first]->events.size();
  for (size_t i = first; i <= frame; i++) add_events(*frames_[i]);
}

double App::seconds_to_next_poll() const {
  if (kind == SourceKind::none) return 1.0;
  if (kind == SourceKind::live && exited) return 1.0;
  double s = std::chrono::duration<double>(next_poll_ - Clock::now()).count();
  return std::max(0.0, s);
}

bool App::poll() {
  if (kind == SourceKind::none || Clock::now() < next_poll_) return false;
  next_poll_ += std::chrono::microseconds(1000000 / hz);
  if (next_poll_ < Clock::now()) next_poll_ = Clock::now() + std::chrono::microseconds(1000000 / hz);
  if (kind == SourceKind::replay) {
    if (paused || cursor + 1 >= frames_.size()) return false;
    cursor++;
    add_events(*frames_[cursor]);
    show(frames_[cursor]);
    return true;
  }
  if (exited) return false;
  if (!segment_->alive()) {
    exited = true;
    error = label + " has exited; showing its last state";
    return true;
  }
  auto t0 = Clock::now();
  Snapshot s;
  std::string err;
  if (!segment_->take(&s, &err)) {
    if (!segment_->alive()) {
      exited = true;
      error = label + " has exited; showing its last state";
    } else {
      error = err;
    }
    return true;
  }
  error.clear();
  snapshots_taken++;
  auto snap = std::make_shared<const Snapshot>(std::move(s));
  Figures f = derive(*snap);
  // Paused with the history full: the oldest sample goes, and the cursor must
  // step back with the sample it shows (at 0, the one it showed is gone).
  if (history.add(*snap, f) && paused && cursor > 0) cursor--;
  add_events(*snap);
  latest_ = snap;
  last_take_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!paused) {
    cursor = history.size() - 1;
    current = snap;
    figures = std::move(f);
    violations = check_spans(*current);
    last_snapshot_at = Clock::now();
    return true;
  }
  return false;
}

void App::set_paused(bool p) {
  paused = p;
  if (!p && kind == SourceKind::live && history.size() != 0) set_cursor(history.size() - 1);
}

void App::set_cursor(size_t i) {
  if (history.size() == 0) return;
  const size_t was = cursor;
  cursor = std::min(i, history.size() - 1);
  if (kind == SourceKind::replay) {
    if (cursor != was) replay_events_to(cursor);
    show(frames_[cursor]);
  } else {
    // The newest sample is the last snapshot itself (after the process
    // exited, nothing newer will come to replace a keyframe near it).
    auto s = cursor == history.size() - 1 && latest_ ? latest_ : history.snapshot_near(cursor);
    if (s && s != current) show(s);
  }
}

}  // namespace fwi
