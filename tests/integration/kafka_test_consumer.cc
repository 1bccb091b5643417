// kafka-test-consumer: the consumer runner in a process of its own, for the
// `kafka` tests that SIGKILL it (IDEM_FAILPOINTS=kafka.runner.after_effects_commit=kill).
//
//   kafka-test-consumer BROKERS TOPIC GROUP STORE_URL BATCH IDLE_MS MAX_MS
//
// Consumes TOPIC in GROUP with the header event_id as the key and the effect of
// kafka_effects.h; exits 0 after IDLE_MS without a message (once it has had one)
// or MAX_MS in all, printing its RunnerStats as one JSON line on stdout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/messaging/runner.h"
#include "integration/kafka_effects.h"
#include "testing/kafka_mock.h"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s BROKERS TOPIC GROUP STORE BATCH IDLE_MS MAX_MS\n", argv[0]);
    return 2;
  }
  using namespace idem;
  auto store = OpenStore(argv[4]);
  if (!store.ok()) {
    std::fprintf(stderr, "store: %s\n", store.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = idem::testing::CreateEffectsTable(**store); !s.ok()) return 1;
  auto transport =
      messaging::KafkaTransport::Create({.brokers = argv[1],
                                         .group = argv[3],
                                         .topics = {argv[2]},
                                         .consumer_config = idem::testing::FastGroupConfig()});
  if (!transport.ok()) {
    std::fprintf(stderr, "transport: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  messaging::RunnerOptions options;
  options.max_batch = static_cast<size_t>(std::atoi(argv[5]));
  auto runner = messaging::Runner::Create(**transport, **store, idem::testing::EffectHandler(),
                                          std::move(options));
  if (!runner.ok()) return 1;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  bool had_one = false;
  const auto idle = std::chrono::milliseconds(std::atoi(argv[6]));
  const auto max = std::chrono::milliseconds(std::atoi(argv[7]));
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start > max || (had_one && now - last > idle)) break;
    absl::StatusOr<size_t> n = (*runner)->RunOnce();
    if (!n.ok()) {
      std::fprintf(stderr, "runner: %s\n", n.status().ToString().c_str());
      if (n.status().code() != absl::StatusCode::kUnavailable) return 1;
      continue;
    }
    if (*n > 0) {
      had_one = true;
      last = std::chrono::steady_clock::now();
    }
  }
  const messaging::RunnerStats s = (*runner)->stats();
  std::printf(
      "{\"polled\":%lld,\"executed\":%lld,\"replayed\":%lld,\"dead_lettered\":%lld,"
      "\"assigned\":%lld,\"revoked\":%lld}\n",
      static_cast<long long>(s.polled), static_cast<long long>(s.executed),
      static_cast<long long>(s.replayed), static_cast<long long>(s.dead_lettered),
      static_cast<long long>(s.assigned), static_cast<long long>(s.revoked));
  return 0;
}
