// Giving up: compensation of the done steps in reverse order, and what goes to a person
// when it cannot finish. Run against every SQL backend; the fixture and its fake
// channel are steps_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/steps_fixture.h"

namespace idem::steps_conformance {
namespace {

TEST_P(StepsConformanceTest, ExhaustedRetriesCompensateDoneStepsInReverseOrder) {
  OperationType type{.name = "refund",
                     .steps = {External(1, "channel_reversal"), Ledger(2, "ledger"),
                               Ledger(3, "invoice", /*max_attempts=*/3)}};
  auto runner = NewRunner(Options(true), {type});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("COMPENSATED", "COMPENSATED", "FAILED"));
  EXPECT_THAT(Attempts("R-1", "exec:3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Sequence("R-1", "comp"), ElementsAre("comp:2", "comp:1"));
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[2].retry_count, 3);
  EXPECT_THAT(op.steps[2].last_error, HasSubstr("scripted failure"));
  const std::string rid = op.steps[0].request_id;
  // compensate sees the step's stored result, and a local one its transaction.
  const Call comp1 = Calls("R-1", "comp:1").at(0);
  EXPECT_EQ(comp1.payload, "sent:" + rid);
  EXPECT_EQ(comp1.request_id, rid);
  EXPECT_FALSE(comp1.has_tx);
  EXPECT_EQ(comp1.attempt, 1);
  const Call comp2 = Calls("R-1", "comp:2").at(0);
  EXPECT_EQ(comp2.payload, "row:R-1#2");
  EXPECT_TRUE(comp2.has_tx);
  EXPECT_EQ(channel_.Cancels(rid), 1);
  EXPECT_EQ(LedgerRows(), 0);

  // Final: a re-run does nothing.
  const int calls = TotalCalls();
  ASSERT_OK_AND_ASSIGN(OperationState again, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(again), "COMPENSATED");
  EXPECT_EQ(TotalCalls(), calls);
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), IsEmpty());
}

// A store error is not the step's failure. A local step whose table is missing
// (here: renamed after the channel reversal went through) is retried, and past its
// budget the operation goes to a person: the reversal is never cancelled because
// the database was broken.
TEST_P(StepsConformanceTest, StoreErrorInAStepNeverCompensates) {
  OperationType type{.name = "refund",
                     .steps = {External(1, "channel_reversal"),
                               Ledger(2, "ledger", /*max_attempts=*/3), Ledger(3, "invoice")}};
  auto runner = NewRunner(Options(true), {type});
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store_->Begin());
    ASSERT_OK(tx->Exec("ALTER TABLE ledger RENAME TO ledger_moved"));
    ASSERT_OK(tx->Commit());
  }
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATION_REQUIRED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "FAILED", "PENDING"));
  EXPECT_THAT(Attempts("R-1", "exec:2"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Sequence("R-1", "comp"), IsEmpty());
  const std::string rid = op.steps.at(0).request_id;
  EXPECT_EQ(channel_.Cancels(rid), 0);
  EXPECT_EQ(channel_.Effects(rid), 1);
  EXPECT_THAT(op.last_error, HasSubstr("nothing was compensated"));
  // A person sees it.
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("R-1"));
}

TEST_P(StepsConformanceTest, FinalFailureCompensatesWithoutRetrying) {
  OperationType type{
      .name = "refund",
      .steps = {External(1, "channel_reversal"), Ledger(2, "ledger"), Ledger(3, "invoice")}};
  auto runner = NewRunner(Options(true), {type});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("COMPENSATED", "COMPENSATED", "FAILED"));
  EXPECT_EQ(Count("R-1", "exec:3"), 1);
  EXPECT_EQ(op.steps.at(2).retry_count, 1);
  EXPECT_THAT(Sequence("R-1", "comp"), ElementsAre("comp:2", "comp:1"));
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());
  EXPECT_EQ(LedgerRows(), 0);
}

TEST_P(StepsConformanceTest, StepWithoutCompensateStaysSuccess) {
  OperationType type{
      .name = "refund",
      .steps = {External(1, "channel_reversal"), Ledger(2, "audit_log", 5, /*compensate=*/false),
                Ledger(3, "invoice")}};
  auto runner = NewRunner(Options(true), {type});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("COMPENSATED", "SUCCESS", "FAILED"));
  EXPECT_THAT(Sequence("R-1", "comp"), ElementsAre("comp:1"));
  EXPECT_TRUE(LedgerHas("R-1#2"));
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(StepsConformanceTest, FailureOfTheFirstStepCompensatesNothing) {
  auto runner = NewRunner(Options(true), {Refund()});
  // The channel rejects the reversal outright: no effect, a final failure.
  Always("R-1", "exec:1", Fail(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("FAILED", "PENDING", "PENDING"));
  EXPECT_EQ(op.steps.at(0).retry_count, 1);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_THAT(Sequence("R-1", "comp"), IsEmpty());
  EXPECT_EQ(Count("R-1", "exec:2"), 0);
  EXPECT_EQ(Count("R-1", "exec:3"), 0);
  EXPECT_EQ(LedgerRows(), 0);
}

TEST_P(StepsConformanceTest, CompensationWaitingForRetryIsResumedWhenDue) {
  auto runner = NewRunner(Options(false), {Refund()});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  Push("R-1", "comp:1", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATING");
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[1].status, StepStatus::kCompensated);
  EXPECT_NE(op.steps[0].status, StepStatus::kCompensated);
  EXPECT_EQ(op.steps[0].retry_count, 1);
  EXPECT_GT(op.next_retry_at, clock_.Now());
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 0);

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("COMPENSATED", "COMPENSATED", "FAILED"));
  EXPECT_THAT(Attempts("R-1", "comp:1"), ElementsAre(1, 2));
  EXPECT_EQ(Count("R-1", "comp:2"), 1);
  EXPECT_EQ(channel_.Cancels(op.steps[0].request_id), 1);
  EXPECT_EQ(LedgerRows(), 0);
}

TEST_P(StepsConformanceTest, CompensationThatKeepsFailingRequiresAPerson) {
  auto runner = NewRunner(Options(true), {Refund(/*ext_attempts=*/3)});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  Always("R-1", "comp:1", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATION_REQUIRED");
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[1].status, StepStatus::kCompensated);  // already undone: stays so
  EXPECT_NE(op.steps[0].status, StepStatus::kCompensated);
  EXPECT_EQ(op.steps[2].status, StepStatus::kFailed);
  EXPECT_THAT(Attempts("R-1", "comp:1"), ElementsAre(1, 2, 3));
  EXPECT_EQ(op.steps[0].retry_count, 3);
  EXPECT_THAT(Sequence("R-1", "comp"), ElementsAre("comp:2", "comp:1", "comp:1", "comp:1"));
  EXPECT_EQ(LedgerRows(), 0);

  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("R-1"));
  // Final: nothing is retried by a re-run or a worker pass.
  const int calls = TotalCalls();
  ASSERT_OK_AND_ASSIGN(OperationState again, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(again), "COMPENSATION_REQUIRED");
  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(TotalCalls(), calls);
}

// A half-undone operation keeps its object locked until a person resolves it: an
// order change must not run over a refund nobody has settled.
TEST_P(StepsConformanceTest, CompensationRequiredKeepsTheObjectLockUntilResolved) {
  auto runner = NewRunner(Options(true), {Refund()});
  auto nowait = NewRunner(Options(false), {Refund()});
  Always("A", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  Always("A", "comp:1", Fail(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(OperationState a, runner->Run(Req("A", "refund", "in", "order-1")));
  ASSERT_EQ(OpStatus(a), "COMPENSATION_REQUIRED");

  ASSERT_OK_AND_ASSIGN(OperationState b, nowait->Run(Req("B", "refund", "in", "order-1")));
  EXPECT_EQ(OpStatus(b), "PENDING");
  EXPECT_EQ(b.blocked_by, "A");
  EXPECT_EQ(FirstCall("B"), -1);

  // Only a COMPENSATION_REQUIRED operation is resolved, and only with a note.
  EXPECT_THAT(runner->Resolve("A", ""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(runner->Resolve("nope", "x"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(OperationState resolved,
                       runner->Resolve("A", "reversal cancelled at the channel by ops"));
  EXPECT_EQ(OpStatus(resolved), "COMPENSATED");
  EXPECT_THAT(resolved.last_error, HasSubstr("resolved by hand: reversal cancelled at the "
                                             "channel by ops"));
  EXPECT_THAT(runner->Resolve("A", "again"), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), Not(Contains("A")));

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, nowait->ResumeDue());
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(OpStatus(MustGet(*runner, "B")), "SUCCESS");
  EXPECT_THAT(nowait->Resolve("B", "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_P(StepsConformanceTest, FinalCompensationFailureRequiresAPerson) {
  auto runner = NewRunner(Options(true), {Refund()});
  Always("R-1", "exec:3", Fail(absl::StatusCode::kInvalidArgument));
  Always("R-1", "comp:1", Fail(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "COMPENSATION_REQUIRED");
  EXPECT_EQ(Count("R-1", "comp:1"), 1);
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[1].status, StepStatus::kCompensated);
  EXPECT_NE(op.steps[0].status, StepStatus::kCompensated);
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("R-1"));
}

TEST_P(StepsConformanceTest, UnknownStepIsCompensatedWhenTheOperationGivesUp) {
  OperationType type{.name = "payout",
                     .steps = {Ledger(1, "ledger"), External(2, "transfer", /*max_attempts=*/3)}};
  auto runner = NewRunner(Options(true), {type});
  Always("P-1", "exec:2", Fail(absl::StatusCode::kDeadlineExceeded));
  Always("P-1", "query:2", AnswerUnknown());
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("P-1", "payout")));
  EXPECT_EQ(OpStatus(op), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op), ElementsAre("COMPENSATED", "COMPENSATED"));
  EXPECT_EQ(Count("P-1", "exec:2"), 1);                            // never re-sent while unknown
  EXPECT_EQ(Count("P-1", "exec:2") + Count("P-1", "query:2"), 3);  // max_attempts in all
  EXPECT_EQ(op.steps.at(1).retry_count, 3);
  EXPECT_THAT(Sequence("P-1", "comp"), ElementsAre("comp:2", "comp:1"));
  const Call comp2 = Calls("P-1", "comp:2").at(0);
  EXPECT_EQ(comp2.payload, "");  // no stored result: "no such effect" is done
  EXPECT_EQ(comp2.request_id, op.steps.at(1).request_id);
  EXPECT_EQ(LedgerRows(), 0);
}

TEST_P(StepsConformanceTest, UnknownStepWhoseCompensationFailsRequiresAPerson) {
  OperationType type{.name = "payout",
                     .steps = {Ledger(1, "ledger"), External(2, "transfer", /*max_attempts=*/3)}};
  auto runner = NewRunner(Options(true), {type});
  Always("P-1", "exec:2", Fail(absl::StatusCode::kDeadlineExceeded));
  Always("P-1", "query:2", AnswerUnknown());
  Always("P-1", "comp:2", Fail(absl::StatusCode::kPermissionDenied));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("P-1", "payout")));
  EXPECT_EQ(OpStatus(op), "COMPENSATION_REQUIRED");
  ASSERT_EQ(op.steps.size(), 2u);
  EXPECT_EQ(op.steps[1].status, StepStatus::kUnknown);  // still not observed: no guess
  EXPECT_EQ(Count("P-1", "comp:2"), 1);
  EXPECT_EQ(Count("P-1", "exec:2"), 1);
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("P-1"));
}

// An UNKNOWN step that has no compensate cannot be undone or ruled out: a person
// must look (the operation is not COMPENSATED by guess).
TEST_P(StepsConformanceTest, UnknownStepWithoutCompensateRequiresAPerson) {
  OperationType type{.name = "payout",
                     .steps = {Ledger(1, "ledger"),
                               External(2, "transfer", /*max_attempts=*/2, /*compensate=*/false)}};
  auto runner = NewRunner(Options(true), {type});
  Always("P-1", "exec:2", Fail(absl::StatusCode::kDeadlineExceeded));
  Always("P-1", "query:2", AnswerUnknown());
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("P-1", "payout")));
  EXPECT_EQ(OpStatus(op), "COMPENSATION_REQUIRED");
  ASSERT_EQ(op.steps.size(), 2u);
  EXPECT_EQ(op.steps[1].status, StepStatus::kUnknown);
  EXPECT_EQ(Count("P-1", "exec:2"), 1);
  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("P-1"));
}

}  // namespace
}  // namespace idem::steps_conformance
