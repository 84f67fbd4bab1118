/* plugin_host: a C program (no C++ runtime of its own) that dlopens a plugin
 * with RTLD_LOCAL and calls its plugin_run(); exits with what it returns, or 10
 * when the plugin cannot be loaded. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: plugin_host PLUGIN.so\n");
    return 10;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "plugin_host: %s\n", dlerror());
    return 10;
  }
  int (*run)(void) = (int (*)(void))dlsym(h, "plugin_run");
  if (run == NULL) {
    fprintf(stderr, "plugin_host: %s\n", dlerror());
    return 10;
  }
  return run();
}
