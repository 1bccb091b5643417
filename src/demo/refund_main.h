// The mains of the refund example's programs behind `idem demo` and `idem worker`
// (src/cli/external.h). Each runs as if it were `idem SUBCOMMAND …`: the same
// --config file (section [demo] or [worker]), messages and exit statuses.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"

namespace idem::cli {

// Runs `idem <subcommand> argv[1..]` with `add` as the only subcommand.
inline int RunAsSubcommand(const char* subcommand, AddCommandFn add, int argc, char** argv) {
  std::vector<char*> args;
  args.push_back(const_cast<char*>("idem"));
  args.push_back(const_cast<char*>(subcommand));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  return RunCommandLine(static_cast<int>(args.size()) - 1, args.data(), {add});
}

}  // namespace idem::cli
