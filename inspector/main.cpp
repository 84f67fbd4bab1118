// freeway-inspect: one binary, two faces. A first argument that names a CLI
// command (list, snapshot, watch, check, record, replay, diff, help) runs the
// headless CLI; anything else ([PID], --replay FILE, --screenshot ...) opens the GUI.
// Windows builds have the CLI only (FWI_WITH_GUI unset).
#include <cstdio>
#include <new>

#include "inspector/cli/cli.h"
#if FWI_WITH_GUI
#include "inspector/gui/gui.h"
#endif

int run(int argc, char** argv) {
  if (argc >= 2 && fwi::cli_is_command(argv[1])) return fwi::cli_main(argc, argv);
#if FWI_WITH_GUI
  return fwi::gui_main(argc, argv);
#else
  std::fprintf(stderr, "freeway-inspect: this build has no GUI; commands: list, snapshot, watch, check, record, replay, diff, help\n");
  return 2;
#endif
}

int main(int argc, char** argv) {
  // A recording's frames are read whole: a small file can describe a heap of
  // millions of spans (each a byte in the file, 48 in memory). What does not
  // fit ends with one line, as every other error, not with std::terminate.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "freeway-inspect: out of memory: the recording or segment describes more than fits here\n");
    return 2;
  }
}
