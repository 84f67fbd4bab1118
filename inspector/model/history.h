// inspector/model/history.h: a bounded history of samples for plots and scrubbing.
//
// Every snapshot adds one Sample (scalar figures and per-class live/committed);
// full snapshots (for the span map) are kept as keyframes within a byte budget.
// Bounded: at least 10 minutes at 20 Hz; memory_bytes() says what it uses.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "inspector/model/derive.h"

namespace fwi {

struct Sample {
  double time_s = 0;
  uint64_t live = 0, committed = 0, rss = 0, reserved = 0;
  double blowup = 0;
  std::array<uint64_t, FWT_SPAN_STATE_COUNT> spans_by_state{};
};

class History {
 public:
  explicit History(size_t max_samples = 20 * 60 * 12, size_t keyframe_budget_bytes = size_t(256) << 20);
  // Returns true when the oldest sample was dropped to make room (every index
  // then names the sample after the one it named).
  bool add(const Snapshot& snap, const Figures& fig);
  size_t size() const;
  const Sample& at(size_t i) const;      // 0 = oldest
  // The kept full snapshot nearest to sample i (nullptr if none).
  std::shared_ptr<const Snapshot> snapshot_near(size_t i) const;
  size_t memory_bytes() const;
  void clear();

 private:
  size_t max_samples_, budget_;
  std::deque<Sample> samples_;
  std::deque<std::pair<double, std::shared_ptr<const Snapshot>>> keyframes_;
  size_t keyframe_bytes_ = 0;
};

}  // namespace fwi
