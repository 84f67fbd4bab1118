// freeway-inspect: one binary, two faces. A first argument that names a CLI
// command (list, snapshot, watch, check, record, replay, diff, help) runs the
// headless CLI; anything else ([PID], --replay FILE, --screenshot ...) opens the GUI.
#include "inspector/cli/cli.h"
#include "inspector/gui/gui.h"

int main(int argc, char** argv) {
  if (argc >= 2 && fwi::cli_is_command(argv[1])) return fwi::cli_main(argc, argv);
  return fwi::gui_main(argc, argv);
}
