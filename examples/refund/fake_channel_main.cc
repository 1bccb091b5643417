// idem-fake-channel: the refund demo's fake payment channel as a process.
//
//   idem-fake-channel --listen 127.0.0.1:0 --fault-rate 0.3 --seed 7
//
// The first stdout line is exactly "listening on HOST:PORT"; logs go to stderr.
// SIGINT/SIGTERM stop it (exit 0). Exit 1 when it cannot listen, 2 for bad flags.
#include <cstdint>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "refund/fake_channel.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  idem::refund::FakeChannelOptions options;
  int64_t delay_ms = 1500;
  CLI::App app(
      "The refund demo's fake payment channel: POST /reversals, never deduplicated, "
      "with injected faults");
  app.add_option("--listen", options.listen, "HOST:PORT to listen on (port 0: any)")
      ->capture_default_str();
  app.add_option("--fault-rate", options.fault_rate,
                 "r in [0,1]: 503 busy with r/4; else timeout r/2, lost response r/2")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of the fault decisions")->capture_default_str();
  app.add_option("--response-delay-ms", delay_ms, "How long a timeout fault holds the answer")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help exits 0
  }
  options.response_delay = absl::Milliseconds(delay_ms);

  spdlog::set_default_logger(spdlog::stderr_color_mt("fake-channel"));
  if (absl::Status s = idem::refund::RunFakeChannel(options); !s.ok()) {
    std::fprintf(stderr, "idem-fake-channel: %s\n", std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
