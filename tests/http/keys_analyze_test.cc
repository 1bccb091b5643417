// Key health (docs/keys.md) end to end: synthetic traffic with known answers through
// the real `idem serve` (3 regenerated groups of 7 keys, 2 over-coarse keys with 3
// mismatches, 5 UUID keys, 2 epoch-second and 2 epoch-millisecond keys, one
// topic-partition-offset key, plain business keys), then `idem keys analyze` on the
// same store, text and --json, checked exactly, and /metrics' idem_key_* counters.
// keys_analyze_test runs it on SQLite; keys_analyze_sql_test (IDEM_KEYS_SQL_SERVERS)
// on PostgreSQL and MariaDB, failing without IDEM_TEST_POSTGRES_URL /
// IDEM_TEST_MYSQL_URL. Bad usage and unreachable stores and servers too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "conformance/store_factory.h"
#include "http/client.h"
#include "idem/fingerprint.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::idem::http::testing::ClientResponse;
using ::idem::http::testing::Fetch;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using json = nlohmann::json;

std::string Digest(const std::string& key) { return idem::Fingerprint(key).substr(0, 12); }
std::string Ex(const std::string& shown, const std::string& key) {
  return "\"" + shown + "\" (sha256:" + Digest(key) + ")";
}

const std::vector<std::string> kUuids = {
    "550e8400-e29b-41d4-a716-446655440000", "9b2e4c1a-7f3d-4e8a-9c6b-1d2e3f4a5b6c",
    "018f3e2a-7b4c-7d5e-8f6a-9b0c1d2e3f4a", "f47ac10b-58cc-4372-a567-0e02b2c3d479",
    "c9bf9e57-1685-4c89-bafb-ff5af830be8a"};

class KeysAnalyze {
 public:
  KeysAnalyze(TempDir& dir, std::string store) : dir_(dir), store_(std::move(store)) {}

  void Start() {
    server_ = std::make_unique<ServeProcess>(dir_.file("serve.err"));
    const std::string line = server_->Start({"--listen", "127.0.0.1:0", "--store", store_,
                                             "--tenant", "acme:tok-a", "--tenant", "beta:tok-b"});
    ASSERT_THAT(line, MatchesRegex("listening on 127\\.0\\.0\\.1:[0-9]+"))
        << server_->stderr_text();
    port_ = server_->port();
  }
  ~KeysAnalyze() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0);
    }
  }

  int Claim(const std::string& biz_type, const std::string& key, const std::string& fp,
            const std::string& token = "tok-a") {
    ClientResponse r = Fetch(port_, "POST", "/v1/claims",
                             R"({"biz_type":")" + biz_type + R"(","key":")" + key +
                                 R"(","fingerprint":")" + fp + R"("})",
                             token);
    return r.status;
  }
  int Complete(const std::string& biz_type, const std::string& key) {
    return Fetch(port_, "POST", "/v1/claims/complete",
                 R"({"biz_type":")" + biz_type + R"(","key":")" + key +
                     R"(","token":1,"result":{"ok":true}})",
                 "tok-a")
        .status;
  }

  // The known mix.
  void Traffic() {
    // (a) Three requests each sent again under new keys: 3 groups, 7 keys.
    for (const char* k : {"order-1001-try1", "order-1001-try2", "order-1001-try3"}) {
      ASSERT_EQ(Claim("refund", k, "fp-regen-1"), 201) << k;
    }
    for (const char* k : {"pay-a", "pay-b"}) ASSERT_EQ(Claim("refund", k, "fp-regen-2"), 201);
    for (const char* k : {"pay-c", "pay-d"}) ASSERT_EQ(Claim("payout", k, "fp-regen-3"), 201);
    // The same fingerprint at another tenant: not a regeneration of acme's.
    ASSERT_EQ(Claim("refund", "beta-order-1", "fp-regen-1", "tok-b"), 201);
    // (b) Two keys carrying several requests: user-1 three fingerprints (2 refused,
    // once after the record finished), user-2 two (1 refused).
    ASSERT_EQ(Claim("refund", "user-1", "u1-a"), 201);
    ASSERT_EQ(Complete("refund", "user-1"), 200);
    ASSERT_EQ(Claim("refund", "user-1", "u1-b"), 422);
    ASSERT_EQ(Claim("refund", "user-1", "u1-c"), 422);
    ASSERT_EQ(Claim("refund", "user-1", "u1-a"), 200);  // a true retry: replayed
    ASSERT_EQ(Claim("refund", "user-2", "u2-a"), 201);
    ASSERT_EQ(Claim("refund", "user-2", "u2-b"), 422);
    // (c) Shapes, each key with a fingerprint of its own.
    for (size_t i = 0; i < kUuids.size(); ++i) {
      ASSERT_EQ(Claim("refund", kUuids[i], "fp-u" + std::to_string(i)), 201);
    }
    int n = 0;
    for (const char* k : {"1733050000", "1733050001", "1733050000123", "1733050000456"}) {
      ASSERT_EQ(Claim("refund", k, "fp-e" + std::to_string(n++)), 201);
    }
    ASSERT_EQ(Claim("refund", "orders:3:18842", "fp-tpo"), 201);
    // Good keys.
    ASSERT_EQ(Claim("refund", "refund:ORD-2024-0001", "fp-g1"), 201);
    ASSERT_EQ(Claim("refund", "R-20240618-000713", "fp-g2"), 201);
  }

  RunResult Analyze(std::vector<std::string> extra) {
    std::vector<std::string> args = {"keys", "analyze"};
    for (std::string& a : StoreArgs(store_, dir_.path())) args.push_back(std::move(a));
    args.insert(args.end(), extra.begin(), extra.end());
    return RunIdem(args, dir_.path());
  }
  std::string ServerUrl() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string TokenFile() {
    std::ofstream(dir_.file("token")) << "tok-a\n";
    return dir_.file("token");
  }
  uint16_t port() const { return port_; }

 private:
  TempDir& dir_;
  std::string store_;
  std::unique_ptr<ServeProcess> server_;
  uint16_t port_ = 0;
};

// The text after the first line (the store and the time it was run at).
std::string Body(const std::string& out) { return out.substr(out.find('\n') + 1); }

void CheckAnalysis(TempDir& dir, const std::string& store) {
  KeysAnalyze k(dir, store);
  ASSERT_NO_FATAL_FAILURE(k.Start());
  ASSERT_NO_FATAL_FAILURE(k.Traffic());

  // Without --server: the records' findings; over-coarse keys not checked.
  RunResult plain = k.Analyze({"--since", "1h"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  EXPECT_THAT(plain.out, MatchesRegex("key health of [^\n]+: 22 records created since "
                                      "[0-9T:.Z-]+ \\(1h\\), window 10m\n(.|\n)*"));
  const std::string shapes =
      "suspicious shapes: 10 keys\n"
      "  uuid: 5 keys: acme refund " +
      Ex("018f3e2a-7b4…", kUuids[2]) + ", acme refund " + Ex("550e8400-e29…", kUuids[0]) +
      ", acme refund " + Ex("9b2e4c1a-7f3…", kUuids[1]) + "\n" + "  epoch_s: 2 keys: acme refund " +
      Ex("1733050000", "1733050000") + ", acme refund " + Ex("1733050001", "1733050001") + "\n" +
      "  epoch_ms: 2 keys: acme refund " + Ex("1733050000123", "1733050000123") + ", acme refund " +
      Ex("1733050000456", "1733050000456") + "\n" +
      "  topic_partition_offset: 1 keys: acme refund " + Ex("orders:3:18842", "orders:3:18842") +
      "\n";
  const std::string regenerated =
      "regenerated keys: 3 groups, 7 keys (one request fingerprint under several keys: the key "
      "is remade on retry)\n"
      "  acme payout fingerprint fp-regen-3: 2 keys: " +
      Ex("pay-c", "pay-c") + ", " + Ex("pay-d", "pay-d") + "\n" +
      "  acme refund fingerprint fp-regen-1: 3 keys: " + Ex("order-1001-try1", "order-1001-try1") +
      ", " + Ex("order-1001-try2", "order-1001-try2") + ", " +
      Ex("order-1001-try3", "order-1001-try3") + "\n" +
      "  acme refund fingerprint fp-regen-2: 2 keys: " + Ex("pay-a", "pay-a") + ", " +
      Ex("pay-b", "pay-b") + "\n";
  EXPECT_EQ(Body(plain.out),
            regenerated +
                "over-coarse keys: not checked (no store keeps the 422s; give --server, the idem "
                "serve answering the claims)\n" +
                shapes);

  // With --server: the 422s of acme's keys.
  RunResult full = k.Analyze({"--server", k.ServerUrl(), "--token-file", k.TokenFile()});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_EQ(Body(full.out), regenerated +
                                "over-coarse keys: 2 keys, 3 mismatches (one key, several "
                                "fingerprints: the key is too broad; 422s of " +
                                k.ServerUrl() + " for tenant acme)\n" + "  acme refund " +
                                Ex("user-1", "user-1") + ": 3 fingerprints, 2 mismatches\n" +
                                "  acme refund " + Ex("user-2", "user-2") +
                                ": 2 fingerprints, 1 mismatches\n" + shapes);

  // --json, one tenant and one biz_type, one example each.
  RunResult j = k.Analyze({"--json", "--tenant", "acme", "--biz-type", "refund", "--examples", "1",
                           "--server", k.ServerUrl(), "--token-file", k.TokenFile()});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  json doc = json::parse(j.out);
  EXPECT_EQ(doc["records"], 19);
  EXPECT_EQ(doc["window"], "10m");
  EXPECT_EQ(doc["regenerated"]["groups"], 2);
  EXPECT_EQ(doc["regenerated"]["keys"], 5);
  ASSERT_EQ(doc["regenerated"]["examples"].size(), 1u);
  const json& g = doc["regenerated"]["examples"][0];
  EXPECT_EQ(g["fingerprint"], "fp-regen-1");
  EXPECT_EQ(g["keys"], 3);
  ASSERT_EQ(g["examples"].size(), 1u);
  EXPECT_EQ(g["examples"][0]["key"], "order-1001-try1");
  EXPECT_EQ(g["examples"][0]["key_sha256"], idem::Fingerprint("order-1001-try1"));
  EXPECT_EQ(doc["over_coarse"]["tenant"], "acme");
  EXPECT_EQ(doc["over_coarse"]["keys"], 2);
  EXPECT_EQ(doc["over_coarse"]["mismatches"], 3);
  ASSERT_EQ(doc["over_coarse"]["examples"].size(), 1u);
  EXPECT_EQ(doc["over_coarse"]["examples"][0]["key"], "user-1");
  EXPECT_EQ(doc["over_coarse"]["examples"][0]["fingerprints"], 3);
  EXPECT_EQ(doc["suspicious"]["keys"], 10);
  EXPECT_EQ(doc["suspicious"]["shapes"]["uuid"]["keys"], 5);
  ASSERT_EQ(doc["suspicious"]["shapes"]["uuid"]["examples"].size(), 1u);
  // Never a whole long key: 12 bytes and "…", the digest beside.
  EXPECT_EQ(doc["suspicious"]["shapes"]["uuid"]["examples"][0]["key"], "018f3e2a-7b4…");
  EXPECT_EQ(doc["suspicious"]["shapes"]["uuid"]["examples"][0]["key_sha256"],
            idem::Fingerprint(kUuids[2]));
  EXPECT_THAT(j.out, Not(HasSubstr(kUuids[2])));
  EXPECT_EQ(doc["suspicious"]["shapes"]["epoch_s"]["keys"], 2);
  EXPECT_EQ(doc["suspicious"]["shapes"]["epoch_ms"]["keys"], 2);
  EXPECT_EQ(doc["suspicious"]["shapes"]["topic_partition_offset"]["keys"], 1);

  // The server's token is acme's: --tenant beta with it is a usage error.
  RunResult other =
      k.Analyze({"--tenant", "beta", "--server", k.ServerUrl(), "--token-file", k.TokenFile()});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_EQ(other.err,
            "idem: keys analyze: --tenant beta, but the token for --server is tenant "
            "acme's\n");

  // /metrics: the same findings as the server counted them (regenerations after the
  // first key of each group).
  ClientResponse m = Fetch(k.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  // Without --metrics-token: each tenant's totals, no biz_type a client named.
  for (const char* line : {
           "idem_key_regenerated_total{tenant=\"acme\"} 4\n",
           "idem_key_fingerprint_mismatch_total{tenant=\"acme\"} 3\n",
           "idem_key_over_coarse_total{tenant=\"acme\"} 2\n",
           "idem_key_suspicious_shape_total{tenant=\"acme\",shape=\"uuid\"} 5\n",
           "idem_key_suspicious_shape_total{tenant=\"acme\",shape=\"epoch_s\"} 2\n",
           "idem_key_suspicious_shape_total{tenant=\"acme\",shape=\"epoch_ms\"} 2\n",
           "idem_key_suspicious_shape_total{tenant=\"acme\",shape=\"topic_partition_offset\"} 1\n",
       }) {
    EXPECT_THAT(m.body, HasSubstr(line));
  }
  EXPECT_THAT(m.body, Not(HasSubstr("biz_type=\"refund\"")));
  // GET /v1/keys/mismatches shows only the caller's tenant.
  ClientResponse beta = Fetch(k.port(), "GET", "/v1/keys/mismatches", "", "tok-b");
  ASSERT_EQ(beta.status, 200) << beta.body;
  EXPECT_EQ(beta.body, R"({"tenant":"beta","keys":[]})");
}

#ifndef IDEM_KEYS_SQL_SERVERS

TEST(KeysAnalyzeSqlite, KnownTrafficGivesKnownFindings) {
  TempDir dir;
  CheckAnalysis(dir, "sqlite://" + dir.file("idem.db"));
}

TEST(KeysAnalyzeUsage, BadInputIsExit2WithOneLine) {
  TempDir dir;
  const std::string store = "sqlite://" + dir.file("none.db");
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{"--since", "abc"}, "idem: keys analyze: --since"},
           {{"--window", "0"}, "idem: keys analyze: --window"},
           {{"--window", "0s"}, "idem: keys analyze: --window must be longer than 0s\n"},
           {{"--since", "0s"}, "idem: keys analyze: --since must be longer than 0s\n"},
           {{"--examples", "101"}, "idem: keys analyze: --examples must be 0 … 100\n"},
           {{"--token-file", "x"},
            "idem: keys analyze: --token-file is the token for --server; "
            "give --server too\n"},
           {{"--server", "ftp://x"}, "idem: keys analyze: --server: "},
       }) {
    std::vector<std::string> args = {"keys", "analyze", "--store", store};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = RunIdem(args, dir.path());
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << " " << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith(c.err)) << c.args[0];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(KeysAnalyzeUsage, ServeRefusesAnEmptyKeyWindow) {
  TempDir dir;
  RunResult r = RunIdem({"serve", "--listen", "127.0.0.1:0", "--store",
                         "sqlite://" + dir.file("x.db"), "--tenant", "a:b", "--key-window", "0s"},
                        dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "idem: serve: --key-window must be longer than 0s\n");
  EXPECT_EQ(r.out, "");
}

TEST(KeysAnalyzeUsage, AStoreOrServerThatDoesNotAnswerIsExit1) {
  TempDir dir;
  RunResult pg = RunIdem(
      {"keys", "analyze", "--store", "postgres://idem:s3cretpw@127.0.0.1:1/x?connect_timeout=1"},
      dir.path());
  EXPECT_EQ(pg.exit_code, 1) << pg.err;
  EXPECT_THAT(pg.err, HasSubstr("127.0.0.1"));
  EXPECT_THAT(pg.err, Not(HasSubstr("s3cretpw")));
  // The password on the command line is warned about; then the one-line reason.
  EXPECT_THAT(pg.err, ::testing::StartsWith("idem: warning: the --store URL carries a password"));
  EXPECT_EQ(std::count(pg.err.begin(), pg.err.end(), '\n'), 2) << pg.err;
  // A missing SQLite file is not created.
  RunResult missing =
      RunIdem({"keys", "analyze", "--store", "sqlite://" + dir.file("no.db")}, dir.path());
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_FALSE(std::ifstream(dir.file("no.db")).good());

  // A store that answers, a server that does not.
  KeysAnalyze k(dir, "sqlite://" + dir.file("idem.db"));
  ASSERT_NO_FATAL_FAILURE(k.Start());
  ASSERT_EQ(k.Claim("refund", "R-1", "f"), 201);
  RunResult down = k.Analyze({"--server", "http://127.0.0.1:1", "--token-file", k.TokenFile()});
  EXPECT_EQ(down.exit_code, 1) << down.err;
  EXPECT_THAT(down.err, HasSubstr("idem: keys analyze: server http://127.0.0.1:1: "));
  // A token the server does not know.
  std::ofstream(dir.file("bad-token")) << "nope\n";
  RunResult refused = k.Analyze({"--server", k.ServerUrl(), "--token-file", dir.file("bad-token")});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("the bearer token is not accepted"));
  EXPECT_THAT(refused.err, Not(HasSubstr("nope")));
  // The route itself: a token is needed, and it takes no parameters.
  EXPECT_EQ(Fetch(k.port(), "GET", "/v1/keys/mismatches").status, 401);
  ClientResponse params =
      Fetch(k.port(), "GET", "/v1/keys/mismatches?biz_type=refund", "", "tok-a");
  EXPECT_EQ(params.status, 400) << params.body;
  EXPECT_THAT(params.body, HasSubstr("takes no query parameters"));
  EXPECT_EQ(Fetch(k.port(), "POST", "/v1/keys/mismatches", "{}", "tok-a").status, 405);
}

#else

TEST(KeysAnalyzePostgres, KnownTrafficGivesKnownFindings) {
  TempDir dir;
  CheckAnalysis(dir, PostgresUrl(dir.path()));
}

TEST(KeysAnalyzeMysql, KnownTrafficGivesKnownFindings) {
  TempDir dir;
  CheckAnalysis(dir, MysqlTestUrl(dir.path()));
}

#endif

}  // namespace
}  // namespace idem::testing
