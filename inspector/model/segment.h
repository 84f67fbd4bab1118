// inspector/model/segment.h: finding, attaching to and reading telemetry segments.
//
// A Segment is a read-only view of one published segment (mapped PROT_READ from
// /dev/shm/freeway.<pid>) or of bytes in memory (tests, fuzzing). take() copies a
// consistent snapshot under the sequence lock (a torn copy is retried, never
// returned) and validates it; any inconsistency is an error string, never a crash.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inspector/model/snapshot.h"

namespace fwi {

// A process that publishes telemetry, as found in /dev/shm.
struct ProcessEntry {
  uint64_t pid = 0;
  std::string exe;
  std::string path;       // the segment's path
  bool alive = false;     // the pid runs and is the process that created the segment
  uint64_t live_bytes = 0, committed_bytes = 0;
};

// Every freeway.<pid> segment in dir (default /dev/shm). With prune, segments of
// dead or recycled pids that the caller may remove are unlinked and left out.
std::vector<ProcessEntry> list_processes(bool prune, const std::string& dir = "/dev/shm");

// Field 22 of /proc/<pid>/stat (the start time in clock ticks since boot),
// which tells a recycled pid from the process that created a segment.
bool process_start_ticks(uint64_t pid, uint64_t* ticks);

// A program name of n bytes with control characters replaced by '?' (it is
// printed on terminals), from a segment's header or a recording.
std::string printable_exe(const char* name, size_t n);

// The content checks every snapshot passes before anyone sees it (take() and
// the recording reader run them): every span state known, the class of every
// small span below the class count, carved and remote_count within capacity,
// a LARGE_TAIL's head index inside the table, owner <= lab_capacity, region
// kinds known, next_vspan <= vspans_per_region, no class of block size 0.
// Empty when valid, else one line naming the record ("span 17: ...").
std::string validate_snapshot(const Snapshot& s, uint32_t lab_capacity);

class Segment {
 public:
  // Attaches to the segment of pid. nullptr with *err set to one line when the
  // pid does not run, publishes nothing, or its segment is invalid or of
  // another major version.
  static std::unique_ptr<Segment> attach(uint64_t pid, std::string* err, const std::string& dir = "/dev/shm");
  // A segment held in memory (tests and the fuzzer). Validates the header.
  static std::unique_ptr<Segment> from_bytes(std::vector<uint8_t> bytes, std::string* err);
  ~Segment();

  // A consistent, validated snapshot; false with *err on failure (after a
  // bounded number of retries when the writer keeps changing it).
  bool take(Snapshot* out, std::string* err);
  // Whether the process behind the segment still runs (always true for bytes).
  bool alive() const;
  const std::string& path() const;
  uint64_t pid() const;

 private:
  Segment() = default;
  struct Impl;
  // The end of attach on every OS: impl holds the mapped view of pid's
  // segment (runs: whether pid runs); checks its header, its pid and that the
  // process is the one that made it.
  static std::unique_ptr<Segment> adopt(std::unique_ptr<Impl> impl, bool runs, std::string* err);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fwi
