#include "refund/refund_operation.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "nlohmann/json.hpp"

namespace idem::refund {

std::string EncodeOrder(const Order& order) {
  return nlohmann::json{
      {"run_id", order.run_id}, {"order_no", order.order_no}, {"amount", order.amount}}
      .dump();
}

absl::StatusOr<Order> DecodeOrder(std::string_view input) {
  nlohmann::json j = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("refund input: not a JSON object");
  Order o;
  for (const char* field : {"run_id", "order_no"}) {
    if (!j.contains(field) || !j[field].is_string() || j[field].get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("refund input: \"", field, "\" must be a non-empty string"));
    }
  }
  if (!j.contains("amount") || !j["amount"].is_number_integer() ||
      j["amount"].get<int64_t>() <= 0) {
    return absl::InvalidArgumentError("refund input: \"amount\" must be a positive integer");
  }
  o.run_id = j["run_id"].get<std::string>();
  o.order_no = j["order_no"].get<std::string>();
  o.amount = j["amount"].get<int64_t>();
  return o;
}

std::string BizKeyOf(const Order& order) { return "refund:" + order.order_no; }

absl::Status CreateDemoTables(Store& store) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  // The incident's ledger: UNIQUE (order_no, biz_type). The inbox has no unique key on
  // purpose: a second notification must be visible, not swallowed.
  IDEM_RETURN_IF_ERROR(tx->Exec("CREATE TABLE IF NOT EXISTS demo_refund_ledger ("
                                " order_no VARCHAR(64) NOT NULL, biz_type VARCHAR(32) NOT NULL,"
                                " amount BIGINT NOT NULL, run_id VARCHAR(32) NOT NULL,"
                                " UNIQUE (order_no, biz_type))")
                           .status());
  IDEM_RETURN_IF_ERROR(tx->Exec("CREATE TABLE IF NOT EXISTS demo_refund_inbox ("
                                " message_id VARCHAR(80) NOT NULL, order_no VARCHAR(64) NOT NULL,"
                                " run_id VARCHAR(32) NOT NULL)")
                           .status());
  return tx->Commit();
}

bool FaultInjector::Fire() {
  if (rate_ <= 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < rate_;
}

RetryPolicy DemoRetryPolicy() {
  RetryPolicy p;
  p.initial_delay = absl::Milliseconds(10);
  p.max_delay = absl::Milliseconds(200);
  p.max_attempts = 5;
  return p;
}

OperationType RefundOperation(const ChannelClient& channel, FaultInjector* faults) {
  const ChannelClient* ch = &channel;
  auto fire = [faults] { return faults != nullptr && faults->Fire(); };

  Step reversal;
  reversal.name = "channel_reversal";
  reversal.external = true;
  reversal.retry = DemoRetryPolicy();
  reversal.execute = [ch](StepContext& c) -> absl::StatusOr<std::string> {
    IDEM_ASSIGN_OR_RETURN(Order o, DecodeOrder(c.input()));
    absl::StatusOr<std::string> id = ch->Reverse(c.request_id(), o.order_no, o.amount);
    // kInternal is an answer the client could not read (e.g. a 201 with a broken
    // body): the reversal may exist. Only a refusal (4xx) surely did nothing; say
    // "not observed" for the rest, so the runner asks before it re-sends.
    if (!id.ok() && absl::IsInternal(id.status())) {
      return absl::UnavailableError(absl::StrCat("channel answer unreadable: ",
                                                 id.status().message()));
    }
    return id;
  };
  reversal.query = [ch](StepContext& c) -> absl::StatusOr<QueryResult> {
    IDEM_ASSIGN_OR_RETURN(std::vector<Reversal> found, ch->Lookup(c.request_id()));
    // Any reversal of this request_id means the effect happened (a cancelled one
    // was undone by a compensation, which never precedes a forward re-run).
    if (found.empty()) return QueryResult{QueryAnswer::kNotFound, ""};
    return QueryResult{QueryAnswer::kDone, found.front().id};
  };
  reversal.compensate = [ch](StepContext& c) -> absl::Status {
    return ch->Cancel(c.request_id()).status();
  };

  Step ledger;
  ledger.name = "ledger";
  ledger.retry = DemoRetryPolicy();
  ledger.execute = [fire](StepContext& c) -> absl::StatusOr<std::string> {
    IDEM_ASSIGN_OR_RETURN(Order o, DecodeOrder(c.input()));
    IDEM_RETURN_IF_ERROR(c.tx()
                             ->Exec("INSERT INTO demo_refund_ledger (order_no, biz_type, amount,"
                                    " run_id) VALUES (?, 'refund', ?, ?)",
                                    {o.order_no, o.amount, o.run_id})
                             .status());
    // The incident: the ledger write hit a slow query and timed out after it ran; the
    // transaction rolls back, the journal says FAILED, and the retry redoes only it.
    if (fire()) return absl::DeadlineExceededError("ledger: statement timeout (injected)");
    return absl::StrCat("ledger:", o.order_no);
  };
  ledger.compensate = [](StepContext& c) -> absl::Status {
    IDEM_ASSIGN_OR_RETURN(Order o, DecodeOrder(c.input()));
    return c.tx()
        ->Exec("DELETE FROM demo_refund_ledger WHERE order_no = ? AND biz_type = 'refund'",
               {o.order_no})
        .status();
  };

  Step notification;
  notification.name = "notification";
  notification.retry = DemoRetryPolicy();
  notification.execute = [fire](StepContext& c) -> absl::StatusOr<std::string> {
    IDEM_ASSIGN_OR_RETURN(Order o, DecodeOrder(c.input()));
    if (fire()) return absl::UnavailableError("inbox: notification service unavailable (injected)");
    const std::string message_id = absl::StrCat("msg-", o.order_no);
    IDEM_RETURN_IF_ERROR(c.tx()
                             ->Exec("INSERT INTO demo_refund_inbox (message_id, order_no, run_id)"
                                    " VALUES (?, ?, ?)",
                                    {message_id, o.order_no, o.run_id})
                             .status());
    return message_id;
  };
  // A sent notification cannot be unsent; it is the last step, so nothing after
  // it can fail and ask for that.

  OperationType type;
  type.name = std::string(kRefundType);
  type.steps = {std::move(reversal), std::move(ledger), std::move(notification)};
  return type;
}

}  // namespace idem::refund
