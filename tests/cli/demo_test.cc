// Black-box tests of `idem demo refund`: the demo with injected
// faults and SIGKILLed runners is part of the test suite, at a small N, and its
// audit must show every effect exactly once.
//
// Built twice (tests/cli/CMakeLists.txt): demo_test runs the default SQLite store,
// --naive and the usage errors; demo_sql_test (IDEM_DEMO_SQL_SERVERS) runs the same
// audit on PostgreSQL and MariaDB from IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL
// and fails when they are not set. Each demo run keeps its rows apart by a run id,
// so the shared test databases need no cleanup.
//
// What the audit guarantees (src/demo/refund_demo.cc, Audit): with no
// duplicate and nothing missing, every order is SUCCESS (exactly one reversal,
// ledger row and notification), COMPENSATED (none of them) or
// COMPENSATION_REQUIRED (at most one of each). Hence for each effect count E:
//   orders - compensated - manual <= E <= orders - compensated,
// with equality when manual == 0.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

#ifdef IDEM_DEMO_SQL_SERVERS
#include "conformance/store_factory.h"  // PostgresUrl, MysqlTestUrl: fail when unset
#endif

namespace idem {
namespace {

using testing::ExpectOneLineFailure;
using testing::IdemBinary;
using testing::ReadWholeFile;
using testing::RunIdemIn;
using testing::RunResult;

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The last line of `text` (which ends in '\n').
std::string LastLine(const std::string& text) {
  if (text.empty() || text.back() != '\n') return "";
  const size_t start = text.rfind('\n', text.size() - 2);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     text.size() - (start == std::string::npos ? 0 : start + 1) - 1);
}

const std::vector<std::string> kReportKeys = {"orders",
                                              "channel_reversals",
                                              "channel_duplicates",
                                              "ledger_rows",
                                              "ledger_duplicates",
                                              "notifications",
                                              "notification_duplicates",
                                              "missing",
                                              "compensated",
                                              "manual",
                                              "runner_kills"};

class DemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(IdemBinary().empty()) << "set IDEM_BIN to the idem binary";
    ASSERT_TRUE(std::filesystem::exists(IdemBinary())) << IdemBinary();
  }

  // Runs idem with `args` in the temp dir.
  RunResult Idem(const std::vector<std::string>& args) { return RunIdemIn(dir_.path(), args); }


  // The --json line: the last stdout line, with exactly the report's keys, each an
  // integer.
  static nlohmann::json Report(const RunResult& r) {
    const std::string line = LastLine(r.out);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << "last stdout line is not a JSON object: " << line;
    if (!j.is_object()) return nlohmann::json::object();
    std::set<std::string> keys;
    for (const auto& [k, v] : j.items()) {
      keys.insert(k);
      EXPECT_TRUE(v.is_number_integer()) << k << " = " << v;
    }
    EXPECT_EQ(keys, std::set<std::string>(kReportKeys.begin(), kReportKeys.end())) << line;
    for (const std::string& k : kReportKeys) {
      if (!j.contains(k) || !j[k].is_number_integer()) j[k] = -1;
    }
    return j;
  }

  // The store the demo reports in its table ("store: URL").
  static std::string StoreLine(const std::string& out) {
    const size_t at = out.find("\nstore: ");
    if (at == std::string::npos) return "";
    const size_t start = at + std::string("\nstore: ").size();
    return out.substr(start, out.find('\n', start) - start);
  }

  // The audit of a step-machine run: no duplicate, nothing missing, every order
  // SUCCESS (one of each effect), COMPENSATED (none) or COMPENSATION_REQUIRED.
  static void ExpectEveryEffectOnce(const nlohmann::json& j, int64_t want_orders) {
    const int64_t orders = j["orders"], compensated = j["compensated"], manual = j["manual"];
    EXPECT_EQ(orders, want_orders);
    EXPECT_EQ(j["channel_duplicates"], 0);
    EXPECT_EQ(j["ledger_duplicates"], 0);
    EXPECT_EQ(j["notification_duplicates"], 0);
    EXPECT_EQ(j["missing"], 0);
    EXPECT_GE(compensated, 0);
    EXPECT_GE(manual, 0);
    EXPECT_LE(compensated + manual, orders);
    for (const char* effect : {"channel_reversals", "ledger_rows", "notifications"}) {
      const int64_t n = j[effect];
      EXPECT_GE(n, orders - compensated - manual) << effect << " in " << j;
      EXPECT_LE(n, orders - compensated) << effect << " in " << j;
      if (manual == 0) {
        EXPECT_EQ(n + compensated, orders) << effect << " in " << j;
      }
    }
  }

  // Runs the step-machine demo with faults and kills and checks the audit: exit 0,
  // no duplicate, nothing missing, every order accounted for, the runner killed.
  nlohmann::json RunAudited(const std::vector<std::string>& store_args, const std::string& seed) {
    std::vector<std::string> args = {"demo",         "refund", "--orders",      "20",
                                     "--fault-rate", "0.3",    "--kill-runner", "0.2",
                                     "--seed",       seed,     "--json"};
    args.insert(args.end(), store_args.begin(), store_args.end());
    RunResult r = Idem(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_THAT(r.out, StartsWith("refund demo (idem step machine): 20 orders, fault rate 0.30, "
                                  "kill rate 0.20, seed " +
                                  seed + "\n"));
    EXPECT_THAT(r.out, HasSubstr("\nresult: every effect exactly once\n"));
    nlohmann::json j = Report(r);
    ExpectEveryEffectOnce(j, 20);
    // Three failpoints per step, 60 steps, 0.2 per step: about a dozen kills; seen
    // 18-21 over seeds 1-5 on every store.
    EXPECT_GT(j["runner_kills"], 0) << j;
    return j;
  }

  testing::TempDir dir_;
};

#if defined(IDEM_DEMO_KAFKA)

// --transport kafka: the orders go through librdkafka's mock cluster; the first
// consumer is SIGKILLed after its first batch's effects and before its offset
// commit, a second consumer joins (a rebalance), and with --kill-runner more
// consumers die at step failpoints. The idem runner keyed by {order_no}:{action}
// with the step machine: every order refunded exactly once, none lost.
TEST_F(DemoTest, KafkaRefundWithRedeliveryRebalanceAndKills) {
  RunResult r = Idem({"demo", "refund", "--transport", "kafka", "--orders", "20", "--fault-rate", "0.2",
                 "--kill-runner", "0.1", "--seed", "4", "--store",
                 "sqlite://" + dir_.file("kafka.db"), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("refund demo over Kafka (mock cluster, idem runner keyed by "
                                "{order_no}:{action}, step machine): 20 orders, fault rate 0.20, "
                                "kill rate 0.10, seed 4\n"));
  EXPECT_THAT(r.out, HasSubstr("\n  consumers joined (rebalance)     1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nresult: every effect exactly once\n"));
  nlohmann::json j = Report(r);
  ExpectEveryEffectOnce(j, 20);
  // The crash before the offset commit at least; random kills on top.
  EXPECT_GE(j["runner_kills"], 1) << j;
}

// --naive over Kafka: dedupe by (topic, partition, offset) + consumer id, as seed
// 0 did. The batch the killed consumer did not commit is redelivered to another
// consumer, whose key differs: the payment is reversed twice. No faults, so the
// only cause of a duplicate is the redelivery. Exit 0, as the direct --naive.
TEST_F(DemoTest, KafkaNaiveDedupeReversesTwice) {
  RunResult r = Idem({"demo", "refund", "--transport", "kafka", "--naive", "--orders", "20",
                 "--fault-rate", "0", "--seed", "4", "--store",
                 "sqlite://" + dir_.file("kafka-naive.db"), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("refund demo over Kafka (mock cluster, naive: dedupe by (topic, "
                                "partition, offset) + consumer id): 20 orders"));
  EXPECT_THAT(r.out, HasSubstr("\nresult: DUPLICATE OR MISSING EFFECTS (see above)\n"));
  nlohmann::json j = Report(r);
  EXPECT_EQ(j["orders"], 20);
  EXPECT_GT(j["channel_duplicates"], 0) << j;
  // The ledger's UNIQUE (order_no, biz_type) rolls the second delivery's local
  // writes back, as in the seed; the channel's reversal is not undone by it.
  EXPECT_EQ(j["ledger_duplicates"], 0) << j;
  EXPECT_EQ(j["notification_duplicates"], 0) << j;
  EXPECT_EQ(j["missing"], 0) << j;
  EXPECT_EQ(j["runner_kills"], 1) << j;
}

TEST_F(DemoTest, KafkaBadTransportIsAUsageError) {
  RunResult r = Idem({"demo", "refund", "--transport", "rabbit"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--transport"));
}

#elif !defined(IDEM_DEMO_SQL_SERVERS)

// The default store is a new SQLite file in a fresh /tmp directory; the table
// names it. Seed 5 compensates an order on some runs: that path is audited too.
TEST_F(DemoTest, RefundOnDefaultSqliteStoreWithFaultsAndKills) {
  std::vector<std::string> stores_seen;
  for (const char* seed : {"5", "2"}) {
    RunAudited({}, seed);
    const std::string store = StoreLine(ReadWholeFile(dir_.file("stdout")));
    EXPECT_THAT(store, StartsWith("sqlite:///tmp/idem-refund-demo-"));
    stores_seen.push_back(store);
    // The demo leaves its directory behind for a look; the test does not.
    if (store.starts_with("sqlite:///tmp/idem-refund-demo-")) {
      const std::filesystem::path db = store.substr(std::string("sqlite://").size());
      EXPECT_TRUE(std::filesystem::exists(db)) << db;
      std::error_code ec;
      std::filesystem::remove_all(db.parent_path(), ec);
    }
  }
  ASSERT_EQ(stores_seen.size(), 2u);
  EXPECT_NE(stores_seen[0], stores_seen[1]) << "each run gets a new store";
}

// The readable table comes first, the JSON line last.
TEST_F(DemoTest, RefundPrintsTheTableThenTheJsonLine) {
  const std::string url = "sqlite://" + dir_.file("demo.db");
  RunResult r = Idem({"demo", "refund", "--orders", "3", "--fault-rate", "0", "--seed", "7", "--store",
                 url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string json = LastLine(r.out);
  ASSERT_THAT(json, StartsWith("{\"orders\":3,"));
  const std::string table = r.out.substr(0, r.out.size() - json.size() - 1);
  EXPECT_THAT(table, StartsWith("refund demo (idem step machine): 3 orders, fault rate 0.00, kill "
                                "rate 0.00, seed 7\n"
                                "store: " +
                                url + "\n\n"));
  EXPECT_THAT(table, HasSubstr("\n  effect                 orders/rows   duplicates\n"
                               "  channel reversals               3            0\n"
                               "  ledger rows                     3            0\n"
                               "  notifications                   3            0\n"));
  EXPECT_THAT(table, HasSubstr("\n  missing (lost steps)             0\n"
                               "  compensated                      0\n"
                               "  manual (compensation required)   0\n"
                               "  runner kills                     0\n"));
  EXPECT_THAT(table, HasSubstr("\n  channel: 3 reversal calls made, 0 cancelled; injected 0 "
                               "timeouts, 0 lost answers, 0 busy\n"));
  EXPECT_THAT(table, HasSubstr("\nresult: every effect exactly once\n"));
  EXPECT_THAT(table, Not(HasSubstr("{")));
  nlohmann::json j = Report(r);
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"orders":3,"channel_reversals":3,"channel_duplicates":0,"ledger_rows":3,
                       "ledger_duplicates":0,"notifications":3,"notification_duplicates":0,
                       "missing":0,"compensated":0,"manual":0,"runner_kills":0})"));

  // Without --json: the table alone.
  RunResult plain =
      Idem({"demo", "refund", "--orders", "3", "--fault-rate", "0", "--seed", "7", "--store", url});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(LastLine(plain.out), "result: every effect exactly once");
  EXPECT_THAT(plain.out, Not(HasSubstr("{")));
}

// A second run on the same store counts only its own rows (the run id).
TEST_F(DemoTest, RefundRunsShareAStoreWithoutSeeingEachOther) {
  const std::string url = "sqlite://" + dir_.file("shared.db");
  for (int run = 0; run < 2; ++run) {
    RunResult r = Idem({"demo", "refund", "--orders", "4", "--fault-rate", "0.3", "--seed", "11",
                   "--store", url, "--json"});
    ASSERT_EQ(r.exit_code, 0) << "run " << run << ": " << r.err;
    nlohmann::json j = Report(r);
    EXPECT_EQ(j["orders"], 4);
    EXPECT_EQ(j["missing"], 0);
    EXPECT_EQ(j["channel_duplicates"], 0);
    EXPECT_EQ(j["ledger_duplicates"], 0);
    EXPECT_EQ(j["notification_duplicates"], 0);
    EXPECT_LE(j["ledger_rows"].get<int64_t>(), 4) << "run " << run;
  }
}

// Every fault fires: no refund can finish, each is compensated (or, were a cancel
// to fail, left to a person), and nothing stays behind in the ledger or the inbox.
TEST_F(DemoTest, RefundWithEveryFaultCompensatesEveryOrder) {
  RunResult r = Idem({"demo", "refund", "--orders", "3", "--fault-rate", "1", "--seed", "1", "--store",
                 "sqlite://" + dir_.file("demo.db"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Report(r);
  EXPECT_EQ(j["missing"], 0);
  EXPECT_EQ(j["compensated"].get<int64_t>() + j["manual"].get<int64_t>(), 3) << j;
  EXPECT_EQ(j["ledger_rows"], 0);
  EXPECT_EQ(j["notifications"], 0);
  EXPECT_EQ(j["channel_duplicates"], 0);
  EXPECT_LE(j["channel_reversals"].get<int64_t>(), j["manual"].get<int64_t>());
  EXPECT_THAT(r.out, HasSubstr("\nresult: every effect exactly once\n"));
}

// The seed's offset-keyed dedupe: a redelivery gets a new offset and reverses the
// payment again. The demo ran, so exit 0, and the table says what went wrong.
TEST_F(DemoTest, NaiveDedupeShowsDuplicateReversals) {
  RunResult r = Idem({"demo", "refund", "--naive", "--orders", "30", "--fault-rate", "0.3", "--seed",
                 "3", "--store", "sqlite://" + dir_.file("naive.db"), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("refund demo (naive: dedupe by message offset): 30 orders"));
  EXPECT_THAT(r.out, HasSubstr("\n  message deliveries               "));
  EXPECT_THAT(r.out, Not(HasSubstr("runner kills")));
  EXPECT_THAT(r.out, HasSubstr("\nresult: DUPLICATE OR MISSING EFFECTS (see above)\n"));
  nlohmann::json j = Report(r);
  EXPECT_EQ(j["orders"], 30);
  EXPECT_GT(j["channel_duplicates"], 0) << j;
  EXPECT_EQ(j["runner_kills"], 0);
}

// The same flags as a step-machine run, for a side-by-side: --kill-runner is
// accepted and said to have nothing to kill.
TEST_F(DemoTest, NaiveAcceptsTheStepMachinesFlags) {
  RunResult r = Idem({"demo", "refund", "--naive", "--orders", "10", "--fault-rate", "0.3",
                 "--kill-runner", "0.2", "--seed", "3", "--store",
                 "sqlite://" + dir_.file("naive.db"), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("refund demo (naive: dedupe by message offset): 10 orders, "
                                "fault rate 0.30, seed 3 (--kill-runner: no runner process in "
                                "this mode)\n"));
  EXPECT_EQ(Report(r)["runner_kills"], 0);
}

// --- usage -------------------------------------------------------------------

TEST_F(DemoTest, RefundBadOptionsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string err;  // exact, or empty: any one line
  };
  const Case cases[] = {
      {{"--orders", "0"}, "idem: demo refund: --orders 0: must be between 1 and 100000\n"},
      {{"--orders", "100001"},
       "idem: demo refund: --orders 100001: must be between 1 and 100000\n"},
      {{"--orders", "-3"}, "idem: demo refund: --orders -3: must be between 1 and 100000\n"},
      {{"--orders", "many"}, ""},
      {{"--fault-rate", "1.5"}, "idem: demo refund: --fault-rate 1.5: must be between 0 and 1\n"},
      {{"--fault-rate", "-0.1"}, "idem: demo refund: --fault-rate -0.1: must be between 0 and 1\n"},
      {{"--fault-rate", "nan"}, ""},
      {{"--kill-runner", "1"},
       "idem: demo refund: --kill-runner 1: must be between 0 and 0.9 (at 1 no step could "
       "finish)\n"},
      {{"--kill-runner", "-0.5"}, ""},
      {{"--store", "bogus://x"}, ""},
      {{"--store", "sqlite://"}, ""},
      {{"--frobnicate"}, "idem: unknown option '--frobnicate' (see idem demo refund --help)\n"},
      {{"--orders"}, ""},
      {{"--seed", "-1"}, "idem: --seed: must be 0 or more (see --help)\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"demo", "refund"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(args.back());
    RunResult r = Idem(args);
    ExpectOneLineFailure(r, 2);
    if (!c.err.empty()) {
      EXPECT_EQ(r.err, c.err);
    }
  }
  RunResult r = Idem({"demo", "refund", "--frobnicate"});
  EXPECT_THAT(r.err, HasSubstr("--frobnicate"));
  r = Idem({"demo", "refund", "--store", "bogus://x"});
  EXPECT_THAT(r.err, HasSubstr("bogus"));
}

// A demo stopped by a signal (timeout, CI) must not leave its fake channel or its
// runner behind: they die with it.
TEST_F(DemoTest, StoppedDemoLeavesNoChildProcesses) {
  const std::string seed = std::to_string(900000 + getpid());
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 1);
    dup2(null, 2);
    execl(IdemBinary().c_str(), IdemBinary().c_str(), "demo", "refund", "--orders", "5000",
          "--fault-rate", "0.3", "--kill-runner", "0.2", "--seed", seed.c_str(), "--store",
          ("sqlite://" + dir_.file("stopped.db")).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  // Children carry "--seed <seed>" (the channel) or "--seed <seed*1000003+n>" (the
  // runner); wait until the channel is up, then stop the demo as `timeout` would.
  auto children = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      std::string cmd = ReadWholeFile(e.path().string() + "/cmdline");
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      // The demo is the program idem-demo (`idem demo` runs it); so is its channel.
      if (cmd.find("idem-demo channel ") != std::string::npos &&
          cmd.find("--seed " + seed + " ") != std::string::npos) {
        ++n;
      }
    }
    return n;
  };
  ::idem::testing::WaitUntil([&] { return children() > 0; });
  ASSERT_EQ(children(), 1) << "the demo's channel did not start";
  kill(pid, SIGTERM);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus));
  ::idem::testing::WaitUntil([&] { return children() == 0; });
  EXPECT_EQ(children(), 0) << "the fake channel outlived the demo";
}

// memory:// has no SQL for the ledger and the journal: the store named is unfit
// for the demo, as `idem stuck` and `idem worker` say with exit 2.
TEST_F(DemoTest, RefundOnMemoryStoreIsUsageError) {
  RunResult r = Idem({"demo", "refund", "--orders", "1", "--store", "memory://"});
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("SQL"));
}

TEST_F(DemoTest, RefundUnreachableStoreExitsOne) {
  RunResult r = Idem({"demo", "refund", "--orders", "1", "--store",
                 "sqlite://" + dir_.file("no/such/dir/demo.db")});
  ExpectOneLineFailure(r, 1);
  r = Idem({"demo", "refund", "--orders", "1", "--store",
            "postgres://idem@127.0.0.1:1/none?connect_timeout=2"});
  ExpectOneLineFailure(r, 1);
}

TEST_F(DemoTest, DemoWithoutADemonstrationIsUsageError) {
  RunResult r = Idem({"demo"});
  ExpectOneLineFailure(r, 2);
  // The reason names what is missing: a demonstration, such as refund.
  EXPECT_THAT(r.err, HasSubstr("refund"));

  r = Idem({"demo", "nosuch"});
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("nosuch"));
}

TEST_F(DemoTest, HelpListsRefundButNotTheInternalSubcommands) {
  RunResult r = Idem({"demo", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("Usage: idem demo"));
  EXPECT_THAT(r.out, HasSubstr("\n  refund "));
  EXPECT_THAT(r.out, Not(HasSubstr("channel")));
  EXPECT_THAT(r.out, Not(HasSubstr("refund-runner")));

  r = Idem({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("\n  demo "));

  r = Idem({"demo", "refund", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: idem demo refund"));
  for (const char* flag :
       {"--orders", "--fault-rate", "--kill-runner", "--seed", "--store", "--naive", "--json"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

#else  // IDEM_DEMO_SQL_SERVERS (and not IDEM_DEMO_KAFKA)

class DemoSqlTest : public DemoTest {};

// A schema (PostgreSQL) or database (MariaDB) of this test's own on the test
// server, as in the conformance suite: the journal's tables are the current
// build's, whatever earlier builds left in the shared database.
TEST_F(DemoSqlTest, RefundOnPostgresWithFaultsAndKills) {
  const std::string url = testing::PostgresUrl(dir_.path());
  ASSERT_FALSE(HasFailure());
  RunAudited({"--store", url}, "2");
}

TEST_F(DemoSqlTest, RefundOnMysqlWithFaultsAndKills) {
  const std::string url = testing::MysqlTestUrl(dir_.path());
  ASSERT_FALSE(HasFailure());
  RunAudited({"--store", url}, "3");
}

#endif  // IDEM_DEMO_SQL_SERVERS

}  // namespace
}  // namespace idem
