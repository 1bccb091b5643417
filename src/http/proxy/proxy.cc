#include "http/proxy/proxy.h"

#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "boost/asio/thread_pool.hpp"
#include "core/absl_compat.h"
#include "http/proxy/canonical_json.h"
#include "http/server/problem.h"
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

// The answer when a request's handling threw (out of memory, say): 500, and the
// cause in the log.
Reply ProxyInternalError(const HttpRequest& request, std::string_view what) {
  spdlog::error("proxy: {} {} failed inside the proxy: {} (request_id={})", request.method,
                request.target, what, request.request_id);
  return Answer(Route::kOther,
                MakeProblem(500, "internal", "Internal error",
                            "the request failed inside the proxy; see the log"),
                "");
}

// A stored answer: {"status":N,"headers":[["Name","value"],...],"body_base64":"..."},
// without Set-Cookie unless `keep_set_cookie`.
std::string Encode(const HttpResponse& response, bool keep_set_cookie) {
  std::string out = absl::StrCat("{\"status\":", response.status, ",\"headers\":[");
  bool first = true;
  for (const auto& [name, value] : response.headers) {
    if (!keep_set_cookie && absl::EqualsIgnoreCase(AV(name), "set-cookie")) continue;
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
  out.content_type = {};  // it is among the stored headers, if the upstream sent one
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

struct Proxy::Threads {
  Threads(int store_threads, int upstream_threads)
      : store(static_cast<size_t>(store_threads)), upstream(static_cast<size_t>(upstream_threads)) {}
  boost::asio::thread_pool store;     // claims and replays: they wait on the store only
  boost::asio::thread_pool upstream;  // forwarded calls, which may hang until the timeout
};

Proxy::Proxy(Guard& guard, const Upstream& upstream, Metrics& metrics, ProxyOptions options)
    : guard_(guard), upstream_(upstream), metrics_(metrics), options_(std::move(options)) {
  if (options_.store_threads > 0 && options_.upstream_threads > 0) {
    threads_ = std::make_unique<Threads>(options_.store_threads, options_.upstream_threads);
  }
}

Proxy::~Proxy() {
  if (threads_ != nullptr) {
    threads_->store.join();  // first: its tasks hand work to the upstream threads
    threads_->upstream.join();
  }
}

namespace {

// A request to the proxy: nothing is refused before its body (the upstream
// authenticates; the proxy holds no tokens), nothing is answered without a store
// or upstream call, so it goes to the Proxy's threads or, without them, the pool.
class ProxyCall final : public Handler::Call {
 public:
  ProxyCall(Proxy& proxy, HttpRequest request) : Call(std::move(request)), proxy_(proxy) {}
  bool StartAsync(const Handler::Resume& resume) override {
    return proxy_.HandleAsync(request_, resume);
  }
  Reply Answer() override { return proxy_.Handle(request_); }

 private:
  Proxy& proxy_;
};

}  // namespace

std::unique_ptr<Handler::Call> Proxy::Begin(HttpRequest request) {
  return std::make_unique<ProxyCall>(*this, std::move(request));
}

Reply Proxy::Handle(const HttpRequest& request) {
  try {
    std::optional<Claimed> claimed;
    if (std::optional<Reply> answer = Admit(request, &claimed)) return *std::move(answer);
    return Forward(request, claimed);
  } catch (const std::exception& e) {
    return ProxyInternalError(request, e.what());
  }
}

bool Proxy::HandleAsync(HttpRequest& request, Resume resume) {
  if (threads_ == nullptr) return false;
  auto taken = std::make_shared<const HttpRequest>(std::move(request));
  auto send = [resume](Reply reply) {
    resume([reply = std::move(reply)] { return reply; });
  };
  // Upstream calls run apart from claims: a replay never waits for a thread that
  // an upstream holds until its timeout.
  auto forward = [this, taken, send](std::optional<Claimed> claimed) {
    boost::asio::post(threads_->upstream, [this, taken, send, claimed = std::move(claimed)] {
      Reply reply;
      try {
        reply = Forward(*taken, claimed);
      } catch (const std::exception& e) {
        reply = ProxyInternalError(*taken, e.what());
      }
      send(std::move(reply));
    });
  };
  if (options_.methods.count(taken->method) == 0) {  // no key, no store: straight on
    forward(std::nullopt);
    return true;
  }
  boost::asio::post(threads_->store, [this, taken, send, forward] {
    std::optional<Claimed> claimed;
    std::optional<Reply> answer;
    try {
      answer = Admit(*taken, &claimed);
    } catch (const std::exception& e) {
      answer = ProxyInternalError(*taken, e.what());
    }
    if (answer.has_value()) {
      send(*std::move(answer));
    } else {
      forward(std::move(claimed));
    }
  });
  return true;
}

std::optional<Reply> Proxy::Admit(const HttpRequest& request, std::optional<Claimed>* claimed) {
  if (options_.methods.count(request.method) == 0) return std::nullopt;  // passes through
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
      if (path.starts_with(prefix)) return std::nullopt;
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
  return AdmitGuarded(request, *std::move(key), claimed);
}

void Proxy::WarnSharedKeys(const HttpRequest& request) {
  if (HeaderOf(request, "Authorization").second == 0 && HeaderOf(request, "Cookie").second == 0) {
    return;
  }
  const int64_t now = absl::ToUnixNanos(guard_.options().clock->Now());
  int64_t last = shared_keys_warned_ns_.load();
  if (last != std::numeric_limits<int64_t>::min() && now - last < absl::ToInt64Nanoseconds(absl::Hours(1))) {
    return;
  }
  if (!shared_keys_warned_ns_.compare_exchange_strong(last, now)) return;  // another thread warns
  spdlog::warn("proxy: keyed requests carry Authorization or Cookie, so the upstream seems to "
               "tell clients apart, but keys are global (no --client-header): a client that "
               "sends another's Idempotency-Key and request gets that client's stored answer; "
               "start the proxy with --client-header Authorization (or the header that names "
               "the client). Logged at most once an hour (request_id={})",
               request.request_id);
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

HttpResponse Proxy::Relay(UpstreamResponse&& answer) const {
  HttpResponse out;
  out.status = answer.status;
  out.content_type = {};
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
  out.body = std::move(answer.body);
  return out;
}

std::optional<Reply> Proxy::ScopeToClient(const HttpRequest& request, Request* claim_request) {
  if (options_.client_header.empty()) {
    WarnSharedKeys(request);
    return std::nullopt;
  }
  const auto [client, count] = HeaderOf(request, options_.client_header);
  if (count == 0) {
    return Answer(kGuardedRoute,
                  MakeProblem(400, "missing_client_identity", "Bad Request",
                              absl::StrCat("keys are kept per client here, and the request has "
                                           "no ",
                                           options_.client_header, " header")),
                  "missing_client");
  }
  // Which one names the client? Scoping by one while the upstream reads another
  // would replay one client's answer to another: refuse, forward nothing.
  if (count > 1) {
    return Answer(
        kGuardedRoute,
        MakeProblem(400, "ambiguous_client_identity", "Bad Request",
                    absl::StrCat("keys are kept per client here, and the ", options_.client_header,
                                 " header is given more than once; send it once")),
        "missing_client");  // no usable client identity
  }
  // A digest, never the value itself (it may be a bearer token).
  claim_request->tenant = "client-" + Fingerprint(client).substr(0, 32);
  return std::nullopt;
}

Reply Proxy::AnswerClaimError(const HttpRequest& request, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    return Answer(kGuardedRoute,
                  MakeProblem(400, "invalid_idempotency_key", "Bad Request", SV(status.message())),
                  "invalid_key");
  }
  spdlog::warn("proxy: store unavailable, not forwarding: {} (request_id={})",
               std::string(status.message()), request.request_id);
  metrics_.CountStoreError();
  HttpResponse r = MakeProblem(503, "store_unavailable", "Store unavailable",
                               "store unavailable; nothing was forwarded, retry later");
  r.headers.emplace_back("Retry-After", "1");
  return Answer(kGuardedRoute, std::move(r), "unavailable");
}

std::optional<Reply> Proxy::AnswerSettledClaim(const HttpRequest& request, const Result& claim,
                                               const std::string& tenant_shown) const {
  switch (claim.outcome) {
    case Outcome::kReplayed:
    case Outcome::kCachedFailure: {
      absl::StatusOr<HttpResponse> stored = Decode(claim.value);
      if (!stored.ok()) {
        spdlog::error("proxy: key of tenant {} has a record the proxy cannot replay: {} "
                      "(request_id={})",
                      tenant_shown, std::string(stored.status().message()), request.request_id);
        return Answer(kGuardedRoute,
                      MakeProblem(500, "internal", "Internal error",
                                  "the stored answer cannot be replayed; see the log"),
                      "internal", tenant_shown);
      }
      stored->headers.emplace_back("Idempotent-Replayed", "true");
      return Answer(kGuardedRoute, *std::move(stored), "replayed", tenant_shown);
    }
    case Outcome::kInProgress: {
      HttpResponse r = MakeProblem(409, "in_progress", "Claim in progress",
                                   "a request with this Idempotency-Key is still being processed",
                                   "in_progress");
      r.headers.emplace_back(
          "Retry-After", std::to_string(InProgressRetryAfter(guard_.options().clock->Now(),
                                                             claim.lease_until,
                                                             options_.retry_after_max)));
      return Answer(kGuardedRoute, std::move(r), "in_progress", tenant_shown);
    }
    case Outcome::kFingerprintMismatch:
    case Outcome::kKeyReused:
      return Answer(kGuardedRoute,
                    MakeProblem(422, "fingerprint_mismatch", "Fingerprint mismatch",
                                "this Idempotency-Key was used for another request (the method, "
                                "target or body differ)",
                                "fingerprint_mismatch"),
                    "fingerprint_mismatch", tenant_shown);
    case Outcome::kExpired:
      return Answer(kGuardedRoute,
                    MakeProblem(410, "expired", "Expired",
                                "the answer stored for this Idempotency-Key was purged after its "
                                "retention; a request this late is not sent again",
                                "expired"),
                    "expired", tenant_shown);
    case Outcome::kAcquired:
    case Outcome::kExecuted:
      break;
  }
  return std::nullopt;
}

std::optional<Reply> Proxy::AdmitGuarded(const HttpRequest& request, std::string key,
                                         std::optional<Claimed>* claimed) {
  Request claim_request;
  claim_request.biz_type = options_.biz_type;
  claim_request.key = std::move(key);
  claim_request.fingerprint = FingerprintOf(request);
  claim_request.tenant = "proxy";
  if (std::optional<Reply> refused = ScopeToClient(request, &claim_request)) return refused;
  const std::string tenant_shown = claim_request.tenant;

  absl::StatusOr<Result> claim = guard_.Claim(claim_request, options_.lease);
  if (!claim.ok()) return AnswerClaimError(request, claim.status());
  if (std::optional<Reply> settled = AnswerSettledClaim(request, *claim, tenant_shown)) {
    return settled;
  }
  *claimed = Claimed{.request = std::move(claim_request),
                     .token = claim->token,
                     .takeover = claim->takeover,
                     .previous_token = claim->previous_token};
  return std::nullopt;
}

Reply Proxy::Forward(const HttpRequest& request, const std::optional<Claimed>& claimed) {
  absl::StatusOr<UpstreamResponse> answer = upstream_.Send(request, request.target);
  if (!claimed.has_value()) {  // passed through
    if (!answer.ok()) {
      spdlog::warn("upstream: {} {} failed: {} (request_id={})", request.method, request.target,
                   std::string(answer.status().message()), request.request_id);
      return Answer(kPassRoute, NoUpstreamAnswer(answer.status()), "");
    }
    return Answer(kPassRoute, Relay(*std::move(answer)), "");
  }
  const Request& claim_request = claimed->request;
  const int64_t token = claimed->token;
  const std::string& tenant_shown = claim_request.tenant;
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
    return Answer(kGuardedRoute, Relay(*std::move(answer)), "released", tenant_shown);
  }
  HttpResponse live = Relay(*std::move(answer));
  if (absl::Status s =
          guard_.Complete(claim_request, token, Encode(live, options_.keep_set_cookie));
      !s.ok()) {
    // The effect happened and the client gets its answer; only a retry after the
    // lease ends would be sent again.
    metrics_.CountStoreError();
    spdlog::error("proxy: the upstream's answer could not be stored: {}; a retry after the "
                  "lease ({}) would be forwarded again (request_id={})",
                  std::string(s.message()), absl::FormatDuration(options_.lease),
                  request.request_id);
  }
  if (claimed->takeover) {
    spdlog::info("proxy: a request whose proxy died mid-flight (token {}) was forwarded again "
                 "after its lease ended (request_id={})",
                 claimed->previous_token, request.request_id);
  }
  return Answer(kGuardedRoute, std::move(live), "executed", tenant_shown);
}

}  // namespace idem::http
