// `idem bridge kafka`: deliver a Kafka topic to an HTTP endpoint, once per event
// (messaging/bridge.h, docs/messaging.md).
//
//   idem bridge kafka --brokers 127.0.0.1:9092 --topic orders --group orders-bridge
//       --key-header event_id --to http://127.0.0.1:8080/orders [--store sqlite://./idem-bridge.db]
//
// Each message is POSTed with `Idempotency-Key: <key>` (the key from the message:
// --key-header, --key-field or --key-template), retried with the retry policy on
// 5xx/408/429/timeouts, committed after a 2xx, dead-lettered (to --dead-letter-topic,
// default TOPIC.dlq) on a final 4xx. Every delivery is recorded in --store, so a
// redelivered message already delivered is not sent again.
//
// Runs until SIGTERM/SIGINT (then finishes or abandons the message in hand and
// commits what was delivered), or until --idle-exit passes without a message.
// Prints its counts as one JSON line on stdout when it stops.
//
// With --metrics-listen HOST:PORT it serves GET /metrics there (messaging/kafka_metrics.h:
// rebalances by kind, deliveries, dead letters, commits, commit failures).
//
// Exit status: 0 after a signal or --idle-exit; 1 when the store cannot be opened
// or Kafka fails fatally; 2 for malformed options.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/server_command.h"
#include "core/absl_compat.h"
#include "http/server/metrics.h"
#include "http/server/metrics_endpoint.h"
#include "http/server/server.h"
#include "http/client/upstream.h"
#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/ttl.h"
#include "messaging/bridge.h"
#include "messaging/kafka_metrics.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {

struct BridgeFlags {
  ServerFlags server{.store = "sqlite://./idem-bridge.db"};
  std::string brokers;
  std::string topic;
  std::string group;
  std::string key_header;
  std::string key_field;
  std::string key_template;
  std::string to;
  std::string dead_letter_topic;
  std::string biz_type = "bridge";
  std::string tenant = "default";
  std::string timeout = "10s";
  int attempts = 5;
  std::string backoff = "100ms";
  std::string max_backoff = "5s";
  std::string lease;  // default: derived from the retry round
  int batch = 100;
  std::vector<std::string> kafka_properties;
  std::string rebalance_log;
  std::string idle_exit;  // "": run until a signal
  std::string metrics_listen;  // "": no metrics listener
};

int BridgeUsage(const std::string& why) {
  PrintReason("bridge kafka: " + why);
  return kExitUsage;
}

// What the flags say, checked: every field is valid once ParseBridgeKafkaFlags returns it.
struct BridgeKafkaPlan {
  messaging::MessageKey key;
  http::UpstreamUrl url;
  absl::Duration timeout;
  RetryPolicy retry;
  absl::Duration lease;
  absl::Duration idle = absl::InfiniteDuration();
  // A small listener: a scrape is one request at a time, answered from counters.
  http::ServerOptions metrics_options{.io_threads = 1, .worker_threads = 1, .max_connections = 64};
  messaging::KafkaOptions kafka;
};

// The errors of the Parse* helpers below are the usage line (BridgeUsage) as it is printed.
absl::StatusOr<messaging::MessageKey> ParseBridgeKafkaKey(const BridgeFlags& f) {
  int keys = !f.key_header.empty() + !f.key_field.empty() + !f.key_template.empty();
  if (keys != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --key-header, --key-field or --key-template (the key "
        "must come from the event, never from the partition/offset)");
  }
  return !f.key_header.empty()
             ? messaging::MessageKey::Parse(messaging::MessageKey::Kind::kHeader, f.key_header)
         : !f.key_field.empty()
             ? messaging::MessageKey::Parse(messaging::MessageKey::Kind::kJsonField, f.key_field)
             : messaging::MessageKey::Parse(messaging::MessageKey::Kind::kTemplate, f.key_template);
}

// --timeout, the retry policy and the lease they need.
absl::Status ParseBridgeKafkaTiming(const BridgeFlags& f, BridgeKafkaPlan* plan) {
  absl::StatusOr<absl::Duration> timeout = ParseTtlDuration(f.timeout, "--timeout");
  absl::StatusOr<absl::Duration> backoff = ParseTtlDuration(f.backoff, "--backoff");
  absl::StatusOr<absl::Duration> max_backoff = ParseTtlDuration(f.max_backoff, "--max-backoff");
  for (const auto* d : {&timeout, &backoff, &max_backoff}) {
    if (!d->ok()) return d->status();
  }
  if (*timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be more than 0");
  }
  plan->timeout = *timeout;
  plan->retry =
      RetryPolicy{.initial_delay = *backoff, .max_delay = *max_backoff, .max_attempts = f.attempts};
  if (absl::Status s = plan->retry.Validate(); !s.ok()) {
    return absl::InvalidArgumentError("--attempts/--backoff/--max-backoff: " + Str(s.message()));
  }
  // A round of attempts must fit in the lease, or a second bridge could take the
  // key over while the first still sends (the same key, but twice as many requests).
  absl::Duration round = absl::ZeroDuration();
  for (int i = 0; i < f.attempts; ++i) {
    round += *timeout + (i > 0 ? plan->retry.Ceiling(i - 1) : absl::ZeroDuration());
  }
  plan->lease = round + absl::Seconds(10);
  if (!f.lease.empty()) {
    absl::StatusOr<absl::Duration> l = ParseTtlDuration(f.lease, "--lease");
    if (!l.ok()) return l.status();
    if (*l <= round) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lease (", f.lease,
                       ") must be longer than one round of "
                       "attempts (--attempts × --timeout plus the backoff: ",
                       absl::FormatDuration(round), ")"));
    }
    plan->lease = *l;
  }
  return absl::OkStatus();
}

absl::StatusOr<BridgeKafkaPlan> ParseBridgeKafkaFlags(const BridgeFlags& f) {
  BridgeKafkaPlan plan;
  IDEM_ASSIGN_OR_RETURN(plan.key, ParseBridgeKafkaKey(f));
  absl::StatusOr<http::UpstreamUrl> url = http::ParseUpstreamUrl(f.to);
  if (!url.ok()) {
    std::string why = Str(url.status().message());
    if (why.starts_with("--upstream")) why = "--to" + why.substr(10);
    return absl::InvalidArgumentError(why);
  }
  plan.url = *std::move(url);
  IDEM_RETURN_IF_ERROR(ParseBridgeKafkaTiming(f, &plan));
  if (!f.idle_exit.empty()) {
    IDEM_ASSIGN_OR_RETURN(plan.idle, ParseTtlDuration(f.idle_exit, "--idle-exit"));
  }
  if (f.batch < 1 || f.batch > 10000) {
    return absl::InvalidArgumentError("--batch must be from 1 to 10000");
  }
  if (!f.metrics_listen.empty() &&
      !ParseListen(f.metrics_listen, &plan.metrics_options.host, &plan.metrics_options.port)) {
    return absl::InvalidArgumentError("--metrics-listen '" + f.metrics_listen +
                                      "' must be HOST:PORT (port 0-65535)");
  }
  plan.kafka = messaging::KafkaOptions{.brokers = f.brokers,
                                       .group = f.group,
                                       .topics = {f.topic},
                                       .dead_letter_topic = f.dead_letter_topic,
                                       .rebalance_log = f.rebalance_log};
  for (const std::string& p : f.kafka_properties) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError("--kafka-property '" + p +
                                        "' must be NAME=VALUE (e.g. session.timeout.ms=10000)");
    }
    plan.kafka.consumer_config.emplace_back(p.substr(0, eq), p.substr(eq + 1));
  }
  return plan;
}

// POSTs each message to `target` on `upstream` (both must outlive the Deliverer).
messaging::Deliverer BridgeKafkaDeliverer(const http::Upstream& upstream,
                                          const std::string& target) {
  return [&upstream, &target](
             const messaging::Message& m,
             std::string_view idempotency_key) -> absl::StatusOr<messaging::HttpAnswer> {
    http::HttpRequest request;
    request.method = "POST";
    request.body = m.payload;
    request.request_id = std::string(idempotency_key);
    request.headers = {{"Idempotency-Key", std::string(idempotency_key)},
                       {"Content-Type", "application/json"},
                       {"X-Kafka-Topic", m.source},
                       {"X-Kafka-Partition", absl::StrCat(m.partition)},
                       {"X-Kafka-Offset", absl::StrCat(m.offset)}};
    absl::StatusOr<http::UpstreamResponse> r = upstream.Send(request, target);
    if (!r.ok()) return r.status();
    return messaging::HttpAnswer{.status = r->status, .body = std::move(r->body)};
  };
}

// Runs rounds until Stop, a fatal error (returned) or `idle` without a new message.
absl::Status RunBridgeKafkaRounds(messaging::Bridge& bridge, absl::Duration idle) {
  absl::Time last = absl::Now();
  int64_t seen = 0;
  while (!bridge.stopping()) {
    absl::StatusOr<size_t> n = bridge.RunOnce();
    if (!n.ok()) {
      if (n.status().code() == absl::StatusCode::kCancelled) break;
      if (n.status().code() != absl::StatusCode::kUnavailable) return n.status();
      spdlog::warn("bridge: {}", SV(n.status().message()));
      continue;
    }
    // Idle time counts from the first assignment: joining the group takes a while.
    const messaging::BridgeStats now = bridge.stats();
    if (now.polled != seen || now.rebalances == 0) {
      seen = now.polled;
      last = absl::Now();
    } else if (absl::Now() - last > idle) {
      break;
    }
  }
  return absl::OkStatus();
}

// Prints the counts as one JSON line, then the reason of a fatal `result`.
int ReportBridgeKafka(const messaging::BridgeStats& s, const absl::Status& result) {
  nlohmann::json j{{"polled", s.polled},         {"delivered", s.delivered},
                   {"skipped", s.skipped},       {"dead_lettered", s.dead_lettered},
                   {"attempts", s.attempts},     {"rounds_failed", s.rounds_failed},
                   {"takeovers", s.takeovers},   {"commits", s.commits},
                   {"commit_failures", s.commit_failures}, {"rebalances", s.rebalances}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  if (!result.ok()) {
    PrintReason("bridge kafka: " + Str(result.message()));
    return kExitFailure;
  }
  return kExitOk;
}

int RunBridgeKafka(const BridgeFlags& f) {
  BlockStopSignals();  // before any thread starts: see server_command.h
  absl::StatusOr<BridgeKafkaPlan> plan = ParseBridgeKafkaFlags(f);
  if (!plan.ok()) return BridgeUsage(Str(plan.status().message()));

  int exit_code = kExitOk;
  std::vector<std::string> warnings;
  std::unique_ptr<Store> store = OpenServerStore("bridge kafka", f.server, &warnings, &exit_code);
  if (store == nullptr) return exit_code;
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  absl::StatusOr<std::unique_ptr<messaging::KafkaTransport>> transport =
      messaging::KafkaTransport::Create(std::move(plan->kafka));
  if (!transport.ok()) {
    if (transport.status().code() == absl::StatusCode::kInvalidArgument) {
      return BridgeUsage(Str(transport.status().message()));
    }
    PrintReason("bridge kafka: " + Str(transport.status().message()));
    return kExitFailure;
  }
  const http::Upstream upstream(plan->url, {.timeout = plan->timeout});
  const std::string target = plan->url.base_path.empty() ? "/" : "";
  messaging::BridgeOptions options{.key = plan->key,
                                   .tenant = f.tenant,
                                   .biz_type = f.biz_type,
                                   .max_batch = static_cast<size_t>(f.batch),
                                   .retry = plan->retry,
                                   .lease = plan->lease};
  absl::StatusOr<std::unique_ptr<messaging::Bridge>> bridge = messaging::Bridge::Create(
      **transport, *store, BridgeKafkaDeliverer(upstream, target), options);
  if (!bridge.ok()) return BridgeUsage(Str(bridge.status().message()));
  // GET /metrics (idem serve's Server and Metrics, with the bridge's counters as a
  // section; messaging/kafka_metrics.h names the series).
  http::Metrics metrics(http::BuildInfo{.version = std::string(Version())});
  metrics.AddSection([b = bridge->get()] { return messaging::RenderBridgeMetrics(b->stats()); });
  http::MetricsEndpoint endpoint(metrics);
  std::unique_ptr<http::Server> metrics_server;
  if (!f.metrics_listen.empty()) {
    metrics_server = std::make_unique<http::Server>(endpoint, plan->metrics_options);
    if (absl::Status s = metrics_server->Start(); !s.ok()) {
      PrintReason("bridge kafka: --metrics-listen: " + Str(s.message()));
      return kExitFailure;
    }
    std::string address = metrics_server->address();
    if (address.find(':') != std::string::npos) address = "[" + address + "]";
    spdlog::info("bridge: metrics on http://{}:{}/metrics", address, metrics_server->port());
  }
  StopOnSignal on_signal([b = bridge->get()] { b->Stop(); });
  spdlog::info("bridging kafka topic {} (group {}) to http://{}{} with keys from {} in {}", f.topic,
               f.group, plan->url.authority, plan->url.base_path, plan->key.ToString(),
               store->url());
  const absl::Status result = RunBridgeKafkaRounds(**bridge, plan->idle);
  return ReportBridgeKafka((*bridge)->stats(), result);
}

}  // namespace

CommandFn AddBridgeCommand(CLI::App& root) {
  auto flags = std::make_shared<BridgeFlags>();
  CLI::App* bridge = root.add_subcommand(
      "bridge", "Deliver messages to an HTTP endpoint once per event (Kafka: `idem bridge kafka`)");
  bridge->require_subcommand(1);
  CLI::App* sub = bridge->add_subcommand(
      "kafka",
      "POST each message of a Kafka topic to --to with an Idempotency-Key from the message; "
      "commit after 2xx, dead-letter on a final 4xx, never send a delivered message again");
  sub->add_option("--brokers", flags->brokers, "Kafka bootstrap servers, HOST:PORT[,...]")->required();
  sub->add_option("--topic", flags->topic, "The topic to deliver")->required();
  sub->add_option("--group", flags->group, "The consumer group (its committed offsets)")->required();
  sub->add_option("--to", flags->to, "The target, http://HOST[:PORT][/PATH]")->type_name("URL")->required();
  sub->add_option("--key-header", flags->key_header, "Key each message by this header (e.g. event_id)")
      ->type_name("NAME");
  sub->add_option("--key-field", flags->key_field,
                  "Key by a field of the JSON payload (order.no or /order/no)")
      ->type_name("PATH");
  sub->add_option("--key-template", flags->key_template,
                  "Key by a template over payload fields, e.g. {order_no}:{event_type}:{version}")
      ->type_name("TEMPLATE");
  sub->add_option("--store", flags->server.store,
                  "Where deliveries are recorded: sqlite://PATH, postgres://…, mysql://… (also "
                  "IDEM_STORE)")
      ->envname("IDEM_STORE")
      ->capture_default_str();
  sub->add_option("--store-password-file", flags->server.store_password_file,
                  "A file with the store's password, added to the URL (else IDEM_STORE_PASSWORD)");
  sub->add_option("--dead-letter-topic", flags->dead_letter_topic,
                  "Where undeliverable messages go, with the reason in headers (default TOPIC.dlq)");
  sub->add_option("--biz-type", flags->biz_type, "The records' biz_type")->capture_default_str();
  sub->add_option("--tenant", flags->tenant, "The records' tenant")->capture_default_str();
  sub->add_option("--timeout", flags->timeout, "Time for one HTTP attempt")->capture_default_str();
  sub->add_option("--attempts", flags->attempts, "Attempts per round (retry policy)")
      ->capture_default_str();
  sub->add_option("--backoff", flags->backoff, "First backoff ceiling (full jitter, doubling)")
      ->capture_default_str();
  sub->add_option("--max-backoff", flags->max_backoff, "Largest backoff ceiling")->capture_default_str();
  sub->add_option("--lease", flags->lease,
                  "How long a delivery holds its key before another bridge may take it over "
                  "(default: one round of attempts + 10s)");
  sub->add_option("--batch", flags->batch, "Messages per poll (committed together)")->capture_default_str();
  sub->add_option("--kafka-property", flags->kafka_properties,
                  "A librdkafka consumer property NAME=VALUE (repeatable), e.g. "
                  "session.timeout.ms=10000 (docs/messaging.md)")
      ->type_name("NAME=VALUE");
  sub->add_option("--rebalance-log", flags->rebalance_log,
                  "Append each assignment/revocation to FILE, one line starting with its RFC 3339 "
                  "time (for `idem diagnose rebalance --events`)")
      ->type_name("FILE");
  sub->add_option("--metrics-listen", flags->metrics_listen,
                  "Serve GET /metrics (Prometheus text: rebalances by kind, deliveries, dead "
                  "letters, commits, commit failures) on HOST:PORT (port 0: any; the address is "
                  "logged)")
      ->type_name("HOST:PORT");
  sub->add_option("--idle-exit", flags->idle_exit,
                  "Exit 0 after this long without a message, counted from the first partition "
                  "assignment (default: run until SIGTERM)")
      ->type_name("DURATION");
  flags->server.config = root.get_config_ptr();
  return [flags, sub]() -> int {
    if (!sub->parsed()) return kExitUsage;
    return RunBridgeKafka(*flags);
  };
}

}  // namespace idem::cli
