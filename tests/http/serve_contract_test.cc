// Black-box tests of `idem serve` that reach the answers of docs/openapi.yaml the
// other serve tests do not: record reads in every state and with another biz_type,
// finish conflicts, wrong methods, oversized headers and /metrics behind a token.
// Like every test that talks through client.h, their responses are recorded and
// validated against the document by http.openapi (tests/http/CMakeLists.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::http {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::idem::testing::IdemBinary;
using ::idem::testing::ServeProcess;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using json = nlohmann::json;

class ServeContractTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    ASSERT_FALSE(IdemBinary().empty()) << "set IDEM_BIN to the idem binary";
    server_ = std::make_unique<ServeProcess>(dir_.file("stderr.txt"));
    std::vector<std::string> args = {"--listen", "127.0.0.1:0",
                                     "--store",  "sqlite://" + dir_.file("x.db"),
                                     "--tenant", "acme:tok-a"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_THAT(server_->Start(args), MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
        << server_->stderr_text();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->stderr_text();
    }
  }

  ClientResponse Post(const std::string& target, const std::string& body) {
    return Fetch(port_, "POST", target, body, "tok-a");
  }
  ClientResponse Get(const std::string& target, const std::string& token = "tok-a") {
    return Fetch(port_, "GET", target, "", token);
  }
  ClientResponse Finish(const std::string& route, const std::string& biz_type,
                        const std::string& key, int64_t token, const std::string& rest) {
    return Post(route, R"({"biz_type":")" + biz_type + R"(","key":")" + key + R"(","token":)" +
                           std::to_string(token) + rest + "}");
  }
  static std::string Outcome(const ClientResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() ? j.value("outcome", "") : "";
  }

  idem::testing::TempDir dir_;
  std::unique_ptr<ServeProcess> server_;
  uint16_t port_ = 0;
};

TEST_F(ServeContractTest, RecordsInEveryStateAndWithAnotherBizType) {
  Start();
  ASSERT_EQ(Post("/v1/claims", R"({"biz_type":"refund","key":"K","fingerprint":"f"})").status, 201);
  ClientResponse processing = Get("/v1/records/refund/K");
  ASSERT_EQ(processing.status, 200) << processing.body;
  EXPECT_THAT(processing.body, HasSubstr(R"("state":"PROCESSING")"));
  ClientResponse other = Get("/v1/records/order/K");
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_EQ(Outcome(other), "key_reused");

  ASSERT_EQ(Finish("/v1/claims/fail", "refund", "K", 1, R"(,"retryable":false,"error":"E")").status,
            200);
  ClientResponse failed = Get("/v1/records/refund/K");
  ASSERT_EQ(failed.status, 200) << failed.body;
  EXPECT_THAT(failed.body, HasSubstr(R"("state":"FAILED")"));
  EXPECT_THAT(failed.body, HasSubstr(R"("error":"E")"));

  // A slash in a key travels percent-encoded.
  ASSERT_EQ(Post("/v1/claims", R"({"biz_type":"refund","key":"a/b"})").status, 201);
  EXPECT_EQ(Get("/v1/records/refund/a%2Fb").status, 200);
  EXPECT_EQ(Get("/v1/records/refund/a%2").status, 400);
  EXPECT_EQ(Get("/v1/records/refund/a%00b").status, 400);
  EXPECT_EQ(Get("/v1/records/refund/a/b").status, 404);  // three segments: no route
}

TEST_F(ServeContractTest, FinishConflictsAndErrors) {
  Start();
  ASSERT_EQ(Post("/v1/claims", R"({"biz_type":"refund","key":"K"})").status, 201);
  ClientResponse stale = Finish("/v1/claims/complete", "refund", "K", 7, R"(,"result":1)");
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_EQ(Outcome(stale), "lease_lost");
  ClientResponse reused =
      Finish("/v1/claims/fail", "order", "K", 1, R"(,"retryable":true,"error":null)");
  EXPECT_EQ(reused.status, 409) << reused.body;
  EXPECT_EQ(Outcome(reused), "key_reused");

  EXPECT_EQ(Finish("/v1/claims/complete", "refund", "K", 1, R"(,"result":{"id":1})").status, 200);
  // The same complete again is fine; another result is not.
  EXPECT_EQ(Finish("/v1/claims/complete", "refund", "K", 1, R"(,"result":{"id":1})").status, 200);
  ClientResponse conflict = Finish("/v1/claims/complete", "refund", "K", 1, R"(,"result":2)");
  EXPECT_EQ(conflict.status, 409) << conflict.body;
  EXPECT_EQ(Outcome(conflict), "conflict");

  EXPECT_EQ(Finish("/v1/claims/fail", "refund", "none", 1, R"(,"retryable":true,"error":1)").status,
            404);
  EXPECT_EQ(Finish("/v1/claims/complete", "refund", "K", 0, R"(,"result":1)").status, 400);
  EXPECT_EQ(Finish("/v1/claims/fail", "refund", "K", 1, R"(,"error":1)").status, 400);
  EXPECT_EQ(Post("/v1/claims", R"({"biz_type":"refund","key":"W","wait_ms":30001})").status, 400);
  EXPECT_EQ(Post("/v1/claims", R"({"biz_type":"refund","key":"W","ttl":1})").status, 400);
  EXPECT_EQ(Post("/v1/claims", R"([1])").status, 400);
}

TEST_F(ServeContractTest, WrongMethodsUnknownRoutesAndLimits) {
  Start();
  for (const auto& [method, target, allow] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/healthz", "GET"},
           {"PUT", "/readyz", "GET"},
           {"POST", "/metrics", "GET"},
           {"GET", "/v1/claims", "POST"},
           {"PATCH", "/v1/claims/complete", "POST"},
           {"GET", "/v1/claims/fail", "POST"},
           {"POST", "/v1/records/refund/K", "GET"},
           {"POST", "/v1/records", "GET"}}) {
    ClientResponse r = Fetch(port_, method, target, "", "tok-a");
    EXPECT_EQ(r.status, 405) << method << " " << target;
    EXPECT_EQ(r.header("allow"), allow) << method << " " << target;
  }
  EXPECT_EQ(Get("/v1/records?biz_type=refund").status, 200);
  ClientResponse bad_token = Get("/v1/records/refund/K", "nope");
  EXPECT_EQ(bad_token.status, 401);
  EXPECT_THAT(bad_token.header("www-authenticate"), HasSubstr("invalid_token"));

  Client c(port_);
  ClientResponse big =
      c.Send("GET", "/healthz", "", "", {{"X-Padding", std::string(20 << 10, 'x')}});
  EXPECT_EQ(big.status, 431) << big.error;
  EXPECT_FALSE(big.keep_alive);
}

TEST_F(ServeContractTest, MetricsBehindAToken) {
  Start({"--metrics-token"});
  ClientResponse none = Get("/metrics", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.header("www-authenticate"), R"(Bearer realm="idem")");
  ClientResponse with = Get("/metrics");
  EXPECT_EQ(with.status, 200);
  EXPECT_THAT(with.body,
              HasSubstr("idem_http_requests_total{route=\"/metrics\",status=\"401\"} 1"));
  EXPECT_EQ(Get("/healthz", "").status, 200);
  EXPECT_EQ(Get("/readyz", "").status, 200);
}

}  // namespace
}  // namespace idem::http
