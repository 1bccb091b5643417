// Runners side by side: leases, the background worker, resuming due operations,
// concurrent runs. Run against every SQL backend; the fixture and its fake channel are
// steps_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/steps_fixture.h"

namespace idem::steps_conformance {
namespace {

TEST_P(StepsConformanceTest, HeldOperationIsBusyAndNothingRuns) {
  auto runner = NewRunner(Options(true), {Refund()});
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  auto runner2 = NewRunner(Options(true), {Refund()}, store2.get());
  std::optional<absl::StatusOr<OperationState>> other, resumed, inside;
  std::optional<absl::StatusOr<int>> due;
  bool hooked = false;
  on_external_exec_ = [&](StepContext& c) {
    if (c.biz_key() != "R-1" || std::exchange(hooked, true)) return;
    inside = runner2->Get("R-1");
    other = runner2->Run(Req("R-1"));
    resumed = runner2->Resume("R-1");
    due = runner2->ResumeDue();
  };
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  ASSERT_TRUE(hooked);

  ASSERT_TRUE(inside.has_value());
  ASSERT_OK(*inside);
  EXPECT_GT((*inside)->lease_until, clock_.Now());
  EXPECT_EQ(OpStatus(**inside), "PENDING");
  ASSERT_TRUE(other.has_value());
  ASSERT_OK(*other);
  EXPECT_TRUE((*other)->busy);
  EXPECT_EQ(OpStatus(**other), "PENDING");
  ASSERT_TRUE(resumed.has_value());
  ASSERT_OK(*resumed);
  EXPECT_TRUE((*resumed)->busy);
  ASSERT_TRUE(due.has_value());
  ASSERT_OK(*due);
  EXPECT_EQ(**due, 0);

  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "query:1"), 0);
  EXPECT_EQ(Count("R-1", "exec:2"), 1);
  EXPECT_EQ(Count("R-1", "exec:3"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

// The same runner, called again from inside one of its own steps, is just another
// caller: busy.
TEST_P(StepsConformanceTest, SameRunnerCalledFromInsideAStepIsBusy) {
  auto runner = NewRunner(Options(true), {Refund()});
  std::optional<absl::StatusOr<OperationState>> nested;
  bool hooked = false;
  on_external_exec_ = [&](StepContext& c) {
    if (c.biz_key() != "R-1" || std::exchange(hooked, true)) return;
    nested = runner->Run(Req("R-1"));
  };
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  ASSERT_TRUE(nested.has_value());
  ASSERT_OK(*nested);
  EXPECT_TRUE((*nested)->busy);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "exec:2"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
}

// A runner that outlives its lease (as good as dead) is replaced: the new holder
// asks `query` before re-sending, and the old one's late journal write loses.
TEST_P(StepsConformanceTest, ExpiredLeaseIsTakenOverAndTheEffectIsNotRepeated) {
  auto runner = NewRunner(Options(true), {Refund()});
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  auto runner2 = NewRunner(Options(true), {Refund()}, store2.get());
  std::optional<absl::StatusOr<OperationState>> taken;
  bool hooked = false;
  on_external_exec_ = [&](StepContext& c) {
    if (c.biz_key() != "R-1" || std::exchange(hooked, true)) return;
    clock_.Advance(runner->options().lease + absl::Seconds(1));  // the call hangs
    taken = runner2->Run(Req("R-1"));
  };
  absl::StatusOr<OperationState> late = runner->Run(Req("R-1"));
  EXPECT_THAT(late, StatusIs(absl::StatusCode::kAborted));
  ASSERT_TRUE(taken.has_value());
  ASSERT_OK(*taken);
  EXPECT_FALSE((*taken)->busy);
  EXPECT_EQ(OpStatus(**taken), "SUCCESS");

  const OperationState op = MustGet(*runner2, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(op.steps.at(0).payload, "found:" + op.steps.at(0).request_id);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "query:1"), 1);
  EXPECT_EQ(Count("R-1", "exec:2"), 1);
  EXPECT_EQ(Count("R-1", "exec:3"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(StepsConformanceTest, PendingOperationIsResumedByAnotherRunner) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));
  const std::string input = "{\"order\":\"O-7\"}";
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1", "refund", input)));
  ASSERT_EQ(OpStatus(op), "PENDING");
  runner.reset();  // the first process is gone

  clock_.Advance(kPastEverything);
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  // A runner that does not know the type skips it.
  StepRunner stranger(*store2, Options(false));
  ASSERT_OK_AND_ASSIGN(int resumed, stranger.ResumeDue());
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(OpStatus(MustGet(stranger, "R-1")), "PENDING");

  auto runner2 = NewRunner(Options(false), {Refund()}, store2.get());
  ASSERT_OK_AND_ASSIGN(resumed, runner2->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner2, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "exec:2"), 2);
  ASSERT_EQ(Count("R-1", "exec:3"), 1);
  const Call notify = Calls("R-1", "exec:3")[0];
  EXPECT_EQ(notify.input, input);  // the stored input
  EXPECT_EQ(notify.results.at(1), op.steps.at(0).payload);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(StepsConformanceTest, WorkerResumesDueOperationsInTheBackground) {
  StepRunnerOptions options;  // the real clock and random source
  options.wait_for_retries = false;
  OperationType type{.name = "refund",
                     .steps = {External(1, "channel_reversal"), Ledger(2, "ledger")}};
  for (Step& s : type.steps) {
    s.retry =
        RetryPolicy{.initial_delay = absl::Milliseconds(1), .max_delay = absl::Milliseconds(2)};
  }
  auto runner = NewRunner(options, {type});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));
  Push("R-2", "exec:1", FailAfterEffect(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(OperationState r1, runner->Run(Req("R-1")));
  ASSERT_EQ(OpStatus(r1), "PENDING");
  ASSERT_OK_AND_ASSIGN(OperationState r2, runner->Run(Req("R-2")));
  ASSERT_EQ(OpStatus(r2), "PENDING");

  Worker worker(*runner, WorkerOptions{.interval = absl::Milliseconds(5), .batch = 10});
  worker.Start();
  worker.Start();  // idempotent
  EXPECT_TRUE(testing::WaitUntil([&] {
    return IsFinal(MustGet(*runner, "R-1").status) && IsFinal(MustGet(*runner, "R-2").status);
  })) << "the worker did not finish both operations";
  worker.Stop();
  EXPECT_EQ(OpStatus(MustGet(*runner, "R-1")), "SUCCESS");
  EXPECT_EQ(OpStatus(MustGet(*runner, "R-2")), "SUCCESS");
  EXPECT_GE(worker.resumed(), 2);
  EXPECT_GE(worker.passes(), 1);
  const int64_t passes = worker.passes();
  // Six intervals: a worker still running would have made more passes (the check
  // can only miss a failure on a stalled machine, never fail a correct worker).
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(worker.passes(), passes);  // stopped
  worker.Stop();                       // idempotent
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-2", "exec:1"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 2);
  EXPECT_EQ(LedgerRows(), 2);
}

TEST_P(StepsConformanceTest, ConcurrentRunsExecuteEachStepOnce) {
  auto runner = NewRunner(Options(true), {Refund()});
  constexpr int kThreads = 8;
  constexpr int kOps = 50;
  auto key = [](int i) { return Cat("C-", i); };
  std::atomic<int> busy{0};
  absl::Mutex errors_mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < kOps; ++n) {
        const int i = (n + t * 7) % kOps;
        absl::StatusOr<OperationState> r = runner->Run(Req(key(i)));
        std::string error;
        if (!r.ok()) {
          error = r.status().ToString();
        } else if (r->busy) {
          busy.fetch_add(1);
        } else if (r->status != OperationStatus::kSuccess) {
          error = Cat(key(i), " ended ", OpStatus(*r));
        }
        if (!error.empty()) {
          absl::MutexLock lock(&errors_mu);
          errors.push_back(key(i) + ": " + error);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(errors, IsEmpty());
  for (int i = 0; i < kOps; ++i) {
    absl::StatusOr<OperationState> op = runner->Get(key(i));
    ASSERT_OK(op);
    if (!IsFinal(op->status)) ASSERT_OK(runner->Run(Req(key(i))));
  }
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE(key(i));
    const OperationState op = MustGet(*runner, key(i));
    EXPECT_EQ(OpStatus(op), "SUCCESS");
    EXPECT_EQ(Count(key(i), "exec:1"), 1);
    EXPECT_EQ(Count(key(i), "exec:2"), 1);
    EXPECT_EQ(Count(key(i), "exec:3"), 1);
    EXPECT_EQ(channel_.Effects(op.steps.at(0).request_id), 1);
  }
  EXPECT_EQ(channel_.TotalEffects(), kOps);
  EXPECT_EQ(LedgerRows(), kOps);
  RecordProperty("busy_answers", busy.load());
}

TEST_P(StepsConformanceTest, ConcurrentResumeDueSharesTheWork) {
  OperationType type{.name = "payout", .steps = {Ledger(1, "ledger"), External(2, "transfer")}};
  auto runner = NewRunner(Options(false), {type});
  constexpr int kOps = 40;
  auto key = [](int i) { return Cat("D-", i); };
  for (int i = 0; i < kOps; ++i) {
    Push(key(i), "exec:1", Fail(absl::StatusCode::kUnavailable));
    ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req(key(i), "payout")));
    ASSERT_EQ(OpStatus(op), "PENDING");
  }
  clock_.Advance(kPastEverything);

  std::unique_ptr<Store> store_a = OpenSecondStore();
  std::unique_ptr<Store> store_b = OpenSecondStore();
  ASSERT_NE(store_a, nullptr);
  ASSERT_NE(store_b, nullptr);
  auto runner_a = NewRunner(Options(false), {type}, store_a.get());
  auto runner_b = NewRunner(Options(false), {type}, store_b.get());
  std::atomic<int> total{0};
  int resumed_a = 0, resumed_b = 0;
  absl::Mutex errors_mu;
  std::vector<std::string> errors;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto work = [&](StepRunner& r, int& mine) {
    while (total.load() < kOps && absl::Now() < deadline) {
      absl::StatusOr<int> n = r.ResumeDue(5);
      if (!n.ok()) {
        absl::MutexLock lock(&errors_mu);
        errors.push_back(n.status().ToString());
        continue;
      }
      mine += *n;
      total.fetch_add(*n);
      if (*n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a worker's pace
    }
  };
  std::thread ta([&] { work(*runner_a, resumed_a); });
  std::thread tb([&] { work(*runner_b, resumed_b); });
  ta.join();
  tb.join();
  EXPECT_THAT(errors, IsEmpty());
  EXPECT_EQ(resumed_a + resumed_b, kOps);
  RecordProperty("resumed_a", resumed_a);
  RecordProperty("resumed_b", resumed_b);
  ASSERT_OK_AND_ASSIGN(int left, runner_a->ResumeDue());
  EXPECT_EQ(left, 0);
  ASSERT_OK_AND_ASSIGN(left, runner_b->ResumeDue());
  EXPECT_EQ(left, 0);
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE(key(i));
    const OperationState op = MustGet(*runner, key(i));
    EXPECT_EQ(OpStatus(op), "SUCCESS");
    EXPECT_EQ(Count(key(i), "exec:1"), 2);  // the scripted failure, then once
    EXPECT_EQ(Count(key(i), "exec:2"), 1);
    EXPECT_EQ(channel_.Effects(op.steps.at(1).request_id), 1);
  }
  EXPECT_EQ(channel_.TotalEffects(), kOps);
  EXPECT_EQ(LedgerRows(), kOps);
}

TEST_P(StepsConformanceTest, ResumeDueHonoursItsLimit) {
  auto runner = NewRunner(Options(false), {Refund()});
  for (const char* key : {"R-1", "R-2", "R-3"}) {
    Push(key, "exec:2", Fail(absl::StatusCode::kUnavailable));
    ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req(key)));
    ASSERT_EQ(OpStatus(op), "PENDING");
  }
  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue(2));
  EXPECT_EQ(resumed, 2);
  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue(2));
  EXPECT_EQ(resumed, 1);
  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue(2));
  EXPECT_EQ(resumed, 0);
  for (const char* key : {"R-1", "R-2", "R-3"}) {
    EXPECT_EQ(OpStatus(MustGet(*runner, key)), "SUCCESS") << key;
  }
}

}  // namespace
}  // namespace idem::steps_conformance
