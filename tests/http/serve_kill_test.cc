// kill -9 under load: `idem serve` on rocksdb:// is SIGKILLed five
// times while 16 connections claim and complete fresh keys, and restarted on the same
// directory each time. Afterwards every complete that was answered 200 is replayed
// with its result byte for byte, and every key ever acquired still holds token 1
// (none was acquired a second time): nothing acknowledged was lost, nothing ran twice.
// The same with the server killing itself at each stage of its durable write
// (store/write_stage.h), and with the WAL's unsynced tail torn after a kill.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
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

// Every key acquired, completed or not, still has its first token: none was
// acquired a second time, by a retry or a recovery. Every complete answered 200
// replays its result byte for byte.
void ExpectEveryAcknowledgedKept(uint16_t port, const Ledger& ledger) {
  for (const auto& [key, times] : ledger.acquired) {
    EXPECT_EQ(times, 1) << key;
    testing::ClientResponse record = testing::Fetch(port, "GET", "/v1/records/pay/" + key, "", "tok");
    ASSERT_EQ(record.status, 200) << key << ": " << record.body;
    EXPECT_THAT(record.body, ::testing::HasSubstr(R"("token":1,)")) << key;
  }
  for (const auto& [key, result] : ledger.completed) {
    testing::ClientResponse again = testing::Fetch(
        port, "POST", "/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})", "tok");
    ASSERT_EQ(again.status, 200) << key << ": " << again.body;
    EXPECT_EQ(again.body, R"({"outcome":"replayed","expires_at":null,"result":)" + result + "}")
        << key;
  }
}

std::vector<std::string> ServeArgs(const std::string& db) {
  return {"--listen", "127.0.0.1:0", "--store", "rocksdb://" + db, "--tenant", "t:tok",
          "--log-level", "warn"};
}

// kClients clients claiming and completing fresh keys against `port` until Stop().
class Load {
 public:
  explicit Load(uint16_t port) : port_(port) {
    for (int i = 0; i < kClients; ++i) {
      clients_.emplace_back(Client, i, std::ref(port_), std::ref(stop_), std::ref(ledger_),
                            std::ref(acks_));
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : clients_) t.join();
    clients_.clear();
  }
  // Waits for `n` more acknowledged completes.
  bool Progress(int n) {
    const int before = acks_.load();
    return idem::testing::WaitUntil([&] { return acks_.load() >= before + n; });
  }
  void SetPort(uint16_t port) { port_ = port; }
  Ledger& ledger() { return ledger_; }

 private:
  std::atomic<uint16_t> port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> acks_{0};
  Ledger ledger_;
  std::vector<std::thread> clients_;
};

TEST(ServeKill, RocksdbKeepsEveryAcknowledgedCompleteAcrossKillNine) {
  idem::testing::TempDir dir;
  const std::vector<std::string> args = ServeArgs(dir.file("db"));
  auto serve = std::make_unique<ServeProcess>(dir.file("serve0.err"));
  ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
  Load load(serve->port());
  for (int kill = 1; kill <= kKills; ++kill) {
    // Under load: a few more acknowledged completes since the last restart.
    ASSERT_TRUE(load.Progress(50)) << "no progress after restart " << kill - 1;
    serve->Stop(SIGKILL);
    serve = std::make_unique<ServeProcess>(dir.file("serve" + std::to_string(kill) + ".err"));
    ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
    load.SetPort(serve->port());
  }
  load.Stop();
  ASSERT_GE(load.ledger().completed.size(), size_t{kKills * 50});
  ExpectEveryAcknowledgedKept(serve->port(), load.ledger());
  EXPECT_EQ(serve->Stop(), 0);
}

// The server kills itself at each stage of its durable write in turn, under the
// same load: between deciding a commit and its WriteBatch, with the batch built,
// with the WAL written but not synced, right after the sync, and with the write
// durable but not answered.
TEST(ServeKill, RocksdbKeepsEveryAcknowledgedCompleteWhenKilledAtEachWriteStage) {
  idem::testing::TempDir dir;
  const std::vector<std::string> args = ServeArgs(dir.file("db"));
  const std::vector<std::string> stages = {"rocksdb.after_decide", "rocksdb.before_write",
                                           "rocksdb.wal.before_sync", "rocksdb.wal.after_sync",
                                           "rocksdb.after_write"};
  auto serve = std::make_unique<ServeProcess>(dir.file("serve.err"));
  ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
  Load load(serve->port());
  ASSERT_TRUE(load.Progress(20));
  for (size_t i = 0; i < stages.size(); ++i) {
    serve->Stop(SIGKILL);
    // Killed at the stage's 60th-odd pass: well after the start, under load.
    serve = std::make_unique<ServeProcess>(dir.file(stages[i] + ".err"));
    serve->set_env("IDEM_FAILPOINTS", stages[i] + "=kill@" + std::to_string(60 + 7 * i));
    ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
    load.SetPort(serve->port());
    EXPECT_EQ(serve->Stop(0, std::chrono::seconds(60)), -1)
        << stages[i] << ": the server did not die at the stage";
    serve = std::make_unique<ServeProcess>(dir.file(stages[i] + ".after.err"));
    ASSERT_THAT(serve->Start(args), StartsWith("listening on ")) << serve->stderr_text();
    load.SetPort(serve->port());
    ASSERT_TRUE(load.Progress(20)) << "no progress after the kill at " << stages[i];
  }
  load.Stop();
  ExpectEveryAcknowledgedKept(serve->port(), load.ledger());
  EXPECT_EQ(serve->Stop(), 0);
}

// Bytes of the newest WAL file of the RocksDB directory `db` (and its path).
std::pair<std::filesystem::path, uintmax_t> NewestWal(const std::string& db) {
  std::filesystem::path newest;
  for (const auto& entry : std::filesystem::directory_iterator(db)) {
    if (entry.path().extension() == ".log" &&
        (newest.empty() || entry.path().filename() > newest.filename())) {
      newest = entry.path();
    }
  }
  return {newest, newest.empty() ? 0 : std::filesystem::file_size(newest)};
}

// A crash that loses what the WAL had not synced tears its tail anywhere past the
// last sync. One client claims and completes keys one at a time (so every answered
// write was synced before the next request) until the server kills itself with a
// write in the WAL and not synced; then copies of the directory with the WAL cut at
// the last sync, one byte short of its end, at random offsets between, and with
// the tail overwritten by random bytes, each recover to a prefix that keeps every
// acknowledged complete, and the write that was never answered is not half there.
TEST(ServeKill, RocksdbWalTornPastTheLastSyncRecoversEveryAcknowledgedComplete) {
  idem::testing::TempDir dir;
  const std::string db = dir.file("db");
  auto serve = std::make_unique<ServeProcess>(dir.file("serve.err"));
  serve->set_env("IDEM_FAILPOINTS", "rocksdb.wal.before_sync=kill@81");
  ASSERT_THAT(serve->Start(ServeArgs(db)), StartsWith("listening on ")) << serve->stderr_text();
  Ledger ledger;
  uintmax_t synced = 0;
  std::string in_flight;  // the key whose request got no answer
  bool claim_in_flight = false;
  for (int n = 0; in_flight.empty(); ++n) {
    ASSERT_LT(n, 1000) << "the server never killed itself";
    const std::string key = "k" + std::to_string(n);
    synced = NewestWal(db).second;
    testing::ClientResponse claim = testing::Fetch(
        serve->port(), "POST", "/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})", "tok");
    if (claim.status != 201) {
      ASSERT_EQ(claim.status, 0) << claim.body;
      in_flight = key;
      claim_in_flight = true;
      break;
    }
    ledger.acquired[key] = 1;
    const std::string result = R"({"paid":")" + key + R"("})";
    synced = NewestWal(db).second;
    testing::ClientResponse done = testing::Fetch(
        serve->port(), "POST", "/v1/claims/complete",
        R"({"biz_type":"pay","key":")" + key + R"(","token":1,"result":)" + result + "}", "tok");
    if (done.status != 200) {
      ASSERT_EQ(done.status, 0) << done.body;
      in_flight = key;
      break;
    }
    ledger.completed[key] = result;
  }
  EXPECT_EQ(serve->Stop(0, std::chrono::seconds(30)), -1);
  const auto [wal, size] = NewestWal(db);
  ASSERT_GT(size, synced) << "the unanswered write is not in the WAL";
  ASSERT_GE(ledger.completed.size(), size_t{30});

  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", WAL synced to " + std::to_string(synced) +
               " of " + std::to_string(size) + " bytes");
  for (int trial = 0; trial < 6; ++trial) {
    const uintmax_t cut = trial == 0   ? synced
                          : trial == 1 ? size - 1
                                       : synced + rng() % (size - synced);
    const std::string copy = dir.file("trial" + std::to_string(trial));
    std::filesystem::copy(db, copy, std::filesystem::copy_options::recursive);
    const std::filesystem::path copied_wal = std::filesystem::path(copy) / wal.filename();
    if (trial == 5) {
      // A torn write of garbage: the tail's bytes replaced, the length kept.
      std::fstream f(copied_wal, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(cut));
      for (uintmax_t i = cut; i < size; ++i) f.put(static_cast<char>(rng()));
    } else {
      std::filesystem::resize_file(copied_wal, cut);
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": tail from byte " + std::to_string(cut));
    ServeProcess again(dir.file("trial" + std::to_string(trial) + ".err"));
    ASSERT_THAT(again.Start(ServeArgs(copy)), StartsWith("listening on ")) << again.stderr_text();
    ExpectEveryAcknowledgedKept(again.port(), ledger);
    // The unanswered write is lost whole: its key is free (a claim) or still held
    // at token 1 without a result (a complete).
    testing::ClientResponse record =
        testing::Fetch(again.port(), "GET", "/v1/records/pay/" + in_flight, "", "tok");
    if (claim_in_flight) {
      EXPECT_EQ(record.status, 404) << record.body;
    } else {
      EXPECT_THAT(record.body, ::testing::HasSubstr(R"("state":"PROCESSING")")) << record.body;
    }
    EXPECT_EQ(again.Stop(), 0);
  }
}

}  // namespace
}  // namespace idem::http
