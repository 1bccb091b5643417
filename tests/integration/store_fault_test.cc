// Store errors that tell the truth, through the real `idem serve`:
// with idem's record table gone (dropped, renamed, a wrong database) a claim is the
// store's fault, 503 with Retry-After, and /readyz is 503; a client retries a 503,
// whereas the 400 this used to be made it drop the message. Once the table is back
// the same server answers again, without a restart. On SQLite, PostgreSQL and
// MariaDB (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL; fails without them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "conformance/store_factory.h"
#include "http/client.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "store/store_url.h"
#include "testing/fault_proxy.h"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::testing {
namespace {

using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using json = nlohmann::json;

// Renames `from` to `to` through `store` (opened while the schema was whole: an
// open refuses a damaged one), as an operator would by hand.
void Rename(Store& store, const std::string& from, const std::string& to) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  ASSERT_TRUE(tx.ok()) << tx.status();
  absl::Status s = (*tx)->Exec("ALTER TABLE " + from + " RENAME TO " + to).status();
  ASSERT_TRUE(s.ok()) << s;
  s = (*tx)->Commit();
  ASSERT_TRUE(s.ok()) << s;
}

ClientResponse Claim(uint16_t port, const std::string& key) {
  return Fetch(port, "POST", "/v1/claims", R"({"biz_type":"refund","key":")" + key + "\"}",
               "tok");
}

// How often `what` occurs in `log`.
int Count(const std::string& log, const std::string& what) {
  int n = 0;
  for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
  return n;
}

void MissingSchemaIs503(const std::string& url, const std::string& scratch) {
  ServeProcess serve(scratch + "/serve.err");
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  ASSERT_EQ(Claim(serve.port(), "K-1").status, 201);
  ASSERT_EQ(Claim(serve.port(), "K-0").status, 201);
  ASSERT_EQ(Fetch(serve.port(), "POST", "/v1/claims/complete",
                  R"({"biz_type":"refund","key":"K-0","token":1,"result":{}})", "tok")
                .status,
            200);
  ASSERT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 200);
  absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(url);
  ASSERT_TRUE(admin.ok()) << admin.status();

  Rename(**admin, "idem_records", "idem_records_moved");
  for (const char* key : {"K-1", "K-2"}) {
    ClientResponse r = Claim(serve.port(), key);
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/problem+json");
    EXPECT_EQ(r.header("retry-after"), "1");
    EXPECT_EQ(json::parse(r.body).value("outcome", ""), "unavailable") << r.body;
    EXPECT_THAT(r.body, ::testing::Not(::testing::HasSubstr("idem_records"))) << "the cause leaks";
  }
  // Answers that never reach the store say nothing of it: bad input, and a
  // duplicate the in-process cache replays. Each used to log "store available
  // again", and the next refused request "store unavailable" once more.
  EXPECT_EQ(Claim(serve.port(), "").status, 400);
  EXPECT_EQ(Claim(serve.port(), "K-0").status, 200);
  ClientResponse complete = Fetch(serve.port(), "POST", "/v1/claims/complete",
                                  R"({"biz_type":"refund","key":"K-1","token":1,"result":{}})",
                                  "tok");
  EXPECT_EQ(complete.status, 503) << complete.body;
  EXPECT_EQ(Fetch(serve.port(), "GET", "/v1/records/refund/K-1", "", "tok").status, 503);
  EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 503);
  // /metrics still answers, and says so (its ping is not a refused request: the
  // count in the recovery line below stays 5).
  EXPECT_THAT(Fetch(serve.port(), "GET", "/metrics").body,
              ::testing::HasSubstr("\nidem_store_up 0\n"));
  // A restart does not paper over it: an empty record table made anew would forget
  // every key (duplicates); the open refuses the damaged schema instead.
  absl::StatusOr<std::unique_ptr<Store>> reopened = OpenStore(url);
  EXPECT_THAT(reopened.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(reopened.status().message()), ::testing::HasSubstr("idem_records"));

  Rename(**admin, "idem_records_moved", "idem_records");
  EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 200);
  EXPECT_THAT(Fetch(serve.port(), "GET", "/metrics").body,
              ::testing::HasSubstr("\nidem_store_up 1\n"));
  EXPECT_EQ(Claim(serve.port(), "K-2").status, 201);
  EXPECT_EQ(serve.Stop(), 0);
  // One log line when the store went down and one when it came back, not one per
  // refused request.
  const std::string log = serve.stderr_text();
  EXPECT_EQ(Count(log, "store unavailable: "), 1) << log;
  EXPECT_EQ(Count(log, "store available again after "), 1) << log;
  EXPECT_THAT(log, ::testing::HasSubstr("5 request(s) were refused")) << log;
}

TEST(StoreFault, SqliteMissingSchemaIs503) {
  TempDir dir;
  MissingSchemaIs503("sqlite://" + dir.path() + "/idem.db", dir.path());
}

// The SQLite file deleted under the running server: nothing is acknowledged any
// more (it used to answer 201 and 200 into the unlinked file, and after a restart a
// completed key was acquired again with token 1).
TEST(StoreFault, SqliteDeletedFileIs503) {
  TempDir dir;
  const std::string path = dir.path() + "/idem.db";
  ServeProcess serve(dir.path() + "/serve.err");
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", "sqlite://" + path, "--tenant",
                           "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  ASSERT_EQ(Claim(serve.port(), "K-1").status, 201);
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  EXPECT_EQ(Claim(serve.port(), "K-2").status, 503);
  ClientResponse complete = Fetch(serve.port(), "POST", "/v1/claims/complete",
                                  R"({"biz_type":"refund","key":"K-1","token":1,"result":{}})",
                                  "tok");
  EXPECT_EQ(complete.status, 503) << complete.body;
  EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 503);
  EXPECT_EQ(serve.Stop(), 0);
}

// The RocksDB directory moved away under the running server: nothing is read from
// it either, not even a claim that meets a live lease (it answered 409 from what
// RocksDB held in memory, and that answer logged "store available again" between
// two "store unavailable" lines). Moved back, the same server answers again.
TEST(StoreFault, RocksdbMovedDirectoryIs503UntilItIsBack) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  ServeProcess serve(dir.path() + "/serve.err");
  ASSERT_THAT(
      serve.Start({"--listen", "127.0.0.1:0", "--store", "rocksdb://" + path, "--tenant", "t:tok"}),
      ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  ASSERT_EQ(Claim(serve.port(), "K-1").status, 201);
  ASSERT_EQ(std::rename(path.c_str(), (path + ".moved").c_str()), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Claim(serve.port(), "K-1").status, 503) << "a live lease read from a moved store";
    EXPECT_EQ(Claim(serve.port(), "K-2").status, 503);
    EXPECT_EQ(Fetch(serve.port(), "GET", "/v1/records/refund/K-1", "", "tok").status, 503);
    EXPECT_EQ(Fetch(serve.port(), "GET", "/v1/records?biz_type=refund", "", "tok").status, 503);
  }
  EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 503);
  ASSERT_EQ(std::rename((path + ".moved").c_str(), path.c_str()), 0);
  EXPECT_EQ(Claim(serve.port(), "K-1").status, 409);
  EXPECT_EQ(Claim(serve.port(), "K-2").status, 201);
  EXPECT_EQ(serve.Stop(), 0);
  const std::string log = serve.stderr_text();
  EXPECT_THAT(log, ::testing::HasSubstr("was deleted while idem had it open")) << log;
  EXPECT_EQ(Count(log, "store unavailable: "), 1) << log;
  EXPECT_EQ(Count(log, "store available again after "), 1) << log;
  EXPECT_THAT(log, ::testing::HasSubstr("9 request(s) were refused")) << log;
}

// A file size limit (ulimit -f, systemd's LimitFSIZE) reached by the WAL: the write
// fails (503, nothing acknowledged) and idem serve stays up (SIGXFSZ ended it),
// /readyz is 503 while RocksDB refuses writes after the error (it said "ready"),
// and every complete answered 200 before is replayed after a restart.
TEST(StoreFault, RocksdbPastAFileSizeLimitIs503AndNotReady) {
  TempDir dir;
  const std::vector<std::string> args = {
      "--listen", "127.0.0.1:0", "--store", "rocksdb://" + dir.path() + "/db", "--tenant", "t:tok"};
  const std::string result = "\"" + std::string(300'000, 'x') + "\"";
  std::vector<std::string> completed;
  {
    ServeProcess serve(dir.path() + "/serve.err");
    ASSERT_THAT(serve.Start(args), ::testing::StartsWith("listening on ")) << serve.stderr_text();
    rlimit limit{};
    ASSERT_EQ(prlimit(serve.pid(), RLIMIT_FSIZE, nullptr, &limit), 0);
    limit.rlim_cur = 2'000'000;
    ASSERT_EQ(prlimit(serve.pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
    bool refused = false;
    for (int i = 0; i < 20 && !refused; ++i) {
      const std::string key = "K-" + std::to_string(i);
      ClientResponse claim = Claim(serve.port(), key);
      refused = claim.status == 503;
      if (refused) break;
      ASSERT_EQ(claim.status, 201) << claim.body;
      ClientResponse done =
          Fetch(serve.port(), "POST", "/v1/claims/complete",
                R"({"biz_type":"refund","key":")" + key + R"(","token":1,"result":)" + result + "}",
                "tok");
      refused = done.status == 503;
      if (!refused) {
        ASSERT_EQ(done.status, 200) << done.body;
        completed.push_back(key);
      }
    }
    EXPECT_TRUE(refused) << "no write failed past the file size limit";
    EXPECT_EQ(Claim(serve.port(), "K-new").status, 503);
    ClientResponse ready = Fetch(serve.port(), "GET", "/readyz");
    EXPECT_EQ(ready.status, 503) << ready.body;
    EXPECT_EQ(serve.Stop(), 0);
    EXPECT_THAT(serve.stderr_text(), ::testing::HasSubstr("File too large")) << serve.stderr_text();
  }
  ASSERT_FALSE(completed.empty());
  ServeProcess again(dir.path() + "/again.err");
  ASSERT_THAT(again.Start(args), ::testing::StartsWith("listening on ")) << again.stderr_text();
  for (const std::string& key : completed) {
    ClientResponse r = Claim(again.port(), key);
    EXPECT_EQ(r.status, 200) << key << ": " << r.body.substr(0, 200);
    EXPECT_EQ(json::parse(r.body).value("result", ""), std::string(300'000, 'x')) << key;
  }
  EXPECT_EQ(Claim(again.port(), "K-new").status, 201);
  EXPECT_EQ(again.Stop(), 0);
}

// A small tmpfs mounted at a directory of its own for the test's life (root only).
class SmallDisk {
 public:
  explicit SmallDisk(const std::string& dir) : dir_(dir) {
    mounted_ = mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=8m") == 0;
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

  // Writes a file until the disk refuses (ENOSPC); false if it never did.
  bool Fill() {
    const int fd = open((dir_ + "/filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    const std::string chunk(64 * 1024, 'f');
    bool full = false;
    while (!full) {
      const ssize_t n = write(fd, chunk.data(), chunk.size());
      full = n < 0 && errno == ENOSPC;
      if (n < 0 && !full) break;
    }
    close(fd);
    return full;
  }
  void Free() { std::remove((dir_ + "/filler").c_str()); }

 private:
  std::string dir_;
  bool mounted_ = false;
};

// A full disk under sqlite://: every claim was 503 (the writes fail) while reads and
// pings still answered, so /readyz stayed 200 and idem_store_up 1 and a load
// balancer kept sending traffic. Readiness follows writes now: 503 as soon as a
// write has failed (well within 2 s of the disk filling), and 200 within 2 s of
// space returning, by the readiness check's own write probe, without any claim.
// A real full disk (a small tmpfs) needs root to mount; CI runs as root.
TEST(StoreFault, SqliteFullDiskIsNotReadyUntilWritesWorkAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs to fill needs root";
  TempDir dir;
  SmallDisk disk(dir.path());
  ASSERT_TRUE(disk.mounted()) << "mount tmpfs on " << dir.path() << ": " << std::strerror(errno);
  const std::string log_dir = dir.path() + ".log";  // off the full disk: the log must go on
  ASSERT_EQ(mkdir(log_dir.c_str(), 0700), 0);
  ServeProcess serve(log_dir + "/serve.err");
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store",
                           "sqlite://" + dir.path() + "/idem.db", "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  ASSERT_EQ(Claim(serve.port(), "K-0").status, 201);
  ASSERT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 200);

  ASSERT_TRUE(disk.Fill());
  const auto filled = std::chrono::steady_clock::now();
  // The WAL may still have room of its own for a claim or two.
  int refused_at = -1;
  for (int i = 1; i <= 50 && refused_at < 0; ++i) {
    const int status = Claim(serve.port(), "K-" + std::to_string(i)).status;
    if (status == 503) refused_at = i;
    ASSERT_TRUE(status == 201 || status == 503) << status;
  }
  ASSERT_GT(refused_at, 0) << "no claim failed on the full disk";
  EXPECT_TRUE(WaitUntil([&] { return Fetch(serve.port(), "GET", "/readyz").status == 503; },
                        std::chrono::seconds(2)))
      << "/readyz stayed 200 on a full disk";
  EXPECT_LT(std::chrono::steady_clock::now() - filled, std::chrono::seconds(2));
  EXPECT_THAT(Fetch(serve.port(), "GET", "/metrics").body,
              ::testing::HasSubstr("\nidem_store_up 0\n"));

  disk.Free();
  const auto freed = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitUntil([&] { return Fetch(serve.port(), "GET", "/readyz").status == 200; },
                        std::chrono::seconds(2)))
      << "/readyz stayed 503 once space returned";
  EXPECT_LT(std::chrono::steady_clock::now() - freed, std::chrono::seconds(2));
  EXPECT_THAT(Fetch(serve.port(), "GET", "/metrics").body,
              ::testing::HasSubstr("\nidem_store_up 1\n"));
  const std::string refused_key = "K-" + std::to_string(refused_at);
  EXPECT_EQ(Claim(serve.port(), refused_key).status, 201);  // nothing was recorded for it
  EXPECT_EQ(Claim(serve.port(), "K-0").status, 409);         // still held: nothing was lost
  EXPECT_EQ(serve.Stop(), 0);
  const std::string log = serve.stderr_text();
  EXPECT_EQ(Count(log, "store unavailable: "), 1) << log;
  EXPECT_EQ(Count(log, "store available again after "), 1) << log;
}

// `url` with its port replaced by `port` (to go through a FaultProxy).
std::string ViaPort(const std::string& url, int port) {
  absl::StatusOr<store::StoreUrl> u =
      store::ParseStoreUrl(url, url.substr(0, url.find("://")));
  EXPECT_TRUE(u.ok() && u->port.has_value()) << url;
  if (!u.ok() || !u->port.has_value()) return url;
  const std::string old = ":" + std::to_string(*u->port) + "/";
  std::string out = url;
  out.replace(out.find(old), old.size(), ":" + std::to_string(port) + "/");
  return out;
}

// Every store call is bounded: a database that goes silent (a black hole, no
// reset) costs each call at most the store's timeout and answers kUnavailable, the
// connections it pinned are given up rather than returned to the pool, and once
// the network heals the same store serves again, without a restart (polled for up
// to kGenerousDeadline: how soon is not the point, that it does without a reopen).
// Also for resets. `params` set short timeouts so the test is quick.
void BoundedAndHeals(const std::string& direct_url, const std::string& params) {
  absl::StatusOr<store::StoreUrl> parsed =
      store::ParseStoreUrl(direct_url, direct_url.substr(0, direct_url.find("://")));
  ASSERT_TRUE(parsed.ok() && parsed->port.has_value()) << direct_url;
  std::unique_ptr<FaultProxy> proxy = FaultProxy::Start(*parsed->port);
  ASSERT_NE(proxy, nullptr);
  const std::string url = ViaPort(direct_url, proxy->port()) +
                          (direct_url.find('?') == std::string::npos ? "?" : "&") + params;
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  ASSERT_TRUE(store.ok()) << store.status();
  Guard guard(**store);
  int n = 0;
  auto claim = [&] {
    return guard.Claim({.biz_type = "refund", .key = "K-" + std::to_string(++n)}, absl::Seconds(30))
        .status();
  };
  ASSERT_TRUE(claim().ok());

  for (FaultProxy::Mode fault : {FaultProxy::Mode::kBlackhole, FaultProxy::Mode::kBlackhole,
                                 FaultProxy::Mode::kReset}) {
    proxy->SetMode(fault);
    // More calls than the pool has connections: none may pin one for good.
    for (int i = 0; i < 6; ++i) {
      const auto start = std::chrono::steady_clock::now();
      absl::Status s = i % 3 == 2 ? (*store)->Ping() : claim();
      const auto took = std::chrono::steady_clock::now() - start;
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      // The bound is the point here: a black-holed call must cost about the store's
      // timeout (1-2 s, a few times over: connect, then the statement), never
      // "forever" (the kernel's TCP timeout is minutes). 20 s is generous on purpose,
      // so a loaded CI machine does not fail it.
      EXPECT_LT(took, std::chrono::seconds(20)) << s;
    }
    proxy->SetMode(FaultProxy::Mode::kPass);
    absl::Status s;
    EXPECT_TRUE(WaitUntil(
        [&] {
          s = claim();
          return s.ok();
        },
        kGenerousDeadline, std::chrono::milliseconds(50)))
        << "not serving " << kGenerousDeadline.count() << " ms after the network healed: " << s;
    EXPECT_TRUE((*store)->Ping().ok());
  }
}

TEST(StoreFault, PostgresBlackHoleIsBoundedAndHeals) {
  TempDir dir;
  BoundedAndHeals(PostgresUrl(dir.path()),
                  "io_timeout_ms=1000&connect_timeout=1&pool_timeout_ms=1000&pool=4");
}

TEST(StoreFault, MysqlBlackHoleIsBoundedAndHeals) {
  TempDir dir;
  BoundedAndHeals(MysqlTestUrl(dir.path()),
                  "io_timeout_s=2&connect_timeout_s=1&pool_wait_ms=1000&pool=4&lock_wait_timeout_s=1");
}

TEST(StoreFault, PostgresMissingSchemaIs503) {
  TempDir dir;
  MissingSchemaIs503(PostgresUrl(dir.path()), dir.path());
}

TEST(StoreFault, MysqlMissingSchemaIs503) {
  TempDir dir;
  MissingSchemaIs503(MysqlTestUrl(dir.path()), dir.path());
}

}  // namespace
}  // namespace idem::testing

namespace idem::testing {
namespace {

// `idem serve` starts while its database server is down (the store
// used to be opened once, so a server booted before its database exited 1), says
// so in one line without the password, answers /readyz and requests 503, and
// serves once the database answers, without a restart. --require-store-at-start
// keeps the old refusal.
void StartsWithTheDatabaseDown(const std::string& direct_url, const std::string& scratch) {
  absl::StatusOr<store::StoreUrl> parsed =
      store::ParseStoreUrl(direct_url, direct_url.substr(0, direct_url.find("://")));
  ASSERT_TRUE(parsed.ok() && parsed->port.has_value()) << direct_url;
  ASSERT_TRUE(parsed->password.has_value() && !parsed->password->empty());
  std::unique_ptr<FaultProxy> proxy = FaultProxy::Start(*parsed->port);
  ASSERT_NE(proxy, nullptr);
  proxy->SetMode(FaultProxy::Mode::kReset);  // the database refuses every connection
  const std::string url = ViaPort(direct_url, proxy->port());

  ServeProcess strict(scratch + "/strict.err");
  EXPECT_EQ(strict.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok",
                          "--require-store-at-start"}),
            "");
  EXPECT_EQ(strict.WaitExit(), 1) << strict.stderr_text();

  ServeProcess serve(scratch + "/serve.err");
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 503);
  ClientResponse refused = Claim(serve.port(), "K-1");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.header("retry-after"), "1");
  // A tenant learns that the store is down, never where it is (host, port, user):
  // the cause is in the log, under the request id the answer quotes.
  EXPECT_THAT(refused.body, ::testing::Not(::testing::HasSubstr(parsed->host))) << refused.body;
  EXPECT_THAT(refused.body, ::testing::Not(::testing::HasSubstr(std::to_string(proxy->port()))));
  EXPECT_FALSE(refused.header("x-request-id").empty());
  EXPECT_EQ(json::parse(refused.body).value("request_id", ""), refused.header("x-request-id"));
  ClientResponse readyz = Fetch(serve.port(), "GET", "/readyz");
  EXPECT_THAT(readyz.body, ::testing::Not(::testing::HasSubstr(parsed->host))) << readyz.body;

  proxy->SetMode(FaultProxy::Mode::kPass);
  EXPECT_TRUE(WaitUntil([&] { return Fetch(serve.port(), "GET", "/readyz").status == 200; }))
      << serve.stderr_text();
  EXPECT_EQ(Claim(serve.port(), "K-1").status, 201);
  EXPECT_EQ(Claim(serve.port(), "K-1").status, 409);  // the claim above holds it
  EXPECT_EQ(serve.Stop(), 0);
  const std::string log = serve.stderr_text();
  EXPECT_THAT(log, ::testing::HasSubstr("is not reachable")) << log;
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr(*parsed->password))) << log;
  EXPECT_THAT(strict.stderr_text(), ::testing::Not(::testing::HasSubstr(*parsed->password)));
}

TEST(StoreFault, PostgresServeStartsWithTheDatabaseDown) {
  TempDir dir;
  StartsWithTheDatabaseDown(PostgresUrl(dir.path()) + "&connect_timeout=1", dir.path());
}

TEST(StoreFault, MysqlServeStartsWithTheDatabaseDown) {
  TempDir dir;
  StartsWithTheDatabaseDown(MysqlTestUrl(dir.path()) + "?connect_timeout_s=1", dir.path());
}

}  // namespace
}  // namespace idem::testing
