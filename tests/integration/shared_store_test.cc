// Two servers, one database (SPEC §3, §11): two real `idem serve` processes on the
// same PostgreSQL schema / MySQL database, 50 concurrent claims of one key split
// over both. The database's unique key is the only thing the two processes share,
// so exactly one claim may win: one 201, forty-nine 409.
//
// Needs IDEM_TEST_POSTGRES_URL and IDEM_TEST_MYSQL_URL (scripts/services.sh); fails,
// never skips, without them. Each test gets a fresh schema/database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "conformance/store_factory.h"
#include "http/client.h"
#include "http/idem_process.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"

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
