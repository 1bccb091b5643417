// The Beast server in-process: keep-alive, 100-continue, limits, asynchronous
// waits and graceful shutdown, over a memory:// store.
//
// The Api runs on a fake clock, so a claim's wait (wait_ms) never runs out on its
// own: a waiting claim is answered only by what the test does (a completion, a
// shutdown). The tests wait for conditions (the waits counter, an answer) with
// generous deadlines instead of sleeping and measuring elapsed time.
#include "http/server/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http/api/api.h"
#include "http/client.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::idem::testing::kGenerousDeadline;
using ::idem::testing::WaitUntil;
using ::testing::HasSubstr;

// The engine under test: Beast when IDEM_HTTP=beast (the suite's second ctest
// run, as `idem serve` reads it), else lean, the default.
HttpEngine EngineUnderTest() {
  const char* http = std::getenv("IDEM_HTTP");
  return http != nullptr && std::string_view(http) == "beast" ? HttpEngine::kBeast
                                                               : HttpEngine::kLean;
}

// An Api on `guard` and `store` with `options` (tenant acme, token tok-a, unless
// they name tenants), served by a started Server on one I/O thread and `workers`
// worker threads; stopped when it goes.
struct StartedServer {
  StartedServer(Guard& guard, Store& store, ApiOptions options, int workers)
      : api(guard, store, metrics, WithTenant(std::move(options))) {
    ServerOptions so;
    so.engine = EngineUnderTest();
    so.port = 0;
    so.io_threads = 1;
    so.worker_threads = workers;
    server = std::make_unique<Server>(api, so);
    started = server->Start();
  }
  ~StartedServer() {
    server->Shutdown();
    server->Wait();
  }
  uint16_t port() const { return server->port(); }

  static ApiOptions WithTenant(ApiOptions o) {
    if (o.tenants.empty()) o.tenants = {Tenant::WithToken("acme", "tok-a")};
    return o;
  }

  Metrics metrics;
  Api api;
  std::unique_ptr<Server> server;
  absl::Status started;
};

// rocksdb:// behind the L1 (as `idem serve` opens it) in a fresh directory, and its
// server (ServerTest::ServeRocksdb); members end in reverse order, the server first.
struct RocksdbServed {
  ::idem::testing::TempDir dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<Guard> guard;
  std::unique_ptr<StartedServer> served;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, OpenStore("memory://"));
    guard_ = std::make_unique<Guard>(*store_);
    ApiOptions o;
    o.tenants = {Tenant::WithToken("acme", "tok-a")};
    o.max_body_bytes = 1000;
    o.clock = &clock_;
    api_ = std::make_unique<Api>(*guard_, *store_, metrics_, o);
    ServerOptions so;
    so.engine = EngineUnderTest();
    so.port = 0;
    so.io_threads = 1;
    so.worker_threads = 4;
    so.max_body_bytes = 1000;
    so.header_timeout = absl::Milliseconds(300);
    so.idle_timeout = absl::Seconds(60);
    server_ = std::make_unique<Server>(*api_, so);
    ASSERT_OK(server_->Start());
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) {
      server_->Shutdown();
      server_->Wait();
    }
  }

  static std::string ClaimBody(const std::string& key, const std::string& extra = "") {
    return R"({"biz_type":"t","key":")" + key + "\"" + extra + "}";
  }

  // Opens `out`'s store and starts its server, with two worker threads.
  void ServeRocksdb(RocksdbServed& out) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner,
                         OpenStore("rocksdb://" + out.dir.file("db")));
    ASSERT_OK_AND_ASSIGN(out.store, NewCachingStore(std::move(inner)));
    out.guard = std::make_unique<Guard>(*out.store);
    out.served = std::make_unique<StartedServer>(*out.guard, *out.store,
                                                 ApiOptions{.clock = &clock_}, /*workers=*/2);
    ASSERT_OK(out.served->started);
  }

  // Claims that met a live lease and started waiting (idem_claim_waits_total).
  uint64_t Waits() const { return Counter(metrics_, "idem_claim_waits_total"); }

  // The value of the unlabelled counter `name` in `metrics`' exposition.
  static uint64_t Counter(const Metrics& metrics, const std::string& name) {
    const std::string text = metrics.Render();
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? ~uint64_t{0} : std::stoull(text.substr(at + name.size() + 2));
  }

  // Starts at the real time so Retry-After stays meaningful against the Guard's
  // (real) lease times; it only moves when a test advances it.
  ::idem::testing::FakeClock clock_{absl::Now()};
  std::unique_ptr<Store> store_;
  std::unique_ptr<Guard> guard_;
  Metrics metrics_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
};

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  Client c(port_);
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 5; ++i) {
    ClientResponse r = c.Send("POST", "/v1/claims", ClaimBody("k" + std::to_string(i)), "tok-a");
    ASSERT_EQ(r.status, 201) << r.error << r.body;
    EXPECT_TRUE(r.keep_alive);
  }
  ClientResponse h = c.Send("GET", "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, R"({"status":"ok"})");
  EXPECT_EQ(metrics_.requests("/v1/claims", 201), 5u);
}

// Requests a client pipelines (RFC 9112 §9.3.2: several written before the first
// answer) arrive in one read and are answered in order, each after the one before:
// on memory://, whose calls go to the worker pool, and on rocksdb:// behind the L1,
// where claims are answered from the writer thread and duplicates at once.
TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  auto claim = [](const std::string& key) {
    const std::string body = ClaimBody(key);
    return "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const std::string complete_p = R"({"biz_type":"t","key":"P","token":1,"result":7})";
  const std::string complete =
      "POST /v1/claims/complete HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
      "Content-Length: " +
      std::to_string(complete_p.size()) + "\r\n\r\n" + complete_p;
  const std::string health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  // claim P, the same claim while P is held, a health check, P completed, P again
  // (now a replay), then a chunked claim of Q.
  const std::string chunked_body = ClaimBody("Q");
  char size[16];
  std::snprintf(size, sizeof size, "%zx", chunked_body.size());
  const std::vector<std::string> requests = {
      claim("P"),
      claim("P"),
      health,
      complete,
      claim("P"),
      "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
          std::string(size) + "\r\n" + chunked_body + "\r\n0\r\n\r\n"};
  const std::vector<int> statuses = {201, 409, 200, 200, 200, 201};

  auto check = [&](uint16_t port, const std::string& where) {
    Client c(port);
    ASSERT_TRUE(c.WritePipelined(requests)) << where;
    for (size_t i = 0; i < statuses.size(); ++i) {
      ClientResponse r = c.Read();
      EXPECT_EQ(r.status, statuses[i]) << where << ", answer " << i << ": " << r.error << r.body;
      EXPECT_TRUE(r.keep_alive) << where << ", answer " << i;
      if (i == 4) {
        EXPECT_EQ(r.header("idempotent-replayed"), "true") << where << ": " << r.body;
      }
    }
  };
  check(port_, "memory://");

  RocksdbServed rocksdb;
  ASSERT_NO_FATAL_FAILURE(ServeRocksdb(rocksdb));
  check(rocksdb.served->port(), "rocksdb://");
}

TEST_F(ServerTest, Expect100ContinueIsAnswered) {
  Client c(port_);
  std::string body = ClaimBody("k");
  ASSERT_TRUE(
      c.WriteRaw("POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
                 "Expect: 100-continue\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n"));
  ClientResponse cont = c.Read();
  EXPECT_EQ(cont.status, 100) << cont.error;
  ASSERT_TRUE(c.WriteRaw(body));
  ClientResponse r = c.Read();
  EXPECT_EQ(r.status, 201) << r.error << r.body;
}

TEST_F(ServerTest, DeclaredBodyOverTheLimitIs413AndCloses) {
  Client c(port_);
  ASSERT_TRUE(
      c.WriteRaw("POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
                 "Content-Length: 1001\r\n\r\n"));
  ClientResponse r = c.Read();
  EXPECT_EQ(r.status, 413) << r.error;
  EXPECT_EQ(r.header("content-type"), "application/problem+json");
  EXPECT_FALSE(r.keep_alive);
  EXPECT_TRUE(c.ClosedByPeer());
}

// The token is checked before the declared length (authentication once the
// headers are in, before the body): a client without one learns nothing but 401, and neither
// body is read.
TEST_F(ServerTest, DeclaredBodyOverTheLimitWithoutATokenIs401) {
  for (const char* auth : {"", "Authorization: Bearer wrong\r\n"}) {
    Client c(port_);
    ASSERT_TRUE(c.WriteRaw(std::string("POST /v1/claims HTTP/1.1\r\nHost: x\r\n") + auth +
                           "Content-Length: 10000000000\r\n\r\n"));
    ClientResponse r = c.Read();
    EXPECT_EQ(r.status, 401) << auth << r.error;
    EXPECT_FALSE(r.keep_alive);
    EXPECT_TRUE(c.ClosedByPeer());
  }
}

// Chunked, the limit holds as the chunks arrive.
TEST_F(ServerTest, ChunkedBodyOverTheLimitIs413) {
  Client c(port_);
  ASSERT_TRUE(
      c.WriteRaw("POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-a\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n3e8\r\n" +
                 std::string(1000, ' ') + "\r\n3e8\r\n" + std::string(1000, ' ') + "\r\n"));
  ClientResponse r = c.Read();
  EXPECT_EQ(r.status, 413) << r.error;
  EXPECT_FALSE(r.keep_alive);
}

TEST_F(ServerTest, SentBodyOverTheLimitIs413) {
  Client c(port_);
  ClientResponse r = c.Send("POST", "/v1/claims", std::string(5000, ' '), "tok-a");
  EXPECT_EQ(r.status, 413) << r.error;
}

// A malformed field line, and two Host fields (RFC 9112 §3.2: a server MUST answer
// 400; the request's authority is ambiguous), are 400 and close the connection.
TEST_F(ServerTest, MalformedHttpIs400AndCloses) {
  const std::pair<std::string, std::string> cases[] = {
      {"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n", "bad_http"},
      {"GET /healthz HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n\r\n",
       "more than one Host header"},
  };
  for (const auto& [request, says] : cases) {
    Client c(port_);
    ASSERT_TRUE(c.WriteRaw(request));
    ClientResponse r = c.Read();
    EXPECT_EQ(r.status, 400) << request << r.error;
    EXPECT_EQ(r.header("content-type"), "application/problem+json");
    EXPECT_THAT(r.body, HasSubstr(says));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  EXPECT_EQ(Fetch(port_, "GET", "/healthz").status, 200);  // one Host is fine
}

// A header trickled in (slowloris) is cut off at header_timeout with 408, not
// held for the keep-alive idle timeout (60 s here) and then dropped silently. A
// connection idle between requests is not: the deadline starts at the first byte.
TEST_F(ServerTest, SlowHeaderIs408AtTheHeaderDeadline) {
  Client slow(port_);
  ASSERT_TRUE(slow.WriteRaw("GET /healthz HTTP/1.1\r\nHost: x\r\n"));  // never finished
  ClientResponse r = slow.Read();  // the client's own limit is 40 s
  EXPECT_EQ(r.status, 408) << r.error;
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_TRUE(slow.ClosedByPeer());

  Client idle(port_);
  ClientResponse first = idle.Send("GET", "/healthz");
  ASSERT_EQ(first.status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle past header_timeout
  EXPECT_EQ(idle.Send("GET", "/healthz").status, 200) << "an idle connection was cut";
}

TEST_F(ServerTest, WaitingClaimsDoNotBlockTheServer) {
  ASSERT_EQ(Fetch(port_, "POST", "/v1/claims", ClaimBody("K"), "tok-a").status, 201);
  // More waiters than worker and I/O threads together.
  std::vector<std::future<ClientResponse>> waiters;
  for (int i = 0; i < 10; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      return Fetch(port_, "POST", "/v1/claims", ClaimBody("K", R"(,"wait_ms":10000)"), "tok-a");
    }));
  }
  ASSERT_TRUE(WaitUntil([&] { return Waits() == 10; })) << metrics_.Render();
  // With all ten waiting, the server still answers another request. A server whose
  // waiters held its threads would answer only once they were (the fake clock never
  // ends their wait), so the request would not come back at all.
  auto health = std::async(std::launch::async, [&] { return Fetch(port_, "GET", "/healthz"); });
  const bool answered = health.wait_for(kGenerousDeadline) == std::future_status::ready;
  EXPECT_TRUE(answered) << "GET /healthz got no answer while claims were waiting";
  if (!answered) clock_.Advance(absl::Hours(1));  // ends the waits, so the test can finish
  EXPECT_EQ(health.get().status, 200);
  for (auto& w : waiters) {
    EXPECT_EQ(w.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a waiter was answered before the holder completed";
  }
  ClientResponse done =
      Fetch(port_, "POST", "/v1/claims/complete",
            R"({"biz_type":"t","key":"K","token":1,"result":{"n" : 1}})", "tok-a");
  ASSERT_EQ(done.status, 200) << done.body;
  // Replayed, not 409: the completion woke them, their wait never ran out.
  for (auto& w : waiters) {
    ClientResponse r = w.get();
    EXPECT_EQ(r.status, 200) << r.error << r.body;
    EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":{"n" : 1}})");
    EXPECT_EQ(r.header("idempotent-replayed"), "true");
  }
}

// Attach without polling: with the poll timer set to an hour, a
// waiter is still answered as soon as the holder completes through the same
// process, because the complete wakes it; and while it waits its timer never
// fires, so it read the store once (when it started waiting) or not at all.
TEST_F(ServerTest, ACompleteWakesItsWaitersWithoutTheirTimer) {
  ApiOptions o;
  o.clock = &clock_;
  o.wait_poll_min = absl::Hours(1);
  o.wait_poll_max = absl::Hours(1);
  StartedServer served(*guard_, *store_, o, /*workers=*/2);
  ASSERT_OK(served.started);
  const Metrics& metrics = served.metrics;
  const uint16_t port = served.port();
  ASSERT_EQ(Fetch(port, "POST", "/v1/claims", ClaimBody("W"), "tok-a").status, 201);
  auto polls = [&] { return Counter(metrics, "idem_claim_polls_total"); };
  std::vector<std::future<ClientResponse>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      return Fetch(port, "POST", "/v1/claims", ClaimBody("W", R"(,"wait_ms":30000)"), "tok-a");
    }));
  }
  const std::string waits = "\nidem_claim_waits_total 3\n";
  ASSERT_TRUE(WaitUntil([&] { return metrics.Render().find(waits) != std::string::npos; }));
  ClientResponse done = Fetch(port, "POST", "/v1/claims/complete",
                              R"({"biz_type":"t","key":"W","token":1,"result":[1]})", "tok-a");
  ASSERT_EQ(done.status, 200) << done.body;
  for (auto& w : waiters) {
    // Their timers are an hour away: only the wake-up can answer them in time.
    ASSERT_EQ(w.wait_for(kGenerousDeadline), std::future_status::ready)
        << "a waiter was not woken by the complete";
    ClientResponse r = w.get();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":[1]})");
  }
  EXPECT_LE(polls(), 3u) << metrics.Render();  // one read each when woken, no more
}

// What the network threads hand to the worker pool is counted
// (idem_http_pool_requests_total): on memory://, whose calls block, every claim and
// complete; on rocksdb:// behind the L1 (as `idem serve` opens it) no claim,
// complete or duplicate of keys nobody else holds, while a page of records is read
// on the pool.
TEST_F(ServerTest, CountsTheRequestsHandedToTheWorkerPool) {
  ASSERT_EQ(Fetch(port_, "POST", "/v1/claims", ClaimBody("P"), "tok-a").status, 201);
  ASSERT_EQ(Fetch(port_, "POST", "/v1/claims/complete",
                  R"({"biz_type":"t","key":"P","token":1,"result":1})", "tok-a")
                .status,
            200);
  EXPECT_EQ(Counter(metrics_, "idem_http_pool_requests_total"), 2u) << metrics_.Render();

  RocksdbServed rocksdb;
  ASSERT_NO_FATAL_FAILURE(ServeRocksdb(rocksdb));
  const Metrics& metrics = rocksdb.served->metrics;
  const uint16_t port = rocksdb.served->port();
  for (int i = 0; i < 10; ++i) {
    const std::string key = "K" + std::to_string(i);
    ASSERT_EQ(Fetch(port, "POST", "/v1/claims", ClaimBody(key), "tok-a").status, 201);
    ASSERT_EQ(Fetch(port, "POST", "/v1/claims/complete",
                    R"({"biz_type":"t","key":")" + key + R"(","token":1,"result":1})", "tok-a")
                  .status,
              200);
  }
  ClientResponse replay = Fetch(port, "POST", "/v1/claims", ClaimBody("K0"), "tok-a");
  EXPECT_EQ(replay.status, 200) << replay.body;
  EXPECT_EQ(Counter(metrics, "idem_http_pool_requests_total"), 0u) << metrics.Render();
  ClientResponse page = Fetch(port, "GET", "/v1/records", "", "tok-a");
  EXPECT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(Counter(metrics, "idem_http_pool_requests_total"), 1u) << metrics.Render();
}

// A store whose transactions wait while `blocked` is set: it holds the server's
// only worker thread in a store call.
class BlockingStore : public StoreBackend {
 public:
  explicit BlockingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    entered_ = true;
    WaitUntil([this] { return !blocked_.load(); }, idem::testing::kGenerousDeadline,
              std::chrono::milliseconds(1));
    return inner_->Begin();
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant, std::string_view key) override {
    return inner_->Get(tenant, key);
  }
  absl::Status Ping() override { return inner_->Ping(); }
  std::string_view url() const override { return inner_->url(); }
  std::atomic<bool> blocked_{false};
  std::atomic<bool> entered_{false};

 private:
  std::unique_ptr<Store> inner_;
};

// The lean duplicate path: a duplicate of a key whose final record
// is in the cache's L1 is answered on the I/O thread, so it is answered even while
// the only worker thread is stuck in a store call.
TEST(ServerFastPath, DuplicatesAreAnsweredWhileEveryWorkerIsBusy) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> memory, OpenStore("memory://"));
  auto blocking_owner = std::make_unique<BlockingStore>(std::move(memory));
  BlockingStore* blocking = blocking_owner.get();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       NewCachingStore(std::move(blocking_owner), {.l1_entries = 1000}));
  Guard guard(*store);
  StartedServer served(guard, *store, ApiOptions{}, /*workers=*/1);
  ASSERT_OK(served.started);
  Api& api = served.api;
  const uint16_t port = served.port();
  const std::string claim = R"({"biz_type":"t","key":"D","fingerprint":"f1"})";
  ClientResponse first = Fetch(port, "POST", "/v1/claims", claim, "tok-a");
  ASSERT_EQ(first.status, 201) << first.body;
  ASSERT_EQ(Fetch(port, "POST", "/v1/claims/complete",
                  R"({"biz_type":"t","key":"D","token":1,"result":{"id":7}})", "tok-a")
                .status,
            200);
  // The only worker is now held in a store call by a first arrival.
  blocking->blocked_ = true;
  blocking->entered_ = false;
  auto stuck = std::async(std::launch::async, [&] {
    return Fetch(port, "POST", "/v1/claims", R"({"biz_type":"t","key":"new"})", "tok-a");
  });
  ASSERT_TRUE(WaitUntil([&] { return blocking->entered_.load(); }));
  auto duplicate = std::async(std::launch::async,
                              [&] { return Fetch(port, "POST", "/v1/claims", claim, "tok-a"); });
  const bool answered = duplicate.wait_for(kGenerousDeadline) == std::future_status::ready;
  blocking->blocked_ = false;  // whatever happened, let the worker go
  ASSERT_TRUE(answered) << "a duplicate waited for the worker pool";
  ClientResponse r = duplicate.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":{"id":7}})");
  EXPECT_EQ(r.header("idempotent-replayed"), "true");
  EXPECT_EQ(stuck.get().status, 201);
  // Decided answers other than a replay take the same path; a wrong token does not.
  HttpRequest mismatch{.method = "POST", .target = "/v1/claims", .authorization = "Bearer tok-a",
                       .body = R"({"biz_type":"t","key":"D","fingerprint":"f2"})"};
  EXPECT_EQ(api.Begin(mismatch)->AnswerWithoutBlocking()->response.status, 422);
  HttpRequest wrong{.method = "POST", .target = "/v1/claims", .authorization = "Bearer wrong",
                    .body = claim};
  std::unique_ptr<Handler::Call> refused = api.Begin(wrong);
  EXPECT_FALSE(refused->AnswerWithoutBlocking().has_value());
  EXPECT_EQ(refused->Answer().response.status, 401);
  // An unknown key goes to the pool with its parsed body, which Answer() uses.
  HttpRequest unknown{.method = "POST", .target = "/v1/claims", .authorization = "Bearer tok-a",
                      .body = R"({"biz_type":"t","key":"unknown"})"};
  std::unique_ptr<Handler::Call> call = api.Begin(unknown);
  EXPECT_FALSE(call->AnswerWithoutBlocking().has_value());
  call->request().body = R"({"biz_type":"t","key":"ignored-once-parsed"})";
  EXPECT_EQ(call->Answer().response.status, 201);
  HttpRequest again{.method = "POST", .target = "/v1/claims", .authorization = "Bearer tok-a",
                    .body = R"({"biz_type":"t","key":"unknown"})"};
  EXPECT_EQ(api.Handle(again).response.status, 409);  // "unknown" is the key that was claimed
}

TEST_F(ServerTest, GracefulShutdownAnswersInFlightAndClosesIdle) {
  ASSERT_EQ(Fetch(port_, "POST", "/v1/claims", ClaimBody("K"), "tok-a").status, 201);
  Client idle(port_);
  ASSERT_EQ(idle.Send("GET", "/healthz").status, 200);
  auto waiter = std::async(std::launch::async, [&] {
    return Fetch(port_, "POST", "/v1/claims", ClaimBody("K", R"(,"wait_ms":20000)"), "tok-a");
  });
  ASSERT_TRUE(WaitUntil([&] { return Waits() == 1; })) << metrics_.Render();
  server_->Shutdown();
  // The fake clock never ends the wait: only the shutdown can answer it.
  const bool answered = waiter.wait_for(kGenerousDeadline) == std::future_status::ready;
  EXPECT_TRUE(answered) << "Shutdown() did not answer the waiting claim";
  if (!answered) clock_.Advance(absl::Hours(1));  // ends the wait, so the test can finish
  ClientResponse r = waiter.get();
  EXPECT_EQ(r.status, 409) << r.error;
  EXPECT_THAT(r.body, HasSubstr(R"("outcome":"in_progress")"));
  EXPECT_FALSE(r.keep_alive);
  EXPECT_TRUE(idle.ClosedByPeer(kGenerousDeadline));
  server_->Wait();
  Client late(port_);
  EXPECT_FALSE(late.connected());
  server_.reset();
}

}  // namespace
}  // namespace idem::http
