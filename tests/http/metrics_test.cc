// Metrics (src/http/server/metrics.h): what each count does to the exposition text, the
// latency histogram's buckets, the bounded label values, and exact totals when many
// threads count at once (the counters are lock-free atomics).
#include "http/server/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/prometheus_text.h"
#include "http/server/route.h"

namespace idem::http {
namespace {

using ::idem::http::testing::SeriesValue;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using ::testing::StartsWith;

std::string Bucket(std::string_view route, std::string_view le) {
  return "idem_http_request_duration_seconds_bucket{route=\"" + std::string(route) + "\",le=\"" +
         std::string(le) + "\"}";
}

TEST(RouteTest, NamesAndBackAndEverythingElseIsOther) {
  for (size_t i = 0; i < kRouteCount; ++i) {
    const Route route = static_cast<Route>(i);
    EXPECT_EQ(RouteNamed(RouteName(route)), route) << RouteName(route);
  }
  EXPECT_EQ(RouteName(Route::kRecord), "/v1/records/{biz_type}/{key}");
  EXPECT_EQ(RouteNamed("/v1/records/refund/R-1"), Route::kOther);
  EXPECT_EQ(RouteNamed("/wp-admin"), Route::kOther);
  EXPECT_EQ(RouteNamed(""), Route::kOther);
}

TEST(MetricsTest, CountsByRouteStatusClassAndOutcome) {
  Metrics m;
  m.CountRequest(Route::kClaims, 201, "acquired", milliseconds(1));
  m.CountRequest(Route::kClaims, 201, "acquired", milliseconds(1));
  m.CountRequest(Route::kClaims, 200, "replayed", milliseconds(1));
  m.CountRequest(Route::kClaims, 409, "in_progress", milliseconds(1));
  m.CountRequest(Route::kClaims, 503, "unavailable", milliseconds(1));
  m.CountRequest(Route::kRecord, 404, "", milliseconds(1));
  EXPECT_EQ(m.requests("/v1/claims", 201), 2u);
  EXPECT_EQ(m.requests_by_class("/v1/claims", 2), 3u);
  EXPECT_EQ(m.requests_by_class("/v1/claims", 4), 1u);
  EXPECT_EQ(m.outcomes("acquired"), 2u);

  const std::string text = m.Render();
  // docs/openapi.yaml's /metrics schema: the body opens with this line.
  EXPECT_THAT(text, StartsWith("# HELP idem_http_requests_total "));
  EXPECT_THAT(SeriesValue(text, R"(idem_http_requests_total{route="/v1/claims",status="201"})"),
              Optional(2));
  EXPECT_THAT(SeriesValue(text, R"(idem_http_requests_total{route="/v1/claims",status="503"})"),
              Optional(1));
  EXPECT_THAT(
      SeriesValue(text, R"(idem_http_requests_by_class_total{route="/v1/claims",class="2xx"})"),
      Optional(3));
  EXPECT_THAT(
      SeriesValue(text, R"(idem_http_requests_by_class_total{route="/v1/claims",class="3xx"})"),
      Optional(0));
  EXPECT_THAT(
      SeriesValue(text, R"(idem_http_requests_by_class_total{route="/v1/claims",class="5xx"})"),
      Optional(1));
  EXPECT_THAT(
      SeriesValue(
          text,
          R"(idem_http_requests_by_class_total{route="/v1/records/{biz_type}/{key}",class="4xx"})"),
      Optional(1));
  EXPECT_THAT(SeriesValue(text, R"(idem_outcomes_total{outcome="replayed"})"), Optional(1));
  // Known outcomes are there at 0 before their first count; routes only once answered.
  EXPECT_THAT(SeriesValue(text, R"(idem_outcomes_total{outcome="lease_lost"})"), Optional(0));
  EXPECT_THAT(text, Not(HasSubstr("route=\"/healthz\"")));
  EXPECT_THAT(text, Not(HasSubstr("outcome=\"other\"")));
}

TEST(MetricsTest, UnknownOutcomesAndStatusesStayBounded) {
  Metrics m;
  m.CountRequest(Route::kClaims, 200, "made_up_1", milliseconds(1));
  m.CountRequest(Route::kClaims, 200, "made_up_2", milliseconds(1));
  m.CountRequest(Route::kOther, 42, "", milliseconds(1));
  m.CountRequest(Route::kOther, 1000, "", milliseconds(1));
  const std::string text = m.Render();
  EXPECT_THAT(SeriesValue(text, R"(idem_outcomes_total{outcome="other"})"), Optional(2));
  EXPECT_THAT(text, Not(HasSubstr("made_up")));
  EXPECT_THAT(SeriesValue(text, R"(idem_http_requests_total{route="other",status="500"})"),
              Optional(2));
}

// Prometheus histogram semantics: buckets are cumulative, le is inclusive, +Inf
// equals _count, which equals the route's answers; _sum is exact.
TEST(MetricsTest, LatencyHistogramIsCumulative) {
  Metrics m;
  const nanoseconds latencies[] = {nanoseconds(0),  microseconds(500), microseconds(501),
                                   milliseconds(3), seconds(20),       nanoseconds(-5)};
  for (nanoseconds l : latencies) m.CountRequest(Route::kRecord, 200, "", l);
  m.CountRequest(Route::kHealthz, 200, "", milliseconds(7));
  const std::string text = m.Render();
  const std::string route = "/v1/records/{biz_type}/{key}";
  EXPECT_THAT(SeriesValue(text, Bucket(route, "0.0005")), Optional(3));  // 0, 500 µs, -5 ns
  EXPECT_THAT(SeriesValue(text, Bucket(route, "0.001")), Optional(4));
  EXPECT_THAT(SeriesValue(text, Bucket(route, "0.0025")), Optional(4));
  EXPECT_THAT(SeriesValue(text, Bucket(route, "0.005")), Optional(5));
  EXPECT_THAT(SeriesValue(text, Bucket(route, "10")), Optional(5));
  EXPECT_THAT(SeriesValue(text, Bucket(route, "+Inf")), Optional(6));
  EXPECT_THAT(
      SeriesValue(text, "idem_http_request_duration_seconds_count{route=\"" + route + "\"}"),
      Optional(6));
  EXPECT_THAT(text, HasSubstr("idem_http_request_duration_seconds_sum{route=\"" + route +
                              "\"} 20.004001000\n"));
  EXPECT_EQ(m.latency_count(route), m.requests_by_class(route, 2));

  // Every bound, in order, each bucket at least the one before.
  const std::vector<std::string> les = {"0.0005", "0.001", "0.0025", "0.005", "0.01",
                                        "0.025",  "0.05",  "0.1",    "0.25",  "0.5",
                                        "1",      "2.5",   "5",      "10",    "+Inf"};
  ASSERT_EQ(les.size(), kLatencyBounds.size() + 1);
  std::optional<double> before = 0;
  for (const std::string& le : les) {
    std::optional<double> v = SeriesValue(text, Bucket(route, le));
    ASSERT_TRUE(v.has_value()) << le;
    EXPECT_GE(*v, *before) << le;
    before = v;
  }
  EXPECT_THAT(SeriesValue(text, Bucket("/healthz", "0.005")), Optional(0));
  EXPECT_THAT(SeriesValue(text, Bucket("/healthz", "0.01")), Optional(1));
}

TEST(MetricsTest, ConnectionsRefusalsBuildInfoAndFailOpen) {
  Metrics m(BuildInfo{.version = "1.2.3"});
  m.DeclareFailOpen("feed_like");
  m.ConnectionOpened();
  m.ConnectionOpened();
  m.ConnectionOpened();
  m.ConnectionClosed();
  m.CountRefused(Refusal::kMaxConnections);
  m.CountRefused(Refusal::kMaxConnections);
  m.CountRefused(Refusal::kFdExhausted);
  m.CountFailOpen("feed_like");
  m.CountFailOpen("not_declared");  // not counted: labels are fixed before serving
  m.CountStoreError();
  m.CountWait();
  const std::string text = m.Render();
  EXPECT_THAT(SeriesValue(text, "idem_http_connections_open"), Optional(2));
  EXPECT_THAT(SeriesValue(text, R"(idem_http_connections_refused_total{reason="max_connections"})"),
              Optional(2));
  EXPECT_THAT(SeriesValue(text, R"(idem_http_connections_refused_total{reason="fd_exhausted"})"),
              Optional(1));
  EXPECT_THAT(text,
              HasSubstr("# TYPE idem_build_info gauge\nidem_build_info{version=\"1.2.3\"} 1\n"));
  EXPECT_THAT(SeriesValue(text, R"(idem_fail_open_total{biz_type="feed_like"})"), Optional(1));
  EXPECT_THAT(text, Not(HasSubstr("not_declared")));
  EXPECT_THAT(SeriesValue(text, "idem_store_errors_total"), Optional(1));
  EXPECT_THAT(SeriesValue(text, "idem_claim_waits_total"), Optional(1));
  EXPECT_EQ(RenderStoreUp(true),
            "# HELP idem_store_up Whether the store answered and took writes during "
            "this scrape.\n# TYPE idem_store_up gauge\nidem_store_up 1\n");
  EXPECT_THAT(RenderStoreUp(false), HasSubstr("\nidem_store_up 0\n"));
}

TEST(MetricsTest, SectionsComeLast) {
  Metrics m;
  m.AddSection([] { return std::string("# a section\n"); });
  EXPECT_THAT(m.Render(),
              ::testing::EndsWith("idem_build_info{version=\"unknown\"} 1\n# a section\n"));
}

// No increment is lost when threads count at once, also while another renders.
TEST(MetricsTest, ConcurrentCountingIsExact) {
  Metrics m;
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kEach; ++i) {
        m.CountRequest(t % 2 == 0 ? Route::kClaims : Route::kRecord, i % 4 == 0 ? 409 : 201,
                       "acquired", microseconds(i % 2000));
        m.ConnectionOpened();
        m.CountRefused(Refusal::kMaxConnections);
        m.ConnectionClosed();
      }
    });
  }
  std::thread renderer([&m] {
    for (int i = 0; i < 50; ++i) (void)m.Render();
  });
  for (std::thread& t : threads) t.join();
  renderer.join();
  constexpr uint64_t kPerRoute = uint64_t{kThreads / 2} * kEach;
  for (std::string_view route : {"/v1/claims", "/v1/records/{biz_type}/{key}"}) {
    EXPECT_EQ(m.requests(route, 409), kPerRoute / 4) << route;
    EXPECT_EQ(m.requests(route, 201), kPerRoute * 3 / 4) << route;
    EXPECT_EQ(m.latency_count(route), kPerRoute) << route;
  }
  EXPECT_EQ(m.outcomes("acquired"), uint64_t{kThreads} * kEach);
  EXPECT_EQ(m.refused(Refusal::kMaxConnections), uint64_t{kThreads} * kEach);
  EXPECT_EQ(m.connections_open(), 0);
  const std::string text = m.Render();
  EXPECT_THAT(SeriesValue(text, Bucket("/v1/claims", "+Inf")), Optional(kPerRoute));
}

}  // namespace
}  // namespace idem::http
