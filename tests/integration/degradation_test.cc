// Degradation (a store that is down is Unavailable, 503): `idem serve` on a
// PostgreSQL server of the test's own, which the test stops and starts again.
//
// While the server is down every claim/complete/fail/record call must answer 503
// problem+json ("outcome":"unavailable", Retry-After) within a bound set by the
// store URL's default timeouts (kBound) and nothing may be recorded; /readyz is 503;
// a fail-open biz_type gets 201 "degraded". When the server is back, idem serves
// again without a restart.
//
// The database is restarted with pg_ctl on the same data directory, port and
// options (postmaster.opts). Not a second instance: that would need another port,
// so another URL, and idem could only follow it by restarting; and the same data
// directory lets the test check that what was committed before the outage is still
// there and that nothing was added during it. (`services.sh start` on the same
// directory would wipe it.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

#ifndef IDEM_SOURCE_DIR
#define IDEM_SOURCE_DIR ""
#endif

namespace idem::testing {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::testing::HasSubstr;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a call may take while the database is down. The bound is the point of
// the test (fail closed at once, never hang), so it stays, but generous: five times
// the default URL's 2 s connect and pool timeouts. A refused connection fails in
// milliseconds; what this catches is a call that waits for the database to return.
constexpr auto kBound = std::chrono::seconds(10);
constexpr char kPgBin[] = "/usr/lib/postgresql/15/bin";

std::string EnvValue(const std::string& env_sh, const std::string& name) {
  std::smatch m;
  std::regex re("export " + name + "=(\\S+)");
  return std::regex_search(env_sh, m, re) ? m[1].str() : "";
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

class DegradationTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("postgres"); }

  // Starts a database server of this test's own: `service` is postgres or mysql
  // (scripts/services.sh); url_ is its test URL, pid_ its server's pid.
  void StartServer(const std::string& service) {
    svc_ = dir_.file("svc");
    const std::string cmd = "IDEM_SERVICES=" + service + " " + std::string(IDEM_SOURCE_DIR) +
                            "/scripts/services.sh start " + svc_ + " >" + dir_.file("svc.log") +
                            " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadWholeFile(dir_.file("svc.log"));
    started_ = true;
    const std::string env = ReadWholeFile(svc_ + "/env.sh");
    const std::string name = service == "postgres" ? "POSTGRES" : "MYSQL";
    url_ = EnvValue(env, "IDEM_TEST_" + name + "_URL");
    ASSERT_FALSE(url_.empty()) << env;
    pid_ = static_cast<pid_t>(std::atol(EnvValue(env, "IDEM_TEST_" + name + "_PID").c_str()));
    ASSERT_TRUE(Alive(pid_)) << env;
    data_ = svc_ + "/postgres/data";
  }

  void TearDown() override {
    if (started_) {
      const std::string cmd = std::string(IDEM_SOURCE_DIR) + "/scripts/services.sh stop " + svc_ +
                              " >>" + dir_.file("svc.log") + " 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0);
    }
  }

  pid_t PostmasterPid() {
    std::ifstream in(data_ + "/postmaster.pid");
    std::string line;
    std::getline(in, line);
    return line.empty() ? -1 : static_cast<pid_t>(std::atol(line.c_str()));
  }

  // Fast shutdown (SIGINT) of the postmaster by pid; waits until it is gone.
  void StopPostgres() {
    opts_ = ReadWholeFile(data_ + "/postmaster.opts");
    ASSERT_FALSE(opts_.empty());
    const pid_t pid = PostmasterPid();
    ASSERT_TRUE(Alive(pid));
    ASSERT_EQ(kill(pid, SIGINT), 0);
    ASSERT_TRUE(WaitUntil([&] { return !Alive(pid); })) << "postgres did not stop";
  }

  // Starts the same data directory again with the options it ran with before.
  void StartPostgresAgain() {
    // postmaster.opts is the server's command line: the binary, then its quoted
    // arguments (-D, -c listen_addresses, -p PORT, ...); pg_ctl -o takes the rest.
    std::string args = opts_.substr(opts_.find(' ') + 1);
    while (!args.empty() && (args.back() == '\n' || args.back() == ' ')) args.pop_back();
    const std::string real_data = std::filesystem::canonical(data_).string();
    const std::string script = std::filesystem::path(real_data).parent_path().string() +
                               "/restart.sh";
    {
      std::ofstream out(script);
      out << "#!/bin/sh\nexec " << kPgBin << "/pg_ctl -D '" << real_data << "' -l '"
          << real_data << "/../restart.log' -w -t 60 start -o '" << args << "'\n";
    }
    chmod(script.c_str(), 0755);
    struct stat st;
    ASSERT_EQ(stat(real_data.c_str(), &st), 0);
    std::string cmd = "sh " + script;
    // The server refuses to run as root; as root, run pg_ctl as the data's owner
    // (who services.sh made it run as).
    if (geteuid() == 0 && st.st_uid != 0) {
      cmd = "runuser -u \"$(stat -c %U '" + real_data + "')\" -- " + cmd;
    }
    cmd += " >" + dir_.file("restart.out") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadWholeFile(dir_.file("restart.out"));
  }

  TempDir dir_;
  std::string svc_, url_, data_, opts_;
  pid_t pid_ = -1;
  bool started_ = false;
};

// A 503 answer as the fail-closed contract says.
void ExpectUnavailable(const ClientResponse& r, Clock::duration took, const std::string& what) {
  EXPECT_EQ(r.status, 503) << what << ": " << r.body << r.error;
  EXPECT_LE(took, kBound) << what << " took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms";
  EXPECT_EQ(r.header("content-type"), "application/problem+json") << what;
  EXPECT_FALSE(r.header("retry-after").empty()) << what;
  if (r.status == 503) {
    json j = json::parse(r.body, nullptr, false);
    EXPECT_EQ(j.value("outcome", ""), "unavailable") << what << ": " << r.body;
  }
}

TEST_F(DegradationTest, FailsClosedFailOpenOnlyWhereAskedAndRecovers) {
  ServeProcess idem(dir_.file("serve.err"));
  ASSERT_THAT(idem.Start({"--listen", "127.0.0.1:0", "--store", url_, "--tenant", "t:tok",
                          "--fail-open", "feed_like"}),
              ::testing::StartsWith("listening on "))
      << idem.stderr_text();
  const uint16_t port = idem.port();

  // Before: a finished key and a held one.
  ClientResponse r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"pay","key":"done"})", "tok");
  ASSERT_EQ(r.status, 201) << r.body;
  r = Fetch(port, "POST", "/v1/claims/complete",
            R"({"biz_type":"pay","key":"done","token":1,"result":{"ok":1}})", "tok");
  ASSERT_EQ(r.status, 200) << r.body;
  r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"pay","key":"held"})", "tok");
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_EQ(Fetch(port, "GET", "/readyz").status, 200);

  StopPostgres();

  // Load while down: 8 clients on keep-alive connections, every call kind.
  constexpr int kThreads = 8, kRounds = 6;
  std::atomic<int> answered{0}, not_503{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client c(port);
      for (int i = 0; i < kRounds; ++i) {
        const std::string key = "down-" + std::to_string(t) + "-" + std::to_string(i);
        const std::vector<std::pair<std::string, std::string>> calls = {
            {"/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})"},
            {"/v1/claims/complete",
             R"({"biz_type":"pay","key":"held","token":1,"result":"x"})"},
            {"/v1/claims/fail",
             R"({"biz_type":"pay","key":"held","token":1,"retryable":false,"error":"e"})"},
            {"GET", "/v1/records/pay/done"},
        };
        for (const auto& [target, body] : calls) {
          const auto start = Clock::now();
          ClientResponse a = target == "GET" ? c.Send("GET", body, "", "tok")
                                             : c.Send("POST", target, body, "tok");
          const auto took = Clock::now() - start;
          ++answered;
          if (a.status != 503 || took > kBound ||
              a.header("content-type") != "application/problem+json" ||
              a.header("retry-after").empty() ||
              json::parse(a.body, nullptr, false).value("outcome", "") != "unavailable") {
            ++not_503;
            std::lock_guard<std::mutex> lock(mu);
            failures.push_back(target + " " + std::to_string(a.status) + " " + a.body + " " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  took)
                                                  .count()) +
                               " ms" + a.error);
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(answered.load(), kThreads * kRounds * 4);
  EXPECT_EQ(not_503.load(), 0) << ::testing::PrintToString(failures);

  // One more of each, checked field by field for a readable failure.
  auto start = Clock::now();
  r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"pay","key":"down-x"})", "tok");
  ExpectUnavailable(r, Clock::now() - start, "claim");

  start = Clock::now();
  ClientResponse ready = Fetch(port, "GET", "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_LE(Clock::now() - start, kBound);

  // Fail-open, only for the biz_type named: 201 degraded, token 0, nothing stored.
  for (int i = 0; i < 3; ++i) {
    start = Clock::now();
    r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"feed_like","key":"like-1"})", "tok");
    EXPECT_LE(Clock::now() - start, kBound);
    ASSERT_EQ(r.status, 201) << r.body;
    json j = json::parse(r.body);
    EXPECT_EQ(j["outcome"], "acquired");
    EXPECT_EQ(j["token"], 0);
    EXPECT_EQ(j["degraded"], true);
  }
  r = Fetch(port, "POST", "/v1/claims/complete",
            R"({"biz_type":"feed_like","key":"like-1","token":0,"result":1})", "tok");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outcome":"degraded"})");
  r = Fetch(port, "POST", "/v1/claims/fail",
            R"({"biz_type":"feed_like","key":"like-1","token":0,"retryable":true,"error":1})",
            "tok");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outcome":"degraded"})");
  // Token 0 is not a way around fail-closed for other biz_types.
  r = Fetch(port, "POST", "/v1/claims/complete",
            R"({"biz_type":"pay","key":"held","token":0,"result":1})", "tok");
  EXPECT_EQ(r.status, 400) << r.body;

  ClientResponse metrics = Fetch(port, "GET", "/metrics");
  EXPECT_THAT(metrics.body, HasSubstr("idem_fail_open_total{biz_type=\"feed_like\"} 3\n"));
  EXPECT_THAT(idem.stderr_text(), HasSubstr("fail-open"));

  StartPostgresAgain();

  // Back without restarting idem.
  ASSERT_TRUE(WaitUntil([&] { return Fetch(port, "GET", "/readyz").status == 200; },
                        kGenerousDeadline, std::chrono::milliseconds(100)))
      << idem.stderr_text();

  // What was committed before the outage survived; nothing was added during it.
  r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"pay","key":"done"})", "tok");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["outcome"], "replayed");
  r = Fetch(port, "GET", "/v1/records/pay/held", "", "tok");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["state"], "PROCESSING");  // the 503'd fail changed nothing
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRounds; ++i) {
      const std::string key = "down-" + std::to_string(t) + "-" + std::to_string(i);
      EXPECT_EQ(Fetch(port, "GET", "/v1/records/pay/" + key, "", "tok").status, 404) << key;
    }
  }
  EXPECT_EQ(Fetch(port, "GET", "/v1/records/feed_like/like-1", "", "tok").status, 404);

  // And claims work again: the outage's keys are fresh, the fail-open one too.
  r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"pay","key":"down-0-0"})", "tok");
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body)["token"], 1);
  r = Fetch(port, "POST", "/v1/claims", R"({"biz_type":"feed_like","key":"like-1"})", "tok");
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body).value("degraded", false), false);
  EXPECT_EQ(json::parse(r.body)["token"], 1);

  EXPECT_EQ(idem.Stop(), 0);
}

}  // namespace
}  // namespace idem::testing

namespace idem::testing {
namespace {

// The processes whose parent is `pid` (PostgreSQL's backends of the postmaster).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/PID/stat: "PID (COMM) STATE PPID …"; COMM may hold spaces and ')'.
    const std::string stat = ReadWholeFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == pid) out.push_back(std::atoi(name.c_str()));
  }
  return out;
}

// A database server frozen (SIGSTOP) for the object's lifetime: its process and
// every child (PostgreSQL's backends; a stopped postmaster forks no new ones). The
// kernel still completes TCP handshakes for it, so clients see a server that
// accepts and never answers, as across a partition or a stuck host.
class Frozen {
 public:
  explicit Frozen(pid_t server) : pids_(ChildrenOf(server)) {
    pids_.insert(pids_.begin(), server);
    for (pid_t p : pids_) kill(p, SIGSTOP);
  }
  ~Frozen() { Thaw(); }
  void Thaw() {
    for (pid_t p : pids_) kill(p, SIGCONT);
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

// A store that stops answering is answered 503 fast with the URL's defaults (no
// timeout parameters): the first claim, whose pooled connection waits for an
// answer, within 5 s; every later one, which must connect, within 2 s. Then the
// server thaws and the same idem serves again without a restart.
class FrozenStoreTest : public DegradationTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override { StartServer(GetParam()); }
};

TEST_P(FrozenStoreTest, IsAnswered503WithinTheDefaultDeadline) {
  ServeProcess idem(dir_.file("serve.err"));
  ASSERT_THAT(idem.Start({"--listen", "127.0.0.1:0", "--store", url_, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << idem.stderr_text();
  const uint16_t port = idem.port();
  // The client waits far longer than any bound, so a slow answer is measured, not cut.
  Client c(port, std::chrono::seconds(5), std::chrono::seconds(120));
  auto claim = [&](const std::string& key, Clock::duration* took) {
    const auto start = Clock::now();
    ClientResponse r =
        c.Send("POST", "/v1/claims", R"({"biz_type":"pay","key":")" + key + R"("})", "tok");
    *took = Clock::now() - start;
    return r;
  };
  auto ms = [](Clock::duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
  };
  Clock::duration took;
  for (int i = 0; i < 3; ++i) {  // pooled connections that will wait on the frozen server
    ASSERT_EQ(claim("warm-" + std::to_string(i), &took).status, 201);
  }

  Frozen frozen(pid_);
  ClientResponse r = claim("frozen-0", &took);
  EXPECT_EQ(r.status, 503) << r.body << r.error;
  EXPECT_LT(took, std::chrono::seconds(5)) << "first claim on a frozen store: " << ms(took);
  for (int i = 1; i <= 3; ++i) {
    r = claim("frozen-" + std::to_string(i), &took);
    EXPECT_EQ(r.status, 503) << r.body << r.error;
    EXPECT_LT(took, std::chrono::seconds(2)) << "claim " << i << " on a frozen store: " << ms(took);
  }
  frozen.Thaw();

  ASSERT_TRUE(WaitUntil([&] { return claim("thawed", &took).status == 201; }, kGenerousDeadline,
                        std::chrono::milliseconds(100)))
      << idem.stderr_text();
  r = claim("frozen-0", &took);  // refused while frozen: nothing was recorded
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(idem.Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Databases, FrozenStoreTest, ::testing::Values("postgres", "mysql"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace idem::testing
