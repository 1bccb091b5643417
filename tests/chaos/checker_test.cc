// The chaos checker on hand-made histories: a clean one passes every property, and
// each property is violated once by a history built to break exactly it.
#include "chaos/checker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "chaos/effect_log.h"
#include "chaos/history.h"
#include "testing/temp_dir.h"

namespace idem::chaos {
namespace {

using ::testing::HasSubstr;

const Clock::time_point kT0 = Clock::time_point(std::chrono::seconds(1000));
Clock::time_point At(int ms) { return kT0 + std::chrono::milliseconds(ms); }

std::string ResultFor(const std::string& key, int64_t token) {
  return R"({"key":")" + key + R"(","token":)" + std::to_string(token) + R"(,"amount":1.50})";
}

class HistoryBuilder {
 public:
  // A claim answered 201 with `token`.
  HistoryBuilder& Grant(int client, const std::string& key, int64_t token, int at_ms,
                        bool takeover = false, int64_t lease_ms = 1000) {
    Operation op = Base(client, key, OpKind::kClaim, at_ms);
    op.lease_ms = lease_ms;
    std::string body = R"({"outcome":"acquired","token":)" + std::to_string(token) +
                       R"(,"lease_until":"2026-01-01T00:00:00Z","takeover":)" +
                       (takeover ? "true" : "false");
    if (takeover) body += R"(,"previous_token":)" + std::to_string(token - 1);
    FillAnswer(&op, 201, body + R"(,"expires_at":null})", "");
    ops_.push_back(op);
    return *this;
  }
  HistoryBuilder& Complete(int client, const std::string& key, int64_t token, int at_ms,
                           int status = 200, const std::string& body = "{}",
                           const std::string& result = "") {
    Operation op = Base(client, key, OpKind::kComplete, at_ms);
    op.token = token;
    op.result = result.empty() ? ResultFor(key, token) : result;
    FillAnswer(&op, status, body, status == 0 ? "read: connection reset" : "");
    ops_.push_back(op);
    return *this;
  }
  HistoryBuilder& Fail(int client, const std::string& key, int64_t token, int at_ms) {
    Operation op = Base(client, key, OpKind::kFail, at_ms);
    op.token = token;
    op.retryable = true;
    FillAnswer(&op, 200, "{}", "");
    ops_.push_back(op);
    return *this;
  }
  // The final read, replaying `result` (raw JSON), or answering `status`/`body`.
  HistoryBuilder& Replay(const std::string& key, const std::string& result, int at_ms) {
    return FinalRead(key, 200,
                     R"({"outcome":"replayed","expires_at":null,"result":)" + result + "}", at_ms);
  }
  HistoryBuilder& FinalRead(const std::string& key, int status, const std::string& body,
                            int at_ms) {
    Operation op = Base(99, key, OpKind::kReplay, at_ms);
    FillAnswer(&op, status, body, "");
    ops_.push_back(op);
    return *this;
  }
  HistoryBuilder& Effect(int client, const std::string& key, int64_t token, int at_ms) {
    effects_.push_back({.key = key, .token = token, .client = client, .at = At(at_ms)});
    return *this;
  }
  Report Check() const { return chaos::Check(ops_, effects_); }

 private:
  static Operation Base(int client, const std::string& key, OpKind kind, int at_ms) {
    Operation op;
    op.client = client;
    op.key = key;
    op.kind = kind;
    op.invoke = At(at_ms);
    op.complete = At(at_ms + 5);
    return op;
  }
  std::vector<Operation> ops_;
  std::vector<chaos::Effect> effects_;
};

// One key done right: claim, effect, complete, final replay.
HistoryBuilder& CleanKey(HistoryBuilder& h, int client, const std::string& key, int at_ms) {
  return h.Grant(client, key, 1, at_ms)
      .Effect(client, key, 1, at_ms + 10)
      .Complete(client, key, 1, at_ms + 20)
      .Replay(key, ResultFor(key, 1), at_ms + 5000);
}

// Each property has the violations `counts` gives it (0 when not named).
void ExpectCounts(const Report& r, const std::map<std::string_view, int64_t>& counts) {
  for (const PropertyResult& p : r.properties) {
    auto it = counts.find(p.property);
    EXPECT_EQ(p.violations, it == counts.end() ? 0 : it->second) << p.property << "\n"
                                                                  << r.Table();
  }
}

// Exactly one property has violations, and it is `property`, with `example`.
void ExpectOnly(const Report& r, std::string_view property, const std::string& example) {
  for (const PropertyResult& p : r.properties) {
    if (p.property == property) {
      EXPECT_EQ(p.violations, 1) << r.Table();
      EXPECT_THAT(p.first_example, HasSubstr(example)) << r.Table();
    } else {
      EXPECT_EQ(p.violations, 0) << p.property << "\n" << r.Table();
    }
  }
  EXPECT_FALSE(r.ok());
}

TEST(ChaosChecker, CleanHistoryPassesEveryProperty) {
  HistoryBuilder h;
  CleanKey(h, 1, "a", 0);
  CleanKey(h, 2, "b", 3);
  // Faults the API allows: a lost claim answer, 503, a takeover after the lease ran
  // out with the effect done twice (reported), a stale complete answered lease_lost,
  // a retryable fail that released the key.
  Operation lost;
  lost.client = 3;
  lost.key = "c";
  lost.invoke = At(0);
  lost.complete = At(30);
  FillAnswer(&lost, 0, "", "read: end of stream");
  HistoryBuilder& hb = h.Grant(3, "c", 1, 40, false, 100)
                           .Effect(3, "c", 1, 50)
                           .Complete(3, "c", 1, 60, 503, R"({"outcome":"unavailable"})")
                           .Grant(4, "c", 2, 400, /*takeover=*/true)
                           .Effect(4, "c", 2, 410)
                           .Complete(3, "c", 1, 420, 409, R"({"outcome":"lease_lost"})")
                           .Complete(4, "c", 2, 430)
                           .Replay("c", ResultFor("c", 2), 5000)
                           .Grant(5, "d", 1, 0)
                           .Effect(5, "d", 1, 10)
                           .Fail(5, "d", 1, 20)
                           .Grant(6, "d", 2, 30)
                           .Effect(6, "d", 2, 40)
                           .Complete(6, "d", 2, 50)
                           .Replay("d", ResultFor("d", 2), 5000);
  Report r = hb.Check();
  EXPECT_TRUE(r.ok()) << r.Table();
  EXPECT_EQ(r.Get(kSingleHolder).checked, 6 + 4);  // effects + acknowledged completes
  EXPECT_EQ(r.Get(kDurable).checked, 4);
  EXPECT_EQ(r.Get(kOneResult).checked, 4);
  EXPECT_EQ(r.Get(kConverged).checked, 4);
  EXPECT_THAT(r.Table(), HasSubstr("| every key converged | 4 | 0 | - |"));
}

TEST(ChaosChecker, SecondHolderWithoutTakeover) {
  HistoryBuilder h;
  h.Grant(1, "k", 1, 0).Effect(1, "k", 1, 10).Grant(2, "k", 2, 2000).Effect(2, "k", 2, 2010);
  h.Complete(2, "k", 2, 2020).Replay("k", ResultFor("k", 2), 5000);
  ExpectOnly(h.Check(), kSingleHolder, "token 2 (client 2) was granted without a takeover");
}

TEST(ChaosChecker, TakeoverWhileTheLeaseWasLive) {
  HistoryBuilder h;
  h.Grant(1, "k", 1, 0, false, 1000).Effect(1, "k", 1, 10).Grant(2, "k", 2, 300, true);
  h.Effect(2, "k", 2, 310).Complete(2, "k", 2, 320).Replay("k", ResultFor("k", 2), 5000);
  ExpectOnly(h.Check(), kSingleHolder, "while token 1's lease was live until at least +1000ms");
}

TEST(ChaosChecker, EffectWithoutAGrant) {
  HistoryBuilder h;
  CleanKey(h, 1, "k", 0);
  h.Effect(2, "k", 7, 30);
  ExpectOnly(h.Check(), kSingleHolder, "under token 7, which no claim granted");
}

TEST(ChaosChecker, AcknowledgedCompleteLost) {
  HistoryBuilder h;
  h.Grant(1, "k", 1, 0).Effect(1, "k", 1, 10).Complete(1, "k", 1, 20);
  h.FinalRead("k", 201, R"({"outcome":"acquired","token":2,"takeover":true})", 5000);
  const Report r = h.Check();
  // A lost complete also leaves the key without a result: two properties see it.
  ExpectCounts(r, {{kDurable, 1}, {kConverged, 1}});
  EXPECT_THAT(r.Get(kDurable).first_example, HasSubstr("final read answered 201 acquired"));
}

TEST(ChaosChecker, ReplayNotByteIdentical) {
  HistoryBuilder h;
  h.Grant(1, "k", 1, 0).Effect(1, "k", 1, 10).Complete(1, "k", 1, 20);
  // The number converted on the way (1.50 → 1.5): not the bytes acknowledged.
  h.Replay("k", R"({"key":"k","token":1,"amount":1.5})", 5000);
  const Report r = h.Check();
  // The replayed bytes are also a result no client sent.
  ExpectCounts(r, {{kDurable, 1}, {kOneResult, 1}});
  EXPECT_THAT(r.Get(kDurable).first_example, HasSubstr("but the final read replays"));
  EXPECT_THAT(r.Get(kOneResult).first_example, HasSubstr("a result no client sent"));
}

TEST(ChaosChecker, TwoResultsForOneKey) {
  HistoryBuilder h;
  // The same token completed twice with different results, both answered 200 (the
  // second must have been 409: a repeated complete with another result is refused).
  h.Grant(1, "k", 1, 0).Effect(1, "k", 1, 10).Complete(1, "k", 1, 20);
  h.Complete(1, "k", 1, 30, 200, "{}", R"({"other":true})");
  h.Replay("k", ResultFor("k", 1), 5000);
  const Report r = h.Check();
  // The second acknowledged result is not the one replayed either.
  ExpectCounts(r, {{kOneResult, 1}, {kDurable, 1}});
  EXPECT_THAT(r.Get(kOneResult).first_example,
              HasSubstr("two completes answered 200 with different results"));
}

TEST(ChaosChecker, StaleTokenAccepted) {
  HistoryBuilder h;
  // Client 2 took over at +300ms (both effects reported and allowed), then client 1's
  // complete with the old token was accepted and client 2's got lease_lost.
  h.Grant(1, "k", 1, 0, false, 100).Effect(1, "k", 1, 10).Grant(2, "k", 2, 300, true);
  h.Effect(2, "k", 2, 310).Complete(1, "k", 1, 400);
  h.Complete(2, "k", 2, 410, 409, R"({"outcome":"lease_lost"})");
  h.Replay("k", ResultFor("k", 1), 5000);
  ExpectOnly(h.Check(), kSingleHolder,
             "stale token accepted: complete(token 1) by client 1 at +400ms answered 200 after "
             "token 2 was granted to client 2 at +305ms");
}

TEST(ChaosChecker, ErrorTheSpecDoesNotAllow) {
  HistoryBuilder h;
  CleanKey(h, 1, "k", 0);
  h.Complete(1, "k", 1, 30, 500, R"({"type":"internal","outcome":"internal"})");
  ExpectOnly(h.Check(), kAllowedErrors, "complete by client 1 at +30ms answered 500 internal");
}

TEST(ChaosChecker, KeyThatNeverConverged) {
  HistoryBuilder h;
  CleanKey(h, 1, "a", 0);
  h.Grant(2, "k", 1, 0).FinalRead("k", 409, R"({"outcome":"in_progress"})", 5000);
  ExpectOnly(h.Check(), kConverged, "key k: final replay by client 99 at +5000ms answered 409");
}

TEST(ChaosHistory, RawMemberKeepsTheBytes) {
  EXPECT_EQ(RawMember(R"({"outcome":"replayed","result":{"a":[1, 2.50,"}"]} })", "result"),
            R"({"a":[1, 2.50,"}"]})");
  EXPECT_EQ(RawMember(R"({"a":"x\"y","result":1.0e3})", "result"), "1.0e3");
  EXPECT_EQ(RawMember(R"({"result":"s"})", "result"), R"("s")");
  EXPECT_EQ(RawMember(R"({"a":1})", "result"), "");
  EXPECT_EQ(RawMember("not json", "result"), "");
  EXPECT_EQ(RawMember(R"({"result":)", "result"), "");
}

TEST(ChaosHistory, FillAnswerReadsTheClaim) {
  Operation op;
  FillAnswer(&op, 201, R"({"outcome":"acquired","token":3,"takeover":true,"previous_token":2})",
             "");
  EXPECT_EQ(op.status, 201);
  EXPECT_EQ(op.error, "acquired");
  EXPECT_EQ(op.token, 3);
  EXPECT_TRUE(op.takeover);
  EXPECT_EQ(op.previous_token, 2);
  FillAnswer(&op, 200, "", "read: connection reset by peer");
  EXPECT_EQ(op.status, 0);
  EXPECT_EQ(op.error, "read: connection reset by peer");
}

TEST(ChaosEffectLog, RoundTripsAndNamesTheBadLine) {
  idem::testing::TempDir dir;
  const std::string path = dir.file("effects.log");
  {
    auto log = EffectLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ((*log)->Append({.key = "a b", .token = 3, .client = 1, .at = At(5)}).code(),
              absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE((*log)->Append({.key = "a%\xc3\xa9", .token = 3, .client = 1, .at = At(5)}).ok());
    ASSERT_TRUE((*log)->Append({.key = "k", .token = 1, .client = 2, .at = At(6)}).ok());
  }
  auto effects = ReadEffectLog(path);
  ASSERT_TRUE(effects.ok()) << effects.status();
  ASSERT_EQ(effects->size(), 2u);
  EXPECT_EQ((*effects)[0].key, "a%\xc3\xa9");
  EXPECT_EQ((*effects)[0].token, 3);
  EXPECT_EQ((*effects)[0].client, 1);
  EXPECT_EQ((*effects)[0].at, At(5));
  EXPECT_EQ((*effects)[1].key, "k");

  std::ofstream(path, std::ios::app) << "k 2 1";  // a torn append
  auto torn = ReadEffectLog(path);
  EXPECT_EQ(torn.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(torn.status().message()), HasSubstr(path + ":3: last line has no"));
  std::ofstream(path, std::ios::trunc) << "k x 1 5\n";
  EXPECT_THAT(std::string(ReadEffectLog(path).status().message()), HasSubstr(":1: bad token"));
  EXPECT_EQ(ReadEffectLog(dir.file("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace idem::chaos
