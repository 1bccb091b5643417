// Retention in `idem serve`: the real binary with [retention.*]
// sections in its --config: claim answers carry expires_at, a configured TTL below
// the derived one stops the start with the derivation, the background purge
// (--purge-every) tombstones what is past its time so a late duplicate is 410
// `expired`, and GET /v1/records pages the caller's records only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "http/client.h"
#include "http/prometheus_text.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::idem::testing::RunIdem;
using ::idem::testing::RunResult;
using ::idem::testing::ServeProcess;
using ::idem::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::Optional;
using ::idem::http::testing::SeriesValue;
using json = nlohmann::json;

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class ServeRetentionTest : public ::testing::Test {
 protected:
  // Starts `idem serve` with `config` as its --config and `extra` flags.
  void Start(const std::string& config, std::vector<std::string> extra = {}) {
    std::ofstream(dir_.file("idem.toml")) << config;
    server_ = std::make_unique<ServeProcess>(dir_.file("stderr.txt"));
    std::vector<std::string> args = {
        "--config",  dir_.file("idem.toml"),          "serve",    "--listen",   "127.0.0.1:0",
        "--store",   "sqlite://" + dir_.file("x.db"), "--tenant", "acme:tok-a", "--tenant",
        "beta:tok-b"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> argv = {::idem::testing::IdemBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string line = server_->StartProgram(argv);
    ASSERT_THAT(line, MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
        << server_->stderr_text();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_ != nullptr && port_ != 0) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0);
    }
  }

  ClientResponse Claim(const std::string& biz_type, const std::string& key,
                       const std::string& token = "tok-a") {
    return Fetch(port_, "POST", "/v1/claims",
                 R"({"biz_type":")" + biz_type + R"(","key":")" + key + R"(","fingerprint":"f"})",
                 token);
  }
  ClientResponse Complete(const std::string& biz_type, const std::string& key, int64_t token,
                          const std::string& bearer = "tok-a") {
    return Fetch(port_, "POST", "/v1/claims/complete",
                 R"({"biz_type":")" + biz_type + R"(","key":")" + key + R"(","token":)" +
                     std::to_string(token) + R"(,"result":{"ok":true}})",
                 bearer);
  }
  ClientResponse Get(const std::string& target, const std::string& token = "tok-a") {
    return Fetch(port_, "GET", target, "", token);
  }

  idem::testing::TempDir dir_;
  std::unique_ptr<ServeProcess> server_;
  uint16_t port_ = 0;
};

constexpr char kRefund[] =
    "[retention.refund]\n"
    "redelivery = \"10m\"\n"
    "recon_cycle = \"30d\"\n"
    "confirm_window = \"3d\"\n"
    "margin = \"60d\"\n";

TEST_F(ServeRetentionTest, ClaimAnswersCarryExpiresAt) {
  Start(kRefund);
  ClientResponse a = Claim("refund", "R-1");
  ASSERT_EQ(a.status, 201) << a.body;
  json aj = json::parse(a.body);
  ASSERT_TRUE(aj["expires_at"].is_string()) << a.body;
  // 90 days after now: the year may differ, the shape does not.
  EXPECT_THAT(aj["expires_at"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"));
  ASSERT_EQ(Complete("refund", "R-1", 1).status, 200);
  ClientResponse replay = Claim("refund", "R-1");
  ASSERT_EQ(replay.status, 200);
  EXPECT_EQ(json::parse(replay.body)["expires_at"], aj["expires_at"]);
  ClientResponse record = Get("/v1/records/refund/R-1");
  ASSERT_EQ(record.status, 200);
  EXPECT_EQ(json::parse(record.body)["expires_at"], aj["expires_at"]);
  // A biz_type without retention: kept for ever.
  ClientResponse other = Claim("payout", "P-1");
  ASSERT_EQ(other.status, 201);
  EXPECT_TRUE(json::parse(other.body)["expires_at"].is_null());
}

// The biz_types the config gives no retention keep their records until purged: the
// start says so, each is logged the first time it makes a record, and counted.
TEST_F(ServeRetentionTest, BizTypesWithoutRetentionAreLoggedOnceAndCounted) {
  Start(kRefund);
  const std::string gauge = "idem_biz_types_without_retention";
  EXPECT_THAT(SeriesValue(Get("/metrics").body, gauge), Optional(0));
  ASSERT_EQ(Claim("refund", "R-1").status, 201);
  EXPECT_THAT(SeriesValue(Get("/metrics").body, gauge), Optional(0));
  ASSERT_EQ(Claim("payout", "P-1").status, 201);
  ASSERT_EQ(Claim("payout", "P-2").status, 201);
  ASSERT_EQ(Claim("payout", "P-1", "tok-b").status, 201);
  ASSERT_EQ(Claim("ledger", "L-1").status, 201);
  EXPECT_THAT(SeriesValue(Get("/metrics").body, gauge), Optional(2));
  const std::string payout =
      "retention: biz_type \"payout\" has no retention, so its records are kept until purged; "
      "to set one, add a [retention.payout] section to the config file (docs/retention.md)\n";
  std::string log;
  ASSERT_TRUE(WaitUntil([&] {
    log = server_->stderr_text();
    return log.find("[retention.ledger]") != std::string::npos;
  })) << log;
  EXPECT_EQ(Occurrences(log, payout), 1) << log;
  EXPECT_EQ(Occurrences(log, "has no retention"), 2) << log;
  EXPECT_THAT(log, HasSubstr("retention: refund: ttl 90d"));
  EXPECT_THAT(log, HasSubstr("retention: any other biz_type's records are kept until purged; "
                             "each is logged when its first record is made "
                             "(idem_biz_types_without_retention counts them)\n"));
  EXPECT_THAT(log, Not(HasSubstr("retention: none configured")));
}

TEST_F(ServeRetentionTest, WithoutAnyRetentionTheStartSaysRecordsAreKeptUntilPurged) {
  Start("");
  std::string log;
  const std::string line =
      "retention: none configured, so every biz_type's records are kept until purged; to set "
      "one, add a [retention.<biz_type>] section to the config file (docs/retention.md)\n";
  EXPECT_TRUE(WaitUntil([&] {
    log = server_->stderr_text();
    return log.find(line) != std::string::npos;
  })) << log;
  ASSERT_EQ(Claim("refund", "R-1").status, 201);
  EXPECT_THAT(SeriesValue(Get("/metrics").body, "idem_biz_types_without_retention"),
              Optional(1));
  EXPECT_EQ(Occurrences(server_->stderr_text(), line), 1);
}

TEST(ServeRetentionStart, AConfiguredTtlBelowTheDerivedOneIsRefused) {
  idem::testing::TempDir dir;
  std::ofstream(dir.file("idem.toml")) << kRefund << "ttl = \"30d\"\n";
  RunResult r = RunIdem({"--config", dir.file("idem.toml"), "serve", "--listen", "127.0.0.1:0",
                         "--store", "sqlite://" + dir.file("x.db"), "--tenant", "a:b"},
                        dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");  // never listened
  // The derivation, then the one-line reason.
  EXPECT_THAT(r.err, HasSubstr("reconciliation cycle             30d        <- dominates"));
  EXPECT_THAT(r.err, HasSubstr("TTL = 30d + 60d = 90d (90 days)"));
  EXPECT_THAT(r.err, HasSubstr("idem: serve: config file: [retention.refund]: configured TTL 30d "
                               "is below the derived TTL 90d (reconciliation cycle 30d + safety "
                               "margin 60d)"));
  // A section without every window is bad usage.
  std::ofstream(dir.file("idem.toml")) << "[retention.refund]\nredelivery = \"10m\"\n";
  RunResult partial = RunIdem({"--config", dir.file("idem.toml"), "serve", "--listen",
                               "127.0.0.1:0", "--store", "sqlite://" + dir.file("x.db")},
                              dir.path());
  EXPECT_EQ(partial.exit_code, 2) << partial.err;
  EXPECT_THAT(partial.err, HasSubstr("'recon_cycle' is missing"));
  // A TTL at least the derived one is fine.
  std::ofstream(dir.file("idem.toml")) << kRefund << "ttl = \"120d\"\n";
  ServeProcess ok(dir.file("stderr.txt"));
  EXPECT_THAT(ok.StartProgram({::idem::testing::IdemBinary(), "--config", dir.file("idem.toml"),
                               "serve", "--listen", "127.0.0.1:0", "--store",
                               "sqlite://" + dir.file("x.db"), "--tenant", "a:b"}),
              MatchesRegex("listening on .*"));
  EXPECT_EQ(ok.Stop(SIGTERM), 0);
}

// A TTL of 2 s (redelivery 1s + margin 1s) and a purge every second: the key is
// tombstoned soon after, and its late duplicate is 410 `expired`, never run again.
TEST_F(ServeRetentionTest, TheBackgroundPurgeLeavesTombstonesALateDuplicateMeets) {
  Start(
      "[retention.refund]\nredelivery = \"1s\"\nrecon_cycle = \"0s\"\nconfirm_window = \"0s\"\n"
      "margin = \"1s\"\n",
      {"--purge-every", "1s"});
  ASSERT_EQ(Claim("refund", "R-1").status, 201);
  ASSERT_EQ(Complete("refund", "R-1", 1).status, 200);
  ASSERT_EQ(Claim("refund", "R-2").status, 201);  // a live lease: never purged
  ClientResponse late;
  ASSERT_TRUE(WaitUntil(
      [&] {
        late = Claim("refund", "R-1");
        return late.status != 200;
      },
      ::idem::testing::kGenerousDeadline, std::chrono::milliseconds(100)))
      << late.status << " " << late.body;
  ASSERT_EQ(late.status, 410) << late.body;
  EXPECT_EQ(late.header("content-type"), "application/problem+json");
  json j = json::parse(late.body);
  EXPECT_EQ(j["type"], "urn:idem:problem:expired");
  EXPECT_EQ(j["outcome"], "expired");
  EXPECT_TRUE(j["purged_at"].is_string());
  EXPECT_EQ(Get("/v1/records/refund/R-1").status, 410);
  // Another tenant's same key is its own.
  EXPECT_EQ(Claim("refund", "R-1", "tok-b").status, 201);
  // The lease is untouched.
  ClientResponse held = Claim("refund", "R-2");
  EXPECT_EQ(held.status, 409) << held.body;
  const std::string metrics = Get("/metrics").body;
  EXPECT_THAT(metrics, MatchesRegex("(.|\n)*idem_purge_records_total\\{action=\"tombstoned\"\\} "
                                    "[1-9](.|\n)*"));
  EXPECT_THAT(metrics, MatchesRegex("(.|\n)*idem_outcomes_total\\{outcome=\"expired\"\\} "
                                    "[1-9](.|\n)*"));
}

TEST_F(ServeRetentionTest, RecordPagesAreTheCallersOnlyAndCursorPaginated) {
  Start(kRefund);
  std::set<std::string> mine;
  for (int i = 0; i < 7; ++i) {
    const std::string key = "K-" + std::to_string(i);
    ASSERT_EQ(Claim(i < 5 ? "refund" : "payout", key).status, 201);
    if (i % 2 == 0) {
      ASSERT_EQ(Complete(i < 5 ? "refund" : "payout", key, 1).status, 200);
    }
    mine.insert(key);
  }
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Claim("refund", "B-" + std::to_string(i), "tok-b").status, 201);

  std::set<std::string> seen;
  std::string target = "/v1/records?limit=3";
  for (int pages = 0; pages < 10; ++pages) {
    ClientResponse page = Get(target);
    ASSERT_EQ(page.status, 200) << page.body;
    json j = json::parse(page.body);
    EXPECT_LE(j["records"].size(), 3u);
    for (const json& r : j["records"]) {
      EXPECT_TRUE(seen.insert(r["key"].get<std::string>()).second) << r;
      EXPECT_FALSE(r.contains("result"));
      EXPECT_TRUE(r.contains("expires_at"));
    }
    if (j["next_cursor"].is_null()) break;
    target = "/v1/records?limit=3&cursor=" + j["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(seen, mine);  // all of acme's, none of beta's

  ClientResponse refunds = Get("/v1/records?biz_type=refund&state=SUCCEEDED");
  ASSERT_EQ(refunds.status, 200);
  std::vector<std::string> keys;
  const json page = json::parse(refunds.body);
  for (const json& r : page["records"]) keys.push_back(r["key"]);
  EXPECT_THAT(keys, ::testing::ElementsAre("K-0", "K-2", "K-4"));
  EXPECT_TRUE(json::parse(refunds.body)["next_cursor"].is_null());
  ClientResponse beta = Get("/v1/records", "tok-b");
  ASSERT_EQ(beta.status, 200);
  EXPECT_EQ(json::parse(beta.body)["records"].size(), 3u);

  for (const std::string bad :
       {"/v1/records?limit=0", "/v1/records?limit=1001", "/v1/records?limit=x",
        "/v1/records?state=RELEASED", "/v1/records?cursor=%%%", "/v1/records?cursor=!!",
        "/v1/records?order=asc", "/v1/records?limit=1&limit=2"}) {
    ClientResponse r = Get(bad);
    EXPECT_EQ(r.status, 400) << bad << " " << r.body;
    EXPECT_EQ(r.header("content-type"), "application/problem+json") << bad;
  }
  EXPECT_EQ(Get("/v1/records", "nope").status, 401);
  EXPECT_EQ(Fetch(port_, "POST", "/v1/records", "{}", "tok-a").status, 405);
}

}  // namespace
}  // namespace idem::http
