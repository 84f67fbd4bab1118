// tests/fuzz/inspector/replay_main.cpp: runs the inspector's fuzz entry
// without libFuzzer, for `make test`.
//
//   fwi_fuzz_replay [--mutate N] [--seed S] [--write-seeds DIR] PATH...
//
// Every file named, and every file inside each directory named, goes through
// LLVMFuzzerTestOneInput. Then, with --mutate N, N inputs made from valid
// segments and recordings (built here, see tests/inspector_model/
// segment_builder.h) by a fixed-seed generator: byte flips, random bytes,
// header fields set to edge values, truncations, insertions and deletions.
// A failing input aborts (the harness says why), so ctest reports it; the
// mutation number and seed reproduce it. --write-seeds DIR writes the valid
// inputs (the seed corpus in tests/fuzz/inspector/seeds was made this way).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "inspector/model/recording.h"
#include "inspector/model/segment.h"
#include "tests/inspector_model/segment_builder.h"
#include "tests/rng.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using fwtest::Rng;

std::vector<uint8_t> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A recording of n frames of a heap that changes a little each frame, as bytes.
std::vector<uint8_t> recording_bytes(const fwitest::SegmentBuilder& sb, int n) {
  std::string err;
  auto seg = fwi::Segment::from_bytes(sb.build(), &err);
  fwi::Snapshot s;
  if (!seg || !seg->take(&s, &err)) {
    std::fprintf(stderr, "fwi_fuzz_replay: the base segment is invalid: %s\n", err.c_str());
    std::exit(1);
  }
  int fd = memfd_create("fwi-replay-seed", MFD_CLOEXEC);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  {
    auto w = fwi::RecordingWriter::create(path, &err);
    for (int i = 0; i < n && w; i++) {
      s.process.time_ns += 50'000'000;
      s.process.snapshots++;
      if (!s.spans.empty()) s.spans[0].carved = s.spans[0].capacity ? uint32_t(i) % s.spans[0].capacity : 0;
      if (!s.labs.empty()) s.labs[0].allocs += uint64_t(i);
      if (i > 0) s.events.clear();
      w->append(s, &err);
    }
  }
  std::vector<uint8_t> b(size_t(lseek(fd, 0, SEEK_END)));
  if (pread(fd, b.data(), b.size(), 0) != ssize_t(b.size())) std::exit(1);
  close(fd);
  return b;
}

// The valid inputs the mutations start from.
std::vector<std::pair<std::string, std::vector<uint8_t>>> bases() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> v;
  fwitest::SegmentBuilder sb = fwitest::small_heap();
  v.emplace_back("segment_small_heap", sb.build());
  fwitest::SegmentBuilder newer = sb;
  newer.minor = 9;
  newer.extra = 16;
  v.emplace_back("segment_minor9_bigger_records", newer.build());
  fwitest::SegmentBuilder ring = sb;
  ring.event_capacity = 4;
  for (int i = 0; i < 9; i++) ring.add_event(FWT_EV_COMMIT, uint32_t(i), 0x1000, 4096, 3'000'000'000ull + i);
  v.emplace_back("segment_ring_wrapped", ring.build());
  fwitest::SegmentBuilder empty;
  empty.sync_counts();
  v.emplace_back("segment_empty_heap", empty.build());
  v.emplace_back("recording_small_heap_12", recording_bytes(sb, 12));
  v.emplace_back("recording_newer_3", recording_bytes(newer, 3));
  return v;
}

// Header fields worth setting to edge values (offset, width).
struct Field {
  size_t off, width;
};
const Field kHeaderFields[] = {
    {offsetof(fwt_header, version_major), 2},  {offsetof(fwt_header, header_size), 4},
    {offsetof(fwt_header, segment_size), 8},   {offsetof(fwt_header, process_size), 4},
    {offsetof(fwt_header, class_size), 4},     {offsetof(fwt_header, span_size), 4},
    {offsetof(fwt_header, event_size), 4},     {offsetof(fwt_header, class_capacity), 4},
    {offsetof(fwt_header, region_capacity), 4}, {offsetof(fwt_header, span_capacity), 4},
    {offsetof(fwt_header, lab_capacity), 4},   {offsetof(fwt_header, event_capacity), 4},
    {offsetof(fwt_header, vspans_per_region), 4}, {offsetof(fwt_header, vspan_shift), 4},
    {offsetof(fwt_header, process_offset), 8}, {offsetof(fwt_header, spans_offset), 8},
    {offsetof(fwt_header, events_offset), 8},  {offsetof(fwt_header, snapshot_seq), 8},
    {offsetof(fwt_header, event_next), 8},
};
const uint64_t kEdges[] = {0, 1, 2, 3, 7, 8, 63, 64, 65, 255, 4096, 65535, 1u << 20, (1u << 20) + 1,
                           0x7fffffff, 0xffffffff, 0x100000000ull, UINT64_MAX / 2, UINT64_MAX - 7, UINT64_MAX};

void mutate(std::vector<uint8_t>* b, Rng* r) {
  int steps = 1 + int(r->below(4));
  for (int k = 0; k < steps; k++) {
    size_t n = b->size();
    switch (r->below(8)) {
      case 0:  // flip a bit
        if (n) (*b)[r->below(n)] ^= uint8_t(1u << r->below(8));
        break;
      case 1:  // a random byte
        if (n) (*b)[r->below(n)] = uint8_t(r->next());
        break;
      case 2: {  // a header field to an edge value
        const Field& f = kHeaderFields[r->below(std::size(kHeaderFields))];
        uint64_t v = kEdges[r->below(std::size(kEdges))];
        if (f.off + f.width <= n) std::memcpy(b->data() + f.off, &v, f.width);
        break;
      }
      case 3:  // an aligned word anywhere (counts, states, varints) to an edge value
        if (n >= 8) {
          uint64_t v = kEdges[r->below(std::size(kEdges))];
          size_t at = r->below(n / 4) * 4;
          std::memcpy(b->data() + at, &v, std::min<size_t>(4, n - at));
        }
        break;
      case 4:  // truncate
        b->resize(r->below(n + 1));
        break;
      case 5: {  // insert bytes
        size_t at = r->below(n + 1), len = 1 + r->below(16);
        std::vector<uint8_t> ins(len);
        for (uint8_t& x : ins) x = uint8_t(r->next());
        b->insert(b->begin() + ptrdiff_t(at), ins.begin(), ins.end());
        break;
      }
      case 6:  // delete bytes
        if (n) {
          size_t at = r->below(n), len = std::min<size_t>(n - at, 1 + r->below(16));
          b->erase(b->begin() + ptrdiff_t(at), b->begin() + ptrdiff_t(at + len));
        }
        break;
      default:  // a small byte (recordings: varint counts, flags) somewhere
        if (n) (*b)[r->below(n)] = uint8_t(r->below(4));
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  uint64_t mutations = 0, seed = 0x5eed1234abcdull;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--mutate" && i + 1 < argc) {
      mutations = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--write-seeds" && i + 1 < argc) {
      fs::path dir(argv[++i]);
      fs::create_directories(dir);
      for (const auto& [name, bytes] : bases()) {
        std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
      }
      std::printf("fwi_fuzz_replay: seeds written to %s\n", dir.string().c_str());
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: fwi_fuzz_replay [--mutate N] [--seed S] [--write-seeds DIR] PATH...\n");
      return 2;
    } else {
      fs::path p(a);
      std::error_code ec;
      if (fs::is_directory(p, ec)) {
        for (const auto& e : fs::directory_iterator(p))
          if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
      } else if (fs::is_regular_file(p, ec)) {
        files.push_back(p);
      } else {
        std::printf("fwi_fuzz_replay: %s: not found, skipped\n", a.c_str());
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::vector<uint8_t> data = slurp(f);
    std::printf("fwi_fuzz_replay: %s (%zu bytes)\n", f.string().c_str(), data.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  if (mutations != 0) {
    auto base = bases();
    Rng r{seed};
    for (uint64_t m = 0; m < mutations; m++) {
      std::vector<uint8_t> b = base[r.below(base.size())].second;
      mutate(&b, &r);
      if (m % 5000 == 0) {
        std::printf("fwi_fuzz_replay: mutation %llu of %llu (seed 0x%llx)\n", static_cast<unsigned long long>(m),
                    static_cast<unsigned long long>(mutations), static_cast<unsigned long long>(seed));
        std::fflush(stdout);
      }
      LLVMFuzzerTestOneInput(b.data(), b.size());
    }
  }
  std::printf("fwi_fuzz_replay: %zu files and %llu mutations replayed, all passed\n", files.size(),
              static_cast<unsigned long long>(mutations));
  return 0;
}
