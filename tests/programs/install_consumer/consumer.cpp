// consumer.cpp: a C++ program built with CMake against an installed freeway
// (find_package(freeway) + freeway::freeway or freeway::freeway_static). Its
// malloc and operator new must both be freeway's.
#include <dlfcn.h>
#include <freeway.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

int main() {
  void* p = std::malloc(100);
  int* i = new int(7);
  std::vector<std::string> v(1000, std::string(100, 'x'));
  std::map<int, std::string> m;
  for (int k = 0; k < 1000; ++k) m[k] = std::to_string(k);
  const int owns_malloc = fw_owns(p);
  const int owns_new = fw_owns(i);
  const int owns_containers = fw_owns(v.data()) && fw_owns(v[999].data());
  std::printf("fw_owns(malloc(100)) = %d\n", owns_malloc);
  std::printf("fw_owns(new int) = %d\n", owns_new);
  std::printf("fw_owns(vector storage) = %d\n", owns_containers);
  std::free(p);
  delete i;
  v.clear();
  m.clear();
  std::printf("fw_check_heap() = %d\n", fw_check_heap());
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&fw_owns), &info) && info.dli_fname) std::printf("fw_owns from: %s\n", info.dli_fname);
  return owns_malloc && owns_new && owns_containers ? 0 : 1;
}
