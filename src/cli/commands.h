// The `idem` subcommands. Each Add*Command registers its subcommand (options and
// help) on `root` and returns the function main() runs when that subcommand was
// chosen; that function returns the process exit status (SPEC §12: 0 success,
// 1 operational failure, 2 bad usage) after printing a one-line reason on stderr.
//
// Every option of a subcommand can also be set from the TOML file given with the
// root's --config, in a section named after the subcommand (e.g. [serve]).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace idem::cli {

using CommandFn = std::function<int()>;

CommandFn AddServeCommand(CLI::App& root);    // serve.cc
CommandFn AddInspectCommand(CLI::App& root);  // inspect.cc
CommandFn AddTtlCommand(CLI::App& root);      // ttl.cc
CommandFn AddMigrateCommand(CLI::App& root);  // migrate.cc
CommandFn AddStuckCommand(CLI::App& root);    // stuck.cc
CommandFn AddWorkerCommand(CLI::App& root);   // worker.cc
CommandFn AddDemoCommand(CLI::App& root);     // demo.cc

}  // namespace idem::cli
