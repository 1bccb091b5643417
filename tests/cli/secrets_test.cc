// A store or Redis password never appears in any output. Every error path
// of OpenStore, NewCachingStore and the commands' start-up is fed a URL carrying a
// password (unreachable servers, bad parameters, malformed URLs, unknown schemes,
// schemes left out) and the password is looked for in every message and in the
// command's stdout and stderr.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "testing/idem_process.h"
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
      // A password holding '@', ':', '/', '?' or '#', raw or percent-encoded: what
      // follows "user:" up to the last '@' is the password, and none of it is shown.
      "postgres://idem:x@" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:x@y:" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:x/" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:x?" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:x#" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:12/" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "postgres://idem:x%40" + pw + "@127.0.0.1:1/db?connect_timeout=1",
      "mysql://idem:x@" + pw + "@127.0.0.1:1/db",
      "mysql://idem:x/" + pw + "@127.0.0.1:1/db",
      // libpq's keyword form, which no store takes: echoed in the error, never its
      // password.
      "host=127.0.0.1 port=1 password=" + pw + " dbname=x",
      "host=127.0.0.1 password = 'x y" + pw + "' dbname=x",
      "host=127.0.0.1 password=x@" + pw + " dbname=x",
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
    runs.push_back({"keys", "analyze", "--store", url});
  }
  runs.push_back({"serve", "--listen", "127.0.0.1:0", "--store", "sqlite://" + dir.file("a.db"),
                  "--cache", std::string("redis://:") + kPassword + "@[::1"});
  for (const std::vector<std::string>& args : runs) {
    RunResult r = RunIdemIn(dir.path(), args);
    std::string what;
    for (const std::string& a : args) what += a + " ";
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_THAT(r.err, Not(HasSubstr(kPassword))) << what;
    EXPECT_THAT(r.out, Not(HasSubstr(kPassword))) << what;
  }
}

// Every command that opens a store takes its password from --store-password-file
// or IDEM_STORE_PASSWORD (migrate's --from and --to from --from-password-file,
// IDEM_FROM_PASSWORD, ...), with the checks `idem serve` makes: one place only, not
// for a path URL, a file private to its owner. A password that reaches a server
// that refuses the connection is in no output.
TEST(Secrets, EveryStoreCommandTakesThePasswordFromAFileOrTheEnvironment) {
  TempDir dir;
  const std::string pw_file = dir.file("pw");
  {
    std::ofstream(pw_file) << "x@" << kPassword << "\n";
  }
  chmod(pw_file.c_str(), 0600);
  const std::string writable = dir.file("pw-writable");
  {
    std::ofstream(writable) << kPassword << "\n";
  }
  chmod(writable.c_str(), 0666);
  const std::vector<std::vector<std::string>> commands = {
      {"migrate"}, {"migrate", "--dry-run"}, {"purge"},       {"purge", "--dry-run"},
      {"inspect", "--tenant", "t", "--key", "k"}, {"stuck"}, {"records", "list"},
      {"keys", "analyze"}, {"worker", "--once", "--refund-channel", "http://127.0.0.1:1"}};
  const std::string server = "postgres://idem@127.0.0.1:1/db?connect_timeout=1";
  for (std::vector<std::string> cmd : commands) {
    std::string what;
    for (const std::string& a : cmd) what += a + " ";
    auto run = [&](std::vector<std::string> extra) {
      std::vector<std::string> args = cmd;
      args.insert(args.end(), extra.begin(), extra.end());
      RunResult r = RunIdemIn(dir.path(), args);
      EXPECT_THAT(r.err, Not(HasSubstr(kPassword))) << what;
      EXPECT_THAT(r.out, Not(HasSubstr(kPassword))) << what;
      return r;
    };
    auto expect = [&what](const RunResult& r, int status, const std::string& says) {
      EXPECT_EQ(r.exit_code, status) << what << r.err;
      EXPECT_THAT(r.err, HasSubstr(says)) << what;
    };
    // Read and written into the URL: a path URL takes none.
    expect(run({"--store", "sqlite://" + dir.file("a.db"), "--store-password-file", pw_file}), 2,
           "which takes none (only server URLs do)");
    // Read, written into the URL and sent: the server is not there.
    expect(run({"--store", server, "--store-password-file", pw_file}), 1, "127.0.0.1");
    setenv("IDEM_STORE_PASSWORD", kPassword, 1);
    RunResult twice = run({"--store", "postgres://idem:inline@127.0.0.1:1/db"});
    RunResult both = run({"--store", server, "--store-password-file", pw_file});
    unsetenv("IDEM_STORE_PASSWORD");
    expect(twice, 2, "already has a password; give it in one place only");
    expect(both, 2, "the store password is given twice");
    expect(run({"--store", server, "--store-password-file", writable}), 1,
           "may be written by group or others (mode 666)");
  }
  // Both stores of a copy.
  setenv("IDEM_FROM_PASSWORD", kPassword, 1);
  RunResult from = RunIdemIn(dir.path(), {"migrate", "--from", "sqlite://" + dir.file("a.db"), "--to",
                                     "sqlite://" + dir.file("b.db")});
  unsetenv("IDEM_FROM_PASSWORD");
  EXPECT_EQ(from.exit_code, 2) << from.err;
  EXPECT_THAT(from.err, HasSubstr("which takes none"));
  RunResult to = RunIdemIn(dir.path(), {"migrate", "--from", "sqlite://" + dir.file("a.db"), "--to",
                                   server, "--to-password-file", pw_file});
  EXPECT_NE(to.exit_code, 0);
  EXPECT_THAT(to.err, Not(HasSubstr(kPassword)));
}

}  // namespace
}  // namespace idem::testing
