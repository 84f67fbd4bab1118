// Replays fuzz inputs without libFuzzer: every file named on the command line,
// and every file inside each directory named (sorted), through the harness's
// LLVMFuzzerTestOneInput. A failing input aborts the program (the harness
// prints what it saw), so ctest reports the failure. Missing directories are
// skipped (tests/fuzz/regressions is empty until the fuzzer finds something).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int fw_fuzz_check_every_input;

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; i++) {
    fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::printf("fuzz replay: %s: not found, skipped\n", argv[i]);
    }
  }
  fw_fuzz_check_every_input = 1;
  std::sort(files.begin(), files.end());
  size_t bytes = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("fuzz replay: %s (%zu bytes)\n", f.string().c_str(), data.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(data.data(), data.size());
    bytes += data.size();
  }
  std::printf("fuzz replay: %zu inputs (%zu bytes) replayed, all passed\n", files.size(), bytes);
  return 0;
}
