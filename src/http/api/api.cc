#include "http/api/api.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/tokens.h"
#include "http/server/buffers.h"
#include "http/server/problem.h"
#include "idem/cache.h"
#include "idem/fingerprint.h"
#include "idem/key.h"
#include "idem/status.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"

namespace idem::http {
namespace {

// The cache tiers' counters, when the store has them.
std::string RenderCacheStats(const Store& store) {
  std::optional<CacheStats> stats = GetCacheStats(store);
  if (!stats.has_value()) return std::string();
  auto counter = [](std::string_view name, std::string_view help, uint64_t value,
                    std::string_view type = "counter") {
    return absl::StrCat("# HELP ", AV(name), " ", AV(help), "\n# TYPE ", AV(name), " ", AV(type),
                        "\n", AV(name), " ", value, "\n");
  };
  return absl::StrCat(
      counter("idem_cache_l1_hits_total", "Duplicates answered from the in-process cache.",
              stats->l1_hits),
      counter("idem_cache_redis_hits_total", "Duplicates answered from Redis.", stats->l2_hits),
      counter("idem_cache_misses_total", "Lookups that went to the store.", stats->misses),
      counter("idem_cache_redis_errors_total", "Redis calls that failed (answered by the store).",
              stats->redis_errors),
      counter("idem_cache_fills_total", "Finished records written into the cache tiers.",
              stats->fills),
      counter("idem_cache_too_large_total",
              "Finished records not cached: larger than the per-record bound.", stats->too_large),
      counter("idem_cache_l1_entries", "Records in the in-process cache now.", stats->l1_entries,
              "gauge"),
      counter("idem_cache_l1_bytes",
              "Bytes the in-process cache holds now (records and their bookkeeping).",
              stats->l1_bytes, "gauge"));
}


constexpr std::string_view kRecordsPrefix = "/v1/records/";

Reply Final(Route route, HttpResponse response, std::string outcome = {}) {
  Reply r;
  r.response = std::move(response);
  r.route = route;
  r.outcome = std::move(outcome);
  return r;
}

HttpResponse Unauthorized(std::string_view detail, bool invalid_token) {
  HttpResponse r = MakeProblem(401, "", "", detail);
  r.headers.emplace_back("WWW-Authenticate", invalid_token
                                                 ? R"(Bearer realm="idem", error="invalid_token")"
                                                 : R"(Bearer realm="idem")");
  return r;
}

uint64_t NextInstance() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<std::string> PercentDecode(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out += segment[i];
      continue;
    }
    if (i + 2 >= segment.size()) {
      return absl::InvalidArgumentError("incomplete percent-escape in path");
    }
    int hi = HexValue(segment[i + 1]), lo = HexValue(segment[i + 2]);
    if (hi < 0 || lo < 0) return absl::InvalidArgumentError("bad percent-escape in path");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Api::Api(Guard& guard, Store& store, Metrics& metrics, ApiOptions options)
    : guard_(guard),
      store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      instance_(NextInstance()),
      health_(*guard.options().clock),
      key_health_(options_.key_health) {
  for (const std::string& biz_type : options_.fail_open) metrics_.DeclareFailOpen(biz_type);
  if (options_.console != nullptr) options_.console->Attach(key_health_, metrics_);
  // Keys finished by other processes on a shared database wake this process's
  // waiting claims too (postgres:// LISTEN/NOTIFY); elsewhere their polls see it.
  finished_ = Backend(store_).SubscribeFinished(
      [this](std::string_view tenant, std::string_view key) { watch_.Notify(tenant, key); });
}

bool Api::IsFailOpen(std::string_view biz_type) const {
  return options_.fail_open.find(biz_type) != options_.fail_open.end();
}

Tenant Tenant::WithToken(std::string name, std::string_view token) {
  return Tenant{std::move(name), Fingerprint(token)};
}

const Tenant* Api::Authenticate(std::string_view authorization) const {
  // RFC 6750 §2.1: "Bearer" (case-insensitive), one or more spaces, the token.
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(AV(authorization.substr(0, kScheme.size())), AV(kScheme)) ||
      authorization[kScheme.size()] != ' ') {
    return nullptr;
  }
  std::string_view token = SV(absl::StripAsciiWhitespace(AV(authorization.substr(kScheme.size()))));
  if (token.empty()) return nullptr;
  // A request is authenticated once (Api::RouteCall), and a client sends the same
  // token on every request of a connection: each thread remembers the last token it
  // resolved. The comparison is constant-time like the digest's, so the memo
  // tells a caller nothing a full check would not.
  struct Memo {
    uint64_t api = 0;
    std::string token;
    const Tenant* tenant = nullptr;
  };
  thread_local Memo memo;
  if (memo.api == instance_ && ConstantTimeEquals(memo.token, token)) return memo.tenant;
  // SHA-256 of the token, compared with every tenant's digest without an early exit.
  const std::string digest = Fingerprint(token);
  const Tenant* found = nullptr;
  for (const Tenant& t : options_.tenants) {
    if (ConstantTimeEquals(digest, t.token_sha256) && found == nullptr) found = &t;
  }
  memo.api = instance_;
  memo.token.assign(token);
  memo.tenant = found;
  return found;
}

Reply WaitingClaim::Poll() const { return api.Poll(*this); }

std::shared_ptr<void> WaitingClaim::Watch(std::function<void()> wake) const {
  return api.Watch(*this, std::move(wake));
}

namespace {

// The memory of the ApiCalls let go on this thread (ApiCall::operator delete), up
// to kApiSpareCalls of them, freed with the thread.
constexpr size_t kApiSpareCalls = 64;
struct ApiSpareCalls {
  ~ApiSpareCalls() {
    for (void* block : blocks) ::operator delete(block);
  }
  std::vector<void*> blocks;
};
thread_local ApiSpareCalls api_spare_calls;

}  // namespace

void* ApiCall::operator new(size_t size) {
  std::vector<void*>& blocks = api_spare_calls.blocks;
  if (size != sizeof(ApiCall) || blocks.empty()) return ::operator new(size);
  void* block = blocks.back();
  blocks.pop_back();
  return block;
}

void ApiCall::operator delete(void* call, size_t size) {
  std::vector<void*>& blocks = api_spare_calls.blocks;
  if (size != sizeof(ApiCall) || blocks.size() >= kApiSpareCalls) {
    ::operator delete(call);
    return;
  }
  blocks.push_back(call);
}

ApiCall::ApiCall(Api& api, HttpRequest request) : Call(std::move(request)), api_(api) {
  api_.RouteCall(*this);
}

ApiCall::~ApiCall() {
  if (!guard_request_.has_value()) return;
  KeepStringBuffer(std::move(guard_request_->key));
  KeepStringBuffer(std::move(guard_request_->fingerprint));
}

std::optional<Reply> ApiCall::BeforeBody() const { return api_.BeforeBody(*this); }
std::optional<Reply> ApiCall::AnswerWithoutBlocking() { return api_.AnswerWithoutBlocking(*this); }
bool ApiCall::StartAsync(const Handler::Resume& resume) {
  if (route == Route::kClaimsBatch) return api_.StartBatch(*this, resume);
  return api_.StartAsync(*this, resume);
}
Reply ApiCall::Answer() { return api_.Answer(*this); }

std::unique_ptr<Handler::Call> Api::Begin(HttpRequest request) {
  return std::make_unique<ApiCall>(*this, std::move(request));
}

Reply Api::Handle(const HttpRequest& request) { return ApiCall(*this, request).Answer(); }

void Api::RouteCall(ApiCall& call) const {
  const std::string_view target = call.request().target;
  const size_t q = target.find('?');
  call.path = target.substr(0, q);
  if (q != std::string_view::npos) call.query = target.substr(q + 1);
  const std::string_view path = call.path;
  // HEAD is GET without the body (RFC 9110 §9.3.2; load balancers probe with
  // it): answered as GET here, the connection sends the header only.
  call.method = call.request().method == "HEAD" ? std::string_view("GET")
                                                : std::string_view(call.request().method);
  if (path == RouteName(Route::kHealthz) || path == RouteName(Route::kReadyz) ||
      path == RouteName(Route::kMetrics)) {
    call.route = RouteNamed(path);
    call.allow = "GET";
    if (call.route == Route::kMetrics && options_.metrics_require_token) {
      call.tenant = Authenticate(call.request().authorization);
    }
    return;
  }
  if (options_.console != nullptr &&
      (path == "/console" || absl::StartsWith(AV(path), "/console/"))) {
    call.route = Route::kConsole;  // the console checks methods and its own sessions
    return;
  }
  if (!absl::StartsWith(AV(path), "/v1/")) return;  // no route: 404
  call.tenant = Authenticate(call.request().authorization);
  if (path == RouteName(Route::kClaims) || path == RouteName(Route::kComplete) ||
      path == RouteName(Route::kFail) || path == RouteName(Route::kClaimsBatch)) {
    call.route = RouteNamed(path);
    call.allow = "POST";
  } else if (path == RouteName(Route::kRecords) || path == RouteName(Route::kKeyMismatches)) {
    call.route = RouteNamed(path);
    call.allow = "GET";
  } else if (absl::StartsWith(AV(path), AV(kRecordsPrefix))) {
    call.route = Route::kRecord;
    call.allow = "GET";
    std::string_view rest = path.substr(kRecordsPrefix.size());
    size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash != 0 && slash + 1 != rest.size() &&
        rest.find('/', slash + 1) == std::string_view::npos) {
      call.biz_type_enc = rest.substr(0, slash);
      call.key_enc = rest.substr(slash + 1);
    }
  }
}

std::optional<Reply> Api::BeforeBody(const ApiCall& call) const {
  if (!absl::StartsWith(AV(call.path), "/v1/") || call.tenant != nullptr) return std::nullopt;
  // Counted under the route Answer() would count it under, or the path's template
  // when Answer() would find it malformed (a record path without two segments).
  return Final(call.route, call.request().authorization.empty()
                               ? Unauthorized("missing Authorization: Bearer <token>", false)
                               : Unauthorized("the bearer token is malformed or unknown", true));
}

Reply Api::Answer(ApiCall& call) {
  try {
    const HttpRequest& request = call.request();
    const std::string_view method = call.method;

    if (call.route == Route::kHealthz) {
      if (method != "GET") {
        return Final(Route::kHealthz, MethodNotAllowed(request.method, "GET"));
      }
      HttpResponse r;
      r.body = R"({"status":"ok"})";
      return Final(Route::kHealthz, std::move(r));
    }
    if (call.route == Route::kReadyz) {
      if (method != "GET") return Final(Route::kReadyz, MethodNotAllowed(request.method, "GET"));
      return Ready();
    }
    if (call.route == Route::kMetrics) {
      if (method != "GET") {
        return Final(Route::kMetrics, MethodNotAllowed(request.method, "GET"));
      }
      if (options_.metrics_require_token && call.tenant == nullptr) {
        return Final(Route::kMetrics, Unauthorized("/metrics needs a bearer token", false));
      }
      // A failed readiness check is a failed store call (counted), but not a refused
      // request: StoreHealth's outage log and its count of refused requests stay as
      // they were.
      const bool store_up = StoreReadiness().ok();
      if (!store_up) metrics_.CountStoreError();
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = absl::StrCat(metrics_.Render(), RenderStoreUp(store_up), RenderCacheStats(store_),
                            // Names a client chose (biz_types) only behind a token.
                            key_health_.Render(options_.metrics_require_token
                                                   ? KeyHealthTracker::kWithBizTypes
                                                   : KeyHealthTracker::kTenantOnly),
                            options_.watch_retention ? retention_watch_.Render() : "");
      return Final(Route::kMetrics, std::move(r));
    }
    if (call.route == Route::kConsole) {
      ConsoleAnswer answer = options_.console->Answer(request, method, call.path,
                                                      call.query.value_or(""));
      Reply reply = Final(Route::kConsole, std::move(answer.response));
      reply.tenant = std::move(answer.who);
      return reply;
    }
    if (call.route == Route::kOther) {
      // Counted as "other", whatever the path: a label value a client chose would
      // make a series per scanned URL.
      return Final(Route::kOther,
                   MakeProblem(404, "", "", absl::StrCat("no route for ", AV(call.path))));
    }
    if (call.route == Route::kRecord && call.key_enc.empty()) {
      return Final(Route::kOther, MakeProblem(404, "", "",
                                              "use /v1/records/{biz_type}/{key} with both segments "
                                              "percent-encoded"));
    }
    if (method != call.allow) {
      return Final(call.route, MethodNotAllowed(request.method, call.allow));
    }

    const Tenant* tenant = call.tenant;
    if (tenant == nullptr) {
      if (request.authorization.empty()) {
        return Final(call.route, Unauthorized("missing Authorization: Bearer <token>", false));
      }
      return Final(call.route, Unauthorized("the bearer token is malformed or unknown", true));
    }
    if (request.body.size() > options_.max_body_bytes) {
      return Final(call.route, BodyTooLarge(options_.max_body_bytes));
    }

    Reply reply;
    switch (call.route) {
      case Route::kClaims:
        reply = Claims(call);
        break;
      case Route::kComplete:
        reply = Complete(call);
        break;
      case Route::kFail:
        reply = Fail(call);
        break;
      case Route::kClaimsBatch:
        reply = Batch(call);
        break;
      case Route::kRecords:
        reply = ListRecords(call.query.value_or(""), tenant->name);
        break;
      case Route::kKeyMismatches:
        reply = KeyMismatches(call.query.has_value(), tenant->name);
        break;
      default:
        reply = GetRecord(call.biz_type_enc, call.key_enc, tenant->name);
        break;
    }
    return Answered(std::move(reply), tenant->name);
  } catch (const std::exception& e) {
    // Handlers catch their dependencies' exceptions; this is the last net.
    return Internal("request", e.what());
  }
}

Reply Api::Answered(Reply reply, const std::string& tenant) {
  // A 503 went through StatusReply, which marked the store down.
  if (reply.store_wrote) health_.Up(/*wrote=*/true);
  reply.tenant = tenant;
  return reply;
}

Reply Api::Internal(std::string_view action, std::string_view cause) {
  metrics_.CountStoreError();
  // The cause names internals (a database, a file, a library): the log only.
  spdlog::error("{}: internal error: {}", action, cause);
  return Final(Route::kOther, MakeProblem(500, "internal", "Internal error",
                                          "internal error; the cause is in the server's log"));
}

absl::Status Api::StoreReadiness() {
  IDEM_RETURN_IF_ERROR(store_.Ping());
  IDEM_RETURN_IF_ERROR(
      health_.Writable([this] { return ProbeStoreWrite(store_, options_.clock->Now()); }));
  health_.Up(/*wrote=*/false);
  return absl::OkStatus();
}

Reply Api::Ready() {
  absl::Status s = StoreReadiness();
  if (s.ok()) {
    HttpResponse r;
    r.body = R"({"status":"ready"})";
    return Final(Route::kReadyz, std::move(r));
  }
  metrics_.CountStoreError();
  health_.Down(s);
  HttpResponse r = MakeProblem(503, "store_unavailable", "Store unavailable",
                               "the store does not answer (the cause is in the server's log)");
  r.headers.emplace_back("Retry-After", "1");
  return Final(Route::kReadyz, std::move(r));
}

Reply Api::StatusReply(const absl::Status& status, std::string_view action) {
  const std::string detail = absl::StrCat(AV(action), ": ", status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return Final(Route::kOther,
                   MakeProblem(400, "invalid_request", "Invalid request", SV(status.message())));
    case absl::StatusCode::kNotFound:
      return Final(Route::kOther,
                   MakeProblem(404, "not_found", "No such record", detail, "not_found"),
                   "not_found");
    case absl::StatusCode::kFailedPrecondition:
      return Final(Route::kOther,
                   MakeProblem(409, "key_reused", "Key reused", detail, "key_reused"),
                   "key_reused");
    case absl::StatusCode::kAborted:
      return Final(Route::kOther,
                   MakeProblem(409, "lease_lost", "Lease lost", detail, "lease_lost"),
                   "lease_lost");
    case absl::StatusCode::kAlreadyExists:
      return Final(Route::kOther,
                   MakeProblem(409, "conflict", "Already finished differently", detail, "conflict"),
                   "conflict");
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted: {
      metrics_.CountStoreError();
      health_.Down(status);
      // The cause (a database host, a driver's words) goes to the log, once per
      // outage (StoreHealth), never to the client.
      HttpResponse r = MakeProblem(503, "store_unavailable", "Store unavailable",
                                   absl::StrCat(AV(action), ": store unavailable; retry"),
                                   "unavailable");
      r.headers.emplace_back("Retry-After", "1");
      return Final(Route::kOther, std::move(r), "unavailable");
    }
    default:
      return Internal(action, status.ToString());
  }
}

absl::Status Api::ValidateIds(std::string_view biz_type, std::string_view key,
                              std::string_view fingerprint) const {
  if (absl::Status s = ValidateFingerprint(fingerprint); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("field \"fingerprint\": ", s.message()));
  }
  if (absl::Status s = ValidateBizType(biz_type, guard_.options().limits); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("field \"biz_type\": ", s.message()));
  }
  if (absl::Status s = ValidateKey(key, guard_.options().limits); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("field \"key\": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace idem::http
