// inspector/gui/gui.h: the graphical face of freeway-inspect.
#pragma once

namespace fwi {
// freeway-inspect [PID] [--replay FILE] [--screenshot FILE.png [--frames N]] [--size WxH]
// Returns the process exit code (2 for usage errors or no display).
int gui_main(int argc, char** argv);
}  // namespace fwi
