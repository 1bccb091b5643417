// The claim routes of Api: POST /v1/claims (and the polls of a claim that waits),
// /v1/claims/complete and /v1/claims/fail, on the worker pool (Claims, Complete,
// Fail), on the network thread for a decided duplicate (AnswerWithoutBlocking), and
// started there on a store with non-blocking transactions (StartAsync).
#include <type_traits>
#include <variant>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/guard_nonblocking.h"
#include "http/api/api.h"
#include "http/api/json.h"
#include "http/server/problem.h"
#include "http/server/buffers.h"
#include "http/api/records.h"
#include "store/backend.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

using ojson = nlohmann::ordered_json;

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

Reply Make(Route route, HttpResponse response, std::string_view outcome = {}) {
  Reply r;
  r.response = std::move(response);
  r.route = route;
  r.outcome = std::string(outcome);
  return r;
}

// `r`, marked as written by the store (Reply::store_wrote).
Reply Written(Reply r) {
  r.store_wrote = true;
  return r;
}

HttpResponse Json(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Reply BadRequest(Route route, const absl::Status& status) {
  return Make(route, MakeProblem(400, "invalid_request", "Invalid request", SV(status.message())));
}

// An RFC 3339 time as a JSON string (FormatRfc3339's text needs no escapes),
// appended to `*out` (the claim answers, built without a json).
void AppendTimeString(std::string* out, absl::Time t) {
  out->push_back('"');
  AppendRfc3339(out, t);
  out->push_back('"');
}

// The same, or null for none.
void AppendTimeOrNull(std::string* out, absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    out->append("null");
  } else {
    AppendTimeString(out, t);
  }
}

// The codes StatusReply answers with 503: the store did not answer in time.
bool IsStoreDown(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace

Reply Api::FailOpenClaim(const Request& req, const absl::Status& status) {
  metrics_.CountFailOpen(req.biz_type);
  // One line per let-through claim: during an outage these are exactly the requests
  // that may turn out to be duplicates, and an operator reconciling afterwards needs
  // their keys.
  spdlog::warn("fail-open: store unavailable ({}); claim of biz_type \"{}\" key \"{}\" "
               "tenant \"{}\" let through unrecorded (duplicates may pass)",
               SV(status.message()), req.biz_type, req.key, req.tenant);
  ojson j = ojson::object();
  j["outcome"] = "acquired";
  j["token"] = 0;
  j["degraded"] = true;
  j["lease_until"] = nullptr;
  j["takeover"] = false;
  return Make(Route::kClaims, Json(201, Dump(j)), "degraded");
}

Reply Api::DegradedFinish(Route route, std::string_view biz_type) {
  if (!IsFailOpen(biz_type)) {
    return BadRequest(route, absl::InvalidArgumentError(
                                 "field \"token\": must be >= 1 (token 0 belongs only to a "
                                 "degraded claim of a fail-open biz_type)"));
  }
  // A degraded claim recorded nothing, so there is nothing to finish; saying so
  // (rather than 404) lets a client treat the pair uniformly.
  return Make(route, Json(200, R"({"outcome":"degraded"})"), "degraded");
}

template <typename Body>
absl::StatusOr<Body> Api::CheckIds(absl::StatusOr<Body> body) const {
  if (!body.ok()) return body;
  absl::Status valid;
  if constexpr (std::is_same_v<Body, ClaimBody>) {
    valid = ValidateIds(body->biz_type, body->key, body->fingerprint);
  } else {
    valid = ValidateIds(body->biz_type, body->key);
  }
  if (!valid.ok()) return valid;
  return body;
}

template <typename Body>
const absl::StatusOr<Body>& Api::BodyOf(ApiCall& call,
                                        absl::StatusOr<Body> (*parse)(std::string_view)) const {
  if (const auto* parsed = std::get_if<absl::StatusOr<Body>>(&call.body)) return *parsed;
  return call.body.template emplace<absl::StatusOr<Body>>(CheckIds(parse(call.request().body)));
}

Request Api::RequestOf(const std::string& tenant, std::string_view biz_type, std::string_view key,
                       std::string_view fingerprint) {
  Request req;
  req.tenant = tenant;
  req.biz_type = std::string(biz_type);
  req.key = std::string(key);
  req.fingerprint = std::string(fingerprint);
  return req;
}

const Request* Api::ClaimRequestOf(ApiCall& call) const {
  if (call.guard_request_.has_value()) return &*call.guard_request_;
  BodyOf(call, ParseClaimBody);
  auto& body = std::get<absl::StatusOr<ClaimBody>>(call.body);
  if (!body.ok()) return nullptr;
  Request& req = call.guard_request_.emplace();
  req.tenant = call.tenant->name;
  req.biz_type = std::move(body->biz_type);
  req.key = std::move(body->key);
  req.fingerprint = std::move(body->fingerprint);
  return &req;
}

Reply Api::Claims(ApiCall& call) {
  // Parsed once: on the network thread already when it found the key unknown.
  const absl::StatusOr<ClaimBody>& body = BodyOf(call, ParseClaimBody);
  if (!body.ok()) return BadRequest(Route::kClaims, body.status());
  return Claim(*ClaimRequestOf(call), *body);
}

Reply Api::Claim(const std::string& tenant, const ClaimBody& body) {
  return Claim(RequestOf(tenant, body.biz_type, body.key, body.fingerprint), body);
}

absl::Time Api::WaitDeadline(const ClaimBody& body) const {
  return body.wait_ms > 0 ? options_.clock->Now() + absl::Milliseconds(body.wait_ms)
                          : absl::InfinitePast();
}

Reply Api::Claim(const Request& req, const ClaimBody& body) {
  const absl::Time deadline = WaitDeadline(body);
  Reply reply = ClaimAnswer(req, absl::Milliseconds(body.lease_ms), deadline,
                            options_.wait_poll_min, watch_.Epoch());
  if (reply.waiting != nullptr) metrics_.CountWait();
  return reply;
}

std::shared_ptr<void> Api::Watch(const WaitingClaim& waiting, std::function<void()> wake) {
  return watch_.Watch(waiting.request.tenant, waiting.request.key, waiting.epoch,
                      std::move(wake));
}

Reply Api::Poll(const WaitingClaim& waiting) {
  try {
    // A plain read while the holder's lease runs: waiting costs one read per poll,
    // never a locking claim transaction (which would queue behind the holder's row
    // lock and slow every other claim). Only a change (finished, released, lease
    // over, or the wait's end) goes through a claim, which decides it.
    const absl::Time now = options_.clock->Now();
    const uint64_t epoch = watch_.Epoch();
    const absl::Duration next = std::min(waiting.poll_interval * 2, options_.wait_poll_max);
    if (now < waiting.deadline) {
      // Every waiter on the key within wait_poll_min shares one read (KeyWatch::Read).
      const KeyWatch::SharedRead shared =
          watch_.Read(waiting.request.tenant, waiting.request.key, now, options_.wait_poll_min,
                      [&]() -> KeyWatch::RecordRead {
                        metrics_.CountPoll();
                        KeyWatch::RecordRead read =
                            store_.Get(waiting.request.tenant, waiting.request.key);
                        // Kept for the key's other waiters: only its state, biz_type
                        // and lease are read here, so a final record's result or
                        // error (up to the body limit each) is not kept with it.
                        if (read.ok() && read->has_value()) {
                          std::string().swap((*read)->result);
                          std::string().swap((*read)->error);
                        }
                        return read;
                      });
      const KeyWatch::RecordRead& record = *shared.value;
      if (record.ok() && record->has_value() && (*record)->state == RecordState::kProcessing &&
          (*record)->biz_type == waiting.request.biz_type && (*record)->lease_until > now) {
        return InProgress(waiting.request, waiting.lease, waiting.deadline,
                          (*record)->lease_until, next, std::min(epoch, shared.epoch));
      }
    }
    return ClaimAnswer(waiting.request, waiting.lease, waiting.deadline, next, epoch);
  } catch (const std::exception& e) {
    Reply r = Internal("claim", e.what());
    r.route = Route::kClaims;
    return r;
  }
}

Reply Api::InProgress(const Request& req, absl::Duration lease, absl::Time deadline,
                      absl::Time lease_until, absl::Duration poll_interval, uint64_t epoch) {
  const absl::Time now = options_.clock->Now();
  Problem p;
  p.status = 409;
  p.slug = "in_progress";
  p.title = "Claim in progress";
  p.detail = absl::StrCat("another holder's lease on this key runs until ",
                          FormatRfc3339(lease_until));
  p.outcome = "in_progress";
  p.extra["lease_until"] = FormatRfc3339(lease_until);
  HttpResponse r = ProblemResponse(p);
  r.headers.emplace_back(
      "Retry-After", absl::StrCat(InProgressRetryAfter(now, lease_until, options_.retry_after_max)));
  Reply reply = Make(Route::kClaims, std::move(r), "in_progress");
  if (now < deadline) {
    reply.waiting =
        std::make_shared<WaitingClaim>(*this, req, lease, deadline, poll_interval, epoch);
    // Never past the deadline: the last poll answers when the wait runs out.
    reply.poll_after = std::max(absl::Milliseconds(1), std::min(poll_interval, deadline - now));
  }
  return reply;
}

Reply Api::ClaimAnswer(const Request& req, absl::Duration lease, absl::Time deadline,
                       absl::Duration poll_interval, uint64_t epoch) {
  absl::StatusOr<Result> result = guard_.Claim(req, lease);
  // kAborted from a claim is contention on the record (another writer slipped in
  // between read and write): the claim itself is safe to repeat at once.
  for (int attempt = 0;
       attempt < 3 && !result.ok() && result.status().code() == absl::StatusCode::kAborted;
       ++attempt) {
    result = guard_.Claim(req, lease);
  }
  return AnswerClaim(req, lease, deadline, poll_interval, epoch, std::move(result));
}

Reply Api::AnswerClaim(const Request& req, absl::Duration lease, absl::Time deadline,
                       absl::Duration poll_interval, uint64_t epoch,
                       absl::StatusOr<Result> result) {
  // Still aborted after the retries: the store answers but the key is hot. That is
  // 503 (retry later) but never grounds for fail-open, which is only for a store
  // that does not answer.
  const bool contended = !result.ok() && (result.status().code() == absl::StatusCode::kAborted ||
                                          IsClaimContended(result.status()));
  if (!result.ok() && result.status().code() == absl::StatusCode::kAborted) {
    result = absl::UnavailableError(result.status().message());
  }
  if (!result.ok()) {
    if (!contended && IsStoreDown(result.status()) && IsFailOpen(req.biz_type)) {
      return FailOpenClaim(req, result.status());
    }
    if (!contended && IsStoreDown(result.status())) health_.WriteFailed();
    Reply r = StatusReply(result.status(), "claim");
    r.route = Route::kClaims;
    return r;
  }
  TrackKeyHealth(req, *result);
  switch (result->outcome) {
    case Outcome::kAcquired: {
      // Written out directly, as DecidedClaim does: a JSON object built member by
      // member and dumped cost ~9,600 instructions of a new key's ~89,000 (callgrind).
      std::string body = TakeStringBuffer();
      body.reserve(160);
      absl::StrAppend(&body, R"({"outcome":"acquired","token":)", result->token,
                      R"(,"lease_until":)");
      AppendTimeString(&body, result->lease_until);
      body.append(result->takeover ? R"(,"takeover":true)" : R"(,"takeover":false)");
      if (result->takeover) absl::StrAppend(&body, R"(,"previous_token":)", result->previous_token);
      body.append(R"(,"expires_at":)");
      AppendTimeOrNull(&body, result->expires_at);
      body.push_back('}');
      return Written(Make(Route::kClaims, Json(201, std::move(body)), "acquired"));
    }
    case Outcome::kReplayed:
    case Outcome::kCachedFailure:
    case Outcome::kKeyReused:
    case Outcome::kFingerprintMismatch:
    case Outcome::kExpired:
      return DecidedClaim(*result);
    case Outcome::kInProgress:
      return InProgress(req, lease, deadline, result->lease_until, poll_interval, epoch);
    case Outcome::kExecuted:
      break;
  }
  return Make(Route::kClaims, MakeProblem(500, "internal", "Internal error",
                                          "unexpected guard outcome for a lease claim"));
}

Reply Api::DecidedClaim(const Result& result) {
  switch (result.outcome) {
    case Outcome::kReplayed:
    case Outcome::kCachedFailure: {
      const bool replayed = result.outcome == Outcome::kReplayed;
      std::string_view name = replayed ? "replayed" : "cached_failure";
      // Every duplicate's answer: reserved once, so the splice appends in place.
      std::string body = TakeStringBuffer();
      body.reserve(100 + result.value.size());
      body.append(R"({"outcome":")").append(name).append(R"(","expires_at":)");
      AppendTimeOrNull(&body, result.expires_at);
      body.push_back('}');
      HttpResponse r =
          Json(200, SpliceMember(std::move(body), replayed ? "result" : "error", result.value));
      r.headers.emplace_back("Idempotent-Replayed", "true");
      return Make(Route::kClaims, std::move(r), name);
    }
    case Outcome::kKeyReused:
      return Make(Route::kClaims,
                  MakeProblem(409, "key_reused", "Key reused",
                              "the key is already used by another biz_type", "key_reused"),
                  "key_reused");
    case Outcome::kFingerprintMismatch:
      return Make(Route::kClaims,
                  MakeProblem(422, "fingerprint_mismatch", "Fingerprint mismatch",
                              "the key was first claimed with a different request fingerprint; "
                              "a retry must carry the same payload",
                              "fingerprint_mismatch"),
                  "fingerprint_mismatch");
    case Outcome::kExpired:
      return Make(Route::kClaims, ExpiredProblem(result.purged_at, result.expires_at), "expired");
    default:
      return Make(Route::kClaims, MakeProblem(500, "internal", "Internal error",
                                              "unexpected guard outcome for a decided key"));
  }
}

std::optional<Reply> Api::AnswerWithoutBlocking(ApiCall& call) {
  // Only a duplicate claim of a key whose final record the store holds in memory;
  // anything else (and anything malformed, which the full path words) returns
  // nullopt and goes on; the parsed body stays in the call.
  const HttpRequest& request = call.request();
  if (request.method != "POST" || request.body.size() > options_.max_body_bytes) {
    return std::nullopt;
  }
  if (call.route != Route::kClaims) return std::nullopt;
  const Tenant* tenant = call.tenant;
  if (tenant == nullptr) return std::nullopt;
  const Request* req = ClaimRequestOf(call);
  if (req == nullptr) return std::nullopt;
  std::optional<Reply> reply = KnownClaim(*req);
  if (reply.has_value()) reply->tenant = tenant->name;
  return reply;
}

std::optional<Reply> Api::KnownClaim(const std::string& tenant, const ClaimBody& body) {
  return KnownClaim(RequestOf(tenant, body.biz_type, body.key, body.fingerprint));
}

std::optional<Reply> Api::KnownClaim(const Request& req) {
  std::optional<Result> known = ClaimIfKnown(guard_, req);
  if (!known.has_value()) return std::nullopt;
  TrackKeyHealth(req, *known);
  return DecidedClaim(*known);
}

void Api::TrackKeyHealth(const Request& req, const Result& result) {
  // Token 1 without a takeover: this claim created the key's record. A re-acquisition
  // after a release or an expired lease is the same key again, not a new one.
  if (result.outcome == Outcome::kAcquired && result.token == 1 && !result.takeover) {
    if (options_.watch_retention) retention_watch_.OnNewRecord(req.biz_type, result.expires_at);
    key_health_.OnNewKey(req.tenant, req.biz_type, req.key, req.fingerprint,
                         options_.clock->Now());
  } else if (result.outcome == Outcome::kFingerprintMismatch) {
    key_health_.OnMismatch(req.tenant, req.biz_type, req.key, req.fingerprint,
                           options_.clock->Now());
  }
}

Reply Api::Complete(ApiCall& call) {
  const absl::StatusOr<CompleteBody>& body = BodyOf(call, ParseCompleteBody);
  if (!body.ok()) return BadRequest(Route::kComplete, body.status());
  return Complete(call.tenant->name, *body);
}

Reply Api::Complete(const std::string& tenant, const CompleteBody& body) {
  if (body.token == 0) return DegradedFinish(Route::kComplete, body.biz_type);
  const Request req = RequestOf(tenant, body.biz_type, body.key);
  return AnswerFinish(Route::kComplete, req, guard_.Complete(req, body.token, body.result),
                      "completed");
}

Reply Api::AnswerFinish(Route route, const Request& req, const absl::Status& status,
                        std::string_view outcome) {
  if (!status.ok()) {
    if (IsStoreDown(status)) health_.WriteFailed();
    Reply r = StatusReply(status, route == Route::kComplete ? "complete" : "fail");
    r.route = route;
    return r;
  }
  watch_.Notify(req.tenant, req.key);  // claims waiting on the key answer now
  return Written(
      Make(route, Json(200, absl::StrCat(R"({"outcome":")", AV(outcome), R"("})")), outcome));
}

Reply Api::Fail(ApiCall& call) {
  const absl::StatusOr<FailBody>& body = BodyOf(call, ParseFailBody);
  if (!body.ok()) return BadRequest(Route::kFail, body.status());
  return Fail(call.tenant->name, *body);
}

Reply Api::Fail(const std::string& tenant, const FailBody& body) {
  if (body.token == 0) return DegradedFinish(Route::kFail, body.biz_type);
  const Request req = RequestOf(tenant, body.biz_type, body.key);
  return AnswerFinish(Route::kFail, req, guard_.Fail(req, body.token, body.retryable, body.error),
                      body.retryable ? "released" : "failed");
}

bool Api::StartAsync(ApiCall& call, const Resume& resume) {
  // Only what the pool would answer the same way: an authenticated POST of a
  // claim, complete or fail with a valid body. Anything else (and every error of
  // the body, which Answer() words) goes to the pool.
  const HttpRequest& request = call.request();
  if (!Backend(store_).non_blocking() || request.method != "POST" ||
      request.body.size() > options_.max_body_bytes) {
    return false;
  }
  const Tenant* tenant = call.tenant;
  if (tenant == nullptr) return false;
  // The call itself is the Guard's NonBlockingCall: its Done hands Resumed to
  // `resume`, which runs it on the network thread.
  // A complete's or a fail's request, once its body is one the guard can take.
  const auto finish_request = [&](const auto& body) -> const Request* {
    if (!body.ok() || body->token == 0) return nullptr;
    call.resume_ = resume;
    return &call.guard_request_.emplace(RequestOf(tenant->name, body->biz_type, body->key));
  };
  try {
    switch (call.route) {
      case Route::kClaims: {
        // Parsed and validated by AnswerWithoutBlocking, which found the key unknown.
        const absl::StatusOr<ClaimBody>& body = BodyOf(call, ParseClaimBody);
        const Request* req = ClaimRequestOf(call);
        if (req == nullptr) return false;
        call.lease_ = absl::Milliseconds(body->lease_ms);
        call.deadline_ = WaitDeadline(*body);
        call.epoch_ = watch_.Epoch();
        call.resume_ = resume;
        return ClaimNonBlocking(guard_, *req, call.lease_, call);
      }
      case Route::kComplete: {
        const absl::StatusOr<CompleteBody>& body = BodyOf(call, ParseCompleteBody);
        const Request* req = finish_request(body);
        return req != nullptr && CompleteNonBlocking(guard_, *req, body->token, body->result, call);
      }
      case Route::kFail: {
        const absl::StatusOr<FailBody>& body = BodyOf(call, ParseFailBody);
        const Request* req = finish_request(body);
        return req != nullptr &&
               FailNonBlocking(guard_, *req, body->token, body->retryable, body->error, call);
      }
      default:
        return false;
    }
  } catch (const std::exception&) {
    return false;  // the blocking call answers it
  }
}

void ApiCall::Done(absl::StatusOr<Result> answer) {
  answer_ = std::move(answer);
  // Let go once called: what the server's resume holds (its connection) must not
  // stay with the call the connection holds.
  const Handler::Resume resume = std::move(resume_);
  resume_ = nullptr;
  resume([this] { return api_.Resumed(*this); });
}

Reply Api::Resumed(ApiCall& call) {
  // A throw here is answered as Answer() answers one.
  try {
    Reply reply;
    const Request& req = *call.guard_request_;
    switch (call.route) {
      case Route::kClaims:
        reply = AnswerClaim(req, call.lease_, call.deadline_, options_.wait_poll_min, call.epoch_,
                            std::move(call.answer_));
        if (reply.waiting != nullptr) metrics_.CountWait();
        break;
      case Route::kComplete:
        reply = AnswerFinish(Route::kComplete, req, call.answer_.status(), "completed");
        break;
      default:
        reply = AnswerFinish(
            Route::kFail, req, call.answer_.status(),
            std::get<absl::StatusOr<FailBody>>(call.body)->retryable ? "released" : "failed");
        break;
    }
    return Answered(std::move(reply), call.tenant->name);
  } catch (const std::exception& e) {
    return Internal("request", e.what());
  }
}

bool Api::StartClaim(const std::string& tenant, const ClaimBody& body, Started started) {
  try {
    const Request req = RequestOf(tenant, body.biz_type, body.key, body.fingerprint);
    const absl::Duration lease = absl::Milliseconds(body.lease_ms);
    const absl::Time deadline = WaitDeadline(body);
    const uint64_t epoch = watch_.Epoch();
    return ClaimNonBlocking(
        guard_, req, lease,
        // Called once: what it holds moves on into the answer.
        [this, req, lease, deadline, epoch, started = std::move(started)](
            absl::StatusOr<Result> result) mutable {
          started([this, req = std::move(req), lease, deadline, epoch,
                   result = std::move(result)] {
            Reply reply = AnswerClaim(req, lease, deadline, options_.wait_poll_min, epoch, result);
            if (reply.waiting != nullptr) metrics_.CountWait();
            return reply;
          });
        });
  } catch (const std::exception&) {
    return false;  // the blocking call answers it
  }
}

bool Api::StartComplete(const std::string& tenant, const CompleteBody& body, Started started) {
  if (body.token == 0) return false;
  try {
    const Request req = RequestOf(tenant, body.biz_type, body.key);
    return CompleteNonBlocking(guard_, req, body.token, body.result,
                               [this, req, started = std::move(started)](
                                   absl::Status status) mutable {
                                 started([this, req = std::move(req), status = std::move(status)] {
                                   return AnswerFinish(Route::kComplete, req, status, "completed");
                                 });
                               });
  } catch (const std::exception&) {
    return false;
  }
}

bool Api::StartFail(const std::string& tenant, const FailBody& body, Started started) {
  if (body.token == 0) return false;
  try {
    const Request req = RequestOf(tenant, body.biz_type, body.key);
    const std::string_view outcome = body.retryable ? "released" : "failed";
    return FailNonBlocking(guard_, req, body.token, body.retryable, body.error,
                           [this, req, outcome, started = std::move(started)](
                               absl::Status status) mutable {
                             started([this, req = std::move(req), outcome,
                                      status = std::move(status)] {
                               return AnswerFinish(Route::kFail, req, status, outcome);
                             });
                           });
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace idem::http
