#include "recon/dispositions.h"

#include <string>

#include "http/client/upstream.h"
#include "http/types.h"
#include "idem/key.h"
#include "nlohmann/json.hpp"
#include "recon/recon_time.h"
#include "recon/tables.h"

namespace idem::recon {
namespace {

std::string Payload(const std::string& source, const Difference& d) {
  nlohmann::ordered_json j;
  j["source"] = source;
  j["key"] = d.key;
  j["class"] = std::string(kClassNames[static_cast<int>(d.cls)]);
  auto side = [](const Row& r) {
    nlohmann::ordered_json s;
    s["amount"] = r.amount;
    s["currency"] = r.currency;
    s["status"] = r.status;
    s["time"] = r.has_time ? nlohmann::ordered_json(FormatTimeUs(r.time_us)) : nullptr;
    return s;
  };
  j["upstream"] = d.upstream ? side(*d.upstream) : nlohmann::ordered_json(nullptr);
  j["local"] = d.local ? side(*d.local) : nlohmann::ordered_json(nullptr);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Detail(const Difference& d) {
  auto show = [](const std::optional<Row>& r) {
    if (!r) return std::string("-");
    std::string s = r->amount;
    if (!r->currency.empty()) s += " " + r->currency;
    if (!r->status.empty()) s += " " + r->status;
    return s;
  };
  switch (d.cls) {
    case DiffClass::kDuplicate:
      return std::to_string(d.duplicate_rows) + " rows " +
             (d.duplicate_side == Side::kUpstream ? "upstream" : "local");
    case DiffClass::kStatusMismatch:
      return "upstream " + show(d.upstream) + ", local " + show(d.local) +
             (d.stuck ? " (stuck in an intermediate state)" : " (another final state)");
    default:
      return "upstream " + show(d.upstream) + ", local " + show(d.local);
  }
}

class HttpActionSink final : public ActionSink {
 public:
  HttpActionSink(std::optional<http::Upstream> replay, std::optional<http::Upstream> repush,
                 std::vector<Header> headers)
      : replay_(std::move(replay)), repush_(std::move(repush)), headers_(std::move(headers)) {}

  SendOutcome Send(Action action, const std::string& key, const std::string& payload) override {
    const std::optional<http::Upstream>& to = action == Action::kReplay ? replay_ : repush_;
    if (!to.has_value()) {
      return {absl::FailedPreconditionError(std::string("no URL for ") +
                                            std::string(ActionName(action)))};
    }
    absl::StatusOr<http::HttpRequest> request = ActionRequest(key, payload, headers_);
    if (!request.ok()) return {request.status()};
    absl::StatusOr<http::UpstreamResponse> r = to->Send(*request, ActionTarget(*to));
    if (!r.ok()) return {r.status()};
    if (r->status >= 200 && r->status <= 299) return {absl::OkStatus()};
    SendOutcome refused{.http_status = r->status,
                        .response = EscapeControl(r->body, kResponseExcerptBytes)};
    refused.status = absl::UnavailableError("answered " + std::to_string(r->status) +
                                            (r->body.empty() ? "" : ": " + refused.response));
    return refused;
  }

 private:
  const std::optional<http::Upstream> replay_;
  const std::optional<http::Upstream> repush_;
  const std::vector<Header> headers_;
};

}  // namespace

absl::StatusOr<http::HttpRequest> ActionRequest(const std::string& key, const std::string& payload,
                                                const std::vector<Header>& extra) {
  // The statement readers refuse such a key; a pending row written before they did
  // is refused here, and stays pending with the reason.
  if (absl::Status s = ValidateHeaderKey(key); !s.ok()) {
    return absl::InvalidArgumentError("not sent: " + std::string(s.message()));
  }
  http::HttpRequest request;
  request.method = "POST";
  request.body = payload;
  request.request_id = "recon";
  request.headers = {{"Idempotency-Key", key}, {"Content-Type", "application/json"}};
  request.headers.insert(request.headers.end(), extra.begin(), extra.end());
  return request;
}

std::string ActionTarget(const http::Upstream& to) { return to.url().base_path.empty() ? "/" : ""; }

std::string_view ActionName(Action a) {
  switch (a) {
    case Action::kNone:
      return "none";
    case Action::kTicket:
      return "ticket";
    case Action::kReplay:
      return "replay";
    case Action::kRepush:
      return "repush";
  }
  return "none";
}

absl::Status ParseActionFlag(std::string_view text, std::array<Action, kClassCount>* plan) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return absl::InvalidArgumentError("--on '" + std::string(text) + "' is not CLASS=ACTION");
  }
  const std::string_view cls = text.substr(0, eq), act = text.substr(eq + 1);
  int c = -1;
  for (int i = 0; i < kClassCount; ++i) {
    if (kClassNames[i] == cls) c = i;
  }
  if (c < 0) return absl::InvalidArgumentError("--on: unknown class '" + std::string(cls) + "'");
  Action a;
  if (act == "none") {
    a = Action::kNone;
  } else if (act == "ticket") {
    a = Action::kTicket;
  } else if (act == "replay") {
    a = Action::kReplay;
  } else if (act == "repush") {
    a = Action::kRepush;
  } else {
    return absl::InvalidArgumentError("--on: unknown action '" + std::string(act) +
                                      "' (none, ticket, replay, repush)");
  }
  const auto k = static_cast<DiffClass>(c);
  if (k == DiffClass::kMissingUpstream && (a == Action::kReplay || a == Action::kRepush)) {
    return absl::InvalidArgumentError(
        "--on missing_upstream: only ticket or none; money the upstream never saw is never "
        "refunded or replayed automatically");
  }
  if (a == Action::kReplay && k != DiffClass::kMissingLocal) {
    return absl::InvalidArgumentError("--on: replay is for missing_local only");
  }
  if (a == Action::kRepush && k != DiffClass::kStatusMismatch) {
    return absl::InvalidArgumentError("--on: repush is for status_mismatch only");
  }
  (*plan)[c] = a;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ActionSink>> NewHttpActionSink(const std::string& replay_url,
                                                              const std::string& repush_url,
                                                              absl::Duration timeout,
                                                              std::vector<Header> headers) {
  auto open = [&](const std::string& url,
                  const char* flag) -> absl::StatusOr<std::optional<http::Upstream>> {
    if (url.empty()) return std::optional<http::Upstream>();
    absl::StatusOr<http::UpstreamUrl> u = http::ParseUpstreamUrl(url);
    if (!u.ok()) {
      return absl::InvalidArgumentError(std::string(flag) + ": " +
                                        std::string(u.status().message()));
    }
    return std::optional<http::Upstream>(std::in_place, *u,
                                         http::UpstreamOptions{.timeout = timeout});
  };
  absl::StatusOr<std::optional<http::Upstream>> replay = open(replay_url, "--replay-url");
  if (!replay.ok()) return replay.status();
  absl::StatusOr<std::optional<http::Upstream>> repush = open(repush_url, "--repush-url");
  if (!repush.ok()) return repush.status();
  return std::make_unique<HttpActionSink>(*std::move(replay), *std::move(repush),
                                          std::move(headers));
}

absl::StatusOr<DispositionResult> ApplyDispositions(Store& store, const std::string& source,
                                                    const std::string& run_id,
                                                    const std::vector<Difference>& differences,
                                                    const std::array<Action, kClassCount>& plan,
                                                    ActionSink* sink, int64_t now_us) {
  DispositionResult result;
  absl::Status s = EnsureTables(store);
  if (!s.ok()) return s;
  std::vector<Ticket> tickets;
  for (const Difference& d : differences) {
    Action a = plan[static_cast<int>(d.cls)];
    if (a == Action::kRepush && !d.stuck) a = Action::kTicket;  // not a state to push on from
    if (a == Action::kNone) continue;
    const bool high = d.cls == DiffClass::kAmountMismatch || d.cls == DiffClass::kDuplicate;
    Ticket t{.source = source,
             .key = d.key,
             .cls = std::string(kClassNames[static_cast<int>(d.cls)]),
             .severity = high ? "high" : "normal",
             .action = std::string(ActionName(a)),
             .state = a == Action::kTicket ? "open" : "pending",
             .detail = Detail(d),
             .payload = Payload(source, d),
             .run_id = run_id,
             .created_at_us = now_us};
    tickets.push_back(std::move(t));
  }
  absl::StatusOr<int64_t> added = InsertTickets(store, tickets);
  if (!added.ok()) return added.status();
  result.new_rows = *added;
  absl::StatusOr<std::vector<Ticket>> pending = PendingActions(store, source);
  if (!pending.ok()) return pending.status();
  for (const Ticket& t : *pending) {
    const Action a = t.action == "replay" ? Action::kReplay : Action::kRepush;
    const SendOutcome sent = sink == nullptr
                                 ? SendOutcome{absl::FailedPreconditionError("no URL configured")}
                                 : sink->Send(a, t.key, t.payload);
    const bool ok = sent.status.ok();
    const Attempt attempt{.state = ok ? "done" : "pending",
                          .last_error = ok ? "" : std::string(sent.status.message()),
                          .http_status = ok ? 0 : sent.http_status,
                          .response = ok ? "" : sent.response};
    s = RecordAttempt(store, t, attempt, now_us);
    if (!s.ok()) return s;
    if (ok) {
      ++result.sent;
      continue;
    }
    ++result.failed;
    if (result.failures.size() < kMaxReportedFailures) {
      result.failures.push_back(ActionFailure{.id = TicketId(source, t.cls, t.key),
                                              .key = t.key,
                                              .cls = t.cls,
                                              .action = std::string(ActionName(a)),
                                              .http_status = sent.http_status,
                                              .response = sent.response,
                                              .error = std::string(sent.status.message())});
    }
  }
  return result;
}

}  // namespace idem::recon
