// tests/windows/programs/inject_cpp.cpp: a C++ program (libstdc++ linked in,
// its operator new calling msvcrt's malloc), knowing nothing of freeway. Its
// stdout must be the same with and without freeway-inject.exe; with freeway.dll
// in the process it says on stderr whether freeway served its blocks.
#include <windows.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

static void report(const char* what, const void* p) {
  HMODULE fw = GetModuleHandleW(L"freeway.dll");
  if (fw == nullptr) return;
  auto owns = reinterpret_cast<int (*)(const void*)>(reinterpret_cast<void*>(GetProcAddress(fw, "fw_owns")));
  std::fprintf(stderr, "%s: %s\n", what, owns != nullptr && owns(p) ? "freeway" : "not freeway");
}

int main() {
  std::map<std::string, std::vector<int>> m;
  for (int i = 0; i < 20000; i++) m["key number " + std::to_string(i % 997)].push_back(i);
  long sum = 0;
  for (auto& [k, v] : m) sum += long(v.size()) * long(k.size());
  auto owned = std::make_unique<std::string>(300, 'x');
  report("new", owned.get());
  report("string data", owned->data());
  std::vector<std::unique_ptr<int[]>> arrays;
  for (int i = 0; i < 1000; i++) arrays.emplace_back(new int[i + 1]);
  report("new[]", arrays.back().get());
  std::printf("entries %zu sum %ld\n", m.size(), sum);
  return 0;
}
