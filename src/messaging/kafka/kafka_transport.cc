#include "idem/messaging/kafka_transport.h"

#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/absl_compat.h"
#include "idem/status.h"
#include "librdkafka/rdkafka.h"
#include "messaging/dead_letter.h"
#include "messaging/kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace idem::messaging {
namespace {

std::string PartitionName(const char* topic, int32_t partition) {
  return absl::StrCat(topic, "[", partition, "]");
}

std::vector<std::string> Names(const rd_kafka_topic_partition_list_t* list) {
  std::vector<std::string> out;
  if (list == nullptr) return out;
  for (int i = 0; i < list->cnt; ++i) {
    out.push_back(PartitionName(list->elems[i].topic, list->elems[i].partition));
  }
  return out;
}

// librdkafka's log lines (syslog levels) into the process's log.
void LogCallback(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
  const char* name = rd_kafka_name(rk);
  if (level <= 3) {
    spdlog::error("librdkafka {} {}: {}", name, fac, buf);
  } else if (level == 4) {
    spdlog::warn("librdkafka {} {}: {}", name, fac, buf);
  } else {
    spdlog::debug("librdkafka {} {}: {}", name, fac, buf);
  }
}

void ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void*) {
  // Most are transient (a broker went away) and librdkafka retries them itself;
  // fatal ones are picked up by the next Poll()/Commit() through rd_kafka_fatal_error.
  spdlog::warn("kafka {}: {}: {}", rd_kafka_name(rk),
               rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
}


absl::Status Set(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof errstr) !=
      RD_KAFKA_CONF_OK) {
    return absl::InvalidArgumentError(absl::StrCat("kafka property ", name, ": ", errstr));
  }
  return absl::OkStatus();
}

// A conf owned until rd_kafka_new takes it.
struct ConfDeleter {
  void operator()(rd_kafka_conf_t* c) const { rd_kafka_conf_destroy(c); }
};
using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;

struct ListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
using ListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t, ListDeleter>;

absl::StatusOr<rd_kafka_t*> NewHandle(rd_kafka_type_t type, ConfPtr conf) {
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) return absl::InvalidArgumentError(absl::StrCat("kafka: ", errstr));
  (void)conf.release();  // owned by rk now
  return rk;
}

absl::Status FatalStatus(rd_kafka_t* rk) {
  char errstr[512];
  rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, errstr, sizeof errstr);
  if (fatal == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("kafka fatal error ", rd_kafka_err2name(fatal), ": ", errstr));
}

Message Convert(const rd_kafka_message_t* m) {
  Message out;
  out.source = rd_kafka_topic_name(m->rkt);
  out.partition = m->partition;
  out.offset = m->offset;
  if (m->key != nullptr) out.key.assign(static_cast<const char*>(m->key), m->key_len);
  if (m->payload != nullptr) out.payload.assign(static_cast<const char*>(m->payload), m->len);
  rd_kafka_timestamp_type_t type;
  const int64_t ts = rd_kafka_message_timestamp(m, &type);
  if (type != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE) out.timestamp_ms = ts;
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name;
    const void* value;
    size_t size;
    for (size_t i = 0;
         rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      out.headers.emplace_back(name, value == nullptr
                                         ? std::string()
                                         : std::string(static_cast<const char*>(value), size));
    }
  }
  return out;
}

}  // namespace

// librdkafka's callbacks into the transport (its friend): `opaque` is the transport.
struct KafkaCallbacks {
  static void Rebalance(rd_kafka_t*, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t* partitions, void* opaque) {
    static_cast<KafkaTransport*>(opaque)->HandleRebalance(err, partitions);
  }
  static void Delivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    static_cast<KafkaTransport*>(opaque)->Delivered(reinterpret_cast<uintptr_t>(m->_private),
                                                    m->err);
  }
};

absl::Status KafkaStatus(int code, std::string_view context) {
  const auto err = static_cast<rd_kafka_resp_err_t>(code);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  const std::string message =
      absl::StrCat(AV(context), ": ", rd_kafka_err2name(err), " (", rd_kafka_err2str(err), ")");
  switch (err) {
    case RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID:
    case RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS:
    case RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST:
    case RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID:
      return absl::AbortedError(message);
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR__FENCED:
    case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
      return absl::FailedPreconditionError(message);
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_INVALID_REQUEST:
      return absl::InvalidArgumentError(message);
    default:
      // Timeouts, transport errors, coordinator moves, leader elections, "not
      // enough replicas": librdkafka's and the broker's transient family.
      return absl::UnavailableError(message);
  }
}

absl::StatusOr<std::unique_ptr<KafkaTransport>> KafkaTransport::Create(KafkaOptions options) {
  if (options.brokers.empty()) return absl::InvalidArgumentError("kafka: no brokers");
  if (options.group.empty()) return absl::InvalidArgumentError("kafka: no consumer group");
  if (options.topics.empty()) return absl::InvalidArgumentError("kafka: no topic");
  if (options.dead_letter_topic.empty()) {
    options.dead_letter_topic = absl::StrCat(options.topics.front(), ".dlq");
  }
  for (const std::string& t : options.topics) {
    if (t == options.dead_letter_topic) {
      return absl::InvalidArgumentError(
          absl::StrCat("kafka: the dead-letter topic '", t, "' is also consumed"));
    }
  }
  std::unique_ptr<KafkaTransport> self(new KafkaTransport(std::move(options)));
  const KafkaOptions& o = self->options_;

  ConfPtr conf(rd_kafka_conf_new());
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "bootstrap.servers", o.brokers));
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "group.id", o.group));
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "auto.offset.reset", "earliest"));
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "enable.partition.eof", "false"));
  IDEM_RETURN_IF_ERROR(
      Set(conf.get(), "isolation.level", o.read_committed ? "read_committed" : "read_uncommitted"));
  for (const auto& [k, v] : o.consumer_config) IDEM_RETURN_IF_ERROR(Set(conf.get(), k, v));
  // Process, then commit: idem commits after the effects, never librdkafka on a timer.
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "enable.auto.commit", "false"));
  IDEM_RETURN_IF_ERROR(Set(conf.get(), "enable.auto.offset.store", "false"));
  rd_kafka_conf_set_opaque(conf.get(), self.get());
  rd_kafka_conf_set_log_cb(conf.get(), LogCallback);
  rd_kafka_conf_set_error_cb(conf.get(), ErrorCallback);
  rd_kafka_conf_set_rebalance_cb(conf.get(), KafkaCallbacks::Rebalance);
  IDEM_ASSIGN_OR_RETURN(self->consumer_, NewHandle(RD_KAFKA_CONSUMER, std::move(conf)));
  rd_kafka_poll_set_consumer(self->consumer_);

  ConfPtr pconf(rd_kafka_conf_new());
  IDEM_RETURN_IF_ERROR(Set(pconf.get(), "bootstrap.servers", o.brokers));
  IDEM_RETURN_IF_ERROR(Set(pconf.get(), "enable.idempotence", "true"));
  IDEM_RETURN_IF_ERROR(Set(pconf.get(), "linger.ms", "0"));
  IDEM_RETURN_IF_ERROR(
      Set(pconf.get(), "message.timeout.ms", absl::StrCat(o.dead_letter_timeout.count())));
  for (const auto& [k, v] : o.producer_config) IDEM_RETURN_IF_ERROR(Set(pconf.get(), k, v));
  rd_kafka_conf_set_opaque(pconf.get(), self.get());
  rd_kafka_conf_set_log_cb(pconf.get(), LogCallback);
  rd_kafka_conf_set_error_cb(pconf.get(), ErrorCallback);
  rd_kafka_conf_set_dr_msg_cb(pconf.get(), KafkaCallbacks::Delivery);
  IDEM_ASSIGN_OR_RETURN(self->producer_, NewHandle(RD_KAFKA_PRODUCER, std::move(pconf)));

  ListPtr topics(rd_kafka_topic_partition_list_new(static_cast<int>(o.topics.size())));
  for (const std::string& t : o.topics) {
    rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  IDEM_RETURN_IF_ERROR(KafkaStatus(rd_kafka_subscribe(self->consumer_, topics.get()), "subscribe"));
  return self;
}

KafkaTransport::~KafkaTransport() {
  if (consumer_ != nullptr) {
    // Leaves the group now (its partitions move at once, not after
    // session.timeout.ms); commits nothing, since auto-commit is off.
    listener_ = nullptr;
    rd_kafka_consumer_close(consumer_);
    rd_kafka_destroy(consumer_);
  }
  if (producer_ != nullptr) {
    rd_kafka_flush(producer_, 5000);
    rd_kafka_destroy(producer_);
  }
}

void KafkaTransport::LogRebalance(std::string_view what, const std::vector<std::string>& parts) {
  const std::string joined = parts.empty() ? "-" : absl::StrJoin(parts, ",");
  spdlog::info("kafka group {}: {} {}", options_.group, what, joined);
  if (!options_.rebalance_log.empty()) {
    std::ofstream out(options_.rebalance_log, std::ios::app);
    out << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone())
        << " kafka rebalance " << what << " group=" << options_.group << " partitions=" << joined
        << "\n";
  }
}

void KafkaTransport::HandleRebalance(int err, rd_kafka_topic_partition_list_t* partitions) {
  const bool cooperative = std::string_view(rd_kafka_rebalance_protocol(consumer_)) == "COOPERATIVE";
  const std::vector<std::string> names = Names(partitions);
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    LogRebalance("assigned", names);
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_assign(consumer_, partitions)) {
        spdlog::error("kafka: incremental assign: {}", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      assigned_.clear();
      rd_kafka_assign(consumer_, partitions);
    }
    for (int i = 0; i < partitions->cnt; ++i) {
      assigned_.emplace(partitions->elems[i].topic, partitions->elems[i].partition);
    }
    if (listener_) listener_({.kind = Rebalance::Kind::kAssigned, .partitions = names});
    return;
  }
  const bool lost = rd_kafka_assignment_lost(consumer_) != 0;
  LogRebalance(lost ? "lost" : "revoked", names);
  // The runner finishes or abandons its work first; then what this Poll had
  // fetched from these partitions is dropped (never handed out, never committed:
  // the next owner reads it from the committed offset).
  if (listener_) {
    listener_({.kind = lost ? Rebalance::Kind::kLost : Rebalance::Kind::kRevoked,
               .partitions = names});
  }
  for (int i = 0; i < partitions->cnt; ++i) {
    const std::pair<std::string, int32_t> tp(partitions->elems[i].topic,
                                             partitions->elems[i].partition);
    assigned_.erase(tp);
    if (collecting_ != nullptr) {
      std::erase_if(*collecting_, [&](const Message& m) {
        return m.source == tp.first && m.partition == tp.second;
      });
    }
  }
  if (cooperative) {
    if (rd_kafka_error_t* e = rd_kafka_incremental_unassign(consumer_, partitions)) {
      spdlog::error("kafka: incremental unassign: {}", rd_kafka_error_string(e));
      rd_kafka_error_destroy(e);
    }
  } else {
    assigned_.clear();
    rd_kafka_assign(consumer_, nullptr);
  }
}

absl::StatusOr<std::vector<Message>> KafkaTransport::Poll(size_t max,
                                                          std::chrono::milliseconds timeout) {
  IDEM_RETURN_IF_ERROR(FatalStatus(consumer_));
  std::vector<Message> out;
  collecting_ = &out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status unreachable;
  while (out.size() < max) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // The first message is waited for; the rest of the batch is what is already
    // fetched (librdkafka prefetches queued.min.messages per partition).
    const int wait_ms = out.empty() ? static_cast<int>(std::max<int64_t>(0, left.count())) : 0;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer_, wait_ms);
    if (m == nullptr) {
      if (!out.empty() || left.count() <= 0) break;
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const rd_kafka_resp_err_t err = m->err;
      const std::string what = m->payload != nullptr
                                   ? std::string(static_cast<const char*>(m->payload), m->len)
                                   : std::string(rd_kafka_err2str(err));
      rd_kafka_message_destroy(m);
      if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
      absl::Status fatal = FatalStatus(consumer_);
      if (!fatal.ok()) {
        collecting_ = nullptr;
        return fatal;
      }
      spdlog::warn("kafka consumer: {}: {}", rd_kafka_err2name(err), what);
      if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        unreachable = absl::UnavailableError(absl::StrCat("kafka: all brokers down: ", what));
      }
      continue;
    }
    out.push_back(Convert(m));
    rd_kafka_message_destroy(m);
  }
  collecting_ = nullptr;
  if (out.empty() && !unreachable.ok()) return unreachable;
  return out;
}

absl::Status KafkaTransport::Commit(const std::vector<Message>& done) {
  std::map<std::pair<std::string, int32_t>, int64_t> next;
  for (const Message& m : done) {
    const std::pair<std::string, int32_t> tp(m.source, m.partition);
    if (!assigned_.contains(tp)) continue;  // someone else's now: theirs to commit
    int64_t& n = next[tp];
    n = std::max(n, m.offset + 1);
  }
  if (next.empty()) return absl::OkStatus();
  ListPtr offsets(rd_kafka_topic_partition_list_new(static_cast<int>(next.size())));
  for (const auto& [tp, offset] : next) {
    rd_kafka_topic_partition_list_add(offsets.get(), tp.first.c_str(), tp.second)->offset = offset;
  }
  const rd_kafka_resp_err_t err = rd_kafka_commit(consumer_, offsets.get(), /*async=*/0);
  IDEM_RETURN_IF_ERROR(FatalStatus(consumer_));
  if (err == RD_KAFKA_RESP_ERR__NO_OFFSET) return absl::OkStatus();
  IDEM_RETURN_IF_ERROR(KafkaStatus(err, "offset commit"));
  for (int i = 0; i < offsets->cnt; ++i) {
    const rd_kafka_topic_partition_t& p = offsets->elems[i];
    IDEM_RETURN_IF_ERROR(
        KafkaStatus(p.err, absl::StrCat("offset commit of ", PartitionName(p.topic, p.partition))));
  }
  return absl::OkStatus();
}

absl::Status KafkaTransport::Rewind(const std::vector<Message>& batch) {
  std::map<std::pair<std::string, int32_t>, int64_t> first;
  for (const Message& m : batch) {
    const std::pair<std::string, int32_t> tp(m.source, m.partition);
    if (!assigned_.contains(tp)) continue;
    auto [it, inserted] = first.emplace(tp, m.offset);
    if (!inserted) it->second = std::min(it->second, m.offset);
  }
  if (first.empty()) return absl::OkStatus();
  ListPtr to(rd_kafka_topic_partition_list_new(static_cast<int>(first.size())));
  for (const auto& [tp, offset] : first) {
    rd_kafka_topic_partition_list_add(to.get(), tp.first.c_str(), tp.second)->offset = offset;
  }
  if (rd_kafka_error_t* e = rd_kafka_seek_partitions(consumer_, to.get(), 10000)) {
    absl::Status s = absl::UnavailableError(absl::StrCat("kafka seek: ", rd_kafka_error_string(e)));
    rd_kafka_error_destroy(e);
    return s;
  }
  for (int i = 0; i < to->cnt; ++i) {
    IDEM_RETURN_IF_ERROR(KafkaStatus(
        to->elems[i].err, absl::StrCat("seek of ", PartitionName(to->elems[i].topic,
                                                                 to->elems[i].partition))));
  }
  return absl::OkStatus();
}

void KafkaTransport::Delivered(uintptr_t seq, int err) {
  auto it = deliveries_.find(seq);
  if (it == deliveries_.end()) return;  // given up on (timed out and purged)
  it->second.done = true;
  it->second.err = err;
}

absl::Status KafkaTransport::DeadLetter(const Message& message, std::string_view reason) {
  const auto all = DeadLetterHeaders(message, reason, options_.group);
  rd_kafka_headers_t* headers = rd_kafka_headers_new(all.size());
  for (const auto& [k, v] : all) {
    rd_kafka_header_add(headers, k.data(), static_cast<ssize_t>(k.size()), v.data(),
                        static_cast<ssize_t>(v.size()));
  }
  const uintptr_t seq = next_delivery_++;
  deliveries_[seq] = Delivery{};
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      producer_, RD_KAFKA_V_TOPIC(options_.dead_letter_topic.c_str()),
      RD_KAFKA_V_KEY(message.key.data(), message.key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(message.payload.data()), message.payload.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(seq)), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(headers);  // not taken on failure
    deliveries_.erase(seq);
    return KafkaStatus(err, "dead-letter produce");
  }
  rd_kafka_flush(producer_, static_cast<int>(options_.dead_letter_timeout.count()));
  const Delivery d = deliveries_[seq];
  deliveries_.erase(seq);
  if (!d.done) {
    // Still queued: purge it, so it cannot land later and be sent again by the
    // retry (a duplicate in the dead-letter topic is harmless but noisy).
    rd_kafka_purge(producer_, RD_KAFKA_PURGE_F_QUEUE);
    rd_kafka_poll(producer_, 0);
    return absl::UnavailableError(
        absl::StrCat("dead-letter produce to ", options_.dead_letter_topic, " timed out"));
  }
  return KafkaStatus(d.err, absl::StrCat("dead-letter produce to ", options_.dead_letter_topic));
}

}  // namespace idem::messaging
