// inspector/cli/cli.h: the headless commands of freeway-inspect.
#pragma once

namespace fwi {
// True when word is a CLI command (list, snapshot, watch, check, record, replay, diff, help, --help, -h, --version).
bool cli_is_command(const char* word);
// Runs the command in argv[1]; returns the process exit code (2 for usage or attach errors).
int cli_main(int argc, char** argv);
}  // namespace fwi
