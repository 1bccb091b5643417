// Two servers, one database: two real `idem serve` processes on the
// same PostgreSQL schema / MySQL database, 50 concurrent claims of one key split
// over both. The database's unique key is the only thing the two processes share,
// so exactly one claim may win: one 201, forty-nine 409.
//
// Needs IDEM_TEST_POSTGRES_URL and IDEM_TEST_MYSQL_URL (scripts/services.sh); fails,
// never skips, without them. Each test gets a fresh schema/database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "conformance/store_factory.h"
#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::testing {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using json = nlohmann::json;

constexpr int kClaims = 50;

void ExactlyOneWinner(const std::string& url, const std::string& scratch) {
  ServeProcess a(scratch + "/a.err"), b(scratch + "/b.err");
  const std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--store", url,
                                         "--tenant", "t:tok"};
  // Started together: both may find the schema missing and create it at once.
  auto started_a = std::async(std::launch::async, [&] { return a.Start(args); });
  auto started_b = std::async(std::launch::async, [&] { return b.Start(args); });
  ASSERT_THAT(started_a.get(), ::testing::StartsWith("listening on ")) << a.stderr_text();
  ASSERT_THAT(started_b.get(), ::testing::StartsWith("listening on ")) << b.stderr_text();

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<ClientResponse> answers(kClaims);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClaims; ++i) {
    threads.emplace_back([&, i] {
      // Connected before the start signal, so the claims hit the servers together.
      Client c(i % 2 == 0 ? a.port() : b.port());
      ++ready;
      while (!go.load()) std::this_thread::yield();
      answers[i] = c.Send("POST", "/v1/claims",
                          R"({"biz_type":"refund","key":"R-shared-1","lease_ms":60000})", "tok");
    });
  }
  while (ready.load() < kClaims) std::this_thread::yield();
  go = true;
  for (std::thread& t : threads) t.join();

  std::map<int, int> by_status;
  int winners_on_a = 0;
  for (int i = 0; i < kClaims; ++i) {
    ++by_status[answers[i].status];
    if (answers[i].status == 201) {
      winners_on_a += i % 2 == 0;
      json j = json::parse(answers[i].body);
      EXPECT_EQ(j["outcome"], "acquired");
      EXPECT_EQ(j["token"], 1);
    } else if (answers[i].status == 409) {
      json j = json::parse(answers[i].body);
      EXPECT_EQ(j["outcome"], "in_progress") << answers[i].body;
      EXPECT_FALSE(answers[i].header("retry-after").empty());
    } else {
      ADD_FAILURE() << "claim " << i << ": " << answers[i].status << " " << answers[i].body
                    << answers[i].error;
    }
  }
  EXPECT_EQ(by_status[201], 1);
  EXPECT_EQ(by_status[409], kClaims - 1);

  // Both servers see the one record the winner left.
  for (uint16_t port : {a.port(), b.port()}) {
    ClientResponse r = Fetch(port, "GET", "/v1/records/refund/R-shared-1", "", "tok");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["state"], "PROCESSING");
    EXPECT_EQ(json::parse(r.body)["token"], 1);
  }
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// Attach across processes: claims waiting on server A for a key that
// server B holds see B's complete through their polls, which are plain reads backing
// off to 250 ms, not locking claim transactions every 15 ms, and which the waiters on
// one key share (one read per 15 ms at most): 20 waiters over ~1.5 s cost fewer reads
// than a dozen each (the old polling cost about a hundred claims each), and at least
// one (they did read the store).
uint64_t Counter(uint16_t port, const std::string& name) {
  const std::string text = Fetch(port, "GET", "/metrics").body;
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? ~uint64_t{0} : std::stoull(text.substr(at + name.size() + 2));
}

void WaitersSeeAnotherServersComplete(const std::string& url, const std::string& scratch) {
  ServeProcess a(scratch + "/a.err"), b(scratch + "/b.err");
  const std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--store", url,
                                         "--tenant", "t:tok"};
  ASSERT_THAT(a.Start(args), ::testing::StartsWith("listening on ")) << a.stderr_text();
  ASSERT_THAT(b.Start(args), ::testing::StartsWith("listening on ")) << b.stderr_text();
  ClientResponse held = Fetch(b.port(), "POST", "/v1/claims",
                              R"({"biz_type":"refund","key":"R-attach"})", "tok");
  ASSERT_EQ(held.status, 201) << held.body;
  constexpr int kWaiters = 20;
  std::vector<std::future<ClientResponse>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      return Fetch(a.port(), "POST", "/v1/claims",
                   R"({"biz_type":"refund","key":"R-attach","wait_ms":30000})", "tok");
    }));
  }
  ASSERT_TRUE(WaitUntil([&] { return Counter(a.port(), "idem_claim_waits_total") == kWaiters; }));
  // Time passes on the real clock (the bound below is on reads per waiting time).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ClientResponse done =
      Fetch(b.port(), "POST", "/v1/claims/complete",
            R"({"biz_type":"refund","key":"R-attach","token":1,"result":{"ok":true}})", "tok");
  ASSERT_EQ(done.status, 200) << done.body;
  for (auto& w : waiters) {
    ClientResponse r = w.get();
    EXPECT_EQ(r.status, 200) << r.body << r.error;
    EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":{"ok":true}})");
  }
  // The bound holds however slow the machine: a slower one polls less, not more.
  const uint64_t polls = Counter(a.port(), "idem_claim_polls_total");
  EXPECT_LE(polls, kWaiters * 12u) << "waiting claims read the store too often";
  EXPECT_GE(polls, uint64_t{1});
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// On PostgreSQL the complete on server B wakes the waiters on server A at once
// (LISTEN/NOTIFY): A's polls back off towards 30 s (--wait-poll-max), so once they
// are far apart only the notification can answer the waiters before their next read.
TEST(SharedStore, PostgresWaitersAreWokenByAnotherServersNotify) {
  TempDir dir;
  const std::string url = PostgresUrl(dir.path());
  ServeProcess a(dir.path() + "/a.err"), b(dir.path() + "/b.err");
  ASSERT_THAT(a.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok",
                       "--wait-poll-max", "30s"}),
              ::testing::StartsWith("listening on "))
      << a.stderr_text();
  ASSERT_THAT(b.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << b.stderr_text();
  ClientResponse held = Fetch(b.port(), "POST", "/v1/claims",
                              R"({"biz_type":"refund","key":"R-notify"})", "tok");
  ASSERT_EQ(held.status, 201) << held.body;
  constexpr int kWaiters = 5;
  // A waiter reads the store 15, 45, 105, ... ms after it began to wait (each pause
  // twice the last, counted from the end of the read before): its 9th read comes
  // 7.665 s in, its 10th no earlier than 15.345 s in.
  constexpr std::chrono::milliseconds kCompleteAt{9000}, kTenthRead{15345};
  const auto launched = std::chrono::steady_clock::now();
  std::vector<std::future<ClientResponse>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      return Fetch(a.port(), "POST", "/v1/claims",
                   R"({"biz_type":"refund","key":"R-notify","wait_ms":30000})", "tok");
    }));
  }
  ASSERT_TRUE(WaitUntil([&] { return Counter(a.port(), "idem_claim_waits_total") == kWaiters; }));
  // Time must pass on the real clock for the reads to spread apart: the complete
  // comes between every waiter's 9th and 10th reads, so an answer before
  // launched + kTenthRead was the notification's, not a read's.
  std::this_thread::sleep_for(kCompleteAt);
  ClientResponse done =
      Fetch(b.port(), "POST", "/v1/claims/complete",
            R"({"biz_type":"refund","key":"R-notify","token":1,"result":{"ok":true}})", "tok");
  ASSERT_EQ(done.status, 200) << done.body;
  for (auto& w : waiters) {
    ASSERT_EQ(w.wait_until(launched + kTenthRead), std::future_status::ready)
        << "a waiter was not woken by the other server's complete";
    ClientResponse r = w.get();
    EXPECT_EQ(r.status, 200) << r.body << r.error;
    EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":{"ok":true}})");
  }
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

TEST(SharedStore, PostgresWaitersSeeAnotherServersComplete) {
  TempDir dir;
  WaitersSeeAnotherServersComplete(PostgresUrl(dir.path()), dir.path());
}

TEST(SharedStore, MysqlWaitersSeeAnotherServersComplete) {
  TempDir dir;
  WaitersSeeAnotherServersComplete(MysqlTestUrl(dir.path()), dir.path());
}

TEST(SharedStore, PostgresTwoServersOneWinner) {
  TempDir dir;
  ExactlyOneWinner(PostgresUrl(dir.path()), dir.path());
}

TEST(SharedStore, MysqlTwoServersOneWinner) {
  TempDir dir;
  ExactlyOneWinner(MysqlTestUrl(dir.path()), dir.path());
}

}  // namespace
}  // namespace idem::testing
