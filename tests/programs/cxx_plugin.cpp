// cxx_plugin: C++ code that a C program loads with dlopen (tests/programs/
// plugin_host.c), as Python or Perl load a C++ extension: its C++ runtime
// then lives in the plugin's local scope, out of reach of libfreeway.so's weak
// references. Under LD_PRELOAD=libfreeway.so its operator new is freeway's,
// which must still call the new_handler and throw std::bad_alloc.
#include <cstdio>
#include <new>

namespace {
int g_handler_calls = 0;
void handler() {
  if (++g_handler_calls == 3) std::set_new_handler(nullptr);
}
void* volatile g_sink;
}  // namespace

// 0 when every check passes; otherwise the number of the first that failed.
extern "C" int plugin_run() {
  volatile size_t huge = size_t(1) << 50;  // more than any machine gives
  try {
    g_sink = ::operator new(huge);
    std::puts("operator new(2^50) returned memory");
    return 1;
  } catch (const std::bad_alloc&) {
  }
  std::set_new_handler(handler);
  try {
    g_sink = ::operator new(huge);
    return 2;
  } catch (const std::bad_alloc&) {
  }
  if (g_handler_calls != 3) {
    std::printf("the new_handler ran %d times, expected 3\n", g_handler_calls);
    return 3;
  }
  if (::operator new(huge, std::nothrow) != nullptr) return 4;
  try {
    g_sink = new char[huge];
    return 5;
  } catch (const std::bad_alloc&) {
  }
  std::puts("bad_alloc thrown, new_handler called");
  return 0;
}
