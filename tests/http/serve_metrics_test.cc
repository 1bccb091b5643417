// GET /metrics of the real `idem serve`: per-route latency histograms
// and status classes, the open-connection gauge, idem_build_info with the version
// `idem --version` prints, and idem_store_up. Connection refusals are in
// serve_limits_test.cc (they need a connection cap); idem_store_up 0 with the store
// broken under a running server is in tests/integration/store_fault_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/client.h"
#include "http/prometheus_text.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::Fetch;
using ::idem::http::testing::SeriesValue;
using ::idem::testing::RunIdem;
using ::idem::testing::ServeProcess;
using ::idem::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using ::testing::StartsWith;

class ServeMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    serve_ = std::make_unique<ServeProcess>(dir_.file("serve.err"));
    ASSERT_THAT(serve_->Start({"--listen", "127.0.0.1:0", "--store",
                               "sqlite://" + dir_.file("idem.db"), "--tenant", "t:tok"}),
                StartsWith("listening on "))
        << serve_->stderr_text();
  }
  void TearDown() override { EXPECT_EQ(serve_->Stop(), 0) << serve_->stderr_text(); }

  std::string Metrics() {
    const auto r = Fetch(serve_->port(), "GET", "/metrics");
    EXPECT_EQ(r.status, 200) << r.error;
    return r.body;
  }
  void Claim(const std::string& key, int status, const std::string& token = "tok") {
    EXPECT_EQ(Fetch(serve_->port(), "POST", "/v1/claims",
                    R"({"biz_type":"refund","key":")" + key + "\"}", token)
                  .status,
              status);
  }

  idem::testing::TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
};

TEST_F(ServeMetricsTest, LatencyHistogramAndStatusClassesPerRoute) {
  Claim("K-1", 201);
  Claim("K-2", 201);
  Claim("K-1", 409);      // in progress
  Claim("K-3", 401, "");  // no token
  EXPECT_EQ(Fetch(serve_->port(), "GET", "/v1/records/refund/K-1", "", "tok").status, 200);
  EXPECT_EQ(Fetch(serve_->port(), "GET", "/nothing/here").status, 404);

  const std::string text = Metrics();
  const std::string claims = R"(route="/v1/claims")";
  EXPECT_THAT(SeriesValue(text, "idem_http_requests_by_class_total{" + claims + R"(,class="2xx"})"),
              Optional(2));
  EXPECT_THAT(SeriesValue(text, "idem_http_requests_by_class_total{" + claims + R"(,class="4xx"})"),
              Optional(2));
  EXPECT_THAT(SeriesValue(text, "idem_http_requests_by_class_total{" + claims + R"(,class="5xx"})"),
              Optional(0));
  // _count is every answer on the route; the +Inf bucket holds them all.
  EXPECT_THAT(SeriesValue(text, "idem_http_request_duration_seconds_count{" + claims + "}"),
              Optional(4));
  EXPECT_THAT(
      SeriesValue(text, "idem_http_request_duration_seconds_bucket{" + claims + R"(,le="+Inf"})"),
      Optional(4));
  std::optional<double> sum =
      SeriesValue(text, "idem_http_request_duration_seconds_sum{" + claims + "}");
  ASSERT_TRUE(sum.has_value()) << text;
  EXPECT_GT(*sum, 0);
  EXPECT_THAT(text, HasSubstr("# TYPE idem_http_request_duration_seconds histogram\n"));
  EXPECT_THAT(
      SeriesValue(
          text,
          R"(idem_http_request_duration_seconds_count{route="/v1/records/{biz_type}/{key}"})"),
      Optional(1));
  // The unrouted target is "other", not its path.
  EXPECT_THAT(SeriesValue(text, R"(idem_http_requests_total{route="other",status="404"})"),
              Optional(1));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("/nothing/here")));
}

TEST_F(ServeMetricsTest, BuildInfoAndStoreUp) {
  const idem::testing::RunResult version = RunIdem({"--version"}, dir_.path());
  ASSERT_EQ(version.exit_code, 0);
  ASSERT_THAT(version.out, StartsWith("idem "));
  const std::string v = version.out.substr(5, version.out.find_first_of("\r\n") - 5);
  const std::string text = Metrics();
  EXPECT_THAT(SeriesValue(text, "idem_build_info{version=\"" + v + "\"}"), Optional(1)) << text;
  EXPECT_THAT(SeriesValue(text, "idem_store_up"), Optional(1)) << text;
}

// The gauge follows the connections the server holds: three kept-alive clients and
// the scrape's own connection, then only the scrape's.
TEST_F(ServeMetricsTest, OpenConnectionsGauge) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(serve_->port()));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_EQ(clients.back()->Send("GET", "/healthz").status, 200);
  }
  std::string text;
  EXPECT_TRUE(WaitUntil([&] {
    text = Metrics();
    return SeriesValue(text, "idem_http_connections_open") == 4;
  })) << text;
  clients.clear();
  EXPECT_TRUE(WaitUntil([&] {
    text = Metrics();
    return SeriesValue(text, "idem_http_connections_open") == 1;
  })) << text;
}

// An unauthenticated /metrics showed the first 32 biz_type names any tenant sent:
// names a client chose are shown only behind --metrics-token now, and without it
// each tenant's key-health totals are shown, labelled by tenant.
TEST_F(ServeMetricsTest, BizTypeNamesOnlyBehindTheMetricsToken) {
  const std::string uuid = "550e8400-e29b-41d4-a716-446655440000";
  ASSERT_EQ(Fetch(serve_->port(), "POST", "/v1/claims",
                  R"({"biz_type":"secret-plan","key":")" + uuid + "\"}", "tok")
                .status,
            201);
  const std::string open = Metrics();
  EXPECT_THAT(open, Not(HasSubstr("secret-plan")));
  EXPECT_THAT(SeriesValue(open, "idem_key_suspicious_shape_total{tenant=\"t\",shape=\"uuid\"}"),
              Optional(1.0))
      << open;

  ServeProcess guarded(dir_.file("guarded.err"));
  ASSERT_THAT(guarded.Start({"--listen", "127.0.0.1:0", "--store",
                             "sqlite://" + dir_.file("guarded.db"), "--tenant", "t:tok",
                             "--metrics-token"}),
              StartsWith("listening on "))
      << guarded.stderr_text();
  ASSERT_EQ(Fetch(guarded.port(), "POST", "/v1/claims",
                  R"({"biz_type":"secret-plan","key":")" + uuid + "\"}", "tok")
                .status,
            201);
  EXPECT_EQ(Fetch(guarded.port(), "GET", "/metrics").status, 401);
  const auto r = Fetch(guarded.port(), "GET", "/metrics", "", "tok");
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(SeriesValue(r.body, "idem_key_suspicious_shape_total{tenant=\"t\",biz_type=\""
                                  "secret-plan\",shape=\"uuid\"}"),
              Optional(1.0))
      << r.body;
  EXPECT_EQ(guarded.Stop(), 0);
}

}  // namespace
}  // namespace idem::http
