#include "inspector/gui/gui.h"
#include <cstdio>
namespace fwi { int gui_main(int, char**) { std::fprintf(stderr, "freeway-inspect: the GUI is not built yet\n"); return 2; } }
