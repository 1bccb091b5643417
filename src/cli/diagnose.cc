// `idem diagnose rebalance`: do a consumer group's rebalances come from network
// jitter? (The computation is diagnose_rebalance.h.)
//
//   idem diagnose rebalance --events rebalances.log --jitter jitter.txt [--slack 5s]
//                           [--threshold 80] [--json]
//
// Prints how many events fall inside a jitter window and their share, whether that
// share reaches the threshold (network jitter → missed heartbeats → consumer kicked
// → rebalance → re-delivery), and session.timeout.ms / heartbeat.interval.ms from
// the windows' P99 duration.
// Exit status: 0 the report was printed (whatever it says); 1 a file cannot be read
// or holds a bad line (FILE:LINE: why); 2 a missing or malformed option.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "cli/diagnose_rebalance.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "idem/ttl.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct RebalanceFlags {
  std::string events;
  std::string jitter;
  std::string slack = "0s";
  int threshold = 80;
  bool json = false;
};

struct DiagnoseFlags {
  CLI::App* rebalance_cmd = nullptr;
  RebalanceFlags rebalance;
};

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return ss.str();
}

std::string Percent(double share) { return absl::StrFormat("%.1f%%", share * 100); }

std::string Lines(const std::vector<int>& lines, size_t max) {
  std::string out;
  for (size_t i = 0; i < lines.size() && i < max; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", lines[i]);
  }
  if (lines.size() > max) absl::StrAppend(&out, ", ... (", lines.size() - max, " more)");
  return out;
}

void PrintHuman(const RebalanceFlags& f, const diagnose::RebalanceDiagnosis& d,
                absl::Duration slack) {
  std::printf("events:          %zu (%s)\n", d.events, f.events.c_str());
  std::printf("jitter windows:  %zu (%s), P99 duration %s, longest %s\n", d.windows,
              f.jitter.c_str(), FormatTtlDuration(d.p99).c_str(),
              FormatTtlDuration(d.longest).c_str());
  std::printf("inside a window: %zu of %zu (%s)%s\n", d.inside, d.events, Percent(d.share).c_str(),
              slack > absl::ZeroDuration() ? absl::StrCat(", counting ", FormatTtlDuration(slack),
                                                          " after each window's end")
                                                 .c_str()
                                           : "");
  if (!d.outside_lines.empty()) {
    std::printf("outside every window: %s %s of %s\n",
                d.outside_lines.size() == 1 ? "line" : "lines", Lines(d.outside_lines, 10).c_str(),
                f.events.c_str());
  }
  if (d.jitter_explains) {
    std::printf(
        "verdict: %s >= %d%%: network jitter explains the rebalances (jitter -> missed "
        "heartbeats -> consumer kicked -> rebalance -> re-delivery). Key the consumer's dedupe "
        "on the event (business key + event type + version), never on partition/offset, fix "
        "the network, and widen the consumer's timeouts:\n",
        Percent(d.share).c_str(), f.threshold);
  } else {
    std::printf(
        "verdict: %s < %d%%: network jitter does not explain most rebalances; look at the "
        "others too (max.poll.interval.ms exceeded by slow batches, deployments, broker "
        "restarts). Timeouts that ride out the measured jitter:\n",
        Percent(d.share).c_str(), f.threshold);
  }
  std::printf("  session.timeout.ms=%lld\n  heartbeat.interval.ms=%lld\n",
              static_cast<long long>(d.advice.session_timeout_ms),
              static_cast<long long>(d.advice.heartbeat_interval_ms));
  std::printf("rule: %s (P99 %s)\n", std::string(diagnose::kTimeoutRule).c_str(),
              FormatTtlDuration(d.p99).c_str());
  if (d.advice.above_broker_max) {
    std::printf(
        "note: above the brokers' default group.max.session.timeout.ms (1800000); raise it "
        "there first, or fix the network: jitter this long is an outage\n");
  }
}

nlohmann::json Json(const RebalanceFlags& f, const diagnose::RebalanceDiagnosis& d,
                    absl::Duration slack) {
  return {
      {"events",
       {{"file", f.events},
        {"count", d.events},
        {"inside", d.inside},
        {"share", d.share},
        {"outside_lines", d.outside_lines}}},
      {"jitter",
       {{"file", f.jitter},
        {"windows", d.windows},
        {"p99_ms", absl::ToInt64Milliseconds(d.p99)},
        {"longest_ms", absl::ToInt64Milliseconds(d.longest)}}},
      {"slack_ms", absl::ToInt64Milliseconds(slack)},
      {"threshold_percent", f.threshold},
      {"jitter_explains", d.jitter_explains},
      {"suggested",
       {{"session.timeout.ms", d.advice.session_timeout_ms},
        {"heartbeat.interval.ms", d.advice.heartbeat_interval_ms},
        {"above_broker_max", d.advice.above_broker_max},
        {"rule", std::string(diagnose::kTimeoutRule)}}},
  };
}

int RunRebalance(const RebalanceFlags& f) {
  absl::StatusOr<absl::Duration> slack = ParseTtlDuration(f.slack, "--slack");
  if (!slack.ok()) {
    PrintReason(absl::StrCat("diagnose rebalance: ", slack.status().message()));
    return kExitUsage;
  }
  if (f.threshold < 0 || f.threshold > 100) {
    PrintReason("diagnose rebalance: --threshold must be a percentage in 0..100");
    return kExitUsage;
  }
  absl::StatusOr<std::string> events_text = ReadWhole(f.events);
  if (!events_text.ok()) {
    PrintReason(absl::StrCat("diagnose rebalance: --events: ", events_text.status().message()));
    return kExitFailure;
  }
  absl::StatusOr<std::string> jitter_text = ReadWhole(f.jitter);
  if (!jitter_text.ok()) {
    PrintReason(absl::StrCat("diagnose rebalance: --jitter: ", jitter_text.status().message()));
    return kExitFailure;
  }
  absl::StatusOr<std::vector<diagnose::Event>> events =
      diagnose::ParseEvents(*events_text, f.events);
  if (!events.ok()) {
    PrintReason(absl::StrCat("diagnose rebalance: ", events.status().message()));
    return kExitFailure;
  }
  absl::StatusOr<std::vector<diagnose::JitterWindow>> windows =
      diagnose::ParseJitterWindows(*jitter_text, f.jitter);
  if (!windows.ok()) {
    PrintReason(absl::StrCat("diagnose rebalance: ", windows.status().message()));
    return kExitFailure;
  }
  const diagnose::RebalanceDiagnosis d = diagnose::DiagnoseRebalances(
      *events, *windows, {.slack = *slack, .threshold_percent = f.threshold});
  if (f.json) {
    std::printf("%s\n", Json(f, d, *slack).dump(2).c_str());
  } else {
    PrintHuman(f, d, *slack);
  }
  return kExitOk;
}

}  // namespace

CommandFn AddDiagnoseCommand(CLI::App& root) {
  CLI::App* cmd =
      root.add_subcommand("diagnose", "Diagnose a consumer group (see `idem diagnose rebalance`)");
  cmd->require_subcommand(1, 1);
  cmd->footer(absl::StrCat(
      "rebalance suggests consumer timeouts by this rule: ", AV(diagnose::kTimeoutRule),
      ". `idem diagnose rebalance --help` describes its input files."));
  auto flags = std::make_shared<DiagnoseFlags>();
  CLI::App* r = cmd->add_subcommand(
      "rebalance",
      "Line up rebalance times with network-jitter windows: the share inside them, and "
      "consumer timeouts from the jitter's P99");
  flags->rebalance_cmd = r;
  RebalanceFlags& f = flags->rebalance;
  r->add_option("--events", f.events,
                "File of events, one per line, each starting with an RFC 3339 timestamp "
                "(the runner's rebalance log, or consumer log lines grepped for rebalances)")
      ->required()
      ->type_name("FILE");
  r->add_option("--jitter", f.jitter,
                "File of jitter windows, one per line: START END, both RFC 3339")
      ->required()
      ->type_name("FILE");
  r->add_option("--slack", f.slack,
                "Count an event this long after a window's end as inside it (a kick comes up "
                "to session.timeout.ms after the last heartbeat): 0s, 5s, 30s, ...")
      ->capture_default_str()
      ->type_name("DURATION");
  r->add_option("--threshold", f.threshold,
                "Share of events inside windows, in percent, at or above which jitter explains "
                "the rebalances")
      ->capture_default_str()
      ->type_name("PERCENT");
  r->add_flag("--json", f.json, "Print the report as JSON");
  r->footer(absl::StrCat(
      "Timestamps: YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM) (RFC 3339; a space may "
      "replace the T). Blank lines and lines starting with '#' are skipped. An event is "
      "inside a window when START <= event <= END + slack.\n"
      "Timeouts: ",
      AV(diagnose::kTimeoutRule),
      ". A P99 of 15s gives 30000/10000. See docs/messaging.md, \"Diagnosing rebalances\".\n"
      "Exit status: 0 report printed, 1 unreadable file or bad line (FILE:LINE), 2 bad usage."));
  return [flags]() -> int {
    if (flags->rebalance_cmd->parsed()) return RunRebalance(flags->rebalance);
    PrintReason("diagnose: no subcommand given");
    return kExitUsage;
  };
}

}  // namespace idem::cli
