// `idem ttl`: derives the retention of dedupe records and shows how.
//
//   idem ttl --redelivery 10m --recon-cycle 30d --confirm-window 3d --margin 60d
//            [--configured 30d] [--json]
//
// Exit status: 0 the derivation (and a configured TTL at least as long);
// 1 a configured TTL below the derived one; 2 a bad duration.
#include "idem/ttl.h"

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/retention_config.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct TtlFlags {
  std::string redelivery;
  std::string recon_cycle;
  std::string confirm_window;
  std::string margin;
  std::string configured;
  const CLI::Option* configured_option = nullptr;  // given (on the command line or in the config)?
  bool json = false;
};

nlohmann::json DurationJson(absl::Duration d) {
  return {{"text", FormatTtlDuration(d)}, {"ms", absl::ToInt64Milliseconds(d)}};
}

int RunTtl(const TtlFlags& flags) {
  TtlInputs inputs;
  struct Term {
    const std::string& text;
    const char* flag;
    absl::Duration* out;
  };
  const Term terms[] = {
      {flags.redelivery, "--redelivery", &inputs.redelivery_window},
      {flags.recon_cycle, "--recon-cycle", &inputs.recon_cycle},
      {flags.confirm_window, "--confirm-window", &inputs.confirm_window},
      {flags.margin, "--margin", &inputs.safety_margin},
  };
  for (const Term& term : terms) {
    absl::StatusOr<absl::Duration> d = ParseTtlDuration(term.text, term.flag);
    if (!d.ok()) {
      PrintReason(d.status().message());
      return kExitUsage;
    }
    *term.out = *d;
  }
  absl::Duration configured = absl::ZeroDuration();
  const bool has_configured = flags.configured_option->count() > 0;
  if (has_configured) {
    absl::StatusOr<absl::Duration> d = ParseTtlDuration(flags.configured, "--configured");
    if (!d.ok()) {
      PrintReason(d.status().message());
      return kExitUsage;
    }
    configured = *d;
  }

  absl::StatusOr<TtlDerivation> derivation = DeriveTtl(inputs);
  if (!derivation.ok()) {
    PrintReason(derivation.status().message());
    return kExitUsage;
  }
  absl::Status check =
      has_configured ? CheckConfiguredTtl(configured, *derivation) : absl::OkStatus();

  // The derivation is printed also when the configured TTL is refused: it is what
  // the operator needs to see to fix the configuration.
  if (flags.json) {
    nlohmann::json j = {
        {"formula", "max(redelivery, recon_cycle, confirm_window) + margin"},
        {"redelivery", DurationJson(derivation->inputs.redelivery_window)},
        {"recon_cycle", DurationJson(derivation->inputs.recon_cycle)},
        {"confirm_window", DurationJson(derivation->inputs.confirm_window)},
        {"margin", DurationJson(derivation->safety_margin)},
        {"dominant", std::string(TtlWindowId(derivation->dominant))},
        {"dominant_window", DurationJson(derivation->dominant_window)},
        {"ttl", DurationJson(derivation->total)},
        {"ttl_days", absl::FDivDuration(derivation->total, absl::Hours(24))},
    };
    if (has_configured) {
      j["configured"] = DurationJson(configured);
      j["configured_ok"] = check.ok();
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::string text = FormatDerivation(*derivation);
    if (has_configured && check.ok()) {
      text += "configured TTL " + FormatTtlDuration(configured) + ": OK (at least " +
              FormatTtlDuration(derivation->total) + ")\n";
    }
    std::fputs(text.c_str(), stdout);
  }
  std::fflush(stdout);
  if (!check.ok()) {
    PrintReason(check.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

CommandFn AddTtlCommand(CLI::App& root) {
  CLI::App* cmd =
      root.add_subcommand("ttl", "Derive how long dedupe records must be kept, and show how");
  cmd->footer(
      "TTL = max(upstream redelivery window, reconciliation cycle, downstream confirmation\n"
      "window) + safety margin (docs/retention.md).\n"
      "Durations: <number><unit> terms, units d, h, m, s, ms, largest first: 10m, 30d, "
      "500ms, 1d12h.\n"
      "Example: idem ttl --redelivery 10m --recon-cycle 30d --confirm-window 3d --margin 60d\n"
      "Exit status: 0 derived (and --configured is long enough), 1 --configured is below the\n"
      "derived TTL, 2 bad usage.");
  auto flags = std::make_shared<TtlFlags>();
  cmd->add_option("--redelivery", flags->redelivery,
                  "Upstream redelivery window: how long the same message can arrive again")
      ->type_name("DURATION")
      ->required();
  cmd->add_option("--recon-cycle", flags->recon_cycle,
                  "Reconciliation cycle: how late reconciliation may replay an effect")
      ->type_name("DURATION")
      ->required();
  cmd->add_option("--confirm-window", flags->confirm_window,
                  "Downstream confirmation window: until the downstream answer is final")
      ->type_name("DURATION")
      ->required();
  cmd->add_option("--margin", flags->margin, "Safety margin added to the largest window")
      ->type_name("DURATION")
      ->required();
  flags->configured_option =
      cmd->add_option("--configured", flags->configured,
                      "A configured TTL to check; refused (exit 1) when below the derived one")
          ->type_name("DURATION");
  cmd->add_flag("--json", flags->json, "Print the derivation as JSON");
  return [flags] { return RunTtl(*flags); };
}

}  // namespace idem::cli
