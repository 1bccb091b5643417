// The API layer of `idem serve` (docs/openapi.yaml), driven without sockets against a
// memory:// store and a fake clock.
#include "http/api/api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "absl/synchronization/notification.h"
#include "http/api/json.h"
#include "http/api/store_health.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "idem/status.h"
#include "nlohmann/json.hpp"
#include "store/backend.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem::http {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// A store that is down: every call is kUnavailable.
class DownStore final : public StoreBackend {
 public:
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    return absl::UnavailableError("database is locked");
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view, std::string_view) override {
    return absl::UnavailableError("database is locked");
  }
  absl::Status Ping() override { return absl::UnavailableError("database is locked"); }
  bool SupportsSql() const override { return false; }
  std::string_view url() const override { return "down://"; }
};

// A memory:// store whose writes fail while `full` is set, as on a full disk:
// reads and pings answer, every commit is the store's fault.
class FullDiskStore final : public StoreBackend {
 public:
  FullDiskStore() : inner_(*OpenStore("memory://")) {}

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, inner_->Begin());
    return std::unique_ptr<StoreTransaction>(new Tx(*this, std::move(tx)));
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view t, std::string_view k) override {
    return inner_->Get(t, k);
  }
  absl::Status Ping() override { return inner_->Ping(); }
  std::string_view url() const override { return "full://"; }

  std::atomic<bool> full{false};
  std::atomic<int> commits{0};  // those that succeeded

 private:
  class Tx final : public RecordTransaction {
   public:
    Tx(FullDiskStore& store, std::unique_ptr<StoreTransaction> inner)
        : store_(store), inner_(std::move(inner)) {}
    absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> p) override {
      return inner_->Exec(sql, p);
    }
    absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> p) override {
      return inner_->Query(sql, p);
    }
    absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
      return Records(*inner_).InsertOrLoad(r);
    }
    absl::StatusOr<bool> Replace(const Record& r, int64_t token, RecordState state) override {
      return Records(*inner_).Replace(r, token, state);
    }
    absl::StatusOr<std::optional<Record>> Load(std::string_view t, std::string_view k) override {
      return Records(*inner_).Load(t, k);
    }
    absl::StatusOr<bool> Retire(const Record& r, absl::Time now,
                                std::optional<absl::Time> until) override {
      return Records(*inner_).Retire(r, now, until);
    }
    absl::Status Commit() override {
      if (store_.full.load()) {
        inner_->Rollback();
        return StoreFaultError("database or disk is full");
      }
      IDEM_RETURN_IF_ERROR(inner_->Commit());
      store_.commits.fetch_add(1);
      return absl::OkStatus();
    }
    void Rollback() override { inner_->Rollback(); }

   private:
    FullDiskStore& store_;
    std::unique_ptr<StoreTransaction> inner_;
  };

  std::unique_ptr<Store> inner_;
};

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, OpenStore("memory://"));
    Build(*store_);
  }

  // Every outcome an answer reports is one Metrics knows by name (metrics.cc's
  // table), so none lands in "other".
  void TearDown() override {
    EXPECT_EQ(metrics_.outcomes("other"), 0u) << "an outcome missing from metrics.cc";
  }

  void Build(Store& store, absl::Duration retry_after_max = kDefaultRetryAfterMax,
             size_t max_batch_answer_bytes = ApiOptions().max_batch_answer_bytes) {
    guard_ = std::make_unique<Guard>(store, GuardOptions{.clock = &clock_});
    ApiOptions o;
    o.retry_after_max = retry_after_max;
    o.max_batch_answer_bytes = max_batch_answer_bytes;
    o.tenants = {Tenant::WithToken("acme", "tok-a"), Tenant::WithToken("beta", "tok-b")};
    o.clock = &clock_;
    o.max_body_bytes = 4096;
    api_ = std::make_unique<Api>(*guard_, store, metrics_, o);
  }

  // Handle() and count the answer as the server does; these requests never wait.
  HttpResponse HandleBlocking(const HttpRequest& request) {
    Reply reply = api_->Handle(request);
    EXPECT_EQ(reply.waiting, nullptr);
    metrics_.CountRequest(reply.route, reply.response.status, reply.outcome,
                          std::chrono::nanoseconds(0));
    return reply.response;
  }

  HttpResponse Call(std::string method, std::string target, std::string body = "",
                    std::string token = "tok-a") {
    HttpRequest r{std::move(method), std::move(target), token.empty() ? "" : "Bearer " + token,
                  std::move(body)};
    return HandleBlocking(r);
  }
  HttpResponse Post(std::string target, std::string body, std::string token = "tok-a") {
    return Call("POST", std::move(target), std::move(body), std::move(token));
  }
  HttpResponse Claim(std::string key, std::string extra = "", std::string token = "tok-a") {
    return Post("/v1/claims", R"({"biz_type":"refund","key":")" + key + "\"" + extra + "}",
                std::move(token));
  }
  HttpResponse Complete(std::string key, int64_t token, std::string result,
                        std::string biz = "refund") {
    return Post("/v1/claims/complete", R"({"biz_type":")" + biz + R"(","key":")" + key +
                                           R"(","token":)" + std::to_string(token) +
                                           R"(,"result":)" + result + "}");
  }
  HttpResponse Fail(std::string key, int64_t token, bool retryable, std::string error) {
    return Post("/v1/claims/fail", R"({"biz_type":"refund","key":")" + key + R"(","token":)" +
                                       std::to_string(token) + R"(,"retryable":)" +
                                       (retryable ? "true" : "false") + R"(,"error":)" + error +
                                       "}");
  }
  // The bound of a batch's answers, on the store of the last Build.
  void ExpectTheBatchAnswerBound();
  static json J(const HttpResponse& r) { return json::parse(r.body); }
  static void ExpectProblem(const HttpResponse& r, int status, std::string_view outcome) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.content_type, "application/problem+json");
    json j = json::parse(r.body);
    EXPECT_TRUE(j.contains("type") && j.contains("title") && j.contains("detail")) << r.body;
    EXPECT_EQ(j["status"], status);
    if (outcome.empty()) {
      EXPECT_FALSE(j.contains("outcome")) << r.body;
    } else {
      EXPECT_EQ(j["outcome"], std::string(outcome)) << r.body;
    }
  }

  testing::FakeClock clock_;  // 2026-01-01T00:00:00Z
  std::unique_ptr<Store> store_;
  std::unique_ptr<Guard> guard_;
  Metrics metrics_;
  std::unique_ptr<Api> api_;
};

TEST_F(ApiTest, AcquireCompleteReplayByteForByte) {
  HttpResponse a = Claim("R-1");
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(a.content_type, "application/json");
  EXPECT_EQ(a.body, R"({"outcome":"acquired","token":1,"lease_until":"2026-01-01T00:00:30.000Z",)"
                    R"("takeover":false,"expires_at":null})");

  const std::string result = R"({"a" : 1.50, "b":[1,2 ]})";
  HttpResponse c = Complete("R-1", 1, "  " + result + " ");
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(c.body, R"({"outcome":"completed"})");

  HttpResponse r = Claim("R-1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":)" + result + "}");
  EXPECT_EQ(r.Header("Idempotent-Replayed"), "true");

  // The same complete again is fine; another result is a conflict.
  EXPECT_EQ(Complete("R-1", 1, result).status, 200);
  ExpectProblem(Complete("R-1", 1, "2"), 409, "conflict");
  EXPECT_EQ(metrics_.outcomes("acquired"), 1u);
  EXPECT_EQ(metrics_.outcomes("replayed"), 1u);
  EXPECT_EQ(metrics_.requests("/v1/claims", 201), 1u);
}

TEST_F(ApiTest, InProgressRetryAfterIsAShortHintNotTheLease) {
  ASSERT_EQ(Claim("K", R"(,"lease_ms":30000)").status, 201);
  clock_.Advance(absl::Milliseconds(10500));
  HttpResponse r = Claim("K");
  ExpectProblem(r, 409, "in_progress");
  // 19.5 s of the lease are left; the client is told to ask again in 1 s.
  EXPECT_EQ(r.Header("Retry-After"), "1");
  EXPECT_EQ(J(r)["lease_until"], "2026-01-01T00:00:30.000Z");
  EXPECT_EQ(J(r)["type"], "urn:idem:problem:in_progress");
  EXPECT_EQ(J(r)["title"], "Claim in progress");
}

TEST_F(ApiTest, InProgressRetryAfterIsTheLeaseLeftInWholeSecondsUpToTheCap) {
  ASSERT_EQ(Claim("K", R"(,"lease_ms":30000)").status, 201);
  clock_.Advance(absl::Milliseconds(10500));
  Build(*store_, absl::Seconds(60));  // a cap above the lease: the time left, rounded up
  EXPECT_EQ(Claim("K").Header("Retry-After"), "20");
  Build(*store_, absl::Seconds(5));
  EXPECT_EQ(Claim("K").Header("Retry-After"), "5");
  clock_.Advance(absl::Milliseconds(16000));  // 3.5 s left
  EXPECT_EQ(Claim("K").Header("Retry-After"), "4");
  clock_.Advance(absl::Milliseconds(3400));  // 0.1 s left: at least 1
  EXPECT_EQ(Claim("K").Header("Retry-After"), "1");
}

// No retention in this Api's Guard: every biz_type that makes a record is counted
// once, from 0 at the start.
TEST_F(ApiTest, BizTypesWithoutRetentionAreCounted) {
  const std::string gauge = "\nidem_biz_types_without_retention ";
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr(gauge + "0\n"));
  ASSERT_EQ(Claim("K-1").status, 201);
  ASSERT_EQ(Claim("K-2").status, 201);
  ASSERT_EQ(Claim("K-1").status, 409);  // no new record
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr(gauge + "1\n"));
  ASSERT_EQ(Post("/v1/claims", R"({"biz_type":"payout","key":"P-1"})", "tok-b").status, 201);
  const std::string text = Call("GET", "/metrics", "", "").body;
  EXPECT_THAT(text, HasSubstr(gauge + "2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE idem_biz_types_without_retention gauge\n"));
}

TEST(RetentionWatchTest, CountsEachBizTypeOnceAndAtMostTheBound) {
  RetentionWatch watch;
  watch.OnNewRecord("refund", absl::FromUnixSeconds(2000000000));  // expires: not counted
  EXPECT_EQ(watch.count(), 0u);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < RetentionWatch::kMaxBizTypes + 50; ++i) {
      watch.OnNewRecord("b" + std::to_string(i), absl::InfiniteFuture());
    }
  }
  EXPECT_EQ(watch.count(), RetentionWatch::kMaxBizTypes);
  EXPECT_THAT(watch.Render(),
              HasSubstr("\nidem_biz_types_without_retention " +
                        std::to_string(RetentionWatch::kMaxBizTypes) + "\n"));
}

TEST_F(ApiTest, ExpiredLeaseIsTakenOverAndTheOldTokenLosesTheLease) {
  ASSERT_EQ(Claim("K", R"(,"lease_ms":1000,"fingerprint":"f1")").status, 201);
  clock_.Advance(absl::Seconds(2));
  // A takeover is a retry of the same request: the fingerprint is still compared.
  ExpectProblem(Claim("K", R"(,"fingerprint":"f2")"), 422, "fingerprint_mismatch");
  HttpResponse t = Claim("K", R"(,"fingerprint":"f1")");
  EXPECT_EQ(t.status, 201);
  EXPECT_EQ(t.body, R"({"outcome":"acquired","token":2,"lease_until":"2026-01-01T00:00:32.000Z",)"
                    R"("takeover":true,"previous_token":1,"expires_at":null})");
  ExpectProblem(Complete("K", 1, "1"), 409, "lease_lost");
  EXPECT_EQ(Complete("K", 2, "1").status, 200);
}

TEST_F(ApiTest, HolderWhoseLeaseRanOutWithoutTakeoverStillCompletes) {
  ASSERT_EQ(Claim("K", R"(,"lease_ms":100)").status, 201);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Complete("K", 1, "true").status, 200);
}

TEST_F(ApiTest, KeyReusedAndFingerprintMismatch) {
  ASSERT_EQ(Claim("K", R"(,"fingerprint":"f1")").status, 201);
  ExpectProblem(Post("/v1/claims", R"({"biz_type":"order","key":"K"})"), 409, "key_reused");
  ExpectProblem(Claim("K", R"(,"fingerprint":"f2")"), 422, "fingerprint_mismatch");
  ExpectProblem(Complete("K", 1, "1", "order"), 409, "key_reused");
  ExpectProblem(Complete("nope", 1, "1"), 404, "not_found");
}

TEST_F(ApiTest, RetryableFailReleasesWithALargerTokenNext) {
  ASSERT_EQ(Claim("K").status, 201);
  HttpResponse f = Fail("K", 1, true, R"({"why":"timeout"})");
  EXPECT_EQ(f.status, 200);
  EXPECT_EQ(f.body, R"({"outcome":"released"})");
  EXPECT_EQ(J(Claim("K"))["token"], 2);
  ExpectProblem(Complete("K", 1, "1"), 409, "lease_lost");
}

TEST_F(ApiTest, FinalFailIsCachedAndReplayedRaw) {
  ASSERT_EQ(Claim("K").status, 201);
  HttpResponse f = Fail("K", 1, false, R"({"code" : "E_CARD"})");
  EXPECT_EQ(f.status, 200);
  EXPECT_EQ(f.body, R"({"outcome":"failed"})");
  HttpResponse r = Claim("K");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"outcome":"cached_failure","expires_at":null,"error":{"code" : "E_CARD"}})");
  EXPECT_EQ(r.Header("Idempotent-Replayed"), "true");
}

TEST_F(ApiTest, RecordReadIsPerTenantAndPercentDecoded) {
  ASSERT_EQ(Claim("a/b c", R"(,"fingerprint":"fp")").status, 201);
  ASSERT_EQ(Complete("a/b c", 1, R"([1, 2])").status, 200);
  HttpResponse r = Call("GET", "/v1/records/refund/a%2Fb%20c?x=1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body,
            R"({"biz_type":"refund","key":"a/b c","state":"SUCCEEDED","token":1,)"
            R"("lease_until":null,"fingerprint":"fp","created_at":"2026-01-01T00:00:00.000Z",)"
            R"("updated_at":"2026-01-01T00:00:00.000Z","expires_at":null,"result":[1, 2]})");
  ExpectProblem(Call("GET", "/v1/records/refund/a%2Fb%20c", "", "tok-b"), 404, "not_found");
  ExpectProblem(Call("GET", "/v1/records/order/a%2Fb%20c"), 409, "key_reused");
  ExpectProblem(Call("GET", "/v1/records/refund/missing"), 404, "not_found");
  ExpectProblem(Call("GET", "/v1/records/refund/a%2"), 400, "");
  ExpectProblem(Call("GET", "/v1/records/refund/a%00b"), 400, "");
  ExpectProblem(Call("GET", "/v1/records/refund/%ff"), 400, "");
  ExpectProblem(Call("GET", "/v1/records/refund"), 404, "");
  ExpectProblem(Call("GET", "/v1/records/refund/a/b"), 404, "");
}

TEST_F(ApiTest, TenantsDoNotShareKeys) {
  ASSERT_EQ(Claim("K").status, 201);
  EXPECT_EQ(Claim("K", "", "tok-b").status, 201);  // beta's own K
}

TEST_F(ApiTest, Authentication) {
  HttpResponse none = Claim("K", "", "");
  ExpectProblem(none, 401, "");
  EXPECT_EQ(none.Header("WWW-Authenticate"), R"(Bearer realm="idem")");
  HttpResponse wrong = Claim("K", "", "tok-x");
  ExpectProblem(wrong, 401, "");
  EXPECT_THAT(std::string(wrong.Header("WWW-Authenticate")), HasSubstr("invalid_token"));
  HttpRequest basic{"POST", "/v1/claims", "Basic dG9rLWE=", R"({"biz_type":"r","key":"k"})"};
  EXPECT_EQ(HandleBlocking(basic).status, 401);
  HttpRequest lower{"POST", "/v1/claims", "bearer  tok-a", R"({"biz_type":"r","key":"k"})"};
  EXPECT_EQ(HandleBlocking(lower).status, 201);
  HttpRequest prefix{"POST", "/v1/claims", "Bearer tok-", R"({"biz_type":"r","key":"k2"})"};
  EXPECT_EQ(HandleBlocking(prefix).status, 401);
}

// Authenticate remembers each thread's last token: alternating tokens, a token that
// is a prefix of the last one, and an Api rebuilt with other tenants (possibly at the
// same address) must each be judged afresh.
TEST_F(ApiTest, AuthenticationMemoNeverAnswersForAnotherTokenOrApi) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Claim("M" + std::to_string(i), "", "tok-a").status, 201);
    EXPECT_EQ(Claim("M" + std::to_string(i), "", "tok-b").status, 201);  // beta's own key
    EXPECT_EQ(Claim("M" + std::to_string(i), "", "tok-a").status, 409);  // acme's, held
    EXPECT_EQ(Claim("N", "", "tok-ax").status, 401);
    EXPECT_EQ(Claim("N", "", "tok-").status, 401);
  }
  EXPECT_EQ(Claim("P", "", "tok-a").status, 201);
  api_.reset();
  ApiOptions o;
  o.tenants = {Tenant::WithToken("gamma", "tok-g")};
  o.clock = &clock_;
  api_ = std::make_unique<Api>(*guard_, *store_, metrics_, o);
  EXPECT_EQ(Claim("P2", "", "tok-a").status, 401);  // acme is not a tenant of this Api
  EXPECT_EQ(Claim("P2", "", "tok-g").status, 201);
}

TEST_F(ApiTest, RoutesMethodsAndOpenEndpoints) {
  ExpectProblem(Call("GET", "/v2/nothing"), 404, "");
  HttpResponse m = Call("GET", "/v1/claims");
  ExpectProblem(m, 405, "");
  EXPECT_EQ(m.Header("Allow"), "POST");
  EXPECT_EQ(Call("POST", "/healthz").Header("Allow"), "GET");
  HttpResponse h = Call("GET", "/healthz", "", "");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, R"({"status":"ok"})");
  EXPECT_EQ(Call("GET", "/readyz", "", "garbage").status, 200);
  ASSERT_EQ(Claim("K").status, 201);
  HttpResponse metrics = Call("GET", "/metrics", "", "");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.content_type, HasSubstr("text/plain"));
  EXPECT_THAT(metrics.body,
              HasSubstr("idem_http_requests_total{route=\"/v1/claims\",status=\"201\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("idem_outcomes_total{outcome=\"acquired\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("idem_store_errors_total 0\n"));
  EXPECT_THAT(metrics.body, HasSubstr("\nidem_store_up 1\n"));
}

// Whatever a client asks for, an unrouted target is counted under one label value,
// "other": a scanner walking a thousand URLs must not make a thousand series.
TEST_F(ApiTest, UnroutedTargetsAreCountedAsOther) {
  for (const char* target : {"/wp-admin", "/v2/nothing", "/v1/records/only-one-segment",
                             "/v1/records/a/b/c", "/metricsx"}) {
    ExpectProblem(Call("GET", target), 404, "");
  }
  EXPECT_EQ(metrics_.requests("other", 404), 5u);
  const std::string text = Call("GET", "/metrics", "", "").body;
  EXPECT_THAT(text, HasSubstr("idem_http_requests_total{route=\"other\",status=\"404\"} 5\n"));
  for (const char* leaked : {"wp-admin", "v2", "only-one-segment", "metricsx"}) {
    EXPECT_THAT(text, ::testing::Not(HasSubstr(leaked)));
  }
  // A record read that does reach its route is counted under the template.
  ExpectProblem(Call("GET", "/v1/records/refund/none"), 404, "not_found");
  EXPECT_EQ(metrics_.requests("/v1/records/{biz_type}/{key}", 404), 1u);
}

// Begin routes a request once: its route, the record path's segments (still
// percent-encoded), the query and the token's tenant are in the ApiCall that every
// later step reads; the body is parsed once, by whichever step comes to it first.
TEST_F(ApiTest, BeginRoutesARequestOnceIntoItsCall) {
  std::unique_ptr<Handler::Call> call =
      api_->Begin({"HEAD", "/v1/records/refund/R%2F1?x=1", "Bearer tok-a"});
  const auto* routed = dynamic_cast<const ApiCall*>(call.get());
  ASSERT_NE(routed, nullptr);
  EXPECT_EQ(routed->route, Route::kRecord);
  EXPECT_EQ(routed->method, "GET");
  EXPECT_EQ(routed->path, "/v1/records/refund/R%2F1");
  EXPECT_EQ(routed->query, std::optional<std::string_view>("x=1"));
  EXPECT_EQ(routed->biz_type_enc, "refund");
  EXPECT_EQ(routed->key_enc, "R%2F1");
  ASSERT_NE(routed->tenant, nullptr);
  EXPECT_EQ(routed->tenant->name, "acme");
  EXPECT_FALSE(call->BeforeBody().has_value());
  // A malformed record path keeps the template's route for a 401 before its body,
  // and is 404 "other" once answered.
  std::unique_ptr<Handler::Call> malformed = api_->Begin({"POST", "/v1/records/a/b/c", ""});
  std::optional<Reply> refused = malformed->BeforeBody();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->response.status, 401);
  EXPECT_EQ(refused->route, Route::kRecord);
  EXPECT_EQ(malformed->Answer().route, Route::kOther);
  // The body, parsed on the network thread, is what the pool's Answer() uses.
  std::unique_ptr<Handler::Call> claim =
      api_->Begin({"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"B1"})"});
  EXPECT_FALSE(claim->AnswerWithoutBlocking().has_value());
  EXPECT_TRUE(
      std::holds_alternative<absl::StatusOr<ClaimBody>>(dynamic_cast<const ApiCall&>(*claim).body));
  claim->request().body = "not read again";
  EXPECT_EQ(claim->Answer().response.status, 201);
}

TEST_F(ApiTest, BadInputIs400NamingTheField) {
  auto detail = [](const HttpResponse& r) { return J(r)["detail"].get<std::string>(); };
  HttpResponse r = Post("/v1/claims", "{nope");
  ExpectProblem(r, 400, "");
  EXPECT_THAT(detail(r), HasSubstr("not valid JSON"));
  EXPECT_THAT(detail(Post("/v1/claims", R"({"key":"k"})")), HasSubstr("\"biz_type\" is required"));
  EXPECT_THAT(detail(Claim(std::string(256, 'k'))), HasSubstr("\"key\""));
  EXPECT_EQ(Claim(std::string(255, 'k')).status, 201);
  EXPECT_THAT(detail(Claim("")), HasSubstr("\"key\""));
  EXPECT_EQ(Claim("a\\u0000b").status, 400);
  EXPECT_EQ(Claim("\\ud800").status, 400);   // a lone surrogate is not UTF-8
  EXPECT_EQ(Claim("\xc3\x28").status, 400);  // invalid UTF-8 bytes
  EXPECT_EQ(Claim("\\u00e9\\ud83d\\ude00").status, 201);
  EXPECT_EQ(Claim("K", R"(,"lease_ms":99)").status, 400);
  EXPECT_EQ(Claim("K", R"(,"wait_ms":30001)").status, 400);
  EXPECT_THAT(detail(Post("/v1/claims", R"({"biz_type":"","key":"k"})")),
              HasSubstr("\"biz_type\""));
  EXPECT_THAT(detail(Post("/v1/claims/fail", R"({"biz_type":"r","key":"k","token":1,"error":1})")),
              HasSubstr("\"retryable\" is required"));
  ExpectProblem(Post("/v1/claims", std::string(4097, ' ')), 413, "");
}

TEST_F(ApiTest, WaitAttachesToTheHolderAndGetsItsResult) {
  ASSERT_EQ(Claim("K").status, 201);
  Reply w = api_->Handle(
      {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"K","wait_ms":5000})"});
  ASSERT_NE(w.waiting, nullptr);
  EXPECT_EQ(w.response.status, 409);
  w = w.waiting->Poll();
  ASSERT_NE(w.waiting, nullptr);
  ASSERT_EQ(Complete("K", 1, R"({"ok" :true})").status, 200);
  w = w.waiting->Poll();
  EXPECT_EQ(w.waiting, nullptr);
  EXPECT_EQ(w.response.status, 200);
  EXPECT_EQ(w.response.body, R"({"outcome":"replayed","expires_at":null,"result":{"ok" :true}})");
}

// The polls of many waiters on one key share a store read while it is
// fresh (wait_poll_min), so waiting costs the store one read per key per window, not
// one per waiter; a complete through this Api is seen by the very next poll.
TEST_F(ApiTest, WaitersOnOneKeyShareTheirPollsReads) {
  ASSERT_EQ(Claim("K").status, 201);
  auto polls = [&] {
    const std::string text = metrics_.Render();
    const size_t at = text.find("\nidem_claim_polls_total ");
    return std::stoll(text.substr(at + 24));
  };
  std::vector<Reply> waiters;
  for (int i = 0; i < 50; ++i) {
    waiters.push_back(api_->Handle({"POST", "/v1/claims", "Bearer tok-a",
                                    R"({"biz_type":"refund","key":"K","wait_ms":5000})"}));
    ASSERT_NE(waiters.back().waiting, nullptr);
  }
  const long long before = polls();
  for (Reply& w : waiters) {
    w = w.waiting->Poll();
    ASSERT_NE(w.waiting, nullptr);
  }
  EXPECT_EQ(polls() - before, 1);
  clock_.Advance(absl::Milliseconds(15));  // the shared read is no longer fresh
  for (Reply& w : waiters) w = w.waiting->Poll();
  EXPECT_EQ(polls() - before, 2);
  ASSERT_EQ(Complete("K", 1, R"({"ok":true})").status, 200);  // no clock step needed
  for (Reply& w : waiters) {
    w = w.waiting->Poll();
    EXPECT_EQ(w.waiting, nullptr);
    EXPECT_EQ(w.response.status, 200);
  }
}

TEST_F(ApiTest, WaitEndsIn409WhenTimeRunsOut) {
  ASSERT_EQ(Claim("K").status, 201);
  Reply w = api_->Handle(
      {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"K","wait_ms":1000})"});
  ASSERT_NE(w.waiting, nullptr);
  clock_.Advance(absl::Milliseconds(1001));
  w = w.waiting->Poll();
  EXPECT_EQ(w.waiting, nullptr);
  ExpectProblem(w.response, 409, "in_progress");
  EXPECT_EQ(w.response.Header("Retry-After"), "1");  // 29 s of lease left, capped
}

TEST_F(ApiTest, WaitBecomesTheHolderWhenTheLeaseEndsOrIsReleased) {
  ASSERT_EQ(Claim("K", R"(,"lease_ms":1000)").status, 201);
  Reply w = api_->Handle(
      {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"K","wait_ms":30000})"});
  ASSERT_NE(w.waiting, nullptr);
  clock_.Advance(absl::Seconds(2));
  w = w.waiting->Poll();
  EXPECT_EQ(w.waiting, nullptr);
  EXPECT_EQ(w.response.status, 201);
  EXPECT_EQ(J(w.response)["takeover"], true);

  ASSERT_EQ(Claim("L").status, 201);
  w = api_->Handle(
      {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"L","wait_ms":30000})"});
  ASSERT_NE(w.waiting, nullptr);
  ASSERT_EQ(Fail("L", 1, true, "null").status, 200);
  w = w.waiting->Poll();
  EXPECT_EQ(w.response.status, 201);
  EXPECT_EQ(J(w.response)["token"], 2);
  EXPECT_EQ(J(w.response)["takeover"], false);
}

// Retention: claim answers carry expires_at, and once a key's record is
// purged its claim and its record read are 410 `expired`, counted as such.
TEST_F(ApiTest, APurgedKeyIs410Expired) {
  RetentionPolicy policy;
  ASSERT_OK(policy.Add("refund", {.redelivery_window = absl::Hours(24)}));
  guard_ = std::make_unique<Guard>(*store_, GuardOptions{.clock = &clock_, .retention = policy});
  ApiOptions o;
  o.tenants = {Tenant::WithToken("acme", "tok-a")};
  o.clock = &clock_;
  api_ = std::make_unique<Api>(*guard_, *store_, metrics_, o);
  HttpResponse a = Claim("R-1", R"(,"fingerprint":"f")");
  ASSERT_EQ(a.status, 201) << a.body;
  EXPECT_EQ(J(a)["expires_at"], "2026-01-02T00:00:00.000Z");
  ASSERT_EQ(Complete("R-1", 1, "1").status, 200);
  EXPECT_EQ(J(Claim("R-1"))["expires_at"], "2026-01-02T00:00:00.000Z");
  clock_.Advance(absl::Hours(25));
  ASSERT_OK_AND_ASSIGN(PurgeStats stats, Purge(*store_, {.clock = &clock_, .pause = {}}));
  ASSERT_EQ(stats.tombstoned, 1);
  HttpResponse late = Claim("R-1", R"(,"fingerprint":"f")");
  ExpectProblem(late, 410, "expired");
  EXPECT_EQ(J(late)["type"], "urn:idem:problem:expired");
  EXPECT_EQ(J(late)["purged_at"], "2026-01-02T01:00:00.000Z");
  EXPECT_EQ(J(late)["tombstone_until"], "2026-01-03T01:00:00.000Z");
  ExpectProblem(Claim("R-1", R"(,"fingerprint":"other")"), 422, "fingerprint_mismatch");
  HttpResponse read = Call("GET", "/v1/records/refund/R-1");
  EXPECT_EQ(read.status, 410) << read.body;
  ExpectProblem(Complete("R-1", 1, "1"), 404, "not_found");
  EXPECT_EQ(metrics_.outcomes("expired"), 1u);
}

TEST_F(ApiTest, RecordPagesArePerTenantAndCursorPaginated) {
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Claim("K-" + std::to_string(i)).status, 201);
  ASSERT_EQ(Complete("K-1", 1, "1").status, 200);
  ASSERT_EQ(Claim("B-1", "", "tok-b").status, 201);
  HttpResponse first = Call("GET", "/v1/records?limit=2");
  ASSERT_EQ(first.status, 200) << first.body;
  json p1 = J(first);
  ASSERT_EQ(p1["records"].size(), 2u);
  EXPECT_EQ(p1["records"][0]["key"], "K-0");
  EXPECT_EQ(p1["records"][1]["key"], "K-1");
  ASSERT_TRUE(p1["next_cursor"].is_string());
  HttpResponse second =
      Call("GET", "/v1/records?limit=2&cursor=" + p1["next_cursor"].get<std::string>());
  json p2 = J(second);
  ASSERT_EQ(p2["records"].size(), 2u);
  EXPECT_EQ(p2["records"][0]["key"], "K-2");
  HttpResponse last =
      Call("GET", "/v1/records?limit=2&cursor=" + p2["next_cursor"].get<std::string>());
  json p3 = J(last);
  ASSERT_EQ(p3["records"].size(), 1u);
  EXPECT_EQ(p3["records"][0]["key"], "K-4");
  EXPECT_TRUE(p3["next_cursor"].is_null());
  // Filters; the other tenant's records never show.
  json done = J(Call("GET", "/v1/records?state=SUCCEEDED&biz_type=refund"));
  ASSERT_EQ(done["records"].size(), 1u);
  EXPECT_EQ(done["records"][0]["key"], "K-1");
  EXPECT_FALSE(done["records"][0].contains("result"));
  json beta = J(Call("GET", "/v1/records", "", "tok-b"));
  ASSERT_EQ(beta["records"].size(), 1u);
  EXPECT_EQ(beta["records"][0]["key"], "B-1");
  EXPECT_EQ(Call("HEAD", "/v1/records").status, 200);  // every GET route answers HEAD
  ExpectProblem(Call("POST", "/v1/records", "{}"), 405, "");
  ExpectProblem(Call("GET", "/v1/records?limit=0"), 400, "");
  ExpectProblem(Call("GET", "/v1/records?tenant=beta"), 400, "");
  ExpectProblem(Call("GET", "/v1/records?cursor=***"), 400, "");
  ExpectProblem(Call("GET", "/v1/records", "", ""), 401, "");
}

TEST_F(ApiTest, StoreDownIs503FailClosed) {
  DownStore down;
  Build(down);
  HttpResponse r = Claim("K");
  ExpectProblem(r, 503, "unavailable");
  EXPECT_EQ(r.Header("Retry-After"), "1");
  ExpectProblem(Complete("K", 1, "1"), 503, "unavailable");
  ExpectProblem(Call("GET", "/readyz", "", ""), 503, "");
  EXPECT_EQ(Call("GET", "/healthz", "", "").status, 200);
  EXPECT_EQ(metrics_.store_errors(), 3u);
  // /metrics still answers, says the store is down, and counts its failed ping.
  HttpResponse metrics = Call("GET", "/metrics", "", "");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr("\nidem_store_up 0\n"));
  EXPECT_EQ(metrics_.store_errors(), 4u);
}

// A batch's answers are bounded: once they reach max_batch_answer_bytes (here
// 300, two replays of a 200-byte result), the items after are answered 413 and
// not decided. Call after Build(store, ..., 300).
void ApiTest::ExpectTheBatchAnswerBound() {
  ASSERT_EQ(Claim("R").status, 201);
  const std::string result = "\"" + std::string(200, 'r') + "\"";
  ASSERT_EQ(Complete("R", 1, result).status, 200);
  HttpResponse r = Post("/v1/claims/batch", R"({"requests":[)"
                                            R"({"op":"claim","biz_type":"refund","key":"R"},)"
                                            R"({"op":"claim","biz_type":"refund","key":"R"},)"
                                            R"({"op":"claim","biz_type":"refund","key":"N"},)"
                                            R"({"op":"claim","biz_type":"refund","key":"R"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json responses = J(r)["responses"];
  ASSERT_EQ(responses.size(), 4u);
  EXPECT_EQ(responses[0]["outcome"], "replayed");
  EXPECT_EQ(responses[1]["outcome"], "replayed");
  for (size_t i : {2, 3}) {
    EXPECT_EQ(responses[i]["status"], 413) << i;
    EXPECT_EQ(responses[i]["type"], "urn:idem:problem:batch_answer_too_large") << i;
    EXPECT_THAT(responses[i]["detail"].get<std::string>(), HasSubstr("300 bytes")) << i;
  }
  ExpectProblem(Call("GET", "/v1/records/refund/N"), 404, "not_found");  // not decided
  EXPECT_EQ(metrics_.outcomes("replayed"), 2u);
  EXPECT_EQ(metrics_.batch_items(Route::kClaims), 4u);
}

TEST_F(ApiTest, BatchItemsPastTheAnswerBoundAreNotDecided) {
  Build(*store_, kDefaultRetryAfterMax, /*max_batch_answer_bytes=*/300);
  ExpectTheBatchAnswerBound();
}

// The same on rocksdb://, whose batch is decided in one pass (one transaction).
TEST_F(ApiTest, BatchItemsPastTheAnswerBoundAreNotDecidedInOnePass) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> rocksdb, OpenStore("rocksdb://" + dir.file("db")));
  ASSERT_TRUE(Backend(*rocksdb).non_blocking());
  Build(*rocksdb, kDefaultRetryAfterMax, /*max_batch_answer_bytes=*/300);
  ExpectTheBatchAnswerBound();
  api_.reset();  // before the store
  guard_.reset();
}

// And behind the cache tier, as idem serve opens it, whose memory answers the
// replays before the transaction: they count against the bound as well.
TEST_F(ApiTest, BatchItemsPastTheAnswerBoundAreNotDecidedWhenTheCacheAnswers) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> rocksdb, OpenStore("rocksdb://" + dir.file("db")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> cached, NewCachingStore(std::move(rocksdb)));
  Build(*cached, kDefaultRetryAfterMax, /*max_batch_answer_bytes=*/300);
  ExpectTheBatchAnswerBound();
  api_.reset();
  guard_.reset();
}

// A batch started on the network thread that meets a key another transaction holds
// goes to the pool whole, and the items it answered from memory there (a 422 from
// the cache tier) are answered and counted once.
TEST_F(ApiTest, ABatchLeftToThePoolCountsWhatTheNetworkThreadAnsweredOnce) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> rocksdb, OpenStore("rocksdb://" + dir.file("db")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> cached, NewCachingStore(std::move(rocksdb)));
  Build(*cached);
  ASSERT_EQ(Claim("M", R"(,"fingerprint":"f1")").status, 201);
  ASSERT_EQ(Complete("M", 1, "1").status, 200);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordTransaction> holder,
                       Backend(*cached).BeginNonBlocking());
  ASSERT_OK_AND_ASSIGN(RecordTransaction::KeyLock held, holder->TryLock("acme", "X"));
  ASSERT_EQ(held, RecordTransaction::KeyLock::kHeld);

  std::unique_ptr<Handler::Call> call = api_->Begin(
      HttpRequest{"POST", "/v1/claims/batch", "Bearer tok-a",
                  R"({"requests":[{"op":"claim","biz_type":"refund","key":"M","fingerprint":"f2"},)"
                  R"({"op":"claim","biz_type":"refund","key":"X"}]})"});
  EXPECT_FALSE(call->StartAsync([](std::function<Reply()>) { ADD_FAILURE() << "resumed"; }));
  holder->Rollback();  // X is free for the pool
  const Reply reply = call->Answer();
  ASSERT_EQ(reply.response.status, 200) << reply.response.body;
  const json responses = json::parse(reply.response.body)["responses"];
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0]["outcome"], "fingerprint_mismatch");
  EXPECT_EQ(responses[1]["outcome"], "acquired");
  const json keys = J(Call("GET", "/v1/keys/mismatches"))["keys"];
  ASSERT_EQ(keys.size(), 1u) << keys;
  EXPECT_EQ(keys[0]["key"], "M");
  EXPECT_EQ(keys[0]["mismatches"], 1);
  holder.reset();
  api_.reset();
  guard_.reset();
}

// Store down: each item is its single call's 503 (fail closed), in a 200.
TEST_F(ApiTest, BatchItemsOnADownStoreAre503) {
  DownStore down;
  Build(down);
  HttpResponse r = Post("/v1/claims/batch", R"({"requests":[)"
                                            R"({"op":"claim","biz_type":"refund","key":"A"},)"
                                            R"({"op":"fail","biz_type":"refund","key":"A",)"
                                            R"("token":1,"retryable":true,"error":null}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json responses = J(r)["responses"];
  ASSERT_EQ(responses.size(), 2u);
  for (const json& item : responses) {
    EXPECT_EQ(item["status"], 503) << item;
    EXPECT_EQ(item["outcome"], "unavailable") << item;
  }
  EXPECT_EQ(metrics_.outcomes("unavailable"), 2u);
}

// A full disk: pings answer, every write fails. /readyz and idem_store_up used to
// stay 200 and 1 while every claim was 503; they follow writes now, and come back
// once a write succeeds: the readiness probe's own (at most one per interval), so a
// server that a load balancer stopped sending claims to is seen ready again.
TEST_F(ApiTest, ReadinessFollowsWritesOnAFullDisk) {
  FullDiskStore store;
  Build(store);
  EXPECT_EQ(Claim("K-1").status, 201);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  store.full = true;
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);  // no write has failed yet
  ExpectProblem(Claim("K-2"), 503, "unavailable");
  ExpectProblem(Call("GET", "/readyz", "", ""), 503, "");
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr("\nidem_store_up 0\n"));
  // Within the probe interval the last probe's answer stands; past it a new probe
  // writes, and fails while the disk is full.
  const int commits = store.commits.load();
  clock_.Advance(StoreHealth::kProbeInterval);
  ExpectProblem(Call("GET", "/readyz", "", ""), 503, "");
  store.full = false;
  ExpectProblem(Call("GET", "/readyz", "", ""), 503, "");
  EXPECT_EQ(store.commits.load(), commits);
  clock_.Advance(StoreHealth::kProbeInterval);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  EXPECT_EQ(store.commits.load(), commits + 2);  // the probe's write and its delete
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr("\nidem_store_up 1\n"));
  // The probe left nothing behind; claims work again.
  EXPECT_FALSE(store.Get("", "write-probe")->has_value());
  EXPECT_EQ(Claim("K-2").status, 201);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  EXPECT_EQ(store.commits.load(), commits + 3);  // no probe while writes work
}

// A disk that fills while no request writes: the readiness check's own probe finds
// it within one probe interval, and finds it gone again as fast.
TEST_F(ApiTest, ReadinessFindsAFullDiskWithoutTraffic) {
  FullDiskStore store;
  Build(store);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  store.full = true;
  clock_.Advance(StoreHealth::kProbeInterval);
  ExpectProblem(Call("GET", "/readyz", "", ""), 503, "");
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr("\nidem_store_up 0\n"));
  store.full = false;
  clock_.Advance(StoreHealth::kProbeInterval);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  EXPECT_THAT(Call("GET", "/metrics", "", "").body, HasSubstr("\nidem_store_up 1\n"));
}

// The readiness probe writes and deletes its record on every embedded store (behind
// the cache, as idem serve opens them), also when an earlier probe left it behind.
TEST(ProbeStoreWrite, WritesAndLeavesNothingBehind) {
  testing::TempDir dir;
  for (const std::string& url :
       {std::string("memory://"), "sqlite://" + dir.file("p.db"), "rocksdb://" + dir.file("p")}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner, OpenStore(url));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, NewCachingStore(std::move(inner)));
    const absl::Time now = absl::FromUnixSeconds(1767225600);
    EXPECT_TRUE(ProbeStoreWrite(*store, now).ok()) << url;
    EXPECT_FALSE((*store->Get("", "write-probe")).has_value()) << url;
    {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
      ASSERT_OK(Records(*tx)
                    .InsertOrLoad(Record{.tenant = "",
                                         .biz_type = "idem.readiness",
                                         .key = "write-probe",
                                         .token = 1,
                                         .lease_until = now,
                                         .created_at = now,
                                         .updated_at = now})
                    .status());
      ASSERT_OK(tx->Commit());
    }
    EXPECT_TRUE(ProbeStoreWrite(*store, now).ok()) << url;
    EXPECT_FALSE((*store->Get("", "write-probe")).has_value()) << url;
  }
}

// A successful write by a request ends the outage too, without a probe.
TEST_F(ApiTest, AWriteThatSucceedsMakesTheStoreReadyAgain) {
  FullDiskStore store;
  Build(store);
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);  // the interval's probe
  store.full = true;
  ExpectProblem(Claim("K-1"), 503, "unavailable");
  store.full = false;
  EXPECT_EQ(Claim("K-1").status, 201);
  // Within the probe interval, the claim's write alone made the store ready again.
  const int commits = store.commits.load();
  EXPECT_EQ(Call("GET", "/readyz", "", "").status, 200);
  EXPECT_EQ(store.commits.load(), commits);
}

// A fingerprint is a digest: one over 1 KiB (1 MB was accepted and stored) is 400
// naming the field, on the blocking path and the network thread's alike.
TEST_F(ApiTest, FingerprintOverTheLimitIs400) {
  const std::string at_limit(kMaxFingerprintBytes, 'f');
  EXPECT_EQ(Claim("F-1", R"(,"fingerprint":")" + at_limit + "\"").status, 201);
  const std::string over(kMaxFingerprintBytes + 1, 'f');
  HttpResponse r = Claim("F-2", R"(,"fingerprint":")" + over + "\"");
  ExpectProblem(r, 400, "");
  EXPECT_THAT(J(r)["detail"].get<std::string>(),
              HasSubstr("field \"fingerprint\": fingerprint is 1025 bytes, over the limit of 1024"));
  HttpRequest request{"POST", "/v1/claims", "Bearer tok-a",
                      R"({"biz_type":"refund","key":"F-2","fingerprint":")" + over + "\"}"};
  EXPECT_FALSE(api_->Begin(request)->AnswerWithoutBlocking().has_value());
  EXPECT_EQ(Call("GET", "/v1/records/refund/F-2").status, 404);
  // The C++ guard refuses it too, before the store.
  EXPECT_THAT(guard_->Claim({.tenant = "acme", .biz_type = "refund", .key = "F-3",
                             .fingerprint = over}).status(),
              ::idem::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

// The lean path: on rocksdb:// (behind the L1, as `idem serve` opens it) a claim,
// complete or fail is started on the network thread (StartAsync) and answered by
// the function the writer thread hands back once the write is durable. Every
// answer is byte for byte the blocking path's, in the same scenario on another
// store; what the async path cannot take (bad bodies, a held key, other routes)
// it leaves to Handle().
class ApiAsyncTest : public ::testing::Test {
 protected:
  struct Side {
    std::unique_ptr<Store> store;
    std::unique_ptr<Guard> guard;
    Metrics metrics;
    std::unique_ptr<Api> api;
    int async = 0;  // requests StartAsync took
  };

  void Open(Side& side, const std::string& dir) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner, OpenStore("rocksdb://" + dir));
    ASSERT_OK_AND_ASSIGN(side.store, NewCachingStore(std::move(inner)));
    side.guard = std::make_unique<Guard>(*side.store, GuardOptions{.clock = &clock_});
    ApiOptions o;
    o.tenants = {Tenant::WithToken("acme", "tok-a")};
    o.clock = &clock_;
    side.api = std::make_unique<Api>(*side.guard, *side.store, side.metrics, o);
  }

  void SetUp() override {
    Open(async_, dir_.file("async"));
    Open(blocking_, dir_.file("blocking"));
  }

  // As the server's Connection does: Begin, then AnswerWithoutBlocking, then
  // StartAsync, then Answer().
  static Reply Serve(Side& side, HttpRequest request) {
    std::unique_ptr<Handler::Call> call = side.api->Begin(std::move(request));
    if (std::optional<Reply> now = call->AnswerWithoutBlocking()) return *now;
    absl::Notification resumed;
    std::function<Reply()> answer;
    const bool started = call->StartAsync([&](std::function<Reply()> rest) {
      answer = std::move(rest);
      resumed.Notify();
    });
    if (!started) return call->Answer();
    ++side.async;
    EXPECT_TRUE(resumed.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return answer();
  }

  // Sends `body` to `target` on both sides; expects the same answer and returns it.
  HttpResponse Both(const std::string& target, const std::string& body) {
    const HttpRequest request{"POST", target, "Bearer tok-a", body};
    Reply a = Serve(async_, request);
    Reply b = blocking_.api->Handle(request);
    EXPECT_EQ(a.response.status, b.response.status) << target << " " << body;
    EXPECT_EQ(a.response.body, b.response.body) << target << " " << body;
    EXPECT_EQ(a.response.headers, b.response.headers) << target << " " << body;
    EXPECT_EQ(a.outcome, b.outcome);
    EXPECT_EQ(a.route, b.route);
    EXPECT_EQ(a.tenant, b.tenant);
    EXPECT_EQ((a.waiting == nullptr), (b.waiting == nullptr));
    return a.response;
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
  Side async_;
  Side blocking_;
};

TEST_F(ApiAsyncTest, ClaimCompleteFailAnswerAsTheBlockingPathDoes) {
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"A"})").status, 201);
  EXPECT_EQ(
      Serve(async_, {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"Z"})"})
          .tenant,
      "acme");
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"A"})").status, 409);
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"other","key":"A"})").status, 409);
  EXPECT_EQ(
      Both("/v1/claims/complete", R"({"biz_type":"refund","key":"A","token":2,"result":{"x":1}})")
          .status,
      409);  // lease_lost
  EXPECT_EQ(Both("/v1/claims/complete",
                 R"({"biz_type":"refund","key":"A","token":1,"result":{"x" : 1.50}})")
                .status,
            200);
  EXPECT_EQ(Both("/v1/claims/complete",
                 R"({"biz_type":"refund","key":"A","token":1,"result":{"x" : 1.50}})")
                .status,
            200);  // the same again
  EXPECT_EQ(
      Both("/v1/claims/complete", R"({"biz_type":"refund","key":"A","token":1,"result":2})").status,
      409);                                                                         // conflict
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"A"})").status, 200);  // replayed
  EXPECT_EQ(
      Both("/v1/claims/complete", R"({"biz_type":"refund","key":"nope","token":1,"result":1})")
          .status,
      404);
  // A retryable fail releases; the next claim takes token 2; a final fail is cached.
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"B","lease_ms":1000})").status, 201);
  EXPECT_EQ(Both("/v1/claims/fail",
                 R"({"biz_type":"refund","key":"B","token":1,"retryable":true,"error":"e"})")
                .status,
            200);
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"B"})").status, 201);
  EXPECT_EQ(Both("/v1/claims/fail",
                 R"({"biz_type":"refund","key":"B","token":2,"retryable":false,"error":{"c":1}})")
                .status,
            200);
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"B"})").status, 200);
  // An expired lease is taken over, with the previous token.
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"C","lease_ms":1000})").status, 201);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Both("/v1/claims", R"({"biz_type":"refund","key":"C"})").status, 201);
  // The writes above went through the writer, not the pool. Duplicates of decided keys
  // were answered by AnswerWithoutBlocking before StartAsync.
  EXPECT_GE(async_.async, 10);
  // Every answer of the writer was counted as the blocking path counts it.
  EXPECT_EQ(async_.metrics.Render(), blocking_.metrics.Render());
}

TEST_F(ApiAsyncTest, WhatItCannotTakeGoesToThePool) {
  const int before = async_.async;
  // Bad bodies and ids, token 0, other routes: Handle() words them.
  for (const auto& [target, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/claims", R"({"biz_type":"refund"})"},
           {"/v1/claims", R"({"biz_type":"refund","key":""})"},
           {"/v1/claims/complete", R"({"biz_type":"refund","key":"A","token":0,"result":1})"},
           {"/v1/claims/complete", R"({"biz_type":"refund","key":"A","token":1})"},
           {"/v1/claims/fail", R"({"biz_type":"refund","key":"A","token":1,"retryable":1})"},
           {"/v1/records", ""}}) {
    Both(target, body);
  }
  EXPECT_EQ(async_.async, before);
  // A key another transaction holds this instant: the blocking claim waits for it.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> holder, async_.store->Begin());
  ASSERT_OK(Records(*holder).Load("acme", "H").status());
  HttpRequest request{"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"H"})"};
  std::unique_ptr<Handler::Call> held = async_.api->Begin(request);
  ASSERT_FALSE(held->AnswerWithoutBlocking().has_value());
  EXPECT_FALSE(held->StartAsync(
      [](std::function<Reply()>) { ADD_FAILURE() << "resumed a request it did not take"; }));
  holder->Rollback();
  EXPECT_EQ(held->Answer().response.status, 201);
  // A store without non-blocking transactions: never taken.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> memory, OpenStore("memory://"));
  Guard guard(*memory);
  Metrics metrics;
  ApiOptions o;
  o.tenants = {Tenant::WithToken("acme", "tok-a")};
  Api api(guard, *memory, metrics, o);
  HttpRequest claim{"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"M"})"};
  std::unique_ptr<Handler::Call> call = api.Begin(claim);
  ASSERT_FALSE(call->AnswerWithoutBlocking().has_value());
  EXPECT_FALSE(call->StartAsync([](std::function<Reply()>) {}));
}

// A claim waiting on a key (wait_ms) is woken by a complete made through the
// async path (its answer notifies the key's watchers) and then replays it.
TEST_F(ApiAsyncTest, AnAsyncCompleteWakesTheKeysWaiters) {
  ASSERT_EQ(
      Serve(async_, {"POST", "/v1/claims", "Bearer tok-a", R"({"biz_type":"refund","key":"W"})"})
          .response.status,
      201);
  Reply w = Serve(async_, {"POST", "/v1/claims", "Bearer tok-a",
                           R"({"biz_type":"refund","key":"W","wait_ms":5000})"});
  ASSERT_NE(w.waiting, nullptr);
  EXPECT_EQ(w.response.status, 409);
  std::atomic<bool> woken{false};
  std::shared_ptr<void> watch = w.waiting->Watch([&] { woken = true; });
  EXPECT_EQ(Serve(async_, {"POST", "/v1/claims/complete", "Bearer tok-a",
                           R"({"biz_type":"refund","key":"W","token":1,"result":{"ok":1}})"})
                .response.status,
            200);
  EXPECT_TRUE(woken.load());
  w = w.waiting->Poll();
  EXPECT_EQ(w.waiting, nullptr);
  EXPECT_EQ(w.response.body, R"({"outcome":"replayed","expires_at":null,"result":{"ok":1}})");
}

}  // namespace
}  // namespace idem::http
