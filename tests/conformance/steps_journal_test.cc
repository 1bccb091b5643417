// The journal: its tables created once, the per-object lock it keeps, the stuck
// operations it lists. Run against every SQL backend; the fixture and its fake channel
// are steps_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/steps_fixture.h"

namespace idem::steps_conformance {
namespace {

TEST_P(StepsConformanceTest, MigrateIsIdempotent) {
  StepRunner runner(*store_, Options(true));
  ASSERT_OK(runner.Register(Refund()));
  EXPECT_OK(runner.Migrate());
  EXPECT_OK(runner.Migrate());
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  StepRunner runner2(*store2, Options(true));
  EXPECT_OK(runner2.Migrate());
  ASSERT_OK_AND_ASSIGN(OperationState op, runner.Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_OK(runner2.Migrate());
  EXPECT_EQ(OpStatus(MustGet(runner2, "R-1")), "SUCCESS");
}

TEST_P(StepsConformanceTest, ObjectLockBlocksASecondOperationUntilTheFirstFinishes) {
  auto runner = NewRunner(Options(true), {Refund()});
  auto nowait = NewRunner(Options(false), {Refund()});
  std::optional<absl::StatusOr<OperationState>> b, c;
  bool hooked = false;
  on_external_exec_ = [&](StepContext& ctx) {
    if (ctx.biz_key() != "A" || std::exchange(hooked, true)) return;
    b = nowait->Run(Req("B", "refund", "in", "order-1"));
    c = nowait->Run(Req("C", "refund", "in", "order-2"));
  };
  ASSERT_OK_AND_ASSIGN(OperationState a, runner->Run(Req("A", "refund", "in", "order-1")));
  EXPECT_EQ(OpStatus(a), "SUCCESS");
  EXPECT_EQ(a.object_key, "order-1");

  ASSERT_TRUE(b.has_value());
  ASSERT_OK(*b);
  EXPECT_FALSE((*b)->busy);
  EXPECT_EQ(OpStatus(**b), "PENDING");
  EXPECT_EQ((*b)->blocked_by, "A");
  EXPECT_THAT(StepStatuses(**b), ElementsAre("PENDING", "PENDING", "PENDING"));
  EXPECT_GT((*b)->next_retry_at, absl::InfinitePast());
  ASSERT_TRUE(c.has_value());  // another object: not blocked
  ASSERT_OK(*c);
  EXPECT_EQ(OpStatus(**c), "SUCCESS");
  EXPECT_EQ((*c)->blocked_by, "");
  EXPECT_EQ(FirstCall("B"), -1);  // none of B's steps ran

  OperationState b_now = MustGet(*runner, "B");
  EXPECT_EQ(OpStatus(b_now), "PENDING");
  EXPECT_EQ(b_now.object_key, "order-1");

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, nowait->ResumeDue());
  EXPECT_EQ(resumed, 1);
  b_now = MustGet(*runner, "B");
  EXPECT_EQ(OpStatus(b_now), "SUCCESS");
  EXPECT_EQ(b_now.blocked_by, "");
  EXPECT_GT(FirstCall("B"), LastCall("A"));
  EXPECT_EQ(channel_.TotalEffects(), 3);
  EXPECT_EQ(LedgerRows(), 3);
}

TEST_P(StepsConformanceTest, ObjectLockIsHeldWhileTheHolderWaitsForARetry) {
  auto nowait = NewRunner(Options(false), {Refund()});
  Push("A", "exec:2", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState a, nowait->Run(Req("A", "refund", "in", "order-1")));
  ASSERT_EQ(OpStatus(a), "PENDING");
  ASSERT_OK_AND_ASSIGN(OperationState b, nowait->Run(Req("B", "refund", "in", "order-1")));
  EXPECT_EQ(OpStatus(b), "PENDING");
  EXPECT_EQ(b.blocked_by, "A");
  EXPECT_EQ(FirstCall("B"), -1);

  // Worker passes until both are done.
  for (int pass = 0; pass < 6; ++pass) {
    if (IsFinal(MustGet(*nowait, "A").status) && IsFinal(MustGet(*nowait, "B").status)) break;
    clock_.Advance(kPastEverything);
    ASSERT_OK(nowait->ResumeDue());
  }
  EXPECT_EQ(OpStatus(MustGet(*nowait, "A")), "SUCCESS");
  EXPECT_EQ(OpStatus(MustGet(*nowait, "B")), "SUCCESS");
  EXPECT_GT(FirstCall("B"), LastCall("A"));  // serialized
  EXPECT_EQ(LedgerRows(), 2);
}

TEST_P(StepsConformanceTest, RunGivesUpWaitingForTheObjectLockAfterLockWait) {
  auto nowait = NewRunner(Options(false), {Refund()});
  Push("A", "exec:2", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState a, nowait->Run(Req("A", "refund", "in", "order-1")));
  ASSERT_EQ(OpStatus(a), "PENDING");

  StepRunnerOptions waiting = Options(true);
  waiting.lock_retry = absl::Seconds(1);
  waiting.lock_wait = absl::Seconds(5);
  auto runner = NewRunner(waiting, {Refund()});
  const absl::Time before = clock_.Now();
  ASSERT_OK_AND_ASSIGN(OperationState b, runner->Run(Req("B", "refund", "in", "order-1")));
  const absl::Duration waited = clock_.Now() - before;
  EXPECT_EQ(OpStatus(b), "PENDING");
  EXPECT_EQ(b.blocked_by, "A");
  EXPECT_GE(waited, absl::Seconds(5));
  EXPECT_LE(waited, absl::Seconds(7));
  EXPECT_EQ(FirstCall("B"), -1);
}

TEST_P(StepsConformanceTest, ListStuckShowsUnknownCompensationRequiredAndDueOperations) {
  auto nowait = NewRunner(Options(false), {Refund()});
  auto waiting = NewRunner(Options(true), {Refund()});
  Push("U", "exec:1", FailAfterEffect(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(OperationState u, nowait->Run(Req("U")));
  ASSERT_THAT(StepStatuses(u), ElementsAre("UNKNOWN", "PENDING", "PENDING"));

  clock_.Advance(absl::Seconds(1));
  Always("C", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  Always("C", "comp:1", Fail(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(OperationState c, waiting->Run(Req("C")));
  ASSERT_EQ(OpStatus(c), "COMPENSATION_REQUIRED");

  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(waiting->Run(Req("S")));
  Push("P", "exec:2", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState p, nowait->Run(Req("P")));
  ASSERT_EQ(OpStatus(p), "PENDING");

  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, nowait->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("U", "C"));  // P is not due yet, S is done
  ASSERT_OK_AND_ASSIGN(stuck, nowait->ListStuck(1));
  EXPECT_THAT(BizKeys(stuck), ElementsAre("U"));

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(stuck, nowait->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("U", "C", "P"));
}

// Many threads, many operations on a few objects: the steps of two operations on
// one object never interleave.
TEST_P(StepsConformanceTest, ObjectLockSerializesConcurrentOperations) {
  StepRunnerOptions options = Options(true);
  options.lock_retry = absl::Milliseconds(10);
  options.lock_wait = absl::Milliseconds(50);
  auto runner = NewRunner(options, {Refund()});
  constexpr int kThreads = 8;
  constexpr int kOps = 16;
  constexpr int kObjects = 4;
  auto key = [](int i) { return Cat("L-", i); };
  auto object = [](int i) { return Cat("order-", i % kObjects); };
  absl::Mutex errors_mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < kOps; ++n) {
        const int i = (n + t * 2) % kOps;
        absl::StatusOr<OperationState> r = runner->Run(Req(key(i), "refund", "in", object(i)));
        if (!r.ok()) {
          absl::MutexLock lock(&errors_mu);
          errors.push_back(key(i) + ": " + r.status().ToString());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(errors, IsEmpty());
  for (int pass = 0; pass < 100; ++pass) {
    bool all_final = true;
    for (int i = 0; i < kOps; ++i)
      all_final = all_final && IsFinal(MustGet(*runner, key(i)).status);
    if (all_final) break;
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(runner->ResumeDue());
  }
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE(key(i));
    const OperationState op = MustGet(*runner, key(i));
    EXPECT_EQ(OpStatus(op), "SUCCESS");
    EXPECT_EQ(op.blocked_by, "");
    EXPECT_EQ(Count(key(i), "exec:1"), 1);
    EXPECT_EQ(Count(key(i), "exec:2"), 1);
    EXPECT_EQ(Count(key(i), "exec:3"), 1);
  }
  for (int a = 0; a < kOps; ++a) {
    for (int b = a + 1; b < kOps; ++b) {
      if (object(a) != object(b)) continue;
      const bool apart =
          LastCall(key(a)) < FirstCall(key(b)) || LastCall(key(b)) < FirstCall(key(a));
      EXPECT_TRUE(apart) << key(a) << " and " << key(b) << " on " << object(a) << " interleaved";
    }
  }
  EXPECT_EQ(channel_.TotalEffects(), kOps);
  EXPECT_EQ(LedgerRows(), kOps);
}

// The first Run creates the journal (no Migrate call), also when several processes
// start at once on an empty database.
TEST_P(StepsConformanceTest, ConcurrentFirstUseCreatesTheJournalOnce) {
  constexpr int kProcesses = 4;
  std::vector<std::unique_ptr<Store>> stores;
  std::vector<std::unique_ptr<StepRunner>> runners;
  for (int p = 0; p < kProcesses; ++p) {
    stores.push_back(OpenSecondStore());
    ASSERT_NE(stores.back(), nullptr);
    runners.push_back(NewRunner(Options(true), {Refund()}, stores.back().get()));
  }
  std::vector<absl::Status> results(kProcesses);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProcesses; ++p) {
    threads.emplace_back([&, p] { results[p] = runners[p]->Run(Req(Cat("F-", p))).status(); });
  }
  for (std::thread& t : threads) t.join();
  for (int p = 0; p < kProcesses; ++p) {
    EXPECT_OK(results[p]);
    EXPECT_EQ(OpStatus(MustGet(*runners[0], Cat("F-", p))), "SUCCESS");
  }
  EXPECT_EQ(LedgerRows(), kProcesses);
  runners.clear();
}

}  // namespace
}  // namespace idem::steps_conformance
