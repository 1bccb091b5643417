// SPEC §10: a store or Redis password never appears in any output. Every error path
// of OpenStore, NewCachingStore and the commands' start-up is fed a URL carrying a
// password (unreachable servers, bad parameters, malformed URLs, unknown schemes,
// schemes left out) and the password is looked for in every message and in the
// command's stdout and stderr.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "testing/idem_cli.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPassword[] = "Pw-9f3c-s3cret";

// Store URLs that fail to open, each with kPassword in it, in every place a
// password can be written.
std::vector<std::string> FailingStoreUrls() {
  const std::string pw = kPassword;
  return {
      "postgres://idem:" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgresql://idem:" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem@127.0.0.1:1/db?password=" + pw + "&connect_timeout=1",
      "postgres://idem:" + pw + "@127.0.0.1:1/db?pool=lots",
      "postgres://idem:" + pw + "@[::1/db",
      "mysql://idem:" + pw + "@127.0.0.1:1/db",
      "mariadb://idem:" + pw + "@127.0.0.1:1/db",
      "mysql://idem:" + pw + "@127.0.0.1:1/db?pool=-3",
      "mysql://idem:" + pw + "@[::1:3306/db",
      "mysql://idem:" + pw,
      "nosuch://idem:" + pw + "@host/db",
      "idem:" + pw + "@host/db",
      "memory://idem:" + pw + "@host",
      "sqlite:///proc/no/such/dir/idem.db?password=" + pw,
  };
}

TEST(Secrets, NoStoreErrorShowsThePassword) {
  for (const std::string& url : FailingStoreUrls()) {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_THAT(std::string(store.status().message()), Not(HasSubstr(kPassword))) << url;
  }
}

TEST(Secrets, NoCacheErrorShowsThePassword) {
  for (const std::string& redis :
       {std::string("redis://:") + kPassword + "@[::1", std::string("redis://:") + kPassword +
                                                            "@127.0.0.1:notaport",
        std::string("rediss://:") + kPassword + "@127.0.0.1:6379"}) {
    absl::StatusOr<std::unique_ptr<Store>> inner = OpenStore("memory://");
    ASSERT_TRUE(inner.ok());
    absl::StatusOr<std::unique_ptr<Store>> cached =
        NewCachingStore(*std::move(inner), CacheOptions{.redis_url = redis});
    ASSERT_FALSE(cached.ok()) << redis;
    EXPECT_THAT(std::string(cached.status().message()), Not(HasSubstr(kPassword))) << redis;
  }
}

TEST(Secrets, NoCommandShowsThePassword) {
  TempDir dir;
  std::vector<std::vector<std::string>> runs;
  for (const std::string& url : FailingStoreUrls()) {
    // Without the flag serve starts and waits for an unreachable server (its
    // start-up warning is checked in serve_store_down_test).
    runs.push_back({"serve", "--listen", "127.0.0.1:0", "--store", url, "--require-store-at-start"});
    runs.push_back({"migrate", "--store", url});
    runs.push_back({"migrate", "--dry-run", "--store", url});
    runs.push_back({"inspect", "--store", url, "--tenant", "t", "--biz-type", "b", "--key", "k"});
    runs.push_back({"stuck", "--store", url});
    runs.push_back({"records", "list", "--store", url});
    runs.push_back({"purge", "--store", url});
    runs.push_back({"purge", "--dry-run", "--store", url});
  }
  runs.push_back({"serve", "--listen", "127.0.0.1:0", "--store", "sqlite://" + dir.file("a.db"),
                  "--cache", std::string("redis://:") + kPassword + "@[::1"});
  for (const std::vector<std::string>& args : runs) {
    Exec r = RunIdemIn(dir.path(), args);
    std::string what;
    for (const std::string& a : args) what += a + " ";
    EXPECT_NE(r.status, 0) << what;
    EXPECT_THAT(r.err, Not(HasSubstr(kPassword))) << what;
    EXPECT_THAT(r.out, Not(HasSubstr(kPassword))) << what;
  }
}

}  // namespace
}  // namespace idem::testing
