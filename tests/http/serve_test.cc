// Black-box tests of `idem serve`: the real binary over a SQLite
// store, driven through HTTP on 127.0.0.1 with a port the kernel picks.
//
// The binary runs on the real clock. Tests wait for what they need (a claim that
// started waiting shows in idem_claim_waits_total, a lease that ran out lets a claim
// take over) with generous deadlines; where a time bound is the point of a test, it
// is far above what the server needs and says why.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

using ::idem::http::testing::Client;
using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::idem::testing::RunResult;
using json = nlohmann::json;

using IdemProcess = ::idem::testing::ServeProcess;
using ::idem::testing::IdemBinary;
using ::idem::testing::WaitUntil;

int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(IdemBinary().empty()) << "set IDEM_BIN to the idem binary";
    server_ = std::make_unique<IdemProcess>(dir_.file("stderr.txt"));
    std::string line =
        server_->Start({"--listen", "127.0.0.1:0", "--store", "sqlite://" + dir_.file("x.db"),
                        "--tenant", "acme:tok-a", "--tenant", "beta:tok-b"});
    ASSERT_THAT(line, MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
        << server_->stderr_text();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->stderr_text();
    }
  }

  ClientResponse Post(const std::string& target, const std::string& body,
                      const std::string& token = "tok-a") {
    return Fetch(port_, "POST", target, body, token);
  }
  ClientResponse Claim(const std::string& key, const std::string& extra = "",
                       const std::string& token = "tok-a") {
    return Post("/v1/claims", R"({"biz_type":"refund","key":")" + key + "\"" + extra + "}", token);
  }
  ClientResponse Complete(const std::string& key, int64_t tok, const std::string& result) {
    return Post("/v1/claims/complete", R"({"biz_type":"refund","key":")" + key + R"(","token":)" +
                                           std::to_string(tok) + R"(,"result":)" + result + "}");
  }
  ClientResponse Fail(const std::string& key, int64_t tok, bool retryable,
                      const std::string& error) {
    return Post("/v1/claims/fail", R"({"biz_type":"refund","key":")" + key + R"(","token":)" +
                                       std::to_string(tok) + R"(,"retryable":)" +
                                       (retryable ? "true" : "false") + R"(,"error":)" + error +
                                       "}");
  }
  // Claims that met a live lease and started waiting, from GET /metrics.
  uint64_t Waits() {
    const std::string text = Fetch(port_, "GET", "/metrics").body;
    const std::string name = "\nidem_claim_waits_total ";
    const size_t at = text.find(name);
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + name.size()));
  }
  static json J(const ClientResponse& r) { return json::parse(r.body); }
  static void ExpectProblem(const ClientResponse& r, int status, const std::string& outcome) {
    ASSERT_EQ(r.status, status) << r.error << r.body;
    EXPECT_EQ(r.header("content-type"), "application/problem+json");
    json j = json::parse(r.body);
    EXPECT_TRUE(j.contains("type") && j.contains("title") && j.contains("detail")) << r.body;
    EXPECT_EQ(j["status"], status);
    if (!outcome.empty()) {
      EXPECT_EQ(j["outcome"], outcome) << r.body;
    }
  }

  idem::testing::TempDir dir_;
  std::unique_ptr<IdemProcess> server_;
  uint16_t port_ = 0;
};

TEST_F(ServeTest, AcquireCompleteAndByteIdenticalReplay) {
  ClientResponse a = Claim("R-1", R"(,"fingerprint":"fp1")");
  ASSERT_EQ(a.status, 201) << a.body;
  json aj = J(a);
  EXPECT_EQ(aj["outcome"], "acquired");
  EXPECT_EQ(aj["token"], 1);
  EXPECT_EQ(aj["takeover"], false);
  EXPECT_THAT(aj["lease_until"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"));

  const std::string result = R"({"a" : 1.50, "b":[1,2 ]})";
  ClientResponse c = Complete("R-1", 1, result);
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(c.body, R"({"outcome":"completed"})");

  ClientResponse r = Claim("R-1", R"(,"fingerprint":"fp1")");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":)" + result + "}");
  EXPECT_EQ(r.header("idempotent-replayed"), "true");

  ExpectProblem(Claim("R-1", R"(,"fingerprint":"fp2")"), 422, "fingerprint_mismatch");
  ExpectProblem(Post("/v1/claims", R"({"biz_type":"order","key":"R-1"})"), 409, "key_reused");

  ClientResponse rec = Fetch(port_, "GET", "/v1/records/refund/R-1", "", "tok-a");
  ASSERT_EQ(rec.status, 200) << rec.body;
  EXPECT_THAT(rec.body, HasSubstr(R"("state":"SUCCEEDED","token":1,)"));
  EXPECT_THAT(rec.body, HasSubstr(R"("result":)" + result + "}"));
  // Tenant isolation: beta does not see acme's record.
  ExpectProblem(Fetch(port_, "GET", "/v1/records/refund/R-1", "", "tok-b"), 404, "");
}

TEST_F(ServeTest, InProgressAndLeaseLostAfterTakeover) {
  // Long enough that the next claim surely meets it live, short enough to wait out.
  ASSERT_EQ(Claim("K", R"(,"lease_ms":2000)").status, 201);
  ClientResponse busy = Claim("K");
  ExpectProblem(busy, 409, "in_progress");
  // Whole seconds left on the lease, rounded up (api_test pins the rounding exactly,
  // on a fake clock).
  const int left = std::stoi(busy.header("retry-after"));
  EXPECT_GE(left, 1);
  EXPECT_LE(left, 2);
  // Claims meeting the live lease change nothing; once it has run out, one takes over.
  ClientResponse t;
  ASSERT_TRUE(WaitUntil(
      [&] {
        t = Claim("K", R"(,"lease_ms":30000)");
        return t.status != 409;
      },
      ::idem::testing::kGenerousDeadline, std::chrono::milliseconds(100)))
      << "the 2 s lease never ran out: " << t.body;
  ASSERT_EQ(t.status, 201) << t.body;
  EXPECT_EQ(J(t)["token"], 2);
  EXPECT_EQ(J(t)["takeover"], true);
  EXPECT_EQ(J(t)["previous_token"], 1);
  ClientResponse busy2 = Claim("K");
  ExpectProblem(busy2, 409, "in_progress");
  // The new 30 s lease, not the old one's last second; Retry-After is the short hint.
  EXPECT_EQ(J(busy2)["lease_until"], J(t)["lease_until"]);
  EXPECT_EQ(busy2.header("retry-after"), "1");
  ExpectProblem(Complete("K", 1, "1"), 409, "lease_lost");
  EXPECT_EQ(Complete("K", 2, "1").status, 200);
}

// Retry-After of a 409 in_progress: the lease's time left capped at
// --retry-after-max (default 1 s), from the flag or the config file's key.
TEST(ServeRetryAfter, TheCapComesFromTheFlagOrTheConfigAndIsChecked) {
  idem::testing::TempDir dir;
  const auto busy_retry_after = [&](std::vector<std::string> args) {
    IdemProcess server(dir.file("stderr.txt"));
    std::vector<std::string> argv = ::idem::testing::IdemArgv(args);
    EXPECT_THAT(server.StartProgram(argv), ::testing::StartsWith("listening on "))
        << server.stderr_text();
    const std::string claim = R"({"biz_type":"refund","key":"K","lease_ms":30000})";
    EXPECT_EQ(Fetch(server.port(), "POST", "/v1/claims", claim, "tok").status, 201);
    ClientResponse busy = Fetch(server.port(), "POST", "/v1/claims", claim, "tok");
    EXPECT_EQ(busy.status, 409) << busy.body;
    EXPECT_EQ(server.Stop(SIGTERM), 0);
    return busy.header("retry-after");
  };
  const auto serve = [&](const std::string& db, std::vector<std::string> extra) {
    std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:0", "--store",
                                     "sqlite://" + dir.file(db), "--tenant", "t:tok"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  EXPECT_EQ(busy_retry_after(serve("a.db", {})), "1");
  EXPECT_EQ(busy_retry_after(serve("b.db", {"--retry-after-max", "5"})), "5");
  std::ofstream(dir.file("idem.toml")) << "[serve]\nretry-after-max = 7\n";
  std::vector<std::string> with_config = {"--config", dir.file("idem.toml")};
  const std::vector<std::string> c = serve("c.db", {});
  with_config.insert(with_config.end(), c.begin(), c.end());
  EXPECT_EQ(busy_retry_after(with_config), "7");
  // A lease shorter than the cap: its time left.
  EXPECT_EQ(busy_retry_after(serve("d.db", {"--retry-after-max", "3600"})), "30");

  for (const std::string bad : {"0", "-1", "3601"}) {
    RunResult r = ::idem::testing::RunIdem(serve("e.db", {"--retry-after-max=" + bad}), dir.path());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("idem: serve: --retry-after-max " + bad +
                                 ": must be whole seconds from 1 to 3600"));
  }
  RunResult text = ::idem::testing::RunIdem(serve("e.db", {"--retry-after-max", "1s"}), dir.path());
  EXPECT_EQ(text.exit_code, 2) << text.err;
  EXPECT_THAT(text.err, HasSubstr("--retry-after-max"));
  std::ofstream(dir.file("idem.toml")) << "[serve]\nretry-after-max = \"2s\"\n";
  std::vector<std::string> bad_config = {"--config", dir.file("idem.toml")};
  bad_config.insert(bad_config.end(), c.begin(), c.end());
  RunResult in_file = ::idem::testing::RunIdem(bad_config, dir.path());
  EXPECT_EQ(in_file.exit_code, 2) << in_file.err;
  EXPECT_THAT(in_file.err, HasSubstr("retry-after-max"));
}

// The packaged /etc/idem/idem.toml shows idem serve's defaults: every key of its
// [serve] section, set or commented out, whose option has a default (`idem serve
// --help` prints "--key TYPE=default") gives that default, except the store, which
// is the service's state directory on purpose.
TEST(ServePackagedConfig, ItsValuesAreServesDefaults) {
  std::ifstream file(IDEM_PACKAGED_CONFIG);
  ASSERT_TRUE(file.good()) << IDEM_PACKAGED_CONFIG;
  idem::testing::TempDir dir;
  const RunResult help = ::idem::testing::RunIdem({"serve", "--help"}, dir.path());
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const std::regex key_line(R"(^(# )?([a-z][a-z-]*) = (.*)$)");
  bool in_serve = false;
  int checked = 0;
  std::set<std::string> seen;
  for (std::string line; std::getline(file, line);) {
    if (line.starts_with("[") || line.starts_with("# [")) in_serve = line == "[serve]";
    std::smatch m;
    if (!in_serve || !std::regex_match(line, m, key_line) || m[2] == "store") continue;
    std::string value = m[3];
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    // "--key TYPE=default" or "--key,--key_alias TYPE=default" in the help.
    const std::regex option("--" + m[2].str() + R"((,--[a-z_]+)? [A-Z:]+=(\S+))");
    std::smatch d;
    if (!std::regex_search(help.out, d, option)) continue;  // no default: an example
    EXPECT_EQ(value, d[2].str()) << "packaged config: " << line;
    seen.insert(m[2]);
    ++checked;
  }
  EXPECT_GE(checked, 11) << "keys checked: " << checked;
  for (const char* key : {"listen", "retry-after-max", "purge-batch", "purge-max-rate"}) {
    EXPECT_TRUE(seen.count(key)) << key << " is not in the packaged config";
  }
}

TEST_F(ServeTest, FailRetryableReleasesFinalFailIsCached) {
  ASSERT_EQ(Claim("K").status, 201);
  ClientResponse f = Fail("K", 1, true, R"({"why":"timeout"})");
  EXPECT_EQ(f.status, 200);
  EXPECT_EQ(f.body, R"({"outcome":"released"})");
  ClientResponse again = Claim("K");
  ASSERT_EQ(again.status, 201);
  EXPECT_EQ(J(again)["token"], 2);

  ClientResponse ff = Fail("K", 2, false, R"({"code" : "E_CARD" })");
  EXPECT_EQ(ff.status, 200);
  EXPECT_EQ(ff.body, R"({"outcome":"failed"})");
  ClientResponse cached = Claim("K");
  EXPECT_EQ(cached.status, 200);
  EXPECT_EQ(cached.body,
            R"({"outcome":"cached_failure","expires_at":null,"error":{"code" : "E_CARD" }})");
  EXPECT_EQ(cached.header("idempotent-replayed"), "true");
  ExpectProblem(Complete("missing", 1, "1"), 404, "");
}

TEST_F(ServeTest, AuthenticationAndOpenEndpoints) {
  ClientResponse none = Claim("K", "", "");
  ExpectProblem(none, 401, "");
  EXPECT_THAT(none.header("www-authenticate"), HasSubstr("Bearer"));
  ExpectProblem(Claim("K", "", "tok-wrong"), 401, "");
  // Tenants never see each other's keys: both acquire their own "K".
  EXPECT_EQ(Claim("K", "", "tok-a").status, 201);
  EXPECT_EQ(Claim("K", "", "tok-b").status, 201);

  EXPECT_EQ(Fetch(port_, "GET", "/healthz").status, 200);
  ClientResponse ready = Fetch(port_, "GET", "/readyz", "", "ignored-token");
  EXPECT_EQ(ready.status, 200);
  ClientResponse metrics = Fetch(port_, "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body,
              HasSubstr("idem_http_requests_total{route=\"/v1/claims\",status=\"201\"} 2\n"));
  EXPECT_THAT(metrics.body,
              HasSubstr("idem_http_requests_total{route=\"/v1/claims\",status=\"401\"} 2\n"));
  EXPECT_THAT(metrics.body, HasSubstr("idem_outcomes_total{outcome=\"acquired\"} 2\n"));
  EXPECT_THAT(metrics.body, HasSubstr("idem_store_errors_total 0\n"));
}

TEST_F(ServeTest, BadInput) {
  ExpectProblem(Post("/v1/claims", R"({"biz_type":"refund","key":)"), 400, "");
  ClientResponse missing = Post("/v1/claims", R"({"biz_type":"refund"})");
  ExpectProblem(missing, 400, "");
  EXPECT_THAT(J(missing)["detail"].get<std::string>(), HasSubstr("\"key\" is required"));
  ClientResponse longkey = Claim(std::string(256, 'k'));
  ExpectProblem(longkey, 400, "");
  EXPECT_THAT(J(longkey)["detail"].get<std::string>(), HasSubstr("key"));
  EXPECT_EQ(Claim(std::string(255, 'k')).status, 201);
  ExpectProblem(Claim("a\\u0000b"), 400, "");
  ExpectProblem(Claim("K", R"(,"lease_ms":50)"), 400, "");
  ExpectProblem(Post("/v1/claims", std::string((1 << 20) + 1, ' ')), 413, "");
  ExpectProblem(Fetch(port_, "GET", "/nope"), 404, "");
  ClientResponse wrong_method = Fetch(port_, "DELETE", "/v1/claims", "", "tok-a");
  ExpectProblem(wrong_method, 405, "");
  EXPECT_EQ(wrong_method.header("allow"), "POST");
}

TEST_F(ServeTest, WaitAttachesToTheHolderAndReplaysItsResult) {
  ASSERT_EQ(Claim("K").status, 201);
  auto waiter = std::async(std::launch::async, [&] { return Claim("K", R"(,"wait_ms":30000)"); });
  ASSERT_TRUE(WaitUntil([&] { return Waits() == 1; })) << "the claim never started waiting";
  ASSERT_EQ(Complete("K", 1, R"([ "done" ])").status, 200);
  // The waiter is woken by the completion, within a poll period (15 ms). One that
  // only looked again when its 30 s wait ran out would replay too, so a bound is
  // what tells them apart: half the wait, far above the poll period, so a slow
  // machine does not fail it.
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(15)), std::future_status::ready)
      << "the waiter was not woken by the completion";
  ClientResponse r = waiter.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":[ "done" ]})");
  EXPECT_EQ(r.header("idempotent-replayed"), "true");
}

TEST_F(ServeTest, WaitRunsOutWith409) {
  ASSERT_EQ(Claim("K").status, 201);
  auto start = std::chrono::steady_clock::now();
  ClientResponse r = Claim("K", R"(,"wait_ms":300)");
  ExpectProblem(r, 409, "in_progress");
  EXPECT_FALSE(r.header("retry-after").empty());
  // It did wait (a lower bound: a loaded machine only makes it longer).
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(Waits(), 1u);
}

TEST_F(ServeTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Client c(port_);
  ASSERT_TRUE(c.connected());
  EXPECT_EQ(c.Send("POST", "/v1/claims", R"({"biz_type":"t","key":"A"})", "tok-a").status, 201);
  EXPECT_EQ(c.Send("POST", "/v1/claims/complete",
                   R"({"biz_type":"t","key":"A","token":1,"result":1})", "tok-a")
                .status,
            200);
  ClientResponse r = c.Send("POST", "/v1/claims", R"({"biz_type":"t","key":"A"})", "tok-a");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(c.Send("GET", "/v1/records/t/A", "", "tok-a").status, 200);
  EXPECT_EQ(c.Send("GET", "/healthz").status, 200);
}

TEST_F(ServeTest, FiftyConcurrentClaimsOfOneKeyAcquireOnce) {
  std::vector<std::future<ClientResponse>> all;
  std::atomic<bool> go{false};
  for (int i = 0; i < 50; ++i) {
    all.push_back(std::async(std::launch::async, [&] {
      Client c(port_);
      while (!go.load()) std::this_thread::yield();
      return c.Send("POST", "/v1/claims", R"({"biz_type":"t","key":"hot"})", "tok-a");
    }));
  }
  go = true;
  int acquired = 0, in_progress = 0;
  for (auto& f : all) {
    ClientResponse r = f.get();
    if (r.status == 201) ++acquired;
    if (r.status == 409 && J(r)["outcome"] == "in_progress") ++in_progress;
    EXPECT_TRUE(r.status == 201 || r.status == 409) << r.status << " " << r.error << r.body;
  }
  EXPECT_EQ(acquired, 1);
  EXPECT_EQ(in_progress, 49);
}

TEST_F(ServeTest, SigtermFinishesAWaitingClaimAndExitsZero) {
  ASSERT_EQ(Claim("K").status, 201);
  auto waiter = std::async(std::launch::async, [&] { return Claim("K", R"(,"wait_ms":30000)"); });
  ASSERT_TRUE(WaitUntil([&] { return Waits() == 1; })) << "the claim never started waiting";
  // Stop() gives the server 20 s, less than the 30 s wait: an exit in time means
  // SIGTERM answered the waiting claim rather than letting it run out.
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->stderr_text();
  ClientResponse r = waiter.get();
  ExpectProblem(r, 409, "in_progress");
  EXPECT_FALSE(r.keep_alive);
  server_.reset();
}

// Start-up failures: one line on stderr and the documented exit status.
class ServeStartupTest : public ::testing::Test {
 protected:
  int Run(const std::vector<std::string>& args, std::string* err) {
    IdemProcess p(dir_.file("stderr.txt"));
    std::string line = p.Start(args);
    EXPECT_EQ(line, "");
    int status = p.WaitExit();
    *err = p.stderr_text();
    return status;
  }
  idem::testing::TempDir dir_;
};

TEST_F(ServeStartupTest, UnwritableStoreIsExit1WithOneLine) {
  std::string err;
  EXPECT_EQ(Run({"--listen", "127.0.0.1:0", "--store", "sqlite:///proc/nonexistent/x.db",
                 "--tenant", "a:t"},
                &err),
            1);
  EXPECT_EQ(CountLines(err), 1) << err;
  EXPECT_THAT(err, HasSubstr("cannot open store"));
}

TEST_F(ServeStartupTest, CorruptDatabaseIsExit1WithOneLine) {
  {
    std::ofstream out(dir_.file("bad.db"), std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 7919 + 13) & 0xFF));
  }
  std::string err;
  EXPECT_EQ(Run({"--listen", "127.0.0.1:0", "--store", "sqlite://" + dir_.file("bad.db"),
                 "--tenant", "a:t"},
                &err),
            1);
  EXPECT_EQ(CountLines(err), 1) << err;
  EXPECT_THAT(err, HasSubstr("cannot open store"));
}

TEST_F(ServeStartupTest, BadFlagsAreExit2WithOneLine) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--listen", "nonsense"},
        std::vector<std::string>{"--listen", "127.0.0.1:70000"},
        std::vector<std::string>{"--tenant", "no-colon"},
        std::vector<std::string>{"--tenant", "a:x", "--tenant", "a:y"},
        std::vector<std::string>{"--threads", "0"},
        std::vector<std::string>{"--max-connections", "-1"},
        std::vector<std::string>{"--header-timeout", "0s"},
        std::vector<std::string>{"--header-timeout", "soon"}}) {
    std::string err;
    EXPECT_EQ(Run(args, &err), 2) << args[1];
    EXPECT_EQ(CountLines(err), 1) << err;
  }
}

TEST_F(ServeStartupTest, PortInUseIsExit1) {
  IdemProcess first(dir_.file("first.txt"));
  std::string line =
      first.Start({"--listen", "127.0.0.1:0", "--store", "memory://", "--tenant", "a:t"});
  ASSERT_THAT(line, HasSubstr("listening on"));
  std::string err;
  EXPECT_EQ(Run({"--listen", "127.0.0.1:" + std::to_string(first.port()), "--store", "memory://",
                 "--tenant", "a:t"},
                &err),
            1);
  EXPECT_EQ(CountLines(err), 1) << err;
  EXPECT_EQ(first.Stop(SIGINT), 0);
}

// SIGTERM and SIGINT are blocked in every thread and taken by sigwait() in the one
// that waits for them. With a handler, a worker could take the signal; under TSan,
// which defers it until that thread's next intercepted call, a worker parked on a
// futex kept it and the server never stopped (1 in ~100 starts in build-tsan).
TEST_F(ServeStartupTest, EveryThreadBlocksTheStopSignalsSoOnlyTheWaiterTakesThem) {
  IdemProcess p(dir_.file("stderr.txt"));
  ASSERT_THAT(p.Start({"--listen", "127.0.0.1:0", "--store", "memory://", "--tenant", "a:t"}),
              HasSubstr("listening on"));
  const std::string tasks = "/proc/" + std::to_string(p.pid()) + "/task";
  int threads = 0;
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    uint64_t blocked = 0;
    bool seen = false;
    while (std::getline(status, line)) {
      if (line.starts_with("SigBlk:")) {
        blocked = std::stoull(line.substr(7), nullptr, 16);
        seen = true;
      }
    }
    if (!seen) continue;  // the thread ended meanwhile
    ++threads;
    // The waiter itself: inside sigwait() the kernel unblocks the awaited signals.
    if (task.path().filename() == std::to_string(p.pid())) continue;
    EXPECT_NE(blocked & (uint64_t{1} << (SIGTERM - 1)), 0u) << task.path() << " takes SIGTERM";
    EXPECT_NE(blocked & (uint64_t{1} << (SIGINT - 1)), 0u) << task.path() << " takes SIGINT";
  }
  EXPECT_GT(threads, 2);  // the waiter (the main thread), the I/O threads, the handler pool
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.stderr_text();
  EXPECT_THAT(p.stderr_text(), HasSubstr("signal 15: shutting down"));
}

TEST_F(ServeStartupTest, WithoutTenantsADevTenantIsPrinted) {
  IdemProcess p(dir_.file("stderr.txt"));
  std::string line = p.Start({"--listen", "127.0.0.1:0", "--store", "memory://"});
  ASSERT_THAT(line, MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"));
  std::string err = p.stderr_text();
  const std::string marker = "development tenant \"dev\", token: ";
  size_t at = err.find(marker);
  ASSERT_NE(at, std::string::npos) << err;
  std::string token = err.substr(at + marker.size());
  token = token.substr(0, token.find('\n'));
  EXPECT_THAT(token, MatchesRegex("[0-9a-f]{64}"));  // 256 random bits
  EXPECT_EQ(Fetch(p.port(), "POST", "/v1/claims", R"({"biz_type":"t","key":"k"})", token).status,
            201);
  EXPECT_EQ(p.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace idem::http

namespace idem::http {
namespace {

// X-Request-Id: a client's sane id is echoed, in the header and in a
// problem body; a missing or unsafe one is replaced by one the server makes.
TEST_F(ServeTest, RequestIdIsEchoedOrMade) {
  Client c(port_);
  ClientResponse given = c.Send("GET", "/v1/records/refund/none", "", "tok-a",
                                {{"X-Request-Id", "trace-42.a:b_c"}});
  EXPECT_EQ(given.status, 404);
  EXPECT_EQ(given.header("x-request-id"), "trace-42.a:b_c");
  EXPECT_EQ(J(given).value("request_id", ""), "trace-42.a:b_c") << given.body;
  ClientResponse unsafe =
      c.Send("GET", "/healthz", "", "", {{"X-Request-Id", "bad id\"<script>"}});
  EXPECT_THAT(unsafe.header("x-request-id"), MatchesRegex("[0-9a-f]{32}"));
  ClientResponse made = c.Send("GET", "/healthz");
  EXPECT_THAT(made.header("x-request-id"), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(made.header("x-request-id"), unsafe.header("x-request-id"));
}

}  // namespace
}  // namespace idem::http

namespace idem::http {
namespace {

// Logs an operator can use: --log-format json writes one JSON object
// per line; every answer has an access line (method, route, status, outcome,
// latency, tenant, request id) that never holds the token; --log-level warn
// silences the access lines; a bad level is a usage error.
TEST(ServeLogTest, JsonAccessLogWithoutSecrets) {
  idem::testing::TempDir dir;
  {
    IdemProcess serve(dir.file("json.err"));
    ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", "memory://", "--tenant",
                             "acme:tok-secret-1", "--log-format", "json"}),
                MatchesRegex("listening on .*"));
    Client c(serve.port());
    ASSERT_EQ(c.Send("POST", "/v1/claims", R"({"biz_type":"refund","key":"K-1"})",
                     "tok-secret-1", {{"X-Request-Id", "req-7"}})
                  .status,
              201);
    ASSERT_EQ(serve.Stop(), 0);
    const std::string log = serve.stderr_text();
    EXPECT_THAT(log, Not(HasSubstr("tok-secret-1")));
    std::istringstream lines(log);
    int access = 0;
    for (std::string line; std::getline(lines, line);) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(j.is_discarded()) << "not one JSON object: " << line;
      ASSERT_TRUE(j.contains("time") && j.contains("level") && j.contains("msg")) << line;
      const std::string msg = j["msg"];
      if (msg.starts_with("access ")) {
        ++access;
        EXPECT_THAT(msg, HasSubstr("method=POST route=/v1/claims status=201 outcome=acquired"));
        EXPECT_THAT(msg, HasSubstr("tenant=acme request_id=req-7"));
        EXPECT_THAT(msg, MatchesRegex(".*latency_ms=[0-9]+\\.[0-9]{3}.*"));
      }
    }
    EXPECT_EQ(access, 1) << log;
  }
  {
    IdemProcess quiet(dir.file("warn.err"));
    ASSERT_THAT(quiet.Start({"--listen", "127.0.0.1:0", "--store", "memory://", "--tenant",
                             "acme:tok", "--log-level", "warn"}),
                MatchesRegex("listening on .*"));
    EXPECT_EQ(Fetch(quiet.port(), "GET", "/healthz").status, 200);
    ASSERT_EQ(quiet.Stop(), 0);
    EXPECT_THAT(quiet.stderr_text(), Not(HasSubstr("access ")));
  }
  RunResult bad = ::idem::testing::RunIdem({"serve", "--log-level", "loud"}, dir.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--log-level 'loud' must be"));
}

// The text log keeps each line one line whatever a tenant puts in a key: a key with
// CR, LF and an escape sequence, logged by a fail-open claim, is written escaped, so
// it cannot forge an access line or drive the operator's terminal.
TEST(ServeLogTest, TextLogEscapesControlCharactersInEveryField) {
  idem::testing::TempDir dir;
  IdemProcess serve(dir.file("text.err"));
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store",
                           "postgres://idem@127.0.0.1:1/idem", "--tenant", "acme:tok",
                           "--fail-open", "refund"}),
              MatchesRegex("listening on .*"));
  Client c(serve.port());
  const std::string forged =
      "K-1\\n[2024-06-18 10:00:00.000] [idem] [info] access method=POST route=/forged\\r"
      "\\u001b[31m\\\\";
  ASSERT_EQ(c.Send("POST", "/v1/claims", R"({"biz_type":"refund","key":")" + forged + R"("})",
                   "tok")
                .status,
            201);
  ASSERT_EQ(serve.Stop(), 0);
  const std::string log = serve.stderr_text();
  EXPECT_THAT(log, HasSubstr("key \"K-1\\n[2024-06-18 10:00:00.000] [idem] [info] access "
                             "method=POST route=/forged\\r\\x1B[31m\\\\\""));
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_THAT(line, MatchesRegex("\\[[-0-9: .]+\\] \\[idem\\] \\[[a-z]+\\] .*")) << line;
    EXPECT_EQ(line.find_first_of(std::string("\r\x1b", 2)), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace idem::http

namespace idem::http {
namespace {

// A result or error is any JSON value, stored and replayed byte-for-byte. Numbers
// past int64/double were refused as "not valid JSON" (simdjson converts numbers),
// and complete comes after the effect, so the client could not retry that away.
TEST_F(ServeTest, BigNumbersInAResultAreStoredAndReplayedByteForByte) {
  for (const std::string& result :
       {std::string(R"({"big":18446744073709551616,"huge":1e400,"tiny":-1e-400,"n":[1E+999]})"),
        std::string("1e400"), std::string("-123456789012345678901234567890")}) {
    const std::string key = "BIG-" + std::to_string(result.size());
    ClientResponse c = Claim(key);
    ASSERT_EQ(c.status, 201) << c.body;
    ClientResponse done = Complete(key, 1, result);
    ASSERT_EQ(done.status, 200) << done.body;
    ClientResponse replay = Claim(key);
    ASSERT_EQ(replay.status, 200) << replay.body;
    EXPECT_THAT(replay.body, HasSubstr("\"result\":" + result)) << replay.body;
  }
  // Still refused: what is not JSON at all, and a body that is not an object.
  EXPECT_EQ(Complete("BIG-x", 1, "1e400x").status, 400);
  EXPECT_EQ(Post("/v1/claims/complete", "[1e400]").status, 400);
}

// `idem serve --store rocksdb://DIR`: lease mode on the embedded key/value store. A
// completed claim replays after a restart; a second server on the same directory
// fails to start with one clear line.
TEST(ServeRocksdbTest, ClaimsSurviveARestartAndTheDirectoryHasOneServer) {
  idem::testing::TempDir dir;
  const std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--store",
                                         "rocksdb://" + dir.file("db"), "--tenant", "acme:tok-a"};
  const std::string claim = R"({"biz_type":"refund","key":"R-1"})";
  {
    IdemProcess serve(dir.file("first.txt"));
    ASSERT_THAT(serve.Start(args), MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
        << serve.stderr_text();
    ClientResponse a = Fetch(serve.port(), "POST", "/v1/claims", claim, "tok-a");
    ASSERT_EQ(a.status, 201) << a.body;
    ClientResponse c = Fetch(serve.port(), "POST", "/v1/claims/complete",
                             R"({"biz_type":"refund","key":"R-1","token":1,"result":{"x":1}})",
                             "tok-a");
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(Fetch(serve.port(), "GET", "/readyz").status, 200);
    // The claim, the complete and the readiness checks' write probes: durable writes
    // of one record each.
    ClientResponse metrics = Fetch(serve.port(), "GET", "/metrics", "", "tok-a");
    const auto series = [&](const std::string& name) -> long {
      const size_t at = metrics.body.find("\n" + name + " ");
      if (at == std::string::npos) return -1;
      return std::stol(metrics.body.substr(at + name.size() + 2));
    };
    const long writes = series("idem_store_write_batch_records_count");
    EXPECT_GE(writes, 2) << metrics.body;
    EXPECT_EQ(series("idem_store_write_batch_records_bucket{le=\"1\"}"), writes);
    EXPECT_EQ(series("idem_store_write_batch_records_sum"), writes);

    IdemProcess second(dir.file("second.txt"));
    EXPECT_EQ(second.Start(args), "");
    EXPECT_EQ(second.WaitExit(), 1);
    EXPECT_EQ(CountLines(second.stderr_text()), 1) << second.stderr_text();
    EXPECT_THAT(second.stderr_text(), HasSubstr("another process has this database open"));
    // `idem purge` cannot open it either, and says how the server purges it.
    RunResult purge = ::idem::testing::RunIdem({"purge", "--store", "rocksdb://" + dir.file("db")},
                                               dir.path());
    EXPECT_EQ(purge.exit_code, 1) << purge.err;
    EXPECT_EQ(CountLines(purge.err), 1) << purge.err;
    EXPECT_THAT(purge.err, HasSubstr("another process has this database open"));
    EXPECT_THAT(purge.err, HasSubstr("is purged by the server itself: run it with --purge-every"));
    EXPECT_EQ(serve.Stop(SIGTERM), 0) << serve.stderr_text();
  }
  IdemProcess again(dir.file("again.txt"));
  ASSERT_THAT(again.Start(args), MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
      << again.stderr_text();
  ClientResponse r = Fetch(again.port(), "POST", "/v1/claims", claim, "tok-a");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"outcome":"replayed","expires_at":null,"result":{"x":1}})");
  EXPECT_EQ(again.Stop(SIGTERM), 0) << again.stderr_text();
}

}  // namespace
}  // namespace idem::http
