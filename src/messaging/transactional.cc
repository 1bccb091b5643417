#include "idem/messaging/transactional.h"

#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/status.h"
#include "librdkafka/rdkafka.h"
#include "messaging/dead_letter.h"
#include "messaging/kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace idem::messaging {
namespace {

// How the transactional contract sorts an error object (rdkafka.h).
enum class Kind { kRetriable, kAbortable, kFatal };

Kind Sort(const rd_kafka_error_t* e) {
  if (rd_kafka_error_is_fatal(e)) return Kind::kFatal;
  if (rd_kafka_error_txn_requires_abort(e)) return Kind::kAbortable;
  if (rd_kafka_error_is_retriable(e)) return Kind::kRetriable;
  return Kind::kFatal;  // "treat these errors … as fatal" (rdkafka.h)
}

std::string Describe(const rd_kafka_error_t* e) {
  return absl::StrCat(rd_kafka_error_name(e), ": ", rd_kafka_error_string(e));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TransactionalProcessor>> TransactionalProcessor::Create(
    TransactionalOptions options, Transform transform) {
  if (options.transactional_id.empty()) {
    return absl::InvalidArgumentError("the exactly-once mode needs a transactional.id");
  }
  if (transform == nullptr) return absl::InvalidArgumentError("no transform");
  if (options.max_batch == 0) return absl::InvalidArgumentError("max_batch must be at least 1");
  options.input.read_committed = true;
  std::unique_ptr<TransactionalProcessor> self(
      new TransactionalProcessor(std::move(options), std::move(transform)));
  IDEM_ASSIGN_OR_RETURN(self->input_, KafkaTransport::Create(self->options_.input));

  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& k, const std::string& v) -> absl::Status {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      return absl::InvalidArgumentError(absl::StrCat("kafka property ", k, ": ", errstr));
    }
    return absl::OkStatus();
  };
  absl::Status s = set("bootstrap.servers", self->options_.input.brokers);
  if (s.ok()) s = set("transactional.id", self->options_.transactional_id);
  if (s.ok()) s = set("linger.ms", "5");
  for (const auto& [k, v] : self->options_.producer_config) {
    if (s.ok()) s = set(k, v);
  }
  if (!s.ok()) {
    rd_kafka_conf_destroy(conf);
    return s;
  }
  self->producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (self->producer_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return absl::InvalidArgumentError(absl::StrCat("kafka producer: ", errstr));
  }
  const int timeout = static_cast<int>(self->options_.call_timeout.count());
  for (int attempt = 0;; ++attempt) {
    rd_kafka_error_t* e = rd_kafka_init_transactions(self->producer_, timeout);
    if (e == nullptr) break;
    const Kind kind = Sort(e);
    const std::string what = Describe(e);
    rd_kafka_error_destroy(e);
    if (kind != Kind::kRetriable) {
      return absl::FailedPreconditionError(absl::StrCat("init_transactions: ", what));
    }
    if (attempt >= 3) return absl::UnavailableError(absl::StrCat("init_transactions: ", what));
  }
  return self;
}

TransactionalProcessor::~TransactionalProcessor() {
  if (producer_ != nullptr) {
    // An open transaction is aborted by the coordinator after
    // transaction.timeout.ms, or at once when this id is initialised again.
    rd_kafka_destroy(producer_);
  }
}

TransactionalStats TransactionalProcessor::stats() const {
  auto v = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {.polled = v(polled_),
          .produced = v(produced_),
          .dead_lettered = v(dead_lettered_),
          .committed = v(committed_),
          .aborted = v(aborted_),
          .retried = v(retried_)};
}

TransactionalProcessor::Next TransactionalProcessor::Transact(const std::vector<Message>& batch,
                                                              absl::Status* fatal) {
  const int timeout = static_cast<int>(options_.call_timeout.count());
  // Runs a transactional call by the contract: retriable again, abortable and
  // fatal reported.
  auto call = [&](const char* what, const std::function<rd_kafka_error_t*()>& fn) -> Next {
    for (;;) {
      rd_kafka_error_t* e = fn();
      if (e == nullptr) return Next::kCommitted;
      const Kind kind = Sort(e);
      const std::string text = Describe(e);
      rd_kafka_error_destroy(e);
      if (kind == Kind::kRetriable) {
        retried_.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("kafka transaction: {}: {}; retrying", what, text);
        continue;
      }
      if (kind == Kind::kAbortable) {
        spdlog::warn("kafka transaction: {}: {}; aborting and rewinding", what, text);
        return Next::kAbort;
      }
      *fatal = absl::FailedPreconditionError(absl::StrCat("kafka transaction: ", what, ": ", text));
      return Next::kFatal;
    }
  };
  if (Next n = call("begin", [&] { return rd_kafka_begin_transaction(producer_); });
      n != Next::kCommitted) {
    return n == Next::kAbort ? Next::kFatal : n;  // begin has no transaction to abort
  }
  std::map<std::pair<std::string, int32_t>, int64_t> next;
  for (const Message& m : batch) {
    absl::StatusOr<std::vector<OutputMessage>> outs = transform_(m);
    std::vector<OutputMessage> to_send;
    if (outs.ok()) {
      to_send = *std::move(outs);
    } else {
      OutputMessage dead{.topic = input_->dead_letter_topic(),
                         .key = m.key,
                         .payload = m.payload,
                         .headers = DeadLetterHeaders(m, outs.status().ToString(),
                                                      options_.input.group)};
      to_send.push_back(std::move(dead));
      dead_lettered_.fetch_add(1, std::memory_order_relaxed);
    }
    for (const OutputMessage& o : to_send) {
      rd_kafka_headers_t* h = rd_kafka_headers_new(o.headers.size());
      for (const auto& [k, v] : o.headers) {
        rd_kafka_header_add(h, k.data(), static_cast<ssize_t>(k.size()), v.data(),
                            static_cast<ssize_t>(v.size()));
      }
      rd_kafka_resp_err_t err;
      while ((err = rd_kafka_producev(
                  producer_, RD_KAFKA_V_TOPIC(o.topic.c_str()), RD_KAFKA_V_PARTITION(o.partition),
                  RD_KAFKA_V_KEY(o.key.data(), o.key.size()),
                  RD_KAFKA_V_VALUE(const_cast<char*>(o.payload.data()), o.payload.size()),
                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                  RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer_, 100);  // let the queue drain
      }
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(h);
        char errstr[512];
        if (rd_kafka_fatal_error(producer_, errstr, sizeof errstr) != RD_KAFKA_RESP_ERR_NO_ERROR) {
          *fatal = absl::FailedPreconditionError(absl::StrCat("kafka transaction: produce: ", errstr));
          return Next::kFatal;
        }
        // A produce refused inside the transaction fails it: abort and redo.
        spdlog::warn("kafka transaction: produce to {}: {}; aborting and rewinding", o.topic,
                     rd_kafka_err2str(err));
        return Next::kAbort;
      }
      produced_.fetch_add(1, std::memory_order_relaxed);
    }
    int64_t& n = next[{m.source, m.partition}];
    n = std::max(n, m.offset + 1);
  }
  rd_kafka_topic_partition_list_t* offsets =
      rd_kafka_topic_partition_list_new(static_cast<int>(next.size()));
  for (const auto& [tp, offset] : next) {
    rd_kafka_topic_partition_list_add(offsets, tp.first.c_str(), tp.second)->offset = offset;
  }
  rd_kafka_consumer_group_metadata_t* group = rd_kafka_consumer_group_metadata(input_->consumer());
  Next sent = call("send_offsets_to_transaction", [&] {
    return rd_kafka_send_offsets_to_transaction(producer_, offsets, group, timeout);
  });
  rd_kafka_consumer_group_metadata_destroy(group);
  rd_kafka_topic_partition_list_destroy(offsets);
  if (sent != Next::kCommitted) return sent;
  return call("commit", [&] { return rd_kafka_commit_transaction(producer_, timeout); });
}

absl::Status TransactionalProcessor::AbortAndRewind(const std::vector<Message>& batch) {
  const int timeout = static_cast<int>(options_.call_timeout.count());
  for (;;) {
    rd_kafka_error_t* e = rd_kafka_abort_transaction(producer_, timeout);
    if (e == nullptr) break;
    const Kind kind = Sort(e);
    const std::string text = Describe(e);
    rd_kafka_error_destroy(e);
    if (kind != Kind::kRetriable) {
      return absl::FailedPreconditionError(absl::StrCat("kafka transaction: abort: ", text));
    }
    retried_.fetch_add(1, std::memory_order_relaxed);
  }
  aborted_.fetch_add(1, std::memory_order_relaxed);
  // The consumer's position moved past the batch; put it back so the batch is
  // read again into the next transaction.
  absl::Status rewound = input_->Rewind(batch);
  if (!rewound.ok()) {
    // Without the rewind the batch would be skipped: stop rather than lose it.
    return absl::FailedPreconditionError(
        absl::StrCat("kafka transaction aborted but the input could not be rewound: ",
                     rewound.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> TransactionalProcessor::RunOnce() {
  IDEM_ASSIGN_OR_RETURN(std::vector<Message> batch,
                        input_->Poll(options_.max_batch, options_.poll_timeout));
  if (batch.empty()) return 0;
  polled_.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_relaxed);
  absl::Status fatal;
  switch (Transact(batch, &fatal)) {
    case Next::kCommitted:
      committed_.fetch_add(1, std::memory_order_relaxed);
      return batch.size();
    case Next::kAbort:
      IDEM_RETURN_IF_ERROR(AbortAndRewind(batch));
      return 0;
    case Next::kFatal:
      break;
  }
  spdlog::error("{}; stopping", SV(fatal.message()));
  return fatal;
}

absl::Status TransactionalProcessor::Run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    absl::StatusOr<size_t> n = RunOnce();
    if (!n.ok() && n.status().code() != absl::StatusCode::kUnavailable) return n.status();
    if (!n.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::OkStatus();
}

}  // namespace idem::messaging
