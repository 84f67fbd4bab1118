// bench/windows/pairs.cpp: nanoseconds per malloc/free pair on Windows, for
// freeway (pairs_freeway.exe, libfreeway.a linked in) and for the CRT's own
// heap (pairs_crt.exe, the same source without it), and pairs_crt.exe again
// under freeway-inject.exe. `make bench-windows` runs the three under wine,
// one after the other.
//   pairs [threads]   (default 1; each thread runs the same loops)
#include <windows.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kPairs = 2'000'000;

double seconds() {
  LARGE_INTEGER t, f;
  QueryPerformanceCounter(&t);
  QueryPerformanceFrequency(&f);
  return double(t.QuadPart) / double(f.QuadPart);
}

// The same size over and over: the fast paths alone.
double fixed(size_t n) {
  double t0 = seconds();
  for (int i = 0; i < kPairs; i++) {
    void* volatile p = malloc(n);
    free(p);
  }
  return (seconds() - t0) * 1e9 / kPairs;
}

// 64 live blocks of 16 B to 1 KiB, replaced in random order.
double mixed() {
  void* live[64] = {};
  uint64_t s = 88172645463325252ull;
  double t0 = seconds();
  for (int i = 0; i < kPairs; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    unsigned k = unsigned(s % 64);
    free(live[k]);
    live[k] = malloc(16 + (s >> 8) % 1009);
  }
  for (void* p : live) free(p);
  return (seconds() - t0) * 1e9 / kPairs;
}

DWORD WINAPI run(void* out) {
  double* r = static_cast<double*>(out);
  r[0] = fixed(32);
  r[1] = fixed(512);
  r[2] = mixed();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  if (threads < 1 || threads > 64) {
    std::fprintf(stderr, "usage: pairs [threads 1..64]\n");
    return 2;
  }
  static double r[64][3];
  HANDLE h[64];
  for (int i = 0; i < threads; i++) h[i] = CreateThread(nullptr, 0, run, r[i], 0, nullptr);
  WaitForMultipleObjects(DWORD(threads), h, TRUE, INFINITE);
  double sum[3] = {};
  for (int i = 0; i < threads; i++)
    for (int j = 0; j < 3; j++) sum[j] += r[i][j] / threads;
  const char* who = PAIRS_STATIC ? "freeway, linked statically"
                    : GetModuleHandleW(L"freeway.dll") != nullptr ? "freeway.dll, injected"
                                                                   : "the CRT's heap";
  std::printf("%-28s threads=%d ns/pair: 32B %6.1f  512B %6.1f  mixed16-1024B %6.1f\n", who, threads, sum[0], sum[1],
              sum[2]);
  return 0;
}
