// `idem demo`: runnable demonstrations.
//
//   idem demo refund [--orders 100] [--fault-rate 0.1] [--kill-runner 0.05] [--seed 1]
//                    [--store URL] [--naive] [--transport direct|kafka] [--json]
//
// Replays the refund incident of docs/steps.md (src/demo/refund_demo.h): a fake
// payment channel process, the step runner as a child process killed at random
// step failpoints, faults at the channel, the ledger and the inbox; then an audit.
// Prints a summary table; with --json, a last line of counts. --naive runs the
// incident's offset-keyed dedupe instead and shows its duplicates. --transport kafka
// sends the orders through librdkafka's mock cluster to consumer child processes
// (`idem demo refund-consumer`), with a redelivery, a rebalance and kills.
// Exit status: 0 the demo ran (with the step machine: and every effect happened
// exactly once); 1 a duplicate or missing effect under the step machine, or an
// operational failure; 2 bad usage.
//
// Three more subcommands exist for the demo's own child processes and are hidden
// from --help: `idem demo channel` (the fake payment channel), `idem demo
// refund-runner` and `idem demo refund-consumer`.
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "cli/reason.h"
#include "demo/refund_demo.h"
#include "refund/fake_channel.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {

struct DemoFlags {
  refund::DemoOptions refund;
  bool json = false;
  // demo channel
  refund::FakeChannelOptions channel;
  int64_t response_delay_ms = 1500;
  // demo refund-runner
  refund::RunnerOptions runner;
  // demo refund-consumer
  refund::ConsumerOptions consumer;
  CLI::App* refund_cmd = nullptr;
  CLI::App* consumer_cmd = nullptr;
  CLI::App* channel_cmd = nullptr;
  CLI::App* runner_cmd = nullptr;
};

int RunRefund(const DemoFlags& flags) {
  if (absl::Status s = refund::ValidateDemoOptions(flags.refund); !s.ok()) {
    PrintReason("demo refund: " + std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<refund::DemoReport> report = refund::RunRefundDemo(flags.refund);
  if (!report.ok()) {
    PrintReason("demo refund: " + std::string(report.status().message()));
    return report.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                         : kExitFailure;
  }
  std::fputs(refund::FormatReport(flags.refund, *report).c_str(), stdout);
  if (flags.json) std::printf("%s\n", refund::ReportJson(*report).c_str());
  std::fflush(stdout);
  if (!flags.refund.naive && !refund::ReportIsClean(*report)) {
    PrintReason("demo refund: the step machine let a duplicate or missing effect through");
    return kExitFailure;
  }
  return kExitOk;
}

int RunChannel(DemoFlags& flags) {
  if (flags.response_delay_ms < 0) {
    PrintReason("demo channel: --response-delay-ms must not be negative");
    return kExitUsage;
  }
  flags.channel.response_delay = absl::Milliseconds(flags.response_delay_ms);
  // Each injected fault is logged at info; the demo's own summary counts them.
  spdlog::set_level(spdlog::level::warn);
  absl::Status s = refund::RunFakeChannel(flags.channel);
  if (!s.ok()) {
    PrintReason("demo channel: " + std::string(s.message()));
    return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

int RunRunner(const DemoFlags& flags) {
  absl::Status s = refund::RunRefundRunner(flags.runner);
  if (!s.ok()) {
    PrintReason("demo refund-runner: " + std::string(s.message()));
    return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

int RunConsumer(const DemoFlags& flags) {
  spdlog::set_level(spdlog::level::err);  // the demo's summary tells the story
  absl::Status s = refund::RunRefundConsumer(flags.consumer);
  if (!s.ok()) {
    PrintReason("demo refund-consumer: " + std::string(s.message()));
    return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

}  // namespace

CommandFn AddDemoCommand(CLI::App& root) {
  CLI::App* demo = root.add_subcommand("demo", "Runnable demonstrations (see `idem demo refund`)");
  demo->require_subcommand(1, 1);
  auto flags = std::make_shared<DemoFlags>();

  CLI::App* r = demo->add_subcommand(
      "refund",
      "Replay a refund incident (a retry reversed a payment twice) with faults and runner "
      "crashes, then audit");
  flags->refund_cmd = r;
  r->add_option("--orders", flags->refund.orders, "Refunds to run (1-100000)")
      ->capture_default_str();
  r->add_option("--fault-rate,--fault_rate", flags->refund.fault_rate,
                "Probability of each injected fault: channel timeouts after the reversal, lost "
                "answers, ledger statement timeouts, notification failures (0-1)")
      ->capture_default_str();
  r->add_option("--kill-runner,--kill_runner", flags->refund.kill_runner,
                "Probability per step that the runner process is SIGKILLed and restarted (0-0.9)")
      ->capture_default_str();
  r->add_option("--seed", flags->refund.seed, "Seed of every random choice (0 or more)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return !v.empty() && v[0] == '-' ? std::string("must be 0 or more") : std::string();
          },
          "UINT64"))
      ->capture_default_str();
  r->add_option("--store", flags->refund.store,
                "Store URL for the journal, ledger and inbox (default: a new SQLite file under "
                "/tmp)");
  r->add_flag("--naive", flags->refund.naive,
              "Dedupe by message offset instead (the incident's design), to see its duplicates");
  r->add_option("--transport", flags->refund.transport,
                "How the orders reach the runner: direct, or kafka (librdkafka's mock cluster in "
                "this process, consumers as child processes: redeliveries, a rebalance, kills)")
      ->capture_default_str();
  r->add_flag("--json", flags->json, "End with one JSON line of the counts");

  CLI::App* c = demo->add_subcommand("channel", "The demo's fake payment channel (internal)");
  c->group("");  // hidden: started by `idem demo refund`
  flags->channel_cmd = c;
  c->add_option("--listen", flags->channel.listen, "HOST:PORT (port 0: any)")->capture_default_str();
  c->add_option("--fault-rate", flags->channel.fault_rate, "Fault probability (0-1)");
  c->add_option("--seed", flags->channel.seed, "Seed of the fault choices");
  c->add_option("--response-delay-ms", flags->response_delay_ms, "Delay of a timeout fault");

  CLI::App* w = demo->add_subcommand("refund-runner", "The demo's step runner (internal)");
  w->group("");  // hidden: started by `idem demo refund`
  flags->runner_cmd = w;
  w->add_option("--store", flags->runner.store)->required();
  w->add_option("--channel", flags->runner.channel_url)->required();
  w->add_option("--run-id", flags->runner.run_id)->required();
  w->add_option("--orders", flags->runner.orders)->required();
  w->add_option("--fault-rate", flags->runner.fault_rate);
  w->add_option("--seed", flags->runner.seed);
  w->add_option("--events-fd", flags->runner.events_fd);
  w->add_option("--acks-fd", flags->runner.acks_fd);

  CLI::App* k = demo->add_subcommand("refund-consumer", "The demo's Kafka consumer (internal)");
  k->group("");  // hidden: started by `idem demo refund --transport kafka`
  flags->consumer_cmd = k;
  k->add_option("--brokers", flags->consumer.brokers)->required();
  k->add_option("--group", flags->consumer.group)->required();
  k->add_option("--topic", flags->consumer.topic)->required();
  k->add_option("--consumer-id", flags->consumer.consumer_id)->required();
  k->add_option("--store", flags->consumer.store)->required();
  k->add_option("--records", flags->consumer.records);
  k->add_option("--channel", flags->consumer.channel_url)->required();
  k->add_option("--fault-rate", flags->consumer.fault_rate);
  k->add_option("--seed", flags->consumer.seed);
  k->add_flag("--naive", flags->consumer.naive);
  k->add_option("--events-fd", flags->consumer.events_fd);
  k->add_option("--acks-fd", flags->consumer.acks_fd);

  return [flags]() -> int {
    if (flags->refund_cmd->parsed()) return RunRefund(*flags);
    if (flags->consumer_cmd->parsed()) return RunConsumer(*flags);
    if (flags->channel_cmd->parsed()) return RunChannel(*flags);
    if (flags->runner_cmd->parsed()) return RunRunner(*flags);
    PrintReason("demo: a demonstration is required: refund (see idem demo --help)");
    return kExitUsage;
  };
}

}  // namespace idem::cli
