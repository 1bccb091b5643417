// External calls whose outcome was not observed: the step is UNKNOWN and `query`
// decides, never a blind resend. Run against every SQL backend; the fixture and its
// fake channel are steps_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/steps_fixture.h"

namespace idem::steps_conformance {
namespace {

TEST_P(StepsConformanceTest, TimeoutAfterTheEffectIsUnknownUntilQueryFindsIt) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:1", FailAfterEffect(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "PENDING");
  EXPECT_THAT(StepStatuses(op), ElementsAre("UNKNOWN", "PENDING", "PENDING"));
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[0].retry_count, 1);
  EXPECT_GT(op.steps[0].next_retry_at, clock_.Now());
  EXPECT_GT(op.next_retry_at, clock_.Now());
  const std::string rid = op.steps[0].request_id;
  EXPECT_TRUE(std::regex_match(rid, kRequestIdPattern)) << rid;
  EXPECT_EQ(channel_.Effects(rid), 1);
  EXPECT_EQ(Count("R-1", "exec:2"), 0);

  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), ElementsAre("R-1"));  // it has an UNKNOWN step

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(op.steps[0].payload, "found:" + rid);  // query's payload
  EXPECT_EQ(op.steps[0].retry_count, 1);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);  // never re-sent
  EXPECT_EQ(Count("R-1", "query:1"), 1);
  EXPECT_EQ(Calls("R-1", "query:1")[0].request_id, rid);
  EXPECT_EQ(channel_.Effects(rid), 1);
  EXPECT_EQ(LedgerRows(), 1);
  // Step 2 sees step 1's result as query stored it.
  EXPECT_EQ(Calls("R-1", "exec:2").at(0).results.at(1), "found:" + rid);
}

TEST_P(StepsConformanceTest, LostResponseIsResolvedByQueryWhileWaiting) {
  auto runner = NewRunner(Options(true), {Refund()});
  Push("R-1", "exec:1", FailAfterEffect(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[0].payload, "found:" + op.steps[0].request_id);
  EXPECT_EQ(op.steps[0].retry_count, 1);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "query:1"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_GT(clock_.slept(), absl::ZeroDuration());
}

TEST_P(StepsConformanceTest, TimeoutBeforeTheEffectIsResentOnceAfterNotFound) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:1", Fail(absl::StatusCode::kDeadlineExceeded));  // no effect
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "PENDING");
  EXPECT_THAT(StepStatuses(op), ElementsAre("UNKNOWN", "PENDING", "PENDING"));
  const std::string rid = op.steps.at(0).request_id;
  EXPECT_EQ(channel_.Effects(rid), 0);

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(Count("R-1", "query:1"), 1);
  EXPECT_EQ(Count("R-1", "exec:1"), 2);  // re-sent exactly once, after kNotFound
  EXPECT_THAT(Sequence("R-1", ""), ::testing::ElementsAreArray(std::vector<std::string>{
                                       "exec:1", "query:1", "exec:1", "exec:2", "exec:3"}));
  EXPECT_EQ(Calls("R-1", "exec:1")[1].request_id, rid);  // the same id every time
  EXPECT_EQ(op.steps[0].payload, "sent:" + rid);
  EXPECT_EQ(op.steps[0].retry_count, 1);
  EXPECT_EQ(channel_.Effects(rid), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
}

TEST_P(StepsConformanceTest, QueryUnknownOrErrorNeverResends) {
  auto runner = NewRunner(Options(false), {Refund(/*ext_attempts=*/6)});
  Push("R-1", "exec:1", FailAfterEffect(absl::StatusCode::kDeadlineExceeded));
  Push("R-1", "query:1", AnswerUnknown());
  Push("R-1", "query:1", Fail(absl::StatusCode::kUnavailable));
  Push("R-1", "query:1", Fail(absl::StatusCode::kInternal));  // any error counts as kUnknown
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_THAT(StepStatuses(op), ElementsAre("UNKNOWN", "PENDING", "PENDING"));
  EXPECT_EQ(op.steps.at(0).retry_count, 1);
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE(Cat("query ", i));
    clock_.Advance(kPastEverything);
    ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
    EXPECT_EQ(resumed, 1);
    op = MustGet(*runner, "R-1");
    EXPECT_EQ(OpStatus(op), "PENDING");
    EXPECT_THAT(StepStatuses(op), ElementsAre("UNKNOWN", "PENDING", "PENDING"));
    EXPECT_EQ(op.steps.at(0).retry_count, 1 + i);
    EXPECT_GT(op.next_retry_at, clock_.Now());
    EXPECT_EQ(Count("R-1", "query:1"), i);
    EXPECT_EQ(Count("R-1", "exec:1"), 1);
  }
  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_EQ(op.steps.at(0).payload, "found:" + op.steps.at(0).request_id);
  EXPECT_EQ(op.steps.at(0).retry_count, 4);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "query:1"), 4);
  EXPECT_EQ(channel_.TotalEffects(), 1);
}

// Store unreachable: Run fails closed (kUnavailable) and runs nothing.
TEST_P(StepsConformanceTest, UnreachableStoreRunsNothing) {
  SwitchableStore flaky(*store_);
  auto runner = NewRunner(Options(true), {Refund()}, &flaky);
  ASSERT_OK(runner->Migrate());
  flaky.set_down(true);
  EXPECT_THAT(runner->Run(Req("R-1")), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(TotalCalls(), 0);
  flaky.set_down(false);
  EXPECT_THAT(runner->Get("R-1"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
}

// The crash window after an external call: the channel call happened, then the store went away
// before its answer was journaled. The step is left UNKNOWN, and the runner that
// takes over asks `query` instead of sending again.
TEST_P(StepsConformanceTest, StoreLostAfterTheCallIsResolvedByQueryNotResent) {
  SwitchableStore flaky(*store_);
  auto runner = NewRunner(Options(true), {Refund()}, &flaky);
  bool hooked = false;
  on_external_exec_ = [&](StepContext& c) {
    if (c.biz_key() != "R-1" || std::exchange(hooked, true)) return;
    flaky.set_down(true);
  };
  EXPECT_THAT(runner->Run(Req("R-1")), StatusIs(absl::StatusCode::kUnavailable));
  flaky.set_down(false);
  OperationState op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "PENDING");
  EXPECT_THAT(StepStatuses(op), ElementsAre("UNKNOWN", "PENDING", "PENDING"));
  EXPECT_EQ(channel_.TotalEffects(), 1);

  clock_.Advance(kPastEverything);  // the failed runner's lease runs out
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  auto runner2 = NewRunner(Options(true), {Refund()}, store2.get());
  ASSERT_OK_AND_ASSIGN(op, runner2->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_EQ(op.steps.at(0).payload, "found:" + op.steps.at(0).request_id);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "query:1"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

}  // namespace
}  // namespace idem::steps_conformance
