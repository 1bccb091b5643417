// Retention, run against every backend: claims carry expires_at from the
// biz_type's TTL, Store::ListRecords pages the records, Purge() turns finished
// records past their time into tombstones (never a lease, never one inside its
// window), a late duplicate meets the tombstone as Outcome::kExpired, and purge
// racing with claims never removes a record a claim is using.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "idem/retention.h"
#include "idem/steps.h"
#include "store/backend.h"
#include "testing/fake_clock.h"
#include "testing/records.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::FakeClock;
using ::idem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kDay = absl::Hours(24);

// The seeds' refund numbers: max(10m, T+30, T+3) + 60 days = 90 days.
RetentionPolicy RefundPolicy() {
  RetentionPolicy p;
  absl::Status s = p.Add("refund", {.redelivery_window = absl::Minutes(10),
                                    .recon_cycle = 30 * kDay,
                                    .confirm_window = 3 * kDay,
                                    .safety_margin = 60 * kDay});
  EXPECT_TRUE(s.ok()) << s;
  return p;
}

class RetentionConformanceTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(
        GetParam(), testing::WithParams(GetParam().url(dir_.path()), GetParam().fast_params));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    policy_ = RefundPolicy();
    guard_ = std::make_unique<Guard>(*store_, GuardOptions{.clock = &clock_, .retention = policy_});
  }

  static Request Req(std::string key, std::string biz_type = "refund", std::string fp = "fp") {
    return Request{
        .biz_type = std::move(biz_type), .key = std::move(key), .fingerprint = std::move(fp)};
  }

  // Claims `key` and ends it: "done" completes, "failed" fails finally, "released"
  // fails retryably, anything else stays PROCESSING (a lease of `lease`).
  void Make(const std::string& key, const std::string& how,
            absl::Duration lease = absl::Seconds(30)) {
    absl::StatusOr<Result> claim = guard_->Claim(Req(key), lease);
    ASSERT_TRUE(claim.ok()) << claim.status();
    ASSERT_EQ(claim->outcome, Outcome::kAcquired) << key;
    if (how == "done") ASSERT_OK(guard_->Complete(Req(key), claim->token, "{\"id\":1}"));
    if (how == "failed") ASSERT_OK(guard_->Fail(Req(key), claim->token, false, "\"no\""));
    if (how == "released") ASSERT_OK(guard_->Fail(Req(key), claim->token, true, "\"later\""));
  }

  std::optional<Record> Stored(const std::string& key, const std::string& tenant = "default") {
    absl::StatusOr<std::optional<Record>> r = store_->Get(tenant, key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  }

  PurgeStats PurgeNow(PurgeOptions options = {}) {
    options.clock = &clock_;
    options.pause = absl::ZeroDuration();
    if (options.policy == nullptr) options.policy = &policy_;
    absl::StatusOr<PurgeStats> stats = Purge(*store_, options);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : PurgeStats{};
  }

  testing::TempDir dir_;
  FakeClock clock_;
  RetentionPolicy policy_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Guard> guard_;
};

TEST_P(RetentionConformanceTest, ClaimsCarryExpiresAtFromTheirBizTypesTtl) {
  const absl::Time t0 = clock_.Now();
  ASSERT_OK_AND_ASSIGN(Result claim, guard_->Claim(Req("R-1")));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.expires_at, t0 + 90 * kDay);
  std::optional<Record> stored = Stored("R-1");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->expires_at, t0 + 90 * kDay);
  EXPECT_FALSE(stored->purged());

  // Completing, and every later write, keeps it: the window runs from the first claim.
  clock_.Advance(absl::Hours(1));
  ASSERT_OK(guard_->Complete(Req("R-1"), claim.token, "\"r\""));
  ASSERT_OK_AND_ASSIGN(Result replay, guard_->Claim(Req("R-1")));
  EXPECT_EQ(replay.outcome, Outcome::kReplayed);
  EXPECT_EQ(replay.expires_at, t0 + 90 * kDay);

  // A released key claimed again, and a lease taken over, keep the first claim's.
  Make("R-2", "released");
  clock_.Advance(absl::Hours(1));
  ASSERT_OK_AND_ASSIGN(Result again, guard_->Claim(Req("R-2"), absl::Seconds(1)));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_EQ(again.expires_at, t0 + absl::Hours(1) + 90 * kDay);
  clock_.Advance(absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(Result takeover, guard_->Claim(Req("R-2")));
  EXPECT_TRUE(takeover.takeover);
  EXPECT_EQ(takeover.expires_at, t0 + absl::Hours(1) + 90 * kDay);
  EXPECT_EQ(Stored("R-2")->expires_at, t0 + absl::Hours(1) + 90 * kDay);

  // A biz_type without retention keeps its records for ever.
  ASSERT_OK_AND_ASSIGN(Result other, guard_->Claim(Req("P-1", "payout")));
  EXPECT_EQ(other.expires_at, absl::InfiniteFuture());
  EXPECT_EQ(Stored("P-1")->expires_at, absl::InfiniteFuture());

  // Transactional mode too.
  ASSERT_OK_AND_ASSIGN(Result run, guard_->Run(Req("R-3"), [](Transaction&) {
    return absl::StatusOr<std::string>("\"x\"");
  }));
  EXPECT_EQ(run.outcome, Outcome::kExecuted);
  EXPECT_EQ(run.expires_at, clock_.Now() + 90 * kDay);
}

TEST_P(RetentionConformanceTest, PurgeTombstonesFinishedRecordsPastTheirTimeOnly) {
  for (const char* how : {"done", "failed", "released"}) Make(how, how);
  Make("stuck", "lease", absl::Seconds(1));        // its holder vanished
  Make("long-lease", "lease", 100 * kDay);         // a live lease past expires_at
  ASSERT_OK(guard_->Claim(Req("P-1", "payout")));  // no retention: kept for ever
  ASSERT_OK(guard_->Complete(Req("P-1", "payout"), 1, "1"));
  clock_.Advance(89 * kDay);
  Make("young", "done");
  // Inside the window nothing goes.
  PurgeStats early = PurgeNow();
  EXPECT_EQ(early.tombstoned, 0);
  EXPECT_FALSE(Stored("done")->purged());

  clock_.Advance(2 * kDay);
  PurgeStats stats = PurgeNow();
  EXPECT_EQ(stats.tombstoned, 3);
  EXPECT_EQ(stats.deleted, 0);
  for (const char* key : {"done", "failed", "released"}) {
    std::optional<Record> t = Stored(key);
    ASSERT_TRUE(t.has_value()) << key;
    EXPECT_TRUE(t->purged()) << key;
    EXPECT_EQ(t->purged_at, clock_.Now()) << key;
    EXPECT_EQ(t->result, "") << key;
    EXPECT_EQ(t->error, "") << key;
    EXPECT_EQ(t->fingerprint, "fp") << key;
    EXPECT_EQ(t->biz_type, "refund") << key;
    // Kept as long again as the record was.
    EXPECT_EQ(t->expires_at, clock_.Now() + 90 * kDay) << key;
  }
  EXPECT_EQ(Stored("done")->state, RecordState::kSucceeded);  // the outcome it had
  EXPECT_EQ(Stored("failed")->state, RecordState::kFailed);
  EXPECT_EQ(Stored("released")->state, RecordState::kReleased);
  for (const char* key : {"stuck", "long-lease", "young"}) {
    EXPECT_FALSE(Stored(key)->purged()) << key;
  }
  EXPECT_EQ(Stored("stuck")->state, RecordState::kProcessing);
  EXPECT_FALSE(Stored("P-1", "default")->purged());
  EXPECT_EQ(PurgeNow().tombstoned, 0);  // a second run finds nothing
}

TEST_P(RetentionConformanceTest, ALateDuplicateMeetsItsTombstone) {
  Make("done", "done");
  Make("released", "released");
  clock_.Advance(91 * kDay);
  ASSERT_EQ(PurgeNow().tombstoned, 2);
  const absl::Time purged = clock_.Now();
  clock_.Advance(kDay);

  for (const char* key : {"done", "released"}) {
    ASSERT_OK_AND_ASSIGN(Result late, guard_->Claim(Req(key)));
    EXPECT_EQ(late.outcome, Outcome::kExpired) << key;
    EXPECT_EQ(late.purged_at, purged) << key;
    EXPECT_EQ(late.expires_at, purged + 90 * kDay) << key;
  }
  EXPECT_EQ(OutcomeName(Outcome::kExpired), "expired");
  // Checks run in the same order as on a live record.
  ASSERT_OK_AND_ASSIGN(Result other_fp, guard_->Claim(Req("done", "refund", "other")));
  EXPECT_EQ(other_fp.outcome, Outcome::kFingerprintMismatch);
  ASSERT_OK_AND_ASSIGN(Result other_type, guard_->Claim(Req("done", "payout")));
  EXPECT_EQ(other_type.outcome, Outcome::kKeyReused);
  if (store_->SupportsSql()) {
    int runs = 0;
    ASSERT_OK_AND_ASSIGN(Result run, guard_->Run(Req("done"), [&](Transaction&) {
      ++runs;
      return absl::StatusOr<std::string>("\"again\"");
    }));
    EXPECT_EQ(run.outcome, Outcome::kExpired);
    EXPECT_EQ(runs, 0);
  }
  // Nothing can finish a tombstone; reading it shows it.
  EXPECT_THAT(guard_->Complete(Req("done"), 1, "\"x\""), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(Record seen, guard_->Get(Req("done")));
  EXPECT_TRUE(seen.purged());
  ASSERT_OK_AND_ASSIGN(Record released, guard_->Get(Req("released")));
  EXPECT_TRUE(released.purged());

  // Once the tombstone's own time is up it goes too, and the key is new again.
  clock_.Advance(90 * kDay);
  PurgeStats stats = PurgeNow();
  EXPECT_EQ(stats.tombstones_dropped, 2);
  EXPECT_FALSE(Stored("done").has_value());
  ASSERT_OK_AND_ASSIGN(Result fresh, guard_->Claim(Req("done")));
  EXPECT_EQ(fresh.outcome, Outcome::kAcquired);
  EXPECT_EQ(fresh.token, 1);
}

TEST_P(RetentionConformanceTest, WithoutTombstonesTheKeyIsNewAgain) {
  Make("done", "done");
  clock_.Advance(91 * kDay);
  PurgeStats stats = PurgeNow({.tombstones = false});
  EXPECT_EQ(stats.deleted, 1);
  EXPECT_EQ(stats.tombstoned, 0);
  EXPECT_FALSE(Stored("done").has_value());
  ASSERT_OK_AND_ASSIGN(Result again, guard_->Claim(Req("done")));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);
}

TEST_P(RetentionConformanceTest, DryRunCountsAndChangesNothing) {
  Make("a", "done");
  Make("b", "failed");
  Make("c", "lease");
  clock_.Advance(91 * kDay);
  PurgeStats dry = PurgeNow({.dry_run = true});
  EXPECT_EQ(dry.scanned, 2);
  EXPECT_EQ(dry.tombstoned, 2);
  EXPECT_FALSE(Stored("a")->purged());
  EXPECT_FALSE(Stored("b")->purged());
  EXPECT_EQ(PurgeNow().tombstoned, 2);
}

// A TTL raised since a record was claimed protects it too: purge keeps a record
// whose created_at plus the current policy's TTL is still ahead.
TEST_P(RetentionConformanceTest, ARaisedTtlKeepsOlderRecords) {
  RetentionPolicy short_policy;
  ASSERT_OK(short_policy.Add("refund", {.redelivery_window = kDay}));
  Guard short_guard(*store_, GuardOptions{.clock = &clock_, .retention = short_policy});
  ASSERT_OK_AND_ASSIGN(Result claim, short_guard.Claim(Req("old")));
  EXPECT_EQ(claim.expires_at, clock_.Now() + kDay);
  ASSERT_OK(short_guard.Complete(Req("old"), claim.token, "1"));
  clock_.Advance(2 * kDay);
  PurgeStats stats = PurgeNow();  // under the refund policy: 90 days
  EXPECT_EQ(stats.tombstoned, 0);
  EXPECT_EQ(stats.kept, 1);
  EXPECT_FALSE(Stored("old")->purged());
  EXPECT_EQ(PurgeNow({.policy = &short_policy}).tombstoned, 1);
}

TEST_P(RetentionConformanceTest, BatchesAndRateAreHonoured) {
  for (int i = 0; i < 25; ++i) Make("k" + std::to_string(i), "done");
  clock_.Advance(91 * kDay);
  std::vector<int64_t> progress;
  PurgeOptions options{.batch = 10,
                       .max_rate = 5,  // 25 records at 5/s: about 5 s of (fake) pauses
                       .progress = [&](const PurgeStats& s) { progress.push_back(s.tombstoned); }};
  options.clock = &clock_;
  options.policy = &policy_;
  const absl::Duration slept_before = clock_.slept();
  ASSERT_OK_AND_ASSIGN(PurgeStats stats, Purge(*store_, options));
  EXPECT_EQ(stats.tombstoned, 25);
  EXPECT_THAT(progress, ::testing::IsSupersetOf({10, 20, 25}));
  EXPECT_GE(clock_.slept() - slept_before, absl::Seconds(4));
}

TEST_P(RetentionConformanceTest, ListRecordsPagesFiltersAndIsolatesTenants) {
  std::set<std::pair<std::string, std::string>> all;
  for (const std::string tenant : {"a", "bb"}) {
    Guard guard(*store_, GuardOptions{.clock = &clock_, .retention = policy_});
    for (int i = 0; i < 7; ++i) {
      Request r{.tenant = tenant,
                .biz_type = i % 2 ? "refund" : "payout",
                .key = "K-" + std::to_string(i)};
      ASSERT_OK_AND_ASSIGN(Result c, guard.Claim(r));
      if (i % 3 == 0) ASSERT_OK(guard.Complete(r, c.token, "\"big result\""));
      all.emplace(tenant, r.key);
    }
  }
  // Pages of 3 across everything: every record once, none twice.
  std::set<std::pair<std::string, std::string>> seen;
  RecordQuery q{.limit = 3};
  for (int pages = 0; pages < 20; ++pages) {
    ASSERT_OK_AND_ASSIGN(std::vector<Record> page, store_->ListRecords(q));
    for (const Record& r : page) {
      EXPECT_TRUE(seen.emplace(r.tenant, r.key).second) << r.tenant << "/" << r.key;
      EXPECT_EQ(r.result, "");  // pages carry no results
    }
    if (page.size() < 3) break;
    q.after = std::make_pair(page.back().tenant, page.back().key);
  }
  EXPECT_EQ(seen, all);

  // One tenant only, filtered.
  ASSERT_OK_AND_ASSIGN(std::vector<Record> mine,
                       store_->ListRecords({.tenant = "bb", .biz_type = "refund", .limit = 100}));
  std::vector<std::string> keys;
  for (const Record& r : mine) {
    EXPECT_EQ(r.tenant, "bb");
    keys.push_back(r.key);
  }
  EXPECT_THAT(keys, ElementsAre("K-1", "K-3", "K-5"));
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> done,
      store_->ListRecords({.tenant = "a", .states = {RecordState::kSucceeded}, .limit = 100}));
  keys.clear();
  for (const Record& r : done) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre("K-0", "K-3", "K-6"));
  // A page of one tenant continues within it.
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> next,
      store_->ListRecords({.tenant = "a", .after = std::make_pair("a", "K-4"), .limit = 100}));
  keys.clear();
  for (const Record& r : next) keys.push_back(r.key);
  EXPECT_THAT(keys, ElementsAre("K-5", "K-6"));
  // By age.
  clock_.Advance(kDay);
  ASSERT_OK(guard_->Claim({.tenant = "a", .biz_type = "refund", .key = "new"}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> old,
      store_->ListRecords(
          {.tenant = "a", .created_before = clock_.Now() - absl::Hours(1), .limit = 100}));
  EXPECT_EQ(old.size(), 7u);
  // Since a time (idem keys analyze --since): only the newer one; the bound is
  // inclusive.
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> recent,
      store_->ListRecords(
          {.tenant = "a", .created_since = clock_.Now() - absl::Hours(1), .limit = 100}));
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].key, "new");
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> from_then,
      store_->ListRecords({.tenant = "a", .created_since = recent[0].created_at, .limit = 100}));
  EXPECT_EQ(from_then.size(), 1u);
  ASSERT_OK_AND_ASSIGN(
      std::vector<Record> between,
      store_->ListRecords({.tenant = "a",
                           .created_before = clock_.Now() - absl::Hours(1),
                           .created_since = clock_.Now() - absl::Hours(48),
                           .limit = 100}));
  EXPECT_EQ(between.size(), 7u);
  EXPECT_THAT(store_->ListRecords({.limit = 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListRecords({.limit = 10001}), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Retire is conditional on the record as the caller read it.
TEST_P(RetentionConformanceTest, RetireOfAMovedRecordDoesNothing) {
  Make("released", "released");
  ASSERT_OK_AND_ASSIGN(std::optional<Record> before, store_->Get("default", "released"));
  ASSERT_TRUE(before.has_value());
  ASSERT_OK_AND_ASSIGN(Result again, guard_->Claim(Req("released")));  // moves it on
  ASSERT_EQ(again.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store_->Begin());
  ASSERT_OK(Records(*tx).Load("default", "released"));
  ASSERT_OK_AND_ASSIGN(bool moved, Records(*tx).Retire(*before, clock_.Now(), clock_.Now() + kDay));
  EXPECT_FALSE(moved);
  ASSERT_OK_AND_ASSIGN(bool deleted, Records(*tx).Retire(*before, clock_.Now(), std::nullopt));
  EXPECT_FALSE(deleted);
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Stored("released")->state, RecordState::kProcessing);
  EXPECT_FALSE(Stored("released")->purged());
}

// Purge racing with claims: whatever a claim got while the purge ran,
// the record it acquired is never removed or tombstoned, a finished key is answered
// either from its record (replayed) or from its tombstone (expired), never run
// again, and nothing inside its window is touched.
TEST_P(RetentionConformanceTest, PurgeRacingWithClaimsNeverRemovesALiveOrInWindowRecord) {
  constexpr int kKeys = 60;
  for (int i = 0; i < kKeys; ++i) {
    Make("old-" + std::to_string(i), i % 3 == 0 ? "released" : "done");
  }
  clock_.Advance(91 * kDay);
  for (int i = 0; i < kKeys / 2; ++i) Make("young-" + std::to_string(i), "done");

  std::atomic<bool> purging{true};
  std::atomic<int> started{0};
  std::atomic<int> bad{0};
  std::mutex mu;
  std::set<std::string> acquired;  // keys a claim acquired during the race
  std::vector<std::thread> claimers;
  for (int t = 0; t < 4; ++t) {
    claimers.emplace_back([&, t] {
      started.fetch_add(1);
      for (int round = 0; purging.load() || round < 2; ++round) {
        for (int i = t; i < kKeys; i += 4) {
          const std::string key = "old-" + std::to_string(i);
          absl::StatusOr<Result> r = guard_->Claim(Req(key), 100 * kDay);
          if (!r.ok()) {
            // SQLite's one writer: a claim that waited out the busy timeout.
            if (r.status().code() != absl::StatusCode::kUnavailable) bad.fetch_add(1);
            continue;
          }
          const bool released = i % 3 == 0;
          switch (r->outcome) {
            case Outcome::kAcquired:
              if (!released) bad.fetch_add(1);  // a finished key ran again
              {
                std::lock_guard<std::mutex> lock(mu);
                acquired.insert(key);
              }
              break;
            case Outcome::kReplayed:
            case Outcome::kExpired:
            case Outcome::kInProgress:  // a released key another thread acquired
              break;
            default:
              bad.fetch_add(1);
          }
        }
        absl::StatusOr<Result> fresh =
            guard_->Claim(Req("new-" + std::to_string(t) + "-" + std::to_string(round)));
        if (fresh.ok() && fresh->outcome != Outcome::kAcquired) bad.fetch_add(1);
      }
    });
  }
  while (started.load() < 4) std::this_thread::yield();  // the purge starts among claims
  PurgeStats total;
  for (int run = 0; run < 5; ++run) {
    PurgeOptions o{.batch = 7};
    absl::StatusOr<PurgeStats> s = [&] {
      o.clock = &clock_;
      o.pause = absl::ZeroDuration();
      o.policy = &policy_;
      return Purge(*store_, o);
    }();
    // SQLite: a batch that waited out the busy timeout; the next run goes on.
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
      continue;
    }
    total.tombstoned += s->tombstoned;
  }
  purging.store(false);
  for (std::thread& t : claimers) t.join();
  EXPECT_EQ(bad.load(), 0);

  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "old-" + std::to_string(i);
    std::optional<Record> r = Stored(key);
    ASSERT_TRUE(r.has_value()) << key;
    if (acquired.contains(key)) {
      EXPECT_FALSE(r->purged()) << key << " was acquired during the purge";
      EXPECT_EQ(r->state, RecordState::kProcessing) << key;
    }
  }
  for (int i = 0; i < kKeys / 2; ++i) {
    EXPECT_FALSE(Stored("young-" + std::to_string(i))->purged());
  }
  ASSERT_OK_AND_ASSIGN(std::vector<Record> fresh,
                       store_->ListRecords({.purged = true, .limit = 10000}));
  for (const Record& r : fresh) EXPECT_THAT(r.key, HasSubstr("old-"));
  EXPECT_GT(total.tombstoned, 0);
}

// The step journal is purged by the same rules (SQL stores): a finished operation of
// an op_type with a policy goes once its TTL has passed; one still running never.
TEST_P(RetentionConformanceTest, FinishedStepOperationsArePurgedByTheSameRules) {
  // The step journal (idem_operations, idem_steps) is SQL tables in the business
  // database: memory:// and rocksdb:// (either writer) have no SQL, so
  // StepRunner cannot run on them and there is nothing to purge; their records'
  // retention is covered by the tests above on every backend.
  if (!store_->SupportsSql()) GTEST_SKIP() << GetParam().name << " has no step journal";
  StepRunner runner(*store_, StepRunnerOptions{.clock = &clock_, .wait_for_retries = false});
  OperationType type{.name = "refund"};
  Step ledger;
  ledger.name = "ledger";
  ledger.execute = [](StepContext& ctx) -> absl::StatusOr<std::string> {
    if (ctx.biz_key() == "pending") return absl::UnavailableError("try later");
    return std::string("ok");
  };
  type.steps.push_back(std::move(ledger));
  ASSERT_OK(runner.Register(std::move(type)));
  ASSERT_OK_AND_ASSIGN(OperationState done, runner.Run({.type = "refund", .biz_key = "done"}));
  ASSERT_EQ(done.status, OperationStatus::kSuccess);
  ASSERT_OK_AND_ASSIGN(OperationState pending,
                       runner.Run({.type = "refund", .biz_key = "pending"}));
  ASSERT_EQ(pending.status, OperationStatus::kPending);

  EXPECT_EQ(PurgeNow().operations_deleted, 0);  // inside the window
  clock_.Advance(91 * kDay);
  EXPECT_EQ(PurgeNow({.dry_run = true}).operations_deleted, 1);
  EXPECT_OK(runner.Get("done"));
  EXPECT_EQ(PurgeNow().operations_deleted, 1);
  EXPECT_THAT(runner.Get("done"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(OperationState still, runner.Get("pending"));
  EXPECT_EQ(still.status, OperationStatus::kPending);
  // An op_type without a policy is kept for ever.
  RetentionPolicy other;
  ASSERT_OK(other.Add("payout", {.redelivery_window = kDay}));
  EXPECT_EQ(PurgeNow({.policy = &other}).operations_deleted, 0);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, RetentionConformanceTest,
                         ::testing::ValuesIn(testing::AllBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem
