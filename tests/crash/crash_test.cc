// Crash tests of the transactional guard: a child process runs the guard over a batch of keys and
// is SIGKILLed at a failpoint; the parent reopens the database, retries every key,
// and checks that each business row exists exactly once and each record agrees
// with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "conformance/store_factory.h"
#include "core/failpoint.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

constexpr int kKeys = 12;

std::string KeyOf(int i) { return "R-" + std::to_string(i); }

absl::StatusOr<Result> RunOne(Guard& guard, const std::string& key) {
  return guard.Run({.biz_type = "refund", .key = key},
                   [&](Transaction& tx) -> absl::StatusOr<std::string> {
                     IDEM_RETURN_IF_ERROR(
                         tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                                 {Value(key), Value(100)}));
                     return "{\"refund\":\"" + key + "\"}";
                   });
}

// One guarded run of `key`: with business rows (RunOne) or without (RunRecordOnly).
using RunFn = absl::StatusOr<Result> (*)(Guard&, const std::string&);

// The stores without SQL: the guarded handler has no business rows, only a result.
absl::StatusOr<Result> RunRecordOnly(Guard& guard, const std::string& key) {
  return guard.Run({.biz_type = "refund", .key = key},
                   [&](Transaction&) -> absl::StatusOr<std::string> {
                     return "{\"refund\":\"" + key + "\"}";
                   });
}

// Forks a child that arms `failpoint` with `action` and runs every key with `run`;
// returns the child's wait status.
int RunChild(const std::string& url, const std::string& failpoint, const std::string& action,
             RunFn run) {
  pid_t pid = fork();
  if (pid == 0) {
    ArmFailpoint(failpoint, action);
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    if (!store.ok()) _exit(3);
    Guard guard(**store);
    for (int i = 0; i < kKeys; ++i) {
      if (!run(guard, KeyOf(i)).ok()) _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

struct CrashCase {
  std::string failpoint;
  int hit;  // the child dies at this hit of the failpoint
};

class CrashTest : public ::testing::TestWithParam<std::tuple<testing::Backend, CrashCase>> {
 protected:
  const CrashCase& Case() const { return std::get<1>(GetParam()); }

  // Kills a child running every key with `run` at Case(), reopens `url`, and runs
  // every key again: each answers its own result, replayed for the keys the child
  // committed before it died (a prefix: keys run in order; hit-1 of them, or hit
  // when it died after a commit) and executed for the rest. Returns the reopened store.
  std::unique_ptr<Store> KillThenRetry(const std::string& url, RunFn run) {
    const int status = RunChild(url, Case().failpoint, "kill@" + std::to_string(Case().hit), run);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "child was not killed; wait status " << status;
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    Guard guard(**store);
    int executed_now = 0;
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<Result> r = run(guard, KeyOf(i));
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return nullptr;
      EXPECT_TRUE(r->outcome == Outcome::kExecuted || r->outcome == Outcome::kReplayed)
          << OutcomeName(r->outcome);
      EXPECT_EQ(r->value, "{\"refund\":\"" + KeyOf(i) + "\"}");
      if (executed_now > 0) {
        EXPECT_EQ(r->outcome, Outcome::kExecuted) << KeyOf(i);
      }
      if (r->outcome == Outcome::kExecuted) ++executed_now;
    }
    const bool killed_after_commit = Case().failpoint == "guard.after_commit";
    EXPECT_EQ(kKeys - executed_now, killed_after_commit ? Case().hit : Case().hit - 1);
    return *std::move(store);
  }
};

TEST_P(CrashTest, KilledChildThenRetryLeavesEachRowExactlyOnce) {
  testing::TempDir dir;
  const std::string url = std::get<0>(GetParam()).url(dir.path());
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_OK(store);
    std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
    // No unique key on purpose: a duplicate effect would show as a second row.
    ASSERT_OK(tx->Exec("CREATE TABLE ledger (order_no TEXT NOT NULL, amount INTEGER NOT NULL)"));
    ASSERT_OK(tx->Commit());
  }

  std::unique_ptr<Store> store = KillThenRetry(url, RunOne);
  ASSERT_NE(store, nullptr);

  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  absl::StatusOr<Rows> rows = tx->Query(
      "SELECT order_no, COUNT(*) FROM ledger GROUP BY order_no ORDER BY order_no");
  ASSERT_OK(rows);
  ASSERT_EQ(rows->rows.size(), static_cast<size_t>(kKeys));
  for (const auto& row : rows->rows) {
    EXPECT_EQ(row[1].as_int(), 1) << "order " << row[0].as_text() << " has duplicate rows";
    absl::StatusOr<std::optional<Record>> rec = Records(*tx).Load("default", row[0].as_text());
    ASSERT_OK(rec);
    ASSERT_TRUE(rec->has_value());
    EXPECT_EQ((*rec)->state, RecordState::kSucceeded);
    EXPECT_EQ((*rec)->result, "{\"refund\":\"" + row[0].as_text() + "\"}");
  }
  absl::StatusOr<Rows> records = tx->Query("SELECT COUNT(*) FROM idem_records WHERE state = 1");
  ASSERT_OK(records);
  EXPECT_EQ(records->rows[0][0].as_int(), kKeys);
}

// Every failpoint of a guarded run, at its first hit and at one in the middle.
const std::vector<CrashCase> kEveryCrashCase = {
    {"guard.after_claim", 1},   {"guard.after_claim", 5},   {"guard.after_handler", 1},
    {"guard.after_handler", 7}, {"guard.before_commit", 1}, {"guard.before_commit", 4},
    {"guard.after_commit", 1},  {"guard.after_commit", 6}};

std::string CrashCaseName(
    const ::testing::TestParamInfo<std::tuple<testing::Backend, CrashCase>>& info) {
  const CrashCase& c = std::get<1>(info.param);
  return std::get<0>(info.param).name + "_" + c.failpoint.substr(6) + "_hit" +
         std::to_string(c.hit);
}

INSTANTIATE_TEST_SUITE_P(EveryFailpoint, CrashTest,
                         ::testing::Combine(::testing::ValuesIn(testing::SqlBackends()),
                                            ::testing::ValuesIn(kEveryCrashCase)),
                         CrashCaseName);

// Lease mode: the holder dies after its claim committed. The record stays
// PROCESSING until its lease ends; then a retry takes it over, is told so
// (takeover, previous_token), and finishes.
class LeaseCrashTest : public ::testing::TestWithParam<testing::Backend> {};

TEST_P(LeaseCrashTest, HolderKilledAfterClaimIsTakenOverAfterItsLease) {
  testing::TempDir dir;
  const std::string url = GetParam().url(dir.path());
  pid_t pid = fork();
  if (pid == 0) {
    ArmFailpoint("guard.after_claim_commit", "kill");
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    if (!store.ok()) _exit(3);
    Guard guard(**store);
    (void)guard.Claim({.biz_type = "reversal", .key = "R-1"}, absl::Seconds(30));
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  ASSERT_OK(store);
  testing::FakeClock clock(absl::Now());
  Guard guard(**store, GuardOptions{.clock = &clock});
  absl::StatusOr<Result> busy = guard.Claim({.biz_type = "reversal", .key = "R-1"});
  ASSERT_OK(busy);
  EXPECT_EQ(busy->outcome, Outcome::kInProgress);
  clock.Advance(absl::Seconds(31));
  absl::StatusOr<Result> taken = guard.Claim({.biz_type = "reversal", .key = "R-1"});
  ASSERT_OK(taken);
  EXPECT_EQ(taken->outcome, Outcome::kAcquired);
  EXPECT_TRUE(taken->takeover);
  EXPECT_EQ(taken->previous_token, 1);
  EXPECT_EQ(taken->token, 2);
  ASSERT_OK(guard.Complete({.biz_type = "reversal", .key = "R-1"}, taken->token, "ok"));
}

INSTANTIATE_TEST_SUITE_P(PersistentBackends, LeaseCrashTest,
                         ::testing::ValuesIn(testing::PersistentBackends()),
                         [](const auto& info) { return info.param.name; });

// The stores without SQL (rocksdb://): what must hold after a kill at every
// failpoint is the record itself (KillThenRetry's answers, then every record
// SUCCEEDED at the first token with its own result: nothing half-written stands).
class KeyValueCrashTest : public CrashTest {};

TEST_P(KeyValueCrashTest, KilledChildThenRetryReplaysWhatWasCommitted) {
  testing::TempDir dir;
  std::unique_ptr<Store> store =
      KillThenRetry(std::get<0>(GetParam()).url(dir.path()), RunRecordOnly);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::optional<Record>> rec = store->Get("default", KeyOf(i));
    ASSERT_OK(rec);
    ASSERT_TRUE(rec->has_value());
    EXPECT_EQ((*rec)->state, RecordState::kSucceeded);
    EXPECT_EQ((*rec)->token, 1);
    EXPECT_EQ((*rec)->result, "{\"refund\":\"" + KeyOf(i) + "\"}");
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFailpoint, KeyValueCrashTest,
                         ::testing::Combine(::testing::ValuesIn(testing::KeyValueBackends()),
                                            ::testing::ValuesIn(kEveryCrashCase)),
                         CrashCaseName);

// Lease mode over a batch (what `idem serve` does): the child claims and completes
// key after key and dies after the Nth claim committed. Every key it completed
// replays, the key it died holding is in progress until its lease ends and is then
// taken over, and the rest are fresh.
class LeaseBatchCrashTest
    : public ::testing::TestWithParam<std::tuple<testing::Backend, int>> {};

TEST_P(LeaseBatchCrashTest, CompletedKeysReplayTheHeldOneIsTakenOver) {
  const int hit = std::get<1>(GetParam());
  testing::TempDir dir;
  const std::string url = std::get<0>(GetParam()).url(dir.path());
  auto req = [](int i) { return Request{.biz_type = "reversal", .key = KeyOf(i)}; };
  pid_t pid = fork();
  if (pid == 0) {
    ArmFailpoint("guard.after_claim_commit", "kill@" + std::to_string(hit));
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    if (!store.ok()) _exit(3);
    Guard guard(**store);
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<Result> r = guard.Claim(req(i), absl::Seconds(30));
      if (!r.ok() || !guard.Complete(req(i), r->token, "done-" + KeyOf(i)).ok()) _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child was not killed; exit status " << status;

  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  ASSERT_OK(store);
  testing::FakeClock clock(absl::Now());
  Guard guard(**store, GuardOptions{.clock = &clock});
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<Result> r = guard.Claim(req(i));
    ASSERT_OK(r);
    if (i < hit - 1) {
      EXPECT_EQ(r->outcome, Outcome::kReplayed) << i;
      EXPECT_EQ(r->value, "done-" + KeyOf(i));
    } else if (i == hit - 1) {
      EXPECT_EQ(r->outcome, Outcome::kInProgress) << i;
    } else {
      EXPECT_EQ(r->outcome, Outcome::kAcquired) << i;
      EXPECT_FALSE(r->takeover);
    }
  }
  clock.Advance(absl::Seconds(31));
  absl::StatusOr<Result> taken = guard.Claim(req(hit - 1));
  ASSERT_OK(taken);
  EXPECT_EQ(taken->outcome, Outcome::kAcquired);
  EXPECT_TRUE(taken->takeover);
  EXPECT_EQ(taken->previous_token, 1);
  EXPECT_EQ(taken->token, 2);
}

INSTANTIATE_TEST_SUITE_P(EveryHit, LeaseBatchCrashTest,
                         ::testing::Combine(::testing::ValuesIn(testing::KeyValueBackends()),
                                            ::testing::Values(1, 5, 12)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_hit" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace idem
