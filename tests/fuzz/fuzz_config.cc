// Fuzzes the TOML config loader of every `idem` program: RunCommandLine's --config
// (CLI11's TOML reader with idem's ConfigReader, cli/retention_config.h) and the
// [retention.<biz_type>] sections RetentionFromConfig turns into a policy.
//
// Input: the config file's bytes. The program has one subcommand, `serve`, with
// options of each kind `idem serve` has (a string, a list, an integer, a flag, a
// duration string); its function reads the retention policy.
// Properties: the exit status is 0 or 2 (bad usage, one `idem: ...` line), never 1:
// RunCommandLine answers 1 only for an exception that escaped a parser (its
// "internal error") here, as the command itself never fails operationally; a
// refused retention section is kInvalidArgument or kFailedPrecondition naming
// "config file: ".
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "cli/commands.h"
#include "cli/retention_config.h"
#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"
#include "spdlog/spdlog.h"

namespace idem::fuzz {
namespace {

constexpr int kRefusedRetention = 3;  // the command's own status for a refused section

struct ServeOptions {
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> tenants;
  int64_t max_body = 1 << 20;
  bool verbose = false;
  std::string lease = "30s";
};

cli::CommandFn AddServe(CLI::App& root) {
  CLI::App* serve = root.add_subcommand("serve", "a server's options, read from the config");
  static ServeOptions* o = new ServeOptions();
  *o = ServeOptions();  // each run starts from the defaults
  serve->add_option("--listen", o->listen, "address");
  serve->add_option("--tenant", o->tenants, "NAME:TOKEN, repeatable");
  serve->add_option("--max-body", o->max_body, "bytes")->check(CLI::Range(1, 1 << 30));
  serve->add_flag("--verbose", o->verbose, "a flag");
  serve->add_option("--lease", o->lease, "a duration");
  return [] {
    absl::StatusOr<RetentionPolicy> policy = cli::RetentionFromConfig();
    if (!policy.ok()) {
      const absl::StatusCode code = policy.status().code();
      Check(code == absl::StatusCode::kInvalidArgument ||
                code == absl::StatusCode::kFailedPrecondition,
            "a refused retention section is kInvalidArgument or kFailedPrecondition",
            idem::SV(policy.status().message()));
      Check(absl::StartsWith(policy.status().message(), "config file: "),
            "a refused retention section names the config file", idem::SV(policy.status().message()));
      return kRefusedRetention;
    }
    return 0;
  };
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = idem::fuzz::ScratchFile("config");
  idem::fuzz::WriteFile(path, data, size);
  // RunCommandLine registers its logger by name each run, as a process does once.
  spdlog::drop("idem");
  std::string arg0 = "idem", arg1 = "serve", arg2 = "--config", arg3 = path;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), nullptr};
  const int status = idem::cli::RunCommandLine(4, argv, {&idem::fuzz::AddServe});
  idem::fuzz::Check(status == 0 || status == 2 || status == idem::fuzz::kRefusedRetention,
                    "a config file is accepted (0) or refused as bad usage (2), never an "
                    "internal error (1)");
  return 0;
}
