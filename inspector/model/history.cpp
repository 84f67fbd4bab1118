// inspector/model/history.cpp: a bounded history of samples and keyframes.
//
// Invariants (after every add()):
//   samples_.size() <= max_samples_            (the oldest sample goes first)
//   keyframe_bytes_ == sum of snapshot_bytes() of the kept keyframes <= budget_
//   keyframes_ are in the order they were added, at least kKeyframeEvery
//   seconds of sample time apart, none older than the oldest sample.
//
// Memory: a Sample is sizeof(Sample) = 112 bytes on x86-64, so the default
// 12,000 samples (10 minutes at 20 Hz) take about 1.3 MiB plus the deque's
// blocks; keyframes take what their tables take (a snapshot of a process with
// 4 arena regions of 1,024 spans is about 170 KiB), capped by the budget
// (256 MiB by default: about 25 minutes of keyframes at one per second for
// such a process). memory_bytes() counts both. docs/recording.md repeats this.
#include "inspector/model/history.h"

#include <algorithm>
#include <stdexcept>

namespace fwi {

namespace {

constexpr double kKeyframeEvery = 1.0;  // seconds of sample time between kept snapshots

template <class T>
size_t vec_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// Bytes a kept snapshot holds (its struct and every table it owns).
size_t snapshot_bytes(const Snapshot& s) {
  return sizeof(Snapshot) + s.exe.capacity() + vec_bytes(s.classes) + vec_bytes(s.regions) + vec_bytes(s.spans) +
         vec_bytes(s.labs) + vec_bytes(s.events);
}

}  // namespace

History::History(size_t max_samples, size_t keyframe_budget_bytes)
    : max_samples_(max_samples == 0 ? 1 : max_samples), budget_(keyframe_budget_bytes) {}

bool History::add(const Snapshot& snap, const Figures& fig) {
  Sample s;
  s.time_s = fig.time_s;
  s.live = fig.live;
  s.committed = fig.committed;
  s.rss = fig.rss;
  s.reserved = fig.reserved;
  s.blowup = fig.blowup;
  s.spans_by_state = fig.spans_by_state;
  samples_.push_back(s);
  bool dropped = false;
  while (samples_.size() > max_samples_) {
    samples_.pop_front();
    dropped = true;
  }

  // A keyframe at most every kKeyframeEvery seconds (a time that goes back,
  // as in a replay of another recording, starts a new series).
  bool due = keyframes_.empty() || s.time_s - keyframes_.back().first >= kKeyframeEvery ||
             s.time_s < keyframes_.back().first;
  if (due) {
    auto copy = std::make_shared<Snapshot>(snap);
    copy->events.clear();  // events belong to the sample they came with, not to the map
    copy->events.shrink_to_fit();
    size_t b = snapshot_bytes(*copy);
    if (b <= budget_) {
      keyframes_.emplace_back(s.time_s, std::move(copy));
      keyframe_bytes_ += b;
    }
  }
  // Drop keyframes beyond the budget, and those older than every sample.
  const double oldest = samples_.front().time_s;
  while (!keyframes_.empty() &&
         (keyframe_bytes_ > budget_ || (keyframes_.size() > 1 && keyframes_.front().first < oldest &&
                                        keyframes_[1].first <= oldest))) {
    keyframe_bytes_ -= snapshot_bytes(*keyframes_.front().second);
    keyframes_.pop_front();
  }
  return dropped;
}

size_t History::size() const { return samples_.size(); }

const Sample& History::at(size_t i) const {
  if (i >= samples_.size()) throw std::out_of_range("History::at");
  return samples_[i];
}

std::shared_ptr<const Snapshot> History::snapshot_near(size_t i) const {
  if (keyframes_.empty() || i >= samples_.size()) return nullptr;
  const double t = samples_[i].time_s;
  // Keyframes are in time order within a series: the nearest by time.
  auto it = std::lower_bound(keyframes_.begin(), keyframes_.end(), t,
                             [](const auto& k, double v) { return k.first < v; });
  if (it == keyframes_.end()) return keyframes_.back().second;
  if (it == keyframes_.begin()) return it->second;
  auto prev = it - 1;
  return (t - prev->first) <= (it->first - t) ? prev->second : it->second;
}

size_t History::memory_bytes() const {
  return sizeof(*this) + samples_.size() * sizeof(Sample) +
         keyframes_.size() * sizeof(std::pair<double, std::shared_ptr<const Snapshot>>) + keyframe_bytes_;
}

void History::clear() {
  samples_.clear();
  keyframes_.clear();
  keyframe_bytes_ = 0;
}

}  // namespace fwi
