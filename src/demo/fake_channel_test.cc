// The fake payment channel and its client over real TCP on port 0.
#include "refund/fake_channel.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "refund/channel_book.h"
#include "refund/channel_client.h"
#include "testing/status_matchers.h"

extern char** environ;

namespace idem::refund {
namespace {

using ::idem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;
using Clock = std::chrono::steady_clock;

constexpr absl::Duration kClientTimeout = absl::Milliseconds(100);
constexpr absl::Duration kResponseDelay = absl::Milliseconds(300);
// For tests that classify every answer by the seed: an answer without a fault came
// back after more than 100 ms under ASan on a loaded 2-core CI machine and read as a
// timeout ('t' for 'o'). A second of margin on each side of the client's timeout
// keeps the classification a property of the seed alone.
constexpr absl::Duration kPatientTimeout = absl::Seconds(1);
constexpr absl::Duration kHeldBack = absl::Seconds(2);

std::unique_ptr<FakeChannelServer> StartServer(double fault_rate = 0, uint64_t seed = 1,
                                               absl::Duration delay = kResponseDelay) {
  FakeChannelOptions options;
  options.fault_rate = fault_rate;
  options.seed = seed;
  options.response_delay = delay;
  absl::StatusOr<std::unique_ptr<FakeChannelServer>> server =
      FakeChannelServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

ChannelClient ClientFor(const FakeChannelServer& server,
                        absl::Duration timeout = absl::Seconds(2)) {
  return ChannelClient("127.0.0.1", server.port(), timeout);
}

struct RawReply {
  int status = 0;
  std::string body;
};

// A request the client would never send (bad JSON, unknown routes).
RawReply Raw(uint16_t port, boost::beast::http::verb verb, const std::string& target,
             const std::string& body = "") {
  namespace bhttp = boost::beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket socket(ioc);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  bhttp::request<bhttp::string_body> request(verb, target, 11);
  request.set(bhttp::field::host, "127.0.0.1");
  request.set(bhttp::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  bhttp::write(socket, request);
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(socket, buffer, response);
  return {static_cast<int>(response.result_int()), response.body()};
}

// 'o' ok, 't' deadline exceeded, 'b' busy (503), 'l' lost (closed, no answer).
char Classify(const absl::Status& s) {
  if (s.ok()) return 'o';
  if (s.code() == absl::StatusCode::kDeadlineExceeded) return 't';
  if (s.code() == absl::StatusCode::kUnavailable) {
    if (absl::StrContains(s.message(), "channel busy")) return 'b';
    if (absl::StrContains(s.message(), "without a response")) return 'l';
  }
  return '?';
}

TEST(FakeChannelTest, ReverseThenLookupFindsIt) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server);

  ASSERT_OK_AND_ASSIGN(std::string id, client.Reverse("refund-1", "order-1", 1999));
  EXPECT_EQ(id, "rv-1");
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> found, client.Lookup("refund-1"));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_EQ(found[0].id, "rv-1");
  EXPECT_EQ(found[0].request_id, "refund-1");
  EXPECT_EQ(found[0].order_no, "order-1");
  EXPECT_EQ(found[0].amount, 1999);
  EXPECT_FALSE(found[0].cancelled);
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> by_order, client.LookupOrder("order-1"));
  ASSERT_THAT(by_order, SizeIs(1));
  EXPECT_EQ(by_order[0].id, "rv-1");
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> none, client.Lookup("refund-2"));
  EXPECT_THAT(none, IsEmpty());
}

TEST(FakeChannelTest, SameRequestIdTwiceMakesTwoReversals) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server);

  ASSERT_OK_AND_ASSIGN(std::string first, client.Reverse("refund-1", "order-1", 500));
  ASSERT_OK_AND_ASSIGN(std::string second, client.Reverse("refund-1", "order-1", 500));
  EXPECT_EQ(first, "rv-1");
  EXPECT_EQ(second, "rv-2");
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> found, client.Lookup("refund-1"));
  ASSERT_THAT(found, SizeIs(2));
  EXPECT_EQ(found[0].id, "rv-1");
  EXPECT_EQ(found[1].id, "rv-2");
  ASSERT_OK_AND_ASSIGN(ChannelStats stats, client.Stats());
  EXPECT_EQ(stats.reversals, 2);
  EXPECT_EQ(stats.cancelled, 0);
  EXPECT_THAT(stats.by_order, ElementsAre(Pair("order-1", 2)));
}

TEST(FakeChannelTest, CancelMarksCancelledAndStatsCountActiveOnly) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server);
  ASSERT_OK(client.Reverse("refund-a", "order-1", 100));
  ASSERT_OK(client.Reverse("refund-a", "order-1", 100));
  ASSERT_OK(client.Reverse("refund-b", "order-2", 250));

  ASSERT_OK_AND_ASSIGN(int cancelled, client.Cancel("refund-a"));
  EXPECT_EQ(cancelled, 2);
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> found, client.Lookup("refund-a"));
  ASSERT_THAT(found, SizeIs(2));
  EXPECT_TRUE(found[0].cancelled);
  EXPECT_TRUE(found[1].cancelled);
  ASSERT_OK_AND_ASSIGN(int again, client.Cancel("refund-a"));
  EXPECT_EQ(again, 0);

  ASSERT_OK_AND_ASSIGN(ChannelStats stats, client.Stats());
  EXPECT_EQ(stats.reversals, 3);
  EXPECT_EQ(stats.cancelled, 2);
  EXPECT_THAT(stats.by_order, ElementsAre(Pair("order-1", 0), Pair("order-2", 1)));
  EXPECT_EQ(stats.timeout_faults, 0);
  EXPECT_EQ(stats.lost_faults, 0);
  EXPECT_EQ(stats.busy_faults, 0);
}

TEST(FakeChannelTest, CancelUnknownRequestIdCancelsNothing) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server);
  ASSERT_OK(client.Reverse("refund-1", "order-1", 100));
  ASSERT_OK_AND_ASSIGN(int cancelled, client.Cancel("refund-unknown"));
  EXPECT_EQ(cancelled, 0);
  ASSERT_OK_AND_ASSIGN(ChannelStats stats, client.Stats());
  EXPECT_EQ(stats.cancelled, 0);
  EXPECT_THAT(stats.by_order, ElementsAre(Pair("order-1", 1)));
}

TEST(FakeChannelTest, BadBodiesAre400NamingTheField) {
  using boost::beast::http::verb;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();

  RawReply r = Raw(port, verb::post, "/reversals", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"body is not valid JSON"})");
  r = Raw(port, verb::post, "/reversals", "[1]");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"body must be a JSON object"})");
  r = Raw(port, verb::post, "/reversals", R"({"order_no":"o","amount":5})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"missing field \"request_id\""})");
  r = Raw(port, verb::post, "/reversals", R"({"request_id":"r","order_no":"o","amount":"5"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"json({"error":"field \"amount\" must be a positive integer (cents)"})json");
  r = Raw(port, verb::post, "/reversals", R"({"request_id":"r","order_no":"o","amount":1.5})");
  EXPECT_EQ(r.status, 400);
  r = Raw(port, verb::post, "/reversals/cancel", R"({"request_id":7})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":"field \"request_id\" must be a non-empty string"})");

  ChannelClient client = ClientFor(*server);
  EXPECT_THAT(client.Reverse("", "order-1", 5), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(client.Reverse("", "order-1", 5).status().message()),
              HasSubstr("\"request_id\" must be a non-empty string"));
  absl::StatusOr<std::string> no_order = client.Reverse("refund-1", "", 5);
  EXPECT_THAT(no_order, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(no_order.status().message()), HasSubstr("\"order_no\""));
  absl::StatusOr<std::string> zero = client.Reverse("refund-1", "order-1", 0);
  EXPECT_THAT(zero, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(zero.status().message()),
              HasSubstr("\"amount\" must be a positive integer"));
  EXPECT_THAT(client.Cancel(""), StatusIs(absl::StatusCode::kInvalidArgument));

  ASSERT_OK_AND_ASSIGN(ChannelStats stats, client.Stats());
  EXPECT_EQ(stats.reversals, 0);
}

TEST(FakeChannelTest, UnknownRoutesMethodsAndQueryParameters) {
  using boost::beast::http::verb;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();
  EXPECT_EQ(Raw(port, verb::get, "/healthz").status, 200);
  EXPECT_EQ(Raw(port, verb::get, "/nope").status, 404);
  EXPECT_EQ(Raw(port, verb::delete_, "/reversals").status, 405);
  EXPECT_EQ(Raw(port, verb::get, "/reversals/cancel").status, 405);
  RawReply r = Raw(port, verb::get, "/reversals?merchant=1");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body,
            R"json({"error":"unknown query parameter \"merchant\" (request_id, order_no)"})json");
  EXPECT_EQ(Raw(port, verb::get, "/reversals?request_id=%zz").status, 400);
  r = Raw(port, verb::get, "/reversals");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"reversals":[]})");
}

TEST(FakeChannelTest, LookupUrlEncodesTheRequestId) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server);
  const std::string odd = "a b&request_id=c/d?e%f+g\xc3\xa9";
  ASSERT_OK(client.Reverse(odd, "order-1", 100));
  ASSERT_OK(client.Reverse("a b", "order-1", 100));
  ASSERT_OK_AND_ASSIGN(std::vector<Reversal> found, client.Lookup(odd));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_EQ(found[0].request_id, odd);
  EXPECT_EQ(found[0].id, "rv-1");
}

// fault_rate 1: no call succeeds; after a timeout or a lost answer the reversal exists,
// after a busy answer it does not.
TEST(FakeChannelTest, FaultRateOneFailsEveryCallButRecordsAllButBusy) {
  auto server = StartServer(/*fault_rate=*/1, /*seed=*/42, kHeldBack);
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server, kPatientTimeout);
  ChannelClient lookup = ClientFor(*server);
  int timeouts = 0, lost = 0, busy = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string request_id = absl::StrCat("refund-", i);
    absl::StatusOr<std::string> r = client.Reverse(request_id, "order-1", 100);
    ASSERT_OK_AND_ASSIGN(std::vector<Reversal> found, lookup.Lookup(request_id));
    switch (Classify(r.status())) {
      case 't':
        ++timeouts;
        EXPECT_THAT(std::string(r.status().message()),
                    HasSubstr("no response to POST /reversals within 1s (request_id=" +
                              request_id + ")"));
        EXPECT_THAT(found, SizeIs(1)) << request_id;
        break;
      case 'l':
        ++lost;
        EXPECT_THAT(found, SizeIs(1)) << request_id;
        break;
      case 'b':
        ++busy;
        EXPECT_THAT(found, IsEmpty()) << request_id;
        break;
      default:
        ADD_FAILURE() << "call " << i << ": " << r.status();
    }
  }
  // Seed 42 draws "lttttbllltbt" (the sequence is fixed by the seed).
  EXPECT_EQ(timeouts, 6);
  EXPECT_EQ(lost, 4);
  EXPECT_EQ(busy, 2);
  ASSERT_OK_AND_ASSIGN(ChannelStats stats, lookup.Stats());
  EXPECT_EQ(stats.reversals, timeouts + lost);
  EXPECT_EQ(stats.timeout_faults, timeouts);
  EXPECT_EQ(stats.lost_faults, lost);
  EXPECT_EQ(stats.busy_faults, busy);
  EXPECT_THAT(stats.by_order, ElementsAre(Pair("order-1", timeouts + lost)));
}

TEST(FakeChannelTest, SameSeedSameFaultSequence) {
  // 3 timeouts of kPatientTimeout each: ~6 s for both runs.
  auto run = [&](uint64_t seed) {
    auto server = StartServer(/*fault_rate=*/0.6, seed, kHeldBack);
    EXPECT_NE(server, nullptr);
    if (server == nullptr) return std::string();
    ChannelClient client = ClientFor(*server, kPatientTimeout);
    std::string sequence;
    for (int i = 0; i < 16; ++i) {
      sequence += Classify(client.Reverse(absl::StrCat("refund-", i), "order-1", 100).status());
    }
    return sequence;
  };
  const std::string first = run(7);
  const std::string second = run(7);
  EXPECT_EQ(first, second);
  // std::mt19937_64 is fully specified, so this holds on every platform.
  EXPECT_EQ(first, "obtboolllottbbbl");
}

// The probabilities fake_channel.h documents, over many draws (no network).
TEST(ChannelBookTest, FaultRatesMatchTheDocumentedTable) {
  constexpr int kRequests = 20000;
  constexpr double kRate = 0.6;
  ChannelBook book(kRate, /*seed=*/5);
  int busy = 0, timeout = 0, lost = 0, ok = 0;
  for (int i = 0; i < kRequests; ++i) {
    ChannelReply reply =
        book.Handle("POST", "/reversals",
                    absl::StrCat(R"({"request_id":"r)", i, R"(","order_no":"o","amount":1})"));
    if (reply.status == 503) {
      ++busy;
    } else if (reply.status == 201 && reply.fault == ChannelFault::kTimeout) {
      ++timeout;
    } else if (reply.status == 201 && reply.fault == ChannelFault::kLost) {
      ++lost;
    } else if (reply.status == 201 && reply.fault == ChannelFault::kNone) {
      ++ok;
    } else {
      ADD_FAILURE() << reply.status << " " << reply.body;
    }
  }
  const double n = kRequests;
  EXPECT_NEAR(busy / n, kRate / 4, 0.01);
  EXPECT_NEAR(timeout / n, (1 - kRate / 4) * kRate / 2, 0.01);
  EXPECT_NEAR(lost / n, (1 - kRate / 4) * kRate / 2, 0.01);
  EXPECT_NEAR(ok / n, (1 - kRate / 4) * (1 - kRate), 0.01);
  ChannelReply stats = book.Handle("GET", "/stats", "");
  EXPECT_EQ(stats.body,
            absl::StrCat(R"({"by_order":{"o":)", kRequests - busy, R"(},"cancelled":0,)",
                         R"("faults":{"busy":)", busy, R"(,"lost":)", lost, R"(,"timeout":)",
                         timeout, R"(},"reversals":)", kRequests - busy, "}"));
}

TEST(ChannelBookTest, FaultRateZeroNeverFaults) {
  ChannelBook book(0, /*seed=*/5);
  for (int i = 0; i < 1000; ++i) {
    ChannelReply reply =
        book.Handle("POST", "/reversals", R"({"request_id":"r","order_no":"o","amount":1})");
    ASSERT_EQ(reply.status, 201);
    ASSERT_EQ(reply.fault, ChannelFault::kNone);
  }
}

TEST(FakeChannelTest, ClientTimeoutIsEnforced) {
  // The answer is held back far longer than the client waits, so a stalled machine
  // (a loaded CI run under ASan) cannot make the client's 100 ms look like the
  // server's delay; Stop() does not wait for held-back answers.
  constexpr absl::Duration kLongHold = absl::Seconds(5);
  auto server = StartServer(/*fault_rate=*/1, /*seed=*/42, kLongHold);
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server, kClientTimeout);
  int timeouts = 0;
  for (int i = 0; i < 12 && timeouts < 2; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::string> r = client.Reverse(absl::StrCat("refund-", i), "order-1", 100);
    const auto elapsed = Clock::now() - start;
    if (r.status().code() != absl::StatusCode::kDeadlineExceeded) continue;
    ++timeouts;
    EXPECT_GE(elapsed, std::chrono::milliseconds(95));
    EXPECT_LT(elapsed, absl::ToChronoMilliseconds(kLongHold));
  }
  EXPECT_EQ(timeouts, 2);
}

TEST(FakeChannelTest, PatientClientGetsTheHeldBackAnswer) {
  auto server = StartServer(/*fault_rate=*/1, /*seed=*/42, absl::Milliseconds(150));
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server, absl::Seconds(2));
  for (int i = 0; i < 12; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::string> r = client.Reverse(absl::StrCat("refund-", i), "order-1", 100);
    if (!r.ok()) continue;
    EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150));
    ASSERT_OK_AND_ASSIGN(ChannelStats stats, client.Stats());
    EXPECT_EQ(*r, absl::StrCat("rv-", stats.reversals));
    return;
  }
  ADD_FAILURE() << "no timeout fault in 12 calls";
}

TEST(FakeChannelTest, StopDoesNotWaitForHeldBackAnswers) {
  auto server = StartServer(/*fault_rate=*/1, /*seed=*/42, absl::Seconds(30));
  ASSERT_NE(server, nullptr);
  ChannelClient client = ClientFor(*server, kClientTimeout);
  bool held = false;
  for (int i = 0; i < 12 && !held; ++i) {
    held = client.Reverse(absl::StrCat("refund-", i), "order-1", 100).status().code() ==
           absl::StatusCode::kDeadlineExceeded;
  }
  ASSERT_TRUE(held);
  const Clock::time_point start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_THAT(client.Stats(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(FakeChannelTest, ConcurrentClientsAllRecorded) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ChannelClient client = ClientFor(*server);
      for (int i = 0; i < kPerThread; ++i) {
        absl::StatusOr<std::string> id =
            client.Reverse(absl::StrCat("refund-", t, "-", i), absl::StrCat("order-", t), 100);
        EXPECT_TRUE(id.ok()) << id.status();
        if (id.ok()) ids[t].push_back(*id);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> distinct;
  for (const auto& per_thread : ids) distinct.insert(per_thread.begin(), per_thread.end());
  EXPECT_EQ(distinct.size(), size_t{kThreads * kPerThread});
  ASSERT_OK_AND_ASSIGN(ChannelStats stats, ClientFor(*server).Stats());
  EXPECT_EQ(stats.reversals, kThreads * kPerThread);
  ASSERT_EQ(stats.by_order.size(), size_t{kThreads});
  for (const auto& [order_no, active] : stats.by_order) EXPECT_EQ(active, kPerThread) << order_no;
}

TEST(FakeChannelTest, ClosedPortIsUnavailableQuickly) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const uint16_t port = server->port();
  server->Stop();
  ChannelClient client("127.0.0.1", port, absl::Seconds(5));
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> r = client.Reverse("refund-1", "order-1", 100);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot connect to 127.0.0.1:"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
}

TEST(FakeChannelTest, StartRejectsBadOptions) {
  FakeChannelOptions bad_rate;
  bad_rate.fault_rate = 1.5;
  EXPECT_THAT(FakeChannelServer::Start(bad_rate), StatusIs(absl::StatusCode::kInvalidArgument));
  FakeChannelOptions bad_listen;
  bad_listen.listen = "127.0.0.1";
  EXPECT_THAT(FakeChannelServer::Start(bad_listen), StatusIs(absl::StatusCode::kInvalidArgument));
  bad_listen.listen = "127.0.0.1:70000";
  EXPECT_THAT(FakeChannelServer::Start(bad_listen), StatusIs(absl::StatusCode::kInvalidArgument));

  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  FakeChannelOptions taken;
  taken.listen = server->address();
  EXPECT_THAT(FakeChannelServer::Start(taken), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(FakeChannelTest, AnnouncesTheBoundAddress) {
  std::string announced;
  FakeChannelOptions options;
  options.on_listening = [&](const std::string& address) { announced = address; };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FakeChannelServer> server,
                       FakeChannelServer::Start(options));
  EXPECT_EQ(announced, absl::StrCat("127.0.0.1:", server->port()));
  EXPECT_EQ(server->base_url(), absl::StrCat("http://127.0.0.1:", server->port()));
  EXPECT_NE(server->port(), 0);
}

TEST(ChannelClientTest, FromUrl) {
  ASSERT_OK_AND_ASSIGN(ChannelClient a, ChannelClient::FromUrl("http://127.0.0.1:8080"));
  EXPECT_EQ(a.host(), "127.0.0.1");
  EXPECT_EQ(a.port(), 8080);
  EXPECT_EQ(a.timeout(), absl::Milliseconds(500));
  ASSERT_OK_AND_ASSIGN(ChannelClient b,
                       ChannelClient::FromUrl("http://localhost/", absl::Seconds(1)));
  EXPECT_EQ(b.host(), "localhost");
  EXPECT_EQ(b.port(), 80);
  EXPECT_EQ(b.timeout(), absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(ChannelClient c, ChannelClient::FromUrl("http://[::1]:9000"));
  EXPECT_EQ(c.host(), "::1");
  EXPECT_EQ(c.port(), 9000);
  for (const char* bad : {"", "127.0.0.1:8080", "https://h:1", "http://", "http://:80",
                          "http://h:", "http://h:0", "http://h:65536", "http://h:8x",
                          "http://h:80/path", "http://u@h:80", "http://[::1", "http://[::1]x"}) {
    EXPECT_THAT(ChannelClient::FromUrl(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(ChannelClient::FromUrl("http://h:1", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChannelClientTest, WorksThroughFromUrl) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(ChannelClient client, ChannelClient::FromUrl(server->base_url()));
  ASSERT_OK_AND_ASSIGN(std::string id, client.Reverse("refund-1", "order-1", 100));
  EXPECT_EQ(id, "rv-1");
}

#ifdef IDEM_FAKE_CHANNEL_BIN
// The process contract the demo relies on: first stdout line, clean exit on SIGTERM.
TEST(FakeChannelProcessTest, PrintsListeningLineAndExitsOnSigterm) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addclose(&actions, out[1]);
  std::vector<std::string> args = {IDEM_FAKE_CHANNEL_BIN, "--listen", "127.0.0.1:0", "--seed", "3"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);

  // Everything the process writes to stdout, until EOF or `deadline`.
  auto read_until = [&](Clock::time_point deadline, bool stop_at_newline) {
    std::string text;
    while (Clock::now() < deadline) {
      if (stop_at_newline && text.find('\n') != std::string::npos) break;
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[256];
      ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    return text;
  };
  const std::string first = read_until(Clock::now() + std::chrono::seconds(5), true);
  std::smatch m;
  const bool matched =
      std::regex_match(first, m, std::regex("listening on 127\\.0\\.0\\.1:([0-9]+)\n"));
  EXPECT_TRUE(matched) << first;
  if (matched) {
    ChannelClient client("127.0.0.1", static_cast<uint16_t>(std::stoi(m[1].str())));
    EXPECT_OK(client.Reverse("refund-1", "order-1", 100));
    absl::StatusOr<ChannelStats> stats = client.Stats();
    ASSERT_OK(stats);
    EXPECT_EQ(stats->reversals, 1);
  }

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const std::string rest = read_until(Clock::now() + std::chrono::seconds(5), false);
  EXPECT_EQ(rest, "");  // logs go to stderr
  int status = 0;
  pid_t waited = 0;
  for (int i = 0; i < 100 && waited == 0; ++i) {
    waited = waitpid(pid, &status, WNOHANG);
    if (waited == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (waited == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "idem-fake-channel did not exit on SIGTERM";
  } else {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  close(out[0]);
}
#endif

}  // namespace
}  // namespace idem::refund
