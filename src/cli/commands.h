// The `idem` subcommands. Each Add*Command registers its subcommand (options and
// help) on `root` and returns the function main() runs when that subcommand was
// chosen; that function returns the process exit status (0 success,
// 1 operational failure, 2 bad usage) after printing a one-line reason on stderr.
//
// Every option of a subcommand can also be set from the TOML file given with the
// root's --config, in a section named after the subcommand (e.g. [serve]).
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace idem::cli {

using CommandFn = std::function<int()>;
using AddCommandFn = CommandFn (*)(CLI::App& root);

// Parses `argv` for a root command `idem` with `commands` as its subcommands (and
// --config, --version), runs the chosen one and returns the exit status. Usage
// errors print one `idem: …` line and return 2. `listed_only` are (name, help) of
// subcommands that --help and usage errors list but that are run elsewhere (the
// external ones, cli/external.h). The `idem` binary and the example programs behind
// its external subcommands (idem-demo, idem-worker) share it, so their messages and
// exit codes agree.
int RunCommandLine(int argc, char** argv, std::initializer_list<AddCommandFn> commands,
                   const std::vector<std::pair<std::string, std::string>>& listed_only = {});

// The project version (CMake's PROJECT_VERSION), as --version prints it.
std::string_view Version();

CommandFn AddServeCommand(CLI::App& root);    // serve.cc
CommandFn AddInspectCommand(CLI::App& root);  // inspect.cc
CommandFn AddTtlCommand(CLI::App& root);      // ttl.cc
CommandFn AddMigrateCommand(CLI::App& root);  // migrate.cc
CommandFn AddStuckCommand(CLI::App& root);    // stuck.cc
CommandFn AddTokenCommand(CLI::App& root);    // token.cc
CommandFn AddProxyCommand(CLI::App& root);    // proxy.cc
CommandFn AddDiagnoseCommand(CLI::App& root);  // diagnose.cc
CommandFn AddReconCommand(CLI::App& root);    // recon.cc
CommandFn AddBridgeCommand(CLI::App& root);   // bridge.cc
CommandFn AddPurgeCommand(CLI::App& root);    // purge.cc
CommandFn AddRecordsCommand(CLI::App& root);  // records.cc
CommandFn AddKeysCommand(CLI::App& root);     // keys.cc

// The refund example's commands live in src/demo and are their own programs
// (idem-demo, idem-worker), run by `idem demo` and `idem worker` (external.h).
CommandFn AddWorkerCommand(CLI::App& root);   // src/demo/worker.cc
CommandFn AddDemoCommand(CLI::App& root);     // src/demo/demo.cc

}  // namespace idem::cli
