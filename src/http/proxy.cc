#include "http/proxy.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/canonical_json.h"
#include "http/json.h"
#include "http/problem.h"
#include "idem/fingerprint.h"
#include "idem/status.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

constexpr Route kGuardedRoute = Route::kProxied;
constexpr Route kPassRoute = Route::kPassThrough;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~:/").find(c) != std::string_view::npos;
}

// The value of header `name` (case-insensitive) and how many times it was given.
std::pair<std::string_view, int> HeaderOf(const HttpRequest& request, std::string_view name) {
  std::string_view value;
  int count = 0;
  for (const auto& [k, v] : request.headers) {
    if (absl::EqualsIgnoreCase(AV(k), AV(name))) {
      value = v;
      ++count;
    }
  }
  return {value, count};
}

// Whether an upstream answer is final for the key (stored and replayed): 2xx and
// 4xx except those that ask the client to retry. Everything else releases the key.
bool IsFinal(int status) {
  if (status >= 200 && status < 300) return true;
  return status >= 400 && status < 500 && status != 408 && status != 425 && status != 429;
}

Reply Answer(Route route, HttpResponse response, std::string_view outcome,
             std::string tenant = {}) {
  Reply r;
  r.route = route;
  r.response = std::move(response);
  r.outcome = std::string(outcome);
  r.tenant = std::move(tenant);
  return r;
}

// The answer when the upstream gave none: 504 for a timeout, else 502. Like every
// 5xx it names no internals (the upstream's address); the cause goes to the log.
HttpResponse NoUpstreamAnswer(const absl::Status& why) {
  if (why.code() == absl::StatusCode::kDeadlineExceeded) {
    return MakeProblem(504, "upstream_timeout", "Gateway Timeout",
                       "the upstream did not answer in time");
  }
  if (why.code() == absl::StatusCode::kResourceExhausted) {
    return MakeProblem(502, "upstream_answer_too_large", "Bad Gateway",
                       "the upstream's answer is larger than this proxy passes on");
  }
  return MakeProblem(502, "upstream_unavailable", "Bad Gateway",
                     "the upstream could not be reached or gave no valid answer");
}

// A stored answer: {"status":N,"headers":[["Name","value"],...],"body_base64":"..."}.
std::string Encode(const HttpResponse& response) {
  std::string out = absl::StrCat("{\"status\":", response.status, ",\"headers\":[");
  bool first = true;
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&out, first ? "" : ",", "[", JsonString(name), ",", JsonString(value), "]");
    first = false;
  }
  absl::StrAppend(&out, "],\"body_base64\":\"", absl::Base64Escape(AV(response.body)), "\"}");
  return out;
}

absl::StatusOr<HttpResponse> Decode(std::string_view stored) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(stored);
  simdjson::dom::element root;
  int64_t status = 0;
  simdjson::dom::array headers;
  std::string_view body64;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS ||
      root["status"].get_int64().get(status) != simdjson::SUCCESS ||
      root["headers"].get_array().get(headers) != simdjson::SUCCESS ||
      root["body_base64"].get_string().get(body64) != simdjson::SUCCESS || status < 100 ||
      status > 999) {
    return absl::DataLossError("the stored answer is not one the proxy wrote");
  }
  HttpResponse out;
  out.status = static_cast<int>(status);
  out.content_type.clear();  // it is among the stored headers, if the upstream sent one
  for (simdjson::dom::element pair : headers) {
    std::string_view name, value;
    if (pair.at(0).get_string().get(name) != simdjson::SUCCESS ||
        pair.at(1).get_string().get(value) != simdjson::SUCCESS) {
      return absl::DataLossError("a stored header is malformed");
    }
    out.headers.emplace_back(std::string(name), std::string(value));
  }
  std::string body;
  if (!absl::Base64Unescape(AV(body64), &body)) {
    return absl::DataLossError("the stored body is not base64");
  }
  out.body = std::move(body);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ParseIdempotencyKey(std::string_view value) {
  std::string_view v = SV(absl::StripAsciiWhitespace(AV(value)));
  if (v.empty()) return absl::InvalidArgumentError("the Idempotency-Key header is empty");
  std::string key;
  if (v.front() == '"') {  // RFC 8941 §3.3.3 sf-string
    size_t i = 1;
    for (; i < v.size() && v[i] != '"'; ++i) {
      char c = v[i];
      if (c == '\\') {
        if (i + 1 >= v.size() || (v[i + 1] != '"' && v[i + 1] != '\\')) {
          return absl::InvalidArgumentError(
              "the Idempotency-Key string has a '\\' not followed by '\"' or '\\'");
        }
        c = v[++i];
      } else if (c < 0x20 || c > 0x7E) {
        return absl::InvalidArgumentError(
            "the Idempotency-Key string may hold only printable ASCII");
      }
      key += c;
    }
    if (i >= v.size()) return absl::InvalidArgumentError("the Idempotency-Key string is unclosed");
    std::string_view rest = v.substr(i + 1);
    if (!rest.empty() && rest.front() != ';') {
      return absl::InvalidArgumentError("the Idempotency-Key has text after its closing quote");
    }
  } else {  // a bare token; parameters (";...") are ignored
    std::string_view token = v.substr(0, v.find(';'));
    for (char c : token) {
      if (!IsTokenChar(c)) {
        return absl::InvalidArgumentError(
            "the Idempotency-Key must be a quoted string (\"...\") or a token of letters, "
            "digits and !#$%&'*+-.^_`|~:/");
      }
    }
    key = std::string(token);
  }
  if (key.empty()) return absl::InvalidArgumentError("the Idempotency-Key is empty");
  return key;
}

Proxy::Proxy(Guard& guard, const Upstream& upstream, Metrics& metrics, ProxyOptions options)
    : guard_(guard), upstream_(upstream), metrics_(metrics), options_(std::move(options)) {}

Reply Proxy::Poll(const WaitingClaim&) {
  return Answer(Route::kOther, MakeProblem(500, "internal", "Internal Server Error", "nothing waits"),
                "");
}

std::optional<Reply> Proxy::BeforeBody(std::string_view, std::string_view) const {
  return std::nullopt;  // the upstream authenticates; the proxy holds no tokens
}

Reply Proxy::Handle(const HttpRequest& request) {
  if (options_.methods.count(request.method) == 0) return PassThrough(request);
  const auto [value, count] = HeaderOf(request, "Idempotency-Key");
  if (count > 1) {
    return Answer(kGuardedRoute,
                  MakeProblem(400, "invalid_idempotency_key", "Bad Request",
                              "the Idempotency-Key header is given more than once"),
                  "invalid_key");
  }
  if (count == 0) {
    const std::string_view path = std::string_view(request.target).substr(0, request.target.find('?'));
    for (const std::string& prefix : options_.optional_prefixes) {
      if (path.starts_with(prefix)) return PassThrough(request);
    }
    return Answer(kGuardedRoute,
                  MakeProblem(400, "missing_idempotency_key", "Bad Request",
                              absl::StrCat(request.method,
                                           " needs an Idempotency-Key header here (a unique "
                                           "value per operation, the same on every retry)")),
                  "missing_key");
  }
  absl::StatusOr<std::string> key = ParseIdempotencyKey(value);
  if (!key.ok()) {
    return Answer(kGuardedRoute,
                  MakeProblem(400, "invalid_idempotency_key", "Bad Request",
                              SV(key.status().message())),
                  "invalid_key");
  }
  return Guarded(request, *std::move(key));
}

Reply Proxy::PassThrough(const HttpRequest& request) {
  absl::StatusOr<UpstreamResponse> answer = upstream_.Send(request, request.target);
  if (!answer.ok()) {
    spdlog::warn("upstream: {} {} failed: {} (request_id={})", request.method, request.target,
                 std::string(answer.status().message()), request.request_id);
    return Answer(kPassRoute, NoUpstreamAnswer(answer.status()), "");
  }
  return Answer(kPassRoute, Relay(*answer), "");
}

std::string Proxy::FingerprintOf(const HttpRequest& request) const {
  std::string body_digest;
  if (options_.canonical_json) {
    if (std::optional<std::string> canonical = CanonicalJson(request.body)) {
      body_digest = "jcs:" + Fingerprint(*canonical);
    }
  }
  if (body_digest.empty()) body_digest = Fingerprint(request.body);
  return Fingerprint(absl::StrCat(request.method, "\n", request.target, "\n", body_digest));
}

HttpResponse Proxy::Relay(const UpstreamResponse& answer) const {
  HttpResponse out;
  out.status = answer.status;
  out.content_type.clear();
  std::string_view connection;
  for (const auto& [name, value] : answer.headers) {
    if (absl::EqualsIgnoreCase(AV(name), "connection")) connection = value;
  }
  for (const auto& [name, value] : answer.headers) {
    // Content-Length is the server's to write (the body may be re-framed).
    if (IsHopByHop(name, connection) || absl::EqualsIgnoreCase(AV(name), "content-length")) {
      continue;
    }
    out.headers.emplace_back(name, value);
  }
  out.body = answer.body;
  return out;
}

Reply Proxy::Guarded(const HttpRequest& request, std::string key) {
  Request claim_request;
  claim_request.biz_type = options_.biz_type;
  claim_request.key = std::move(key);
  claim_request.fingerprint = FingerprintOf(request);
  claim_request.tenant = "proxy";
  if (!options_.client_header.empty()) {
    const auto [client, count] = HeaderOf(request, options_.client_header);
    if (count == 0) {
      return Answer(kGuardedRoute,
                    MakeProblem(400, "missing_client_identity", "Bad Request",
                                absl::StrCat("keys are kept per client here, and the request has "
                                             "no ", options_.client_header, " header")),
                    "missing_client");
    }
    // A digest, never the value itself (it may be a bearer token).
    claim_request.tenant = "client-" + Fingerprint(client).substr(0, 32);
  }
  const std::string tenant_shown = claim_request.tenant;

  absl::StatusOr<Result> claim = guard_.Claim(claim_request, options_.lease);
  if (!claim.ok()) {
    if (claim.status().code() == absl::StatusCode::kInvalidArgument) {
      return Answer(kGuardedRoute,
                    MakeProblem(400, "invalid_idempotency_key", "Bad Request",
                                SV(claim.status().message())),
                    "invalid_key");
    }
    spdlog::warn("proxy: store unavailable, not forwarding: {} (request_id={})",
                 std::string(claim.status().message()), request.request_id);
    metrics_.CountStoreError();
    HttpResponse r = MakeProblem(503, "store_unavailable", "Service Unavailable",
                                 "store unavailable; nothing was forwarded, retry later");
    r.headers.emplace_back("Retry-After", "1");
    return Answer(kGuardedRoute, std::move(r), "unavailable");
  }
  switch (claim->outcome) {
    case Outcome::kReplayed:
    case Outcome::kCachedFailure: {
      absl::StatusOr<HttpResponse> stored = Decode(claim->value);
      if (!stored.ok()) {
        spdlog::error("proxy: key of tenant {} has a record the proxy cannot replay: {} "
                      "(request_id={})",
                      tenant_shown, std::string(stored.status().message()), request.request_id);
        return Answer(kGuardedRoute,
                      MakeProblem(500, "internal", "Internal Server Error",
                                  "the stored answer cannot be replayed; see the log"),
                      "internal", tenant_shown);
      }
      stored->headers.emplace_back("Idempotent-Replayed", "true");
      return Answer(kGuardedRoute, *std::move(stored), "replayed", tenant_shown);
    }
    case Outcome::kInProgress: {
      HttpResponse r = MakeProblem(409, "in_progress", "Conflict",
                                   "a request with this Idempotency-Key is still being processed",
                                   "in_progress");
      const double left =
          absl::ToDoubleSeconds(claim->lease_until - guard_.options().clock->Now());
      r.headers.emplace_back("Retry-After",
                             std::to_string(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(left)))));
      return Answer(kGuardedRoute, std::move(r), "in_progress", tenant_shown);
    }
    case Outcome::kFingerprintMismatch:
    case Outcome::kKeyReused:
      return Answer(kGuardedRoute,
                    MakeProblem(422, "fingerprint_mismatch", "Unprocessable Content",
                                "this Idempotency-Key was used for another request (the method, "
                                "target or body differ)",
                                "fingerprint_mismatch"),
                    "fingerprint_mismatch", tenant_shown);
    case Outcome::kExpired:
      return Answer(kGuardedRoute,
                    MakeProblem(410, "expired", "Gone",
                                "the answer stored for this Idempotency-Key was purged after its "
                                "retention; a request this late is not sent again",
                                "expired"),
                    "expired", tenant_shown);
    case Outcome::kAcquired:
    case Outcome::kExecuted:
      break;
  }

  const int64_t token = claim->token;
  absl::StatusOr<UpstreamResponse> answer = upstream_.Send(request, request.target);
  if (!answer.ok() || !IsFinal(answer->status)) {
    const std::string why = answer.ok() ? absl::StrCat("upstream answered ", answer->status)
                                        : std::string(answer.status().message());
    if (absl::Status s = guard_.Fail(claim_request, token, /*retryable=*/true, JsonString(why));
        !s.ok()) {
      spdlog::warn("proxy: could not release the key after \"{}\": {}; it is free again when "
                   "its lease ends (request_id={})",
                   why, std::string(s.message()), request.request_id);
    }
    if (!answer.ok()) {
      spdlog::warn("upstream: {} {} failed: {}; key released (request_id={})", request.method,
                   request.target, why, request.request_id);
      return Answer(kGuardedRoute, NoUpstreamAnswer(answer.status()), "released", tenant_shown);
    }
    return Answer(kGuardedRoute, Relay(*answer), "released", tenant_shown);
  }
  HttpResponse live = Relay(*answer);
  HttpResponse kept = live;
  if (!options_.keep_set_cookie) {
    std::erase_if(kept.headers, [](const auto& h) {
      return absl::EqualsIgnoreCase(AV(h.first), "set-cookie");
    });
  }
  if (absl::Status s = guard_.Complete(claim_request, token, Encode(kept)); !s.ok()) {
    // The effect happened and the client gets its answer; only a retry after the
    // lease ends would be sent again.
    metrics_.CountStoreError();
    spdlog::error("proxy: the upstream's answer could not be stored: {}; a retry after the "
                  "lease ({}) would be forwarded again (request_id={})",
                  std::string(s.message()), absl::FormatDuration(options_.lease),
                  request.request_id);
  }
  if (claim->takeover) {
    spdlog::info("proxy: a request whose proxy died mid-flight (token {}) was forwarded again "
                 "after its lease ended (request_id={})",
                 claim->previous_token, request.request_id);
  }
  return Answer(kGuardedRoute, std::move(live), "executed", tenant_shown);
}

}  // namespace idem::http
