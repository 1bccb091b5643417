// The cache tiers (include/idem/cache.h) against a real Redis: duplicates already decided are
// answered without a database transaction, and losing a tier (flush, a dead Redis,
// eviction) never changes an answer or lets a duplicate run.
//
// Needs IDEM_TEST_REDIS_URL (redis://127.0.0.1:PORT); fails, never skips, without
// it. The dead-Redis test starts and kills a redis-server of its own.
#include "idem/cache.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "store/record_codec.h"
#include "store/redis/redis_client.h"
#include "testing/fake_clock.h"
#include "testing/redis_admin.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::idem::testing::FakeClock;

// Counts the transactions that reach the database.
class CountingStore final : public StoreBackend {
 public:
  CountingStore(std::unique_ptr<Store> inner, std::atomic<int>* begins)
      : inner_(std::move(inner)), begins_(begins) {}
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    begins_->fetch_add(1);
    return inner_->Begin();
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view t, std::string_view k) override {
    return inner_->Get(t, k);
  }
  absl::Status Ping() override { return inner_->Ping(); }
  const SqlDialect* sql_dialect() const override { return Backend(*inner_).sql_dialect(); }
  std::string_view url() const override { return inner_->url(); }

 private:
  std::unique_ptr<Store> inner_;
  std::atomic<int>* begins_;
};

std::string SharedRedisUrl() { return testing::RedisUrl(); }

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A redis-server of the test's own, so the test may kill it.
class OwnRedis {
 public:
  OwnRedis() {
    port_ = FreePort();
    const std::string port = std::to_string(port_);
    pid_ = fork();
    if (pid_ == 0) {
      // Dies with the test even when the test itself is killed (no orphan server).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (int null_fd = open("/dev/null", O_WRONLY); null_fd >= 0) {
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
      }
      execlp("redis-server", "redis-server", "--bind", "127.0.0.1", "--port", port.c_str(),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    redis::RedisClient probe(redis::RedisAddress{.host = "127.0.0.1", .port = port_},
                             redis::RedisClientOptions{});
    ready_ = ::idem::testing::WaitUntil([&] { return probe.Get("probe").ok(); },
                                        ::idem::testing::kGenerousDeadline,
                                        std::chrono::milliseconds(20));
  }
  ~OwnRedis() { Kill(); }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool ready() const { return ready_; }
  std::string url() const { return absl::StrCat("redis://127.0.0.1:", port_); }

 private:
  int port_ = -1;
  pid_t pid_ = -1;
  bool ready_ = false;
};

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    prefix_ = absl::StrCat("idem:test:", getpid(), ":", rd(), ":");
  }

  // A cached store over the test's sqlite file; every Begin() is counted in `begins`.
  std::unique_ptr<Store> Open(CacheOptions options, std::atomic<int>* begins) {
    absl::StatusOr<std::unique_ptr<Store>> db = OpenStore("sqlite://" + dir_.file("idem.db"));
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return nullptr;
    options.clock = &clock_;
    options.redis_key_prefix = prefix_;
    options.log = [](std::string_view) {};  // expected in these tests; keep the output clean
    absl::StatusOr<std::unique_ptr<Store>> store = NewCachingStore(
        std::make_unique<CountingStore>(*std::move(db), begins), std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  Handler Counting(std::string result, absl::Status error = absl::OkStatus()) {
    return [this, result, error](Transaction&) -> absl::StatusOr<std::string> {
      ++runs_;
      if (!error.ok()) return error;
      return result;
    };
  }

  static Request Req(std::string key, std::string tenant = "default", std::string fp = "fp") {
    return Request{.tenant = std::move(tenant),
                   .biz_type = "refund",
                   .key = std::move(key),
                   .fingerprint = std::move(fp)};
  }

  // What Redis holds for (tenant, key), read behind the store's back.
  std::optional<std::string> RedisValue(const std::string& url, std::string_view tenant,
                                        std::string_view key) {
    absl::StatusOr<redis::RedisAddress> address = redis::ParseRedisUrl(url);
    EXPECT_TRUE(address.ok());
    redis::RedisClient client(*address, {});
    absl::StatusOr<std::optional<std::string>> v =
        client.Get(prefix_ + store::RecordKey(tenant, key));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::nullopt;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::string prefix_;
  std::atomic<int> runs_{0};
};

TEST_F(CacheTest, DuplicateAnsweredFromL1WithoutTransaction) {
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({}, &begins);
  Guard guard(*store, {.clock = &clock_});
  absl::StatusOr<Result> first = guard.Run(Req("k1"), Counting("R1"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, Outcome::kExecuted);
  const int after_first = begins.load();

  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Result> dup = guard.Run(Req("k1"), Counting("other"));
    ASSERT_TRUE(dup.ok()) << dup.status();
    EXPECT_EQ(dup->outcome, Outcome::kReplayed);
    EXPECT_EQ(dup->value, "R1");
  }
  absl::StatusOr<Result> mismatch = guard.Run(Req("k1", "default", "fp2"), Counting("x"));
  ASSERT_TRUE(mismatch.ok());
  EXPECT_EQ(mismatch->outcome, Outcome::kFingerprintMismatch);
  absl::StatusOr<Result> claim = guard.Claim(Req("k1"));
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(claim->outcome, Outcome::kReplayed);
  Request other_biz = Req("k1");
  other_biz.biz_type = "payout";
  absl::StatusOr<Result> reused = guard.Run(other_biz, Counting("x"));
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(reused->outcome, Outcome::kKeyReused);

  EXPECT_EQ(begins.load(), after_first);  // zero transactions for the duplicates
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(GetCacheStats(*store)->l1_hits, 6u);
}

TEST_F(CacheTest, CachedFailureAnsweredFromL1) {
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({}, &begins);
  Guard guard(*store, {.clock = &clock_});
  absl::StatusOr<Result> first =
      guard.Run(Req("bad"), Counting("", absl::InvalidArgumentError("no such account")));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  const int after_first = begins.load();
  absl::StatusOr<Result> dup = guard.Run(Req("bad"), Counting("R"));
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ(dup->outcome, Outcome::kCachedFailure);
  EXPECT_THAT(dup->value, ::testing::HasSubstr("no such account"));
  EXPECT_EQ(begins.load(), after_first);
  EXPECT_EQ(runs_.load(), 1);
}

TEST_F(CacheTest, DuplicateAnsweredFromRedisWithoutTransaction) {
  const std::string url = SharedRedisUrl();
  std::atomic<int> begins_a{0}, begins_b{0};
  // Two instances over one database and one Redis, L1 off: B learns only from Redis.
  std::unique_ptr<Store> a = Open({.l1_entries = 0, .redis_url = url}, &begins_a);
  std::unique_ptr<Store> b = Open({.l1_entries = 0, .redis_url = url}, &begins_b);
  Guard guard_a(*a, {.clock = &clock_});
  Guard guard_b(*b, {.clock = &clock_});
  const std::string binary("R\0\x01\xff end", 9);
  absl::StatusOr<Result> first = guard_a.Run(Req("k2"), Counting(binary));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(RedisValue(url, "default", "k2").has_value());

  absl::StatusOr<Result> dup = guard_b.Run(Req("k2"), Counting("other"));
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ(dup->outcome, Outcome::kReplayed);
  EXPECT_EQ(dup->value, binary);  // byte-identical through Redis
  EXPECT_EQ(begins_b.load(), 0);
  EXPECT_EQ(runs_.load(), 1);
  CacheStats stats = *GetCacheStats(*b);
  EXPECT_EQ(stats.l2_hits, 1u);
  EXPECT_EQ(stats.redis_errors, 0u);
}

TEST_F(CacheTest, FlushAllMidRunChangesNoAnswer) {
  const std::string url = SharedRedisUrl();
  absl::StatusOr<redis::RedisAddress> address = redis::ParseRedisUrl(url);
  ASSERT_TRUE(address.ok());
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.l1_entries = 0, .redis_url = url}, &begins);
  Guard guard(*store, {.clock = &clock_});
  constexpr int kKeys = 50;
  std::vector<Result> firsts;
  for (int i = 0; i < kKeys; ++i) {
    absl::Status error = i % 5 == 0 ? absl::FailedPreconditionError("declined") : absl::OkStatus();
    absl::StatusOr<Result> r =
        guard.Run(Req(absl::StrCat("f", i)), Counting(absl::StrCat("R", i), error));
    if (error.ok()) {
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  auto check_all = [&] {
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<Result> r = guard.Run(Req(absl::StrCat("f", i)), Counting("again"));
      ASSERT_TRUE(r.ok()) << r.status();
      if (i % 5 == 0) {
        EXPECT_EQ(r->outcome, Outcome::kCachedFailure) << i;
      } else {
        EXPECT_EQ(r->outcome, Outcome::kReplayed) << i;
        EXPECT_EQ(r->value, absl::StrCat("R", i));
      }
    }
  };
  check_all();
  EXPECT_EQ(GetCacheStats(*store)->l2_hits, static_cast<uint64_t>(kKeys));
  const std::string flush =
      absl::StrCat("redis-cli -h ", address->host, " -p ", address->port, " FLUSHALL > /dev/null");
  ASSERT_EQ(std::system(flush.c_str()), 0);
  check_all();                     // answered by the database, which refills Redis
  check_all();                     // from Redis again
  EXPECT_EQ(runs_.load(), kKeys);  // every handler ran exactly once
}

TEST_F(CacheTest, RedisKilledMidRunRunsNoDuplicate) {
  OwnRedis redis;
  ASSERT_TRUE(redis.ready()) << "could not start redis-server";
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store =
      Open({.l1_entries = 0, .redis_url = redis.url(), .redis_retry_after = absl::ZeroDuration()},
           &begins);
  Guard guard(*store, {.clock = &clock_});
  constexpr int kKeys = 20;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(guard.Run(Req(absl::StrCat("d", i)), Counting(absl::StrCat("R", i))).ok());
  }
  auto hammer = [&] {
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kKeys; ++i) {
          absl::StatusOr<Result> r = guard.Run(Req(absl::StrCat("d", i)), Counting("again"));
          if (!r.ok() || r->outcome != Outcome::kReplayed || r->value != absl::StrCat("R", i)) {
            ++wrong;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return wrong.load();
  };
  EXPECT_EQ(hammer(), 0);
  EXPECT_GT(GetCacheStats(*store)->l2_hits, 0u);
  redis.Kill();
  EXPECT_EQ(hammer(), 0);  // answers unchanged, from the database
  // A new key after the kill still executes once and is then replayed.
  ASSERT_TRUE(guard.Run(Req("new"), Counting("N")).ok());
  absl::StatusOr<Result> dup = guard.Run(Req("new"), Counting("again"));
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->outcome, Outcome::kReplayed);
  EXPECT_EQ(runs_.load(), kKeys + 1);
  EXPECT_GT(GetCacheStats(*store)->redis_errors, 0u);
}

TEST_F(CacheTest, ReleasedKeyIsNeverReplayedFromCache) {
  const std::string url = SharedRedisUrl();
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.redis_url = url}, &begins);
  Guard guard(*store, {.clock = &clock_});
  // Lease mode: a retryable failure releases the key.
  absl::StatusOr<Result> claim = guard.Claim(Req("rel"));
  ASSERT_TRUE(claim.ok());
  ASSERT_EQ(claim->outcome, Outcome::kAcquired);
  ASSERT_TRUE(guard.Fail(Req("rel"), claim->token, /*retryable=*/true, "timeout").ok());
  EXPECT_FALSE(RedisValue(url, "default", "rel").has_value());
  EXPECT_FALSE(Backend(*store).LookupDecided("default", "rel")->has_value());
  absl::StatusOr<Result> again = guard.Claim(Req("rel"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, Outcome::kAcquired);
  EXPECT_GT(again->token, claim->token);
  ASSERT_TRUE(guard.Complete(Req("rel"), again->token, "done").ok());
  absl::StatusOr<Result> replay = guard.Claim(Req("rel"));
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_EQ(replay->value, "done");

  // Transactional mode: a retryable handler error leaves nothing to cache.
  EXPECT_EQ(guard.Run(Req("rel2"), Counting("", absl::UnavailableError("flaky"))).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(RedisValue(url, "default", "rel2").has_value());
  absl::StatusOr<Result> retry = guard.Run(Req("rel2"), Counting("R2"));
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->outcome, Outcome::kExecuted);
}

TEST_F(CacheTest, ProcessingRecordIsNeverServedFromCache) {
  const std::string url = SharedRedisUrl();
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.redis_url = url}, &begins);
  Guard guard(*store, {.clock = &clock_});
  absl::StatusOr<Result> claim = guard.Claim(Req("p"), absl::Seconds(30));
  ASSERT_TRUE(claim.ok());
  ASSERT_EQ(claim->outcome, Outcome::kAcquired);
  EXPECT_FALSE(RedisValue(url, "default", "p").has_value());
  EXPECT_FALSE(Backend(*store).LookupDecided("default", "p")->has_value());
  const int before = begins.load();
  absl::StatusOr<Result> second = guard.Claim(Req("p"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, Outcome::kInProgress);  // from the database's live lease
  EXPECT_EQ(second->token, claim->token);
  EXPECT_EQ(begins.load(), before + 1);
  // Reading a PROCESSING record (Guard::Get) caches nothing either.
  ASSERT_TRUE(guard.Get(Req("p")).ok());
  EXPECT_FALSE(Backend(*store).LookupDecided("default", "p")->has_value());
  // After the lease expires, the takeover is decided by the database.
  clock_.Advance(absl::Seconds(31));
  absl::StatusOr<Result> takeover = guard.Claim(Req("p"));
  ASSERT_TRUE(takeover.ok());
  EXPECT_EQ(takeover->outcome, Outcome::kAcquired);
  EXPECT_TRUE(takeover->takeover);
}

TEST_F(CacheTest, L1SizeBoundIsRespected) {
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.l1_entries = 10}, &begins);
  Guard guard(*store, {.clock = &clock_});
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(guard.Run(Req(absl::StrCat("b", i)), Counting(absl::StrCat("R", i))).ok());
    EXPECT_LE(GetCacheStats(*store)->l1_entries, 10u);
  }
  EXPECT_EQ(GetCacheStats(*store)->l1_entries, 10u);
  int before = begins.load();
  // The 10 most recent are in L1; an evicted one goes to the database and still replays.
  for (int i = 90; i < 100; ++i) {
    EXPECT_EQ(guard.Run(Req(absl::StrCat("b", i)), Counting("x"))->outcome, Outcome::kReplayed);
  }
  EXPECT_EQ(begins.load(), before);
  absl::StatusOr<Result> evicted = guard.Run(Req("b0"), Counting("x"));
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->outcome, Outcome::kReplayed);
  EXPECT_EQ(evicted->value, "R0");
  EXPECT_EQ(begins.load(), before + 1);
  EXPECT_EQ(GetCacheStats(*store)->l1_entries, 10u);
  EXPECT_EQ(runs_.load(), 100);
}

// L1 was bounded by its number of records only, so 1 MB results took the server's
// memory up by a megabyte each. It is bounded in bytes too, each record charged its
// strings and bookkeeping, and a record over max_entry_bytes is cached nowhere.
TEST_F(CacheTest, L1BytesBoundIsRespected) {
  std::atomic<int> begins{0};
  constexpr size_t kBytes = 64 * 1024;
  std::unique_ptr<Store> store =
      Open({.l1_entries = 1000, .l1_bytes = kBytes, .max_entry_bytes = 32 * 1024}, &begins);
  Guard guard(*store, {.clock = &clock_});
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(guard.Run(Req(absl::StrCat("m", i)),
                          Counting(absl::StrCat(std::string(10000, 'r'), i)))
                    .ok());
    EXPECT_LE(GetCacheStats(*store)->l1_bytes, kBytes);
  }
  const CacheStats full = *GetCacheStats(*store);
  EXPECT_EQ(full.l1_entries, 6u);  // 6 records of ~10.3 KB fit 64 KiB, 7 do not
  EXPECT_GT(full.l1_bytes, 6u * 10000);
  EXPECT_EQ(full.too_large, 0u);
  // The most recent are answered from L1; an evicted one by the database.
  EXPECT_TRUE(Backend(*store).PeekDecided("default", "m99").has_value());
  EXPECT_FALSE(Backend(*store).PeekDecided("default", "m0").has_value());
  EXPECT_EQ(guard.Run(Req("m0"), Counting("x"))->value, std::string(10000, 'r') + "0");

  // Over max_entry_bytes: not cached, counted, and nothing evicted for it.
  ASSERT_TRUE(guard.Run(Req("big"), Counting(std::string(40000, 'b'))).ok());
  EXPECT_FALSE(Backend(*store).PeekDecided("default", "big").has_value());
  EXPECT_EQ(GetCacheStats(*store)->too_large, 1u);
  EXPECT_TRUE(Backend(*store).PeekDecided("default", "m99").has_value());
  EXPECT_EQ(guard.Run(Req("big"), Counting("x"))->value, std::string(40000, 'b'));
  EXPECT_EQ(runs_.load(), 101);
}

TEST(CacheOptionsTest, ZeroMaxEntryBytesIsInvalidArgument) {
  EXPECT_EQ(NewCachingStore(*OpenStore("memory://"), {.max_entry_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CacheTest, L1EntriesExpireAfterTtl) {
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.ttl = absl::Minutes(1)}, &begins);
  Guard guard(*store, {.clock = &clock_});
  ASSERT_TRUE(guard.Run(Req("t"), Counting("R")).ok());
  EXPECT_TRUE(Backend(*store).LookupDecided("default", "t")->has_value());
  clock_.Advance(absl::Minutes(2));
  EXPECT_FALSE(Backend(*store).LookupDecided("default", "t")->has_value());
  EXPECT_EQ(guard.Run(Req("t"), Counting("x"))->value, "R");  // the database still answers
}

TEST_F(CacheTest, TenantsAreIsolatedInEveryTier) {
  const std::string url = SharedRedisUrl();
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store = Open({.redis_url = url}, &begins);
  std::unique_ptr<Store> redis_only = Open({.l1_entries = 0, .redis_url = url}, &begins);
  Guard guard(*store, {.clock = &clock_});
  Guard guard2(*redis_only, {.clock = &clock_});
  // Pairs whose plain concatenation would collide: ("ab", "c") and ("a", "bc").
  const std::vector<std::pair<std::string, std::string>> pairs = {{"ab", "c"},
                                                                  {"a", "bc"},
                                                                  {"1:a", "b"},
                                                                  {"1", ":ab"},
                                                                  {std::string("x\0", 2), "y"},
                                                                  {"x", std::string("\0y", 2)}};
  for (size_t i = 0; i < pairs.size(); ++i) {
    absl::StatusOr<Result> r =
        guard.Run(Req(pairs[i].second, pairs[i].first), Counting(absl::StrCat("T", i)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->outcome, Outcome::kExecuted) << i;
  }
  for (Guard* g : {&guard, &guard2}) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      absl::StatusOr<Result> r = g->Run(Req(pairs[i].second, pairs[i].first), Counting("x"));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outcome, Outcome::kReplayed) << i;
      EXPECT_EQ(r->value, absl::StrCat("T", i)) << i;
    }
  }
  EXPECT_EQ(runs_.load(), static_cast<int>(pairs.size()));
}

TEST_F(CacheTest, UnreachableRedisIsAMissNotAnError) {
  // Nothing listens on the port: every Redis call fails fast, counted, never returned.
  std::atomic<int> begins{0};
  std::unique_ptr<Store> store =
      Open({.l1_entries = 0, .redis_url = absl::StrCat("redis://127.0.0.1:", FreePort())}, &begins);
  Guard guard(*store, {.clock = &clock_});
  ASSERT_EQ(guard.Run(Req("u"), Counting("R"))->outcome, Outcome::kExecuted);
  EXPECT_EQ(guard.Run(Req("u"), Counting("x"))->outcome, Outcome::kReplayed);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_GT(GetCacheStats(*store)->redis_errors, 0u);
}

TEST(CacheOptionsTest, BadRedisUrlIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Store>> s =
      NewCachingStore(*OpenStore("memory://"), {.redis_url = "http://x"});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewCachingStore(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(GetCacheStats(**OpenStore("memory://")).has_value());
}

}  // namespace
}  // namespace idem
