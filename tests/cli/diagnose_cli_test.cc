// `idem diagnose rebalance` run as a binary: the report (text and JSON) for files
// whose answer is worked out by hand, and bad input → FILE:LINE, exit 1; usage → 2.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using testing::ExpectOneLineFailure;
using testing::RunResult;
using ::testing::HasSubstr;
using testing::RunIdemIn;

// Ten rebalances, eight of them inside the four jitter windows (80 %: jitter is the
// cause): the windows last 15 s, 4 s, 9 s and 2 s, so P99 (the longest, with fewer than 100)
// is 15 s, which gives session 30 s / heartbeat 10 s.
constexpr char kEvents[] =
    "# rebalances of group refunds\n"
    "2024-06-18T10:00:03Z revoked refunds[0]\n"
    "2024-06-18T10:00:03.500Z assigned refunds[0]\n"
    "2024-06-18T10:00:15Z revoked refunds[1]\n"  // the first window's end: inside
    "2024-06-18T18:20:01+08:00 revoked refunds[0]\n"
    "2024-06-18T10:20:04Z assigned refunds[0]\n"
    "2024-06-18T10:45:00Z revoked refunds[2]\n"  // outside (line 7)
    "\n"
    "2024-06-18T11:00:00Z revoked refunds[0]\n"
    "2024-06-18T11:00:08Z assigned refunds[0]\n"
    "2024-06-18T12:00:01Z revoked refunds[1]\n"
    "2024-06-18T12:00:05Z assigned refunds[1]\n";  // 3 s after the last window (line 12)
constexpr char kJitter[] =
    "2024-06-18T10:00:00Z 2024-06-18T10:00:15Z\n"
    "2024-06-18T10:20:00Z 2024-06-18T10:20:04Z\n"
    "2024-06-18T11:00:00Z 2024-06-18T11:00:09Z\n"
    "2024-06-18T12:00:00Z 2024-06-18T12:00:02Z\n";

class DiagnoseCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(testing::IdemBinary().empty()) << "set IDEM_BIN"; }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_.file(name), std::ios::binary) << text;
    return name;
  }
  RunResult Idem(const std::vector<std::string>& args) { return RunIdemIn(dir_.path(), args); }
  RunResult Diagnose(const std::string& events, const std::string& jitter,
                std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"diagnose", "rebalance",
                                     "--events", Write("ev.log", events),
                                     "--jitter", Write("jitter.txt", jitter)};
    args.insert(args.end(), more.begin(), more.end());
    return Idem(args);
  }

  testing::TempDir dir_;
};

TEST_F(DiagnoseCliTest, ReportsTheShareTheVerdictAndTheTimeouts) {
  RunResult r = Diagnose(kEvents, kJitter);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("events:          10 (ev.log)\n"));
  EXPECT_THAT(r.out, HasSubstr("jitter windows:  4 (jitter.txt), P99 duration 15s, longest 15s\n"));
  EXPECT_THAT(r.out, HasSubstr("inside a window: 8 of 10 (80.0%)\n"));
  EXPECT_THAT(r.out, HasSubstr("outside every window: lines 7, 12 of ev.log\n"));
  EXPECT_THAT(r.out, HasSubstr("verdict: 80.0% >= 80%: network jitter explains the rebalances"));
  EXPECT_THAT(r.out, HasSubstr("  session.timeout.ms=30000\n  heartbeat.interval.ms=10000\n"));
}

TEST_F(DiagnoseCliTest, JsonWithSlackAndThreshold) {
  RunResult r = Diagnose(kEvents, kJitter, {"--json", "--slack", "3s", "--threshold", "95"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["events"]["count"], 10);
  EXPECT_EQ(j["events"]["inside"], 9);  // the slack takes in line 12
  EXPECT_DOUBLE_EQ(j["events"]["share"].get<double>(), 0.9);
  EXPECT_EQ(j["events"]["outside_lines"], nlohmann::json::array({7}));
  EXPECT_EQ(j["jitter"]["windows"], 4);
  EXPECT_EQ(j["jitter"]["p99_ms"], 15000);
  EXPECT_EQ(j["slack_ms"], 3000);
  EXPECT_EQ(j["threshold_percent"], 95);
  EXPECT_EQ(j["jitter_explains"], false);
  EXPECT_EQ(j["suggested"]["session.timeout.ms"], 30000);
  EXPECT_EQ(j["suggested"]["heartbeat.interval.ms"], 10000);
}

TEST_F(DiagnoseCliTest, BelowTheThresholdPointsElsewhere) {
  RunResult r = Diagnose("2024-06-18T09:00:00Z revoked\n2024-06-18T10:00:01Z revoked\n", kJitter);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("inside a window: 1 of 2 (50.0%)\n"));
  EXPECT_THAT(r.out, HasSubstr("verdict: 50.0% < 80%: network jitter does not explain"));
}

TEST_F(DiagnoseCliTest, BadFilesNameFileAndLineAndExitOne) {
  RunResult r = Diagnose("2024-06-18T10:00:03Z ok\n2024-06-18 10:00:04 no offset\n", kJitter);
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("ev.log:2: "));
  EXPECT_THAT(r.err, HasSubstr("no UTC offset"));

  r = Diagnose(kEvents,
               "2024-06-18T10:00:00Z 2024-06-18T10:00:15Z\n"
               "2024-06-18T10:20:04Z 2024-06-18T10:20:00Z\n");
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("jitter.txt:2: END is before START (by 4s)"));

  r = Diagnose("", kJitter);
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("ev.log:1: the file is empty: no events"));
  r = Diagnose(kEvents, "");
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("jitter.txt:1: the file is empty"));

  r = Idem({"diagnose", "rebalance", "--events", "missing.log", "--jitter",
            Write("jitter.txt", kJitter)});
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot read missing.log"));
}

TEST_F(DiagnoseCliTest, UsageErrorsExitTwo) {
  ExpectOneLineFailure(Idem({"diagnose"}), 2, /*stdout_may_have_output=*/true);
  RunResult r = Idem({"diagnose", "rebalance", "--events", Write("ev.log", kEvents)});
  ExpectOneLineFailure(r, 2, true);
  EXPECT_THAT(r.err, HasSubstr("--jitter"));
  r = Diagnose(kEvents, kJitter, {"--slack", "soon"});
  ExpectOneLineFailure(r, 2, true);
  EXPECT_THAT(r.err, HasSubstr("--slack"));
  r = Diagnose(kEvents, kJitter, {"--threshold", "120"});
  ExpectOneLineFailure(r, 2, true);
  EXPECT_THAT(r.err, HasSubstr("--threshold"));
}

TEST_F(DiagnoseCliTest, HelpExplainsTheRule) {
  RunResult r = Idem({"diagnose", "rebalance", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("1.95 x the jitter windows' P99"));
  EXPECT_THAT(r.out, HasSubstr("heartbeat.interval.ms = session.timeout.ms / 3"));
  r = Idem({"--help"});
  EXPECT_THAT(r.out, HasSubstr("diagnose"));
}

}  // namespace
}  // namespace idem
