// inspector/model/recording.h: the recording file format (record / replay / diff).
//
// A recording is a versioned file: a file header, then one frame per snapshot,
// each delta-encoded against the previous frame (see docs/recording.md).
// A snapshot file (`snapshot --out`) is a recording of one frame.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "inspector/model/snapshot.h"

namespace fwi {

class RecordingWriter {
 public:
  static std::unique_ptr<RecordingWriter> create(const std::string& path, std::string* err);
  bool append(const Snapshot& s, std::string* err);
  uint64_t bytes_written() const;
  ~RecordingWriter();

 private:
  RecordingWriter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class RecordingReader {
 public:
  static std::unique_ptr<RecordingReader> open(const std::string& path, std::string* err);
  // Next frame into *out; false at the end (err empty) or on a bad file (err set).
  bool next(Snapshot* out, std::string* err);
  ~RecordingReader();

 private:
  RecordingReader() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fwi
