// `idem demo refund --transport kafka`: the refund demo through librdkafka's mock
// cluster (demo_internal.h, RunOverKafka), and its consumer child (`idem demo
// refund-consumer`, refund_demo.h, RunRefundConsumer): the example's consumer
// (examples/refund/refund_kafka.h) or the incident's naive one, stopped at the
// failpoints the demo kills it at.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/failpoint.h"
#include "demo/demo_internal.h"
#include "demo/refund_demo.h"
#include "idem/guard.h"
#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/retry.h"
#include "idem/status.h"
#include "idem/steps.h"
#include "librdkafka/rdkafka.h"
#include "librdkafka/rdkafka_mock.h"
#include "refund/refund_kafka.h"
#include "refund/refund_operation.h"
#include "spdlog/spdlog.h"

namespace idem::refund {
namespace {

constexpr int kPartitions = 2;
constexpr char kTopic[] = "refunds";
constexpr char kGroup[] = "refund-demo";
// Random kills at step failpoints are capped: each one costs the group a session
// timeout (3 s on the mock) before the dead member's partitions move on.
constexpr int kMaxRandomKills = 2;
// What the naive consumer hits after a batch's effects, before its offset commit
// (the idem Runner's own is kafka.runner.after_effects_commit).
constexpr char kNaiveAfterEffects[] = "kafka.naive.after_effects";

std::string RdError(const char* what, const char* err) { return absl::StrCat(what, ": ", err); }

// The mock cluster, a producer of the orders and a handle that reads the group's
// committed offsets. All in this process; the consumers reach it over TCP.
class MockCluster {
 public:
  static absl::StatusOr<std::unique_ptr<MockCluster>> Start() {
    auto m = std::unique_ptr<MockCluster>(new MockCluster());
    char err[512];
    m->owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, Conf({}), err, sizeof err);
    if (m->owner_ == nullptr) return absl::UnavailableError(RdError("kafka mock", err));
    m->cluster_ = rd_kafka_mock_cluster_new(m->owner_, 1);
    if (m->cluster_ == nullptr) return absl::UnavailableError("kafka mock: cannot start a cluster");
    m->brokers_ = rd_kafka_mock_cluster_bootstraps(m->cluster_);
    if (rd_kafka_mock_topic_create(m->cluster_, kTopic, kPartitions, 1) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::UnavailableError("kafka mock: cannot create the topic");
    }
    m->producer_ = rd_kafka_new(RD_KAFKA_PRODUCER,
                                Conf({{"bootstrap.servers", m->brokers_}, {"linger.ms", "5"}}),
                                err, sizeof err);
    if (m->producer_ == nullptr) return absl::UnavailableError(RdError("kafka producer", err));
    m->checker_ = rd_kafka_new(RD_KAFKA_CONSUMER,
                               Conf({{"bootstrap.servers", m->brokers_}, {"group.id", kGroup}}),
                               err, sizeof err);
    if (m->checker_ == nullptr) return absl::UnavailableError(RdError("kafka consumer", err));
    return m;
  }
  ~MockCluster() {
    if (checker_ != nullptr) rd_kafka_destroy(checker_);
    if (producer_ != nullptr) rd_kafka_destroy(producer_);
    if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
    if (owner_ != nullptr) rd_kafka_destroy(owner_);
  }

  const std::string& brokers() const { return brokers_; }

  // Produces order `o` to partition `partition`: the order as JSON with its
  // action, the event_id header "{order_no}:refund". Asynchronous; Flush waits.
  absl::Status Produce(const Order& o, int32_t partition) {
    const std::string payload = EncodeRefundMessage(o);
    const std::string event_id = o.order_no + ":refund";
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_KEY(o.order_no.data(), o.order_no.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
        RD_KAFKA_V_HEADER("event_id", event_id.data(), static_cast<ssize_t>(event_id.size())),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::UnavailableError(RdError("kafka produce", rd_kafka_err2str(err)));
    }
    return absl::OkStatus();
  }

  // Waits for every message produced, then returns the end offset per partition.
  absl::StatusOr<std::vector<int64_t>> Flush() {
    if (rd_kafka_flush(producer_, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::UnavailableError("kafka produce: not every order was acknowledged in 10 s");
    }
    std::vector<int64_t> end(kPartitions);
    for (int p = 0; p < kPartitions; ++p) {
      int64_t low = 0;
      const rd_kafka_resp_err_t err =
          rd_kafka_query_watermark_offsets(producer_, kTopic, p, &low, &end[p], 5000);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return absl::UnavailableError(RdError("kafka watermarks", rd_kafka_err2str(err)));
      }
    }
    return end;
  }

  // True when the group has committed up to `end` on every partition.
  bool CommittedAll(const std::vector<int64_t>& end) {
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(kPartitions);
    for (int p = 0; p < kPartitions; ++p) rd_kafka_topic_partition_list_add(parts, kTopic, p);
    bool all = rd_kafka_committed(checker_, parts, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int p = 0; all && p < kPartitions; ++p) all = parts->elems[p].offset >= end[p];
    rd_kafka_topic_partition_list_destroy(parts);
    return all;
  }

 private:
  MockCluster() = default;
  static rd_kafka_conf_t* Conf(const std::vector<std::pair<std::string, std::string>>& props) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    for (const auto& [k, v] : props) rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err);
    return conf;
  }

  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string brokers_;
  rd_kafka_t* producer_ = nullptr;
  rd_kafka_t* checker_ = nullptr;
};

void KillAndReap(internal::Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGKILL);
  internal::WaitExit(c.pid);
  c.pid = -1;
  internal::CloseFd(c.events_fd);
  internal::CloseFd(c.acks_fd);
}

// idem's consumer (examples/refund/refund_kafka.h), with the demo's short lease so
// that a killed consumer's successor soon takes its refunds over.
absl::Status ConsumeWithSteps(const ConsumerOptions& o, messaging::Transport& transport,
                              Store& store, const ChannelClient& channel, FaultInjector& faults) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> records, OpenStore(o.records));
  StepRunnerOptions so;
  so.lease = internal::kRunnerLease;
  so.lock_retry = absl::Milliseconds(20);
  return ConsumeRefunds(transport, store, *records, channel, &faults, so);
}

// The incident's consumer: dedupe by (topic, partition, offset) + consumer instance.
// The same message redelivered to another consumer after a rebalance or a crash
// gets another key, and its refund runs again.
absl::Status ConsumeNaively(const ConsumerOptions& o, messaging::Transport& transport, Store& store,
                            const ChannelClient& channel, FaultInjector& faults) {
  Guard guard(store);
  for (;;) {
    absl::StatusOr<std::vector<messaging::Message>> batch =
        transport.Poll(20, std::chrono::milliseconds(200));
    if (!batch.ok() && batch.status().code() == absl::StatusCode::kUnavailable) continue;
    IDEM_RETURN_IF_ERROR(batch.status());
    if (batch->empty()) continue;
    for (const messaging::Message& m : *batch) {
      absl::StatusOr<Order> order = DecodeRefundMessage(m);
      if (!order.ok()) {
        spdlog::warn("{}[{}]@{}: skipped: {}", m.source, m.partition, m.offset,
                     std::string(order.status().message()));
        continue;
      }
      const std::string key =
          absl::StrCat(m.source, "-", m.partition, "@", m.offset, "#", o.consumer_id);
      for (int delivery = 1; delivery <= internal::kNaiveMaxDeliveries; ++delivery) {
        absl::StatusOr<Result> r =
            guard.Run({.biz_type = "refund-message", .key = key}, [&](Transaction& tx) {
              return internal::NaiveRefundEffect(channel, faults, key, *order, tx);
            });
        if (r.ok() || !IsRetryable(r.status())) break;
      }
    }
    IDEM_FAILPOINT(kNaiveAfterEffects);
    if (absl::Status s = transport.Commit(*batch); !s.ok()) {
      spdlog::warn("commit failed, the batch will be redelivered: {}", std::string(s.message()));
    }
  }
}

}  // namespace

absl::Status RunRefundConsumer(const ConsumerOptions& o) {
  if (o.brokers.empty() || o.topic.empty() || o.group.empty() || o.consumer_id.empty() ||
      (!o.naive && o.records.empty())) {
    return absl::InvalidArgumentError(
        "refund-consumer needs --brokers, --topic, --group, --consumer-id and (without --naive) "
        "--records");
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(o.store));
  IDEM_ASSIGN_OR_RETURN(ChannelClient channel,
                        ChannelClient::FromUrl(o.channel_url, internal::kChannelTimeout));
  FaultInjector faults(o.fault_rate, o.seed);
  // The mock's group settings for fast rebalances (tests/testing/kafka_mock.h).
  IDEM_ASSIGN_OR_RETURN(
      std::unique_ptr<messaging::KafkaTransport> transport,
      messaging::KafkaTransport::Create({.brokers = o.brokers,
                                         .group = o.group,
                                         .topics = {o.topic},
                                         .consumer_config = {{"session.timeout.ms", "3000"},
                                                             {"heartbeat.interval.ms", "500"},
                                                             {"log_level", "3"},
                                                             {"client.id", o.consumer_id}}}));
  if (o.events_fd >= 0 && o.acks_fd >= 0) internal::ReportFailpointsToParent(o.events_fd, o.acks_fd);
  return o.naive ? ConsumeNaively(o, *transport, *store, channel, faults)
                 : ConsumeWithSteps(o, *transport, *store, channel, faults);
}

namespace internal {

absl::Status RunOverKafka(const DemoOptions& o, const std::string& store,
                          const std::string& records, const std::string& channel_url,
                          const std::string& run_id, DemoReport& report) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<MockCluster> cluster, MockCluster::Start());
  for (int i = 1; i <= o.orders; ++i) {
    IDEM_RETURN_IF_ERROR(cluster->Produce(DemoOrder(run_id, i), (i - 1) % kPartitions));
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<int64_t> end, cluster->Flush());
  auto spawn = [&](const std::string& consumer_id, uint64_t seed, bool killable) {
    std::vector<std::string> args = {
        "refund-consumer", "--brokers",     cluster->brokers(),  "--group",   kGroup,
        "--topic",         kTopic,          "--consumer-id",     consumer_id, "--store",
        store,             "--records",     records,             "--channel", channel_url,
        "--fault-rate",    absl::StrCat(o.fault_rate), "--seed",
        absl::StrCat(o.seed * 1000003 + seed)};
    if (o.naive) args.push_back("--naive");
    return Spawn(o.self_exe, std::move(args), /*capture_stdout=*/false, /*kill_pipes=*/killable);
  };
  // Three failpoints per step, as in the direct demo.
  const double per_point = o.kill_runner > 0 ? 1.0 - std::pow(1.0 - o.kill_runner, 1.0 / 3) : 0;
  std::mt19937_64 rng(o.seed ^ 0x6b61666bULL);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int generation = 1;
  IDEM_ASSIGN_OR_RETURN(Child primary, spawn("consumer-1", 1, true));
  Child extra;
  std::string buf;
  bool crashed_before_commit = false;
  int random_kills = 0;
  const absl::Time deadline = absl::Now() + o.deadline;
  absl::Time next_check = absl::Now();
  absl::Status result = absl::OkStatus();
  for (;;) {
    if (absl::Now() >= next_check) {
      if (cluster->CommittedAll(end)) break;
      next_check = absl::Now() + absl::Milliseconds(300);
    }
    if (absl::Now() > deadline) {
      result = absl::DeadlineExceededError(absl::StrCat(
          "the Kafka consumers did not finish within ", absl::FormatDuration(o.deadline)));
      break;
    }
    absl::StatusOr<std::optional<std::string>> line =
        ReadLine(primary.events_fd, buf, absl::Milliseconds(100));
    if (!line.ok() && line.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    if (!line.ok()) {
      result = line.status();
      break;
    }
    if (!line->has_value()) {
      const int code = WaitExit(primary.pid);
      primary.pid = -1;
      result = absl::InternalError(
          absl::StrCat("the refund consumer exited with status ", code, " (see above)"));
      break;
    }
    const std::string& event = **line;
    bool kill_now = false;
    if (!crashed_before_commit && (event == "kafka.runner.after_effects_commit" ||
                                   event == kNaiveAfterEffects)) {
      // The incident: the effects are done, the offsets not committed.
      crashed_before_commit = true;
      kill_now = true;
    } else if (event.starts_with("steps.") && random_kills < kMaxRandomKills && per_point > 0 &&
               uniform(rng) < per_point) {
      ++random_kills;
      kill_now = true;
    }
    if (!kill_now) {
      if (write(primary.acks_fd, "g", 1) != 1) {
        // Gone: shows as EOF on the next read.
      }
      continue;
    }
    KillAndReap(primary);
    buf.clear();
    ++report.runner_kills;
    ++generation;
    absl::StatusOr<Child> next = spawn(absl::StrCat("consumer-", generation), generation, true);
    if (!next.ok()) {
      result = next.status();
      break;
    }
    primary = *next;
    if (extra.pid < 0) {
      // A second consumer joins the group as well: a rebalance that hands the
      // killed one's uncommitted partitions to a consumer with another id.
      absl::StatusOr<Child> joined = spawn("consumer-joined", 0, false);
      if (!joined.ok()) {
        result = joined.status();
        break;
      }
      extra = *joined;
      ++report.rebalance_joins;
    }
  }
  KillAndReap(primary);
  KillAndReap(extra);
  return result;
}

absl::StatusOr<std::map<std::string, std::string>> NaiveStatuses(Store& store,
                                                                 const std::string& run_id) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(Rows rows,
                        tx->Query("SELECT DISTINCT order_no FROM demo_refund_ledger WHERE run_id = ?",
                                  {Value(run_id)}));
  tx->Rollback();
  std::map<std::string, std::string> out;
  for (const auto& r : rows.rows) {
    out[r[0].is_blob() ? r[0].as_blob() : r[0].as_text()] = "SUCCESS";
  }
  return out;
}

}  // namespace internal
}  // namespace idem::refund
