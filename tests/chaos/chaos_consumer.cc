// chaos-consumer: one consumer process of the messaging chaos runs (messaging.h),
// the consumer runner (idem/messaging/runner.h) over Kafka or Redis Streams, until SIGTERM.
//
//   chaos-consumer --transport kafka|streams --endpoint BROKERS|REDIS_URL
//                  --source TOPIC|STREAM --group G --consumer NAME --store URL
//                  [--batch N] [--delay-us N] [--claim-idle-ms N]
//                  [--external-effect PATH]
//
// The key is the header event_id (the runner's default). A payload starting with
// "poison" is refused for good (dead-lettered). The effect of an event is a row of
// the table chaos_effects (event_id, consumer) written in the batch's transaction
// (transactional mode: exactly once). With --external-effect PATH it is instead a
// line "event_id consumer" appended and fdatasync'd to PATH outside the
// transaction: a consumer that calls a system without a key, which a crash between
// the effect and the batch's commit repeats (the seeded bug the messaging chaos
// test shows the checker catching).
//
// SIGTERM stops the runner (the batch in hand is finished or abandoned
// uncommitted) and exits 0; a setup error exits 1 with the reason; bad usage 2.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/messaging/redis_streams.h"
#include "idem/messaging/runner.h"

namespace {

std::atomic<idem::messaging::Runner*> g_runner{nullptr};

void OnTerm(int) {
  if (idem::messaging::Runner* r = g_runner.load()) r->Stop();
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "chaos-consumer: %s\nusage: chaos-consumer --transport kafka|streams --endpoint E "
               "--source S --group G --consumer NAME --store URL [--batch N] [--delay-us N] "
               "[--claim-idle-ms N] [--external-effect PATH]\n",
               why.c_str());
  return 2;
}

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "chaos-consumer: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace idem;
  std::map<std::string, std::string> flags = {{"--batch", "20"},
                                              {"--delay-us", "0"},
                                              {"--claim-idle-ms", "1000"},
                                              {"--external-effect", ""}};
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (i + 1 >= argc) return Usage(f + " needs a value");
    flags[f] = argv[i + 1];
  }
  for (const char* required :
       {"--transport", "--endpoint", "--source", "--group", "--consumer", "--store"}) {
    if (flags[required].empty()) return Usage(std::string(required) + " is required");
  }
  int64_t batch = 0, delay_us = 0, claim_idle_ms = 0;
  if (!absl::SimpleAtoi(flags["--batch"], &batch) || batch < 1) return Usage("bad --batch");
  if (!absl::SimpleAtoi(flags["--delay-us"], &delay_us) || delay_us < 0) {
    return Usage("bad --delay-us");
  }
  if (!absl::SimpleAtoi(flags["--claim-idle-ms"], &claim_idle_ms) || claim_idle_ms < 1) {
    return Usage("bad --claim-idle-ms");
  }
  const std::string consumer = flags["--consumer"];

  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(flags["--store"]);
  if (!store.ok()) return Fail("store", store.status());
  {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
    if (!tx.ok()) return Fail("store", tx.status());
    absl::StatusOr<int64_t> made = (*tx)->Exec(
        "CREATE TABLE IF NOT EXISTS chaos_effects (event_id TEXT NOT NULL, consumer TEXT NOT "
        "NULL)");
    if (!made.ok()) return Fail("creating chaos_effects", made.status());
    if (absl::Status s = (*tx)->Commit(); !s.ok()) return Fail("creating chaos_effects", s);
  }

  std::unique_ptr<messaging::Transport> transport;
  if (flags["--transport"] == "kafka") {
    auto t = messaging::KafkaTransport::Create(
        {.brokers = flags["--endpoint"],
         .group = flags["--group"],
         .topics = {flags["--source"]},
         // A short session: a stalled (SIGSTOPped) or killed member is noticed and its
         // partitions move within seconds.
         .consumer_config = {{"session.timeout.ms", "3000"},
                             {"heartbeat.interval.ms", "500"},
                             {"log_level", "3"},
                             {"topic.metadata.refresh.interval.ms", "1000"}}});
    if (!t.ok()) return Fail("kafka", t.status());
    transport = *std::move(t);
  } else if (flags["--transport"] == "streams") {
    auto t = messaging::RedisStreamsTransport::Open(
        {.url = flags["--endpoint"],
         .stream = flags["--source"],
         .group = flags["--group"],
         .consumer = consumer,
         .key_field = "event_id",
         .max_deliveries = 1000,  // kills redeliver entries many times; none is poison by count
         .claim_min_idle = absl::Milliseconds(claim_idle_ms),
         .claim_interval = absl::Milliseconds(200)});
    if (!t.ok()) return Fail("redis streams", t.status());
    transport = *std::move(t);
  } else {
    return Usage("--transport must be kafka or streams");
  }

  int effect_fd = -1;
  if (!flags["--external-effect"].empty()) {
    effect_fd = ::open(flags["--external-effect"].c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (effect_fd < 0) return Fail("--external-effect", absl::UnavailableError(std::strerror(errno)));
  }
  messaging::MessageHandler handler = [&](const messaging::Message& m,
                                          Transaction& tx) -> absl::StatusOr<std::string> {
    if (m.payload.rfind("poison", 0) == 0) {
      return absl::InvalidArgumentError("the payload is poison for this handler");
    }
    const std::string* event_id = m.Header("event_id");
    if (event_id == nullptr) return absl::InvalidArgumentError("no event_id header");
    if (effect_fd >= 0) {
      const std::string line = absl::StrCat(*event_id, " ", consumer, "\n");
      if (::write(effect_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
          ::fdatasync(effect_fd) != 0) {
        return absl::UnavailableError("the external effect could not be written");
      }
    } else {
      const Value params[] = {Value(*event_id), Value(consumer)};
      IDEM_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO chaos_effects (event_id, consumer) VALUES (?, ?)", params)
              .status());
    }
    // The handler's work takes time (--delay-us): the pace of the load.
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    return std::string(R"({"ok":true})");
  };

  messaging::RunnerOptions options;
  options.max_batch = static_cast<size_t>(batch);
  options.biz_type = "chaos-message";
  options.retry.initial_delay = absl::Milliseconds(20);
  options.retry.max_delay = absl::Milliseconds(300);
  auto runner = messaging::Runner::Create(*transport, **store, handler, std::move(options));
  if (!runner.ok()) return Fail("runner", runner.status());
  g_runner = runner->get();
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, nullptr);
  absl::Status s = (*runner)->Run();
  g_runner = nullptr;
  const messaging::RunnerStats st = (*runner)->stats();
  std::fprintf(stderr,
               "chaos-consumer %s: polled=%lld executed=%lld replayed=%lld dead_lettered=%lld "
               "store_retries=%lld commit_failures=%lld assigned=%lld revoked=%lld\n",
               consumer.c_str(), static_cast<long long>(st.polled),
               static_cast<long long>(st.executed), static_cast<long long>(st.replayed),
               static_cast<long long>(st.dead_lettered), static_cast<long long>(st.store_retries),
               static_cast<long long>(st.commit_failures), static_cast<long long>(st.assigned),
               static_cast<long long>(st.revoked));
  if (!s.ok()) return Fail("runner", s);
  return 0;
}
