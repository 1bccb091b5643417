// kill -9 under load: `idem serve` on rocksdb:// is SIGKILLed five
// times while 16 connections claim and complete fresh keys, and restarted on the same
// directory each time. Afterwards every complete that was answered 200 is replayed
// with its result byte for byte, and every key ever acquired still holds token 1
// (none was acquired a second time): nothing acknowledged was lost, nothing ran twice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

using ::idem::testing::ServeProcess;
using ::testing::StartsWith;

constexpr int kClients = 16;
constexpr int kKills = 5;

struct Ledger {
  std::mutex mu;
  std::map<std::string, int> acquired;          // key → number of 201s it got
  std::map<std::string, std::string> completed;  // key → result acknowledged with 200
};

// One client: claims fresh keys and completes them until `stop`, against whatever
// port `port` holds now (it changes at each restart); errors (the server killed
// under it) just move it on to the next key.
void Client(int id, std::atomic<uint16_t>& port, std::atomic<bool>& stop, Ledger& ledger,
            std::atomic<int>& acks) {
  for (int n = 0; !stop.load(); ++n) {
    const std::string key = "c" + std::to_string(id) + "-" + std::to_string(n);
    testing::ClientResponse claim = testing::Fetch(
        port.load(), "POST", "/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})", "tok");
    if (claim.status != 201) {
      // No server (it is being restarted): the client's pause before it retries.
      if (claim.status == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(ledger.mu);
      ++ledger.acquired[key];
    }
    const std::string result = R"({"paid":")" + key + R"("})";
    testing::ClientResponse done = testing::Fetch(
        port.load(), "POST", "/v1/claims/complete",
        R"({"biz_type":"pay","key":")" + key + R"(","token":1,"result":)" + result + "}", "tok");
    if (done.status == 200) {
      std::lock_guard<std::mutex> lock(ledger.mu);
      ledger.completed[key] = result;
      ++acks;
    }
  }
}

TEST(ServeKill, RocksdbKeepsEveryAcknowledgedCompleteAcrossKillNine) {
  idem::testing::TempDir dir;
  const std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--store",
                                         "rocksdb://" + dir.file("db"), "--tenant", "t:tok",
                                         "--log-level", "warn"};
  auto serve = std::make_unique<ServeProcess>(dir.file("serve0.err"));
  ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
  std::atomic<uint16_t> port{serve->port()};
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0};
  Ledger ledger;
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(Client, i, std::ref(port), std::ref(stop), std::ref(ledger),
                         std::ref(acks));
  }
  for (int kill = 1; kill <= kKills; ++kill) {
    // Under load: a few more acknowledged completes since the last restart.
    const int before = acks.load();
    ASSERT_TRUE(idem::testing::WaitUntil([&] { return acks.load() >= before + 50; }))
        << "no progress after restart " << kill - 1;
    serve->Stop(SIGKILL);
    serve = std::make_unique<ServeProcess>(dir.file("serve" + std::to_string(kill) + ".err"));
    ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
    port = serve->port();
  }
  stop = true;
  for (std::thread& t : clients) t.join();

  std::lock_guard<std::mutex> lock(ledger.mu);
  ASSERT_GE(ledger.completed.size(), size_t{kKills * 50});
  // Every key acquired, completed or not, still has its first token: none was
  // acquired a second time, by a retry or a recovery.
  for (const auto& [key, times] : ledger.acquired) {
    EXPECT_EQ(times, 1) << key;
    testing::ClientResponse record =
        testing::Fetch(serve->port(), "GET", "/v1/records/pay/" + key, "", "tok");
    ASSERT_EQ(record.status, 200) << key << ": " << record.body;
    EXPECT_THAT(record.body, ::testing::HasSubstr(R"("token":1,)")) << key;
  }
  int checked = 0;
  for (const auto& [key, result] : ledger.completed) {
    testing::ClientResponse again = testing::Fetch(
        serve->port(), "POST", "/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})", "tok");
    ASSERT_EQ(again.status, 200) << key << ": " << again.body;
    EXPECT_EQ(again.body, R"({"outcome":"replayed","expires_at":null,"result":)" + result + "}")
        << key;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(ledger.completed.size()));
  EXPECT_EQ(serve->Stop(), 0);
}

}  // namespace
}  // namespace idem::http
