// External subcommands, as git has them: `idem NAME ARGS…` for a NAME that is not
// built into the binary runs the program `idem-NAME ARGS…`. The refund example's
// programs come this way (`idem demo` is idem-demo, `idem worker` is idem-worker),
// so the product binary does not link the example.
//
// Programs are looked for, in order, in the directory of the running `idem` (the
// build tree puts them there) and in `../libexec/idem` beside it (where
// `cmake --install` and the Debian package put them). PATH is not searched: what
// `idem NAME` runs does not depend on the caller's environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idem::cli {

// The directories searched, in order.
std::vector<std::string> ExternalCommandDirs();

// The path of the executable idem-`name`, or std::nullopt. `name` must be a
// subcommand name ([a-z][a-z0-9-]*), else std::nullopt.
std::optional<std::string> FindExternalCommand(std::string_view name);

// The names of every external subcommand found (sorted, without the "idem-").
std::vector<std::string> ListExternalCommands();

// Replaces this process with `path`, passing argv[1..argc) minus argv[skip] (the
// subcommand's own name). Returns only on failure, after printing the reason, with
// exit status 1.
int ExecExternalCommand(const std::string& path, int argc, char** argv, int skip);

}  // namespace idem::cli
