// consume_bench: messages/s of the consumer runner (idem/messaging/runner.h) whose
// effect is one SQL row per message, with one store transaction and one offset
// commit per message versus one of each per poll batch, on the stores given.
// Kafka is librdkafka's mock cluster in this process, over loopback TCP, so the
// numbers are the runner's and the store's, not a network's.
//
//   consume_bench [--messages N] [--batch B] STORE_URL...
//
// Prints one line per (store, commits, effect) and, per store and effect,
// "ratio batched/per_message (EFFECT) = X".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/messaging/runner.h"
#include "librdkafka/rdkafka.h"
#include "librdkafka/rdkafka_mock.h"
#include "spdlog/spdlog.h"

namespace {

using namespace idem;

struct Cluster {
  rd_kafka_t* owner = nullptr;
  rd_kafka_mock_cluster_t* mock = nullptr;
  std::string brokers;
};

bool ProduceAll(const std::string& brokers, const std::string& topic, int n) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "linger.ms", "5", err, sizeof err);
  rd_kafka_t* p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  for (int i = 0; i < n; ++i) {
    const std::string id = "E-" + std::to_string(i);
    const std::string payload = "{\"order_no\":\"R-" + std::to_string(i) + "\",\"amount\":\"12.50\"}";
    rd_kafka_headers_t* h = rd_kafka_headers_new(1);
    rd_kafka_header_add(h, "event_id", -1, id.data(), static_cast<ssize_t>(id.size()));
    while (rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
                             RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                             RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(p, 10);
    }
  }
  const bool ok = rd_kafka_flush(p, 60000) == RD_KAFKA_RESP_ERR_NO_ERROR;
  rd_kafka_destroy(p);
  return ok;
}

// Messages/s from the first message handled to the last, or -1 on failure. With
// `statement`, the effect's INSERT is the runner's first statement
// (RunnerOptions::first_statement) and the handler only answers; else the handler
// runs it.
double Measure(const Cluster& c, const std::string& topic, Store& store, bool batched,
               bool statement, size_t batch, int n, const std::string& tenant) {
  {
    auto tx = store.Begin();
    if (!tx.ok()) return -1;
    (void)(*tx)->Exec("DROP TABLE IF EXISTS bench_ledger");
    if (!(*tx)->Exec("CREATE TABLE bench_ledger (order_no TEXT NOT NULL, body TEXT NOT NULL)").ok() ||
        !(*tx)->Commit().ok()) {
      return -1;
    }
  }
  auto transport = messaging::KafkaTransport::Create(
      {.brokers = c.brokers,
       .group = tenant,
       .topics = {topic},
       .consumer_config = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"}}});
  if (!transport.ok()) return -1;
  messaging::RunnerOptions o;
  o.tenant = tenant;  // a fresh key space per run: every message is a first arrival
  o.max_batch = batch;
  o.batched = batched;
  static constexpr char kInsert[] = "INSERT INTO bench_ledger (order_no, body) VALUES (?, ?)";
  if (statement) {
    o.first_statement = [](const messaging::Message& m) -> absl::StatusOr<Statement> {
      return Statement{kInsert, {Value(*m.Header("event_id")), Value(m.payload)}};
    };
  }
  auto runner = messaging::Runner::Create(
      **transport, store,
      [statement](const messaging::Message& m, Transaction& tx) -> absl::StatusOr<std::string> {
        if (!statement) {
          const Value p[] = {Value(*m.Header("event_id")), Value(m.payload)};
          auto r = tx.Exec(kInsert, p);
          if (!r.ok()) return r.status();
        }
        return std::string("{}");
      },
      std::move(o));
  if (!runner.ok()) return -1;
  std::chrono::steady_clock::time_point start;
  bool started = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while ((*runner)->stats().executed < n && std::chrono::steady_clock::now() < give_up) {
    auto before = std::chrono::steady_clock::now();
    absl::StatusOr<size_t> got = (*runner)->RunOnce();
    if (!got.ok() && got.status().code() != absl::StatusCode::kUnavailable) return -1;
    if (got.ok() && *got > 0 && !started) {
      started = true;
      start = before;
    }
  }
  if ((*runner)->stats().executed < n) return -1;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return n / secs;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 5000;
  size_t batch = 500;
  std::vector<std::string> stores;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--messages") == 0 && i + 1 < argc) {
      n = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = static_cast<size_t>(std::atoi(argv[++i]));
    } else {
      stores.push_back(argv[i]);
    }
  }
  if (stores.empty() || n <= 0 || batch == 0) {
    std::fprintf(stderr, "usage: consume_bench [--messages N] [--batch B] STORE_URL...\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  Cluster c;
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
  c.owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  c.mock = rd_kafka_mock_cluster_new(c.owner, 1);
  c.brokers = rd_kafka_mock_cluster_bootstraps(c.mock);
  rd_kafka_mock_topic_create(c.mock, "bench", 1, 1);
  if (!ProduceAll(c.brokers, "bench", n)) {
    std::fprintf(stderr, "consume_bench: producing failed\n");
    return 1;
  }
  std::printf("%d messages, effect = one INSERT per message, batch up to %zu\n", n, batch);
  std::printf("effect \"handler\": the handler runs the INSERT; \"statement\": it is the "
              "runner's first_statement\n");
  std::printf("%-10s %-12s %-10s %12s\n", "store", "commits", "effect", "messages/s");
  int run = 0;
  for (const std::string& url : stores) {
    auto store = OpenStore(url);
    if (!store.ok()) {
      std::fprintf(stderr, "consume_bench: %s\n", store.status().ToString().c_str());
      return 1;
    }
    const std::string name = url.substr(0, url.find(':'));
    double rates[2][2];  // [statement][batched]
    for (int statement = 0; statement < 2; ++statement) {
      for (int batched = 0; batched < 2; ++batched) {
        const std::string tenant =
            "bench-" + std::to_string(::getpid()) + "-" + std::to_string(run++);
        double& rate = rates[statement][batched];
        rate = Measure(c, "bench", **store, batched == 1, statement == 1, batch, n, tenant);
        const char* effect = statement ? "statement" : "handler";
        const char* commits = batched ? "batched" : "per-message";
        if (rate < 0) {
          std::fprintf(stderr, "consume_bench: the %s %s run on %s failed\n", commits, effect,
                       name.c_str());
          return 1;
        }
        std::printf("%-10s %-12s %-10s %12.0f\n", name.c_str(), commits, effect, rate);
        std::fflush(stdout);
      }
    }
    for (int statement = 0; statement < 2; ++statement) {
      std::printf("%s: ratio batched/per_message (%s) = %.1f\n", name.c_str(),
                  statement ? "statement" : "handler", rates[statement][1] / rates[statement][0]);
    }
  }
  rd_kafka_mock_cluster_destroy(c.mock);
  rd_kafka_destroy(c.owner);
  return 0;
}
