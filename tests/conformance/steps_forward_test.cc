// The forward path: every step once, request ids, re-runs of a finished operation,
// retries of a failed step, local steps' writes, a run that may wait, validation of
// types and requests, opaque bytes. Run against every SQL backend; the fixture and its
// fake channel are steps_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/steps_fixture.h"

namespace idem::steps_conformance {
namespace {

TEST_P(StepsConformanceTest, HappyPathRunsEveryStepOnce) {
  auto runner = NewRunner(Options(true), {Refund()});
  const RunRequest req = Req("R-20240618-000713");
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(req));
  EXPECT_FALSE(op.busy);
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));

  ASSERT_EQ(Count(req.biz_key, "exec:1"), 1);
  EXPECT_EQ(Count(req.biz_key, "exec:2"), 1);
  EXPECT_EQ(Count(req.biz_key, "exec:3"), 1);
  EXPECT_EQ(Count(req.biz_key, "query:1"), 0);  // a first call needs no query
  const Call ext = Calls(req.biz_key, "exec:1")[0];
  EXPECT_TRUE(std::regex_match(ext.request_id, kRequestIdPattern)) << ext.request_id;
  EXPECT_EQ(channel_.Effects(ext.request_id), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
  EXPECT_TRUE(LedgerHas(OrderNo(req.biz_key, 2)));

  // What the step functions saw.
  EXPECT_EQ(ext.attempt, 1);
  EXPECT_EQ(ext.input, req.input);
  EXPECT_FALSE(ext.has_tx);  // no transaction is held across an external call
  EXPECT_EQ(ext.payload, "");
  const Call ledger = Calls(req.biz_key, "exec:2")[0];
  EXPECT_TRUE(ledger.has_tx);
  EXPECT_EQ(ledger.attempt, 1);
  EXPECT_EQ(ledger.input, req.input);
  EXPECT_THAT(ledger.results,
              ElementsAre("<null>", "sent:" + ext.request_id, "<null>", "<null>", "<null>"));
  const Call notify = Calls(req.biz_key, "exec:3")[0];
  EXPECT_TRUE(notify.has_tx);
  EXPECT_THAT(notify.results, ElementsAre("<null>", "sent:" + ext.request_id,
                                          "row:" + OrderNo(req.biz_key, 2), "<null>", "<null>"));

  // The journal.
  ASSERT_OK_AND_ASSIGN(OperationState got, runner->Get(req.biz_key));
  EXPECT_EQ(got.biz_key, req.biz_key);
  EXPECT_EQ(got.type, "refund");
  EXPECT_EQ(got.object_key, "");
  EXPECT_EQ(got.input, req.input);
  EXPECT_EQ(OpStatus(got), "SUCCESS");
  EXPECT_EQ(got.blocked_by, "");
  EXPECT_EQ(got.last_error, "");
  EXPECT_FALSE(got.busy);
  EXPECT_EQ(got.created_at, start_);  // times come from the injected clock
  EXPECT_EQ(got.updated_at, start_);
  ASSERT_EQ(got.steps.size(), 3u);
  const char* names[] = {"channel_reversal", "ledger", "notify"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    const StepRecord& s = got.steps[i];
    EXPECT_EQ(s.step_seq, i + 1);
    EXPECT_EQ(s.name, names[i]);
    EXPECT_EQ(s.status, StepStatus::kSuccess);
    EXPECT_EQ(s.retry_count, 0);
    EXPECT_EQ(s.next_retry_at, absl::InfinitePast());
    EXPECT_EQ(s.updated_at, start_);
    EXPECT_EQ(s.last_error, "");
  }
  EXPECT_EQ(got.steps[0].request_id, ext.request_id);
  EXPECT_EQ(got.steps[1].request_id, "");  // local steps have none
  EXPECT_EQ(got.steps[2].request_id, "");
  EXPECT_EQ(got.steps[0].payload, "sent:" + ext.request_id);
  EXPECT_EQ(got.steps[1].payload, "row:" + OrderNo(req.biz_key, 2));
  EXPECT_EQ(got.steps[2].payload, "seen:1");  // step 3 sees step 2's committed row
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());

  ASSERT_OK_AND_ASSIGN(std::vector<OperationState> stuck, runner->ListStuck());
  EXPECT_THAT(BizKeys(stuck), IsEmpty());
}

TEST_P(StepsConformanceTest, RequestIdIsDeterministicPerBizKeyAndStep) {
  auto two_calls = [this] {
    return OperationType{.name = "two_calls",
                         .steps = {External(1, "debit"), External(2, "credit")}};
  };
  auto runner = NewRunner(Options(true), {two_calls()});
  ASSERT_OK(runner->Run(Req("R-1", "two_calls")));
  ASSERT_OK(runner->Run(Req("R-2", "two_calls")));
  ASSERT_EQ(Count("R-1", "exec:1"), 1);
  ASSERT_EQ(Count("R-1", "exec:2"), 1);
  ASSERT_EQ(Count("R-2", "exec:1"), 1);
  const std::string r1s1 = Calls("R-1", "exec:1")[0].request_id;
  const std::string r1s2 = Calls("R-1", "exec:2")[0].request_id;
  const std::string r2s1 = Calls("R-2", "exec:1")[0].request_id;
  for (const std::string& id : {r1s1, r1s2, r2s1}) {
    EXPECT_TRUE(std::regex_match(id, kRequestIdPattern)) << id;
  }
  EXPECT_NE(r1s1, r1s2);  // differs across step_seq
  EXPECT_NE(r1s1, r2s1);  // differs across biz_key
  OperationState op = MustGet(*runner, "R-1");
  ASSERT_EQ(op.steps.size(), 2u);
  EXPECT_EQ(op.steps[0].request_id, r1s1);
  EXPECT_EQ(op.steps[1].request_id, r1s2);

  // The same (biz_key, step_seq) gives the same id on a re-created runner over a
  // fresh database ("every process").
  testing::TempDir other_dir;
  absl::StatusOr<std::unique_ptr<Store>> other_store =
      testing::OpenBackendStore(GetParam(), GetParam().url(other_dir.path()));
  ASSERT_OK(other_store);
  auto other = NewRunner(Options(true), {two_calls()}, other_store->get());
  ASSERT_OK_AND_ASSIGN(OperationState again, other->Run(Req("R-1", "two_calls")));
  EXPECT_EQ(OpStatus(again), "SUCCESS");
  ASSERT_EQ(Count("R-1", "exec:1"), 2);
  EXPECT_EQ(Calls("R-1", "exec:1")[1].request_id, r1s1);
  EXPECT_EQ(Calls("R-1", "exec:2")[1].request_id, r1s2);
  other.reset();
}

TEST_P(StepsConformanceTest, RerunOfFinishedOperationRunsNothing) {
  auto runner = NewRunner(Options(true), {Refund()});
  ASSERT_OK_AND_ASSIGN(OperationState first, runner->Run(Req("R-1")));
  ASSERT_EQ(OpStatus(first), "SUCCESS");
  const int calls = TotalCalls();
  clock_.Advance(absl::Hours(1));

  auto same_as_first = [&](const OperationState& op) {
    EXPECT_FALSE(op.busy);
    EXPECT_EQ(OpStatus(op), "SUCCESS");
    ASSERT_EQ(op.steps.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(i + 1);
      EXPECT_EQ(op.steps[i].status, StepStatus::kSuccess);
      EXPECT_EQ(op.steps[i].payload, first.steps[i].payload);
      EXPECT_EQ(op.steps[i].request_id, first.steps[i].request_id);
      EXPECT_EQ(op.steps[i].retry_count, 0);
      EXPECT_EQ(op.steps[i].updated_at, start_);  // nothing was rewritten
    }
  };
  {
    SCOPED_TRACE("Run again");
    ASSERT_OK_AND_ASSIGN(OperationState again, runner->Run(Req("R-1")));
    same_as_first(again);
  }
  {
    SCOPED_TRACE("Resume");
    ASSERT_OK_AND_ASSIGN(OperationState resumed, runner->Resume("R-1"));
    same_as_first(resumed);
  }
  {
    SCOPED_TRACE("Run on another runner and store");
    std::unique_ptr<Store> store2 = OpenSecondStore();
    ASSERT_NE(store2, nullptr);
    auto runner2 = NewRunner(Options(true), {Refund()}, store2.get());
    ASSERT_OK_AND_ASSIGN(OperationState other, runner2->Run(Req("R-1")));
    same_as_first(other);
    ASSERT_OK_AND_ASSIGN(int resumed, runner2->ResumeDue());
    EXPECT_EQ(resumed, 0);  // a final operation is never due
  }
  EXPECT_EQ(TotalCalls(), calls);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(StepsConformanceTest, RetryableFailureIsRetriedAndDoneStepsAreNotRedone) {
  auto runner = NewRunner(Options(true), {Refund()});
  // The ledger write times out twice (slow DB, then a deadlock), then succeeds.
  Push("R-1", "exec:2", Fail(absl::StatusCode::kDeadlineExceeded));
  Push("R-1", "exec:2", Fail(absl::StatusCode::kAborted));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(Count("R-1", "exec:1"), 1);  // the channel reversal happened exactly once
  EXPECT_EQ(Count("R-1", "query:1"), 0);
  EXPECT_THAT(Attempts("R-1", "exec:2"), ElementsAre(1, 2, 3));
  EXPECT_EQ(Count("R-1", "exec:3"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
  ASSERT_EQ(op.steps.size(), 3u);
  EXPECT_EQ(op.steps[0].retry_count, 0);
  EXPECT_EQ(op.steps[1].retry_count, 2);
  EXPECT_EQ(op.steps[2].retry_count, 0);
  // It slept through two backoff delays on the fake clock (ceilings 4 s + 8 s).
  EXPECT_GT(clock_.slept(), absl::ZeroDuration());
  EXPECT_LE(clock_.slept(), absl::Seconds(12));
  OperationState got = MustGet(*runner, "R-1");
  ASSERT_EQ(got.steps.size(), 3u);
  EXPECT_EQ(got.steps[1].retry_count, 2);
  EXPECT_EQ(got.steps[1].payload, "row:R-1#2");
}

TEST_P(StepsConformanceTest, RetryableFailureWithoutWaitingIsResumedWhenDue) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));

  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_FALSE(op.busy);
  EXPECT_EQ(OpStatus(op), "PENDING");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "FAILED", "PENDING"));
  ASSERT_EQ(op.steps.size(), 3u);
  const absl::Time now = clock_.Now();
  EXPECT_EQ(op.steps[1].retry_count, 1);
  EXPECT_GT(op.steps[1].next_retry_at, now);
  EXPECT_LE(op.steps[1].next_retry_at, now + absl::Seconds(4));  // first ceiling
  EXPECT_THAT(op.steps[1].last_error, HasSubstr("scripted failure"));
  EXPECT_GT(op.next_retry_at, now);
  EXPECT_LE(op.next_retry_at, now + absl::Seconds(4));
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());  // it did not wait
  EXPECT_EQ(Count("R-1", "exec:3"), 0);

  // Not due yet: nothing runs.
  ASSERT_OK_AND_ASSIGN(int resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 0);
  ASSERT_OK_AND_ASSIGN(OperationState early, runner->Resume("R-1"));
  EXPECT_FALSE(early.busy);
  EXPECT_EQ(OpStatus(early), "PENDING");
  EXPECT_THAT(StepStatuses(early), ElementsAre("SUCCESS", "FAILED", "PENDING"));
  EXPECT_EQ(Count("R-1", "exec:2"), 1);
  EXPECT_EQ(clock_.slept(), absl::ZeroDuration());

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "PENDING");  // failed a second time
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "FAILED", "PENDING"));
  EXPECT_EQ(op.steps[1].retry_count, 2);
  EXPECT_GT(op.next_retry_at, clock_.Now());

  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 1);
  op = MustGet(*runner, "R-1");
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(op.steps[1].retry_count, 2);
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_THAT(Attempts("R-1", "exec:2"), ElementsAre(1, 2, 3));
  EXPECT_EQ(Count("R-1", "exec:3"), 1);
  EXPECT_EQ(channel_.TotalEffects(), 1);
  EXPECT_EQ(LedgerRows(), 1);
  // Step 3 ran in a later pass and still sees the earlier results from the journal.
  const Call notify = Calls("R-1", "exec:3").at(0);
  EXPECT_EQ(notify.results.at(1), "sent:" + op.steps[0].request_id);
  EXPECT_EQ(notify.results.at(2), "row:R-1#2");

  ASSERT_OK_AND_ASSIGN(resumed, runner->ResumeDue());
  EXPECT_EQ(resumed, 0);
}

// A Run that returned PENDING no longer owns the operation: another runner may
// resume it as soon as it is due, not only after the lease would have run out.
TEST_P(StepsConformanceTest, RunThatReturnsPendingReleasesItsLease) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  ASSERT_EQ(OpStatus(op), "PENDING");
  EXPECT_LE(op.lease_until, clock_.Now());
  EXPECT_LE(MustGet(*runner, "R-1").lease_until, clock_.Now());

  clock_.Advance(absl::Seconds(5));  // past next_retry_at (<= 4 s), inside a 30 s lease
  std::unique_ptr<Store> store2 = OpenSecondStore();
  ASSERT_NE(store2, nullptr);
  auto runner2 = NewRunner(Options(false), {Refund()}, store2.get());
  ASSERT_OK_AND_ASSIGN(int resumed, runner2->ResumeDue());
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(OpStatus(MustGet(*runner, "R-1")), "SUCCESS");
}

TEST_P(StepsConformanceTest, LocalStepWritesRollBackWithAFailedAttempt) {
  auto runner = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));  // after its INSERT
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "PENDING");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "FAILED", "PENDING"));
  EXPECT_EQ(LedgerRows(), 0);  // rolled back

  // Run again once due: the same INSERT (same primary key) now commits once.
  clock_.Advance(kPastEverything);
  ASSERT_OK_AND_ASSIGN(op, runner->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_THAT(StepStatuses(op), ElementsAre("SUCCESS", "SUCCESS", "SUCCESS"));
  EXPECT_EQ(Count("R-1", "exec:2"), 2);
  EXPECT_EQ(LedgerRows(), 1);
  EXPECT_EQ(op.steps.at(2).payload, "seen:1");

  // A final failure after the INSERT rolls it back too.
  Push("R-2", "exec:2", Fail(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(OperationState op2, runner->Run(Req("R-2")));
  EXPECT_EQ(OpStatus(op2), "COMPENSATED");
  EXPECT_THAT(StepStatuses(op2), ElementsAre("COMPENSATED", "FAILED", "PENDING"));
  EXPECT_FALSE(LedgerHas("R-2#2"));
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(StepsConformanceTest, RegisterValidatesOperationTypes) {
  StepRunner runner(*store_, Options(true));
  auto local = [this](std::string name) { return Notify(1, std::move(name)); };
  auto type = [&](std::string name, std::vector<Step> steps) {
    return OperationType{.name = std::move(name), .steps = std::move(steps)};
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(runner.Register(type("", {local("a")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("has space", {local("a")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("slash/name", {local("a")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type(std::string(65, 'a'), {local("a")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("ok", {local("")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("ok", {local("bad;name")})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("ok", {local(std::string(65, 's'))})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("ok", {})), StatusIs(kInvalid));
  EXPECT_THAT(runner.Register(type("ok", std::vector<Step>(101, local("s")))), StatusIs(kInvalid));
  Step no_execute = local("a");
  no_execute.execute = nullptr;
  EXPECT_THAT(runner.Register(type("ok", {no_execute})), StatusIs(kInvalid));
  Step no_query = External(1, "a");
  no_query.query = nullptr;
  EXPECT_THAT(runner.Register(type("ok", {no_query})), StatusIs(kInvalid));
  Step bad_retry = local("a");
  bad_retry.retry.max_attempts = 0;
  EXPECT_THAT(runner.Register(type("ok", {bad_retry})), StatusIs(kInvalid));
  bad_retry.retry = RetryPolicy{.initial_delay = absl::ZeroDuration()};
  EXPECT_THAT(runner.Register(type("ok", {bad_retry})), StatusIs(kInvalid));
  // Nothing above was registered.
  EXPECT_THAT(runner.Run(Req("K", "ok")), StatusIs(absl::StatusCode::kNotFound));

  // The edges that are fine: 64-byte names of every allowed character, 100 steps, a
  // local step without query or compensate.
  const std::string name64 = "Az09_.-" + std::string(57, 'x');
  ASSERT_EQ(name64.size(), 64u);
  EXPECT_OK(runner.Register(type(name64, {local(name64)})));
  EXPECT_OK(runner.Register(type("hundred", std::vector<Step>(100, local("s")))));
  EXPECT_THAT(runner.Register(type(name64, {local("other")})),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(OperationState op, runner.Run(Req("K", name64)));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
}

TEST_P(StepsConformanceTest, RunValidatesRequests) {
  auto runner = NewRunner(Options(true),
                          {Refund(), OperationType{.name = "noop", .steps = {Notify(1, "n")}}});
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(runner->Run(Req("K", "no_such_type")), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(runner->Run(Req("")), StatusIs(kInvalid));
  EXPECT_THAT(runner->Run(Req(std::string(256, 'k'))), StatusIs(kInvalid));
  EXPECT_THAT(runner->Run(Req("K", "refund", "in", std::string(256, 'o'))), StatusIs(kInvalid));
  EXPECT_EQ(TotalCalls(), 0);
  ASSERT_OK_AND_ASSIGN(OperationState longest, runner->Run(Req(std::string(255, 'k'), "noop")));
  EXPECT_EQ(OpStatus(longest), "SUCCESS");
  EXPECT_EQ(MustGet(*runner, std::string(255, 'k')).biz_key, std::string(255, 'k'));

  // The same biz_key with another type, input or object_key: refused, nothing runs.
  ASSERT_OK(runner->Run(Req("R-1", "refund", "in")));
  const int calls = TotalCalls();
  EXPECT_THAT(runner->Run(Req("R-1", "noop", "in")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(runner->Run(Req("R-1", "refund", "other input")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(runner->Run(Req("R-1", "refund", "in", "order-9")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(TotalCalls(), calls);
  OperationState op = MustGet(*runner, "R-1");
  EXPECT_EQ(op.type, "refund");
  EXPECT_EQ(op.input, "in");
  // ... also while the operation is not final yet.
  Push("R-2", "exec:2", Fail(absl::StatusCode::kInvalidArgument));
  Always("R-2", "comp:1", Fail(absl::StatusCode::kUnavailable));
  auto nowait = NewRunner(Options(false), {Refund()});
  ASSERT_OK_AND_ASSIGN(OperationState r2, nowait->Run(Req("R-2", "refund", "in")));
  ASSERT_EQ(OpStatus(r2), "COMPENSATING");
  EXPECT_THAT(nowait->Run(Req("R-2", "refund", "changed")),
              StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_THAT(runner->Get("nope"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(runner->Resume("nope"), StatusIs(absl::StatusCode::kNotFound));
  // Resume needs the stored type registered on this runner.
  StepRunner bare(*store_, Options(true));
  EXPECT_THAT(bare.Resume("R-1"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(OperationState seen, bare.Get("R-1"));  // Get needs no type
  EXPECT_EQ(OpStatus(seen), "SUCCESS");
}

// Keys are opaque bytes up to 255 bytes, as the Guard takes them, and steps.h says
// biz_key follows the Guard's key rules.
TEST_P(StepsConformanceTest, BizKeysAreOpaqueBytes) {
  // A step that puts no key into business SQL (PostgreSQL TEXT would refuse it).
  Step noop{.name = "n", .retry = Policy(5)};
  noop.execute = [](StepContext& c) -> absl::StatusOr<std::string> {
    return std::string(c.biz_key());
  };
  auto runner = NewRunner(Options(true), {OperationType{.name = "noop", .steps = {noop}}});
  const std::string odd_key("a\0b\xff", 4);
  ASSERT_OK_AND_ASSIGN(OperationState odd, runner->Run(Req(odd_key, "noop", "in")));
  EXPECT_EQ(OpStatus(odd), "SUCCESS");
  EXPECT_EQ(MustGet(*runner, odd_key).biz_key, odd_key);
  EXPECT_EQ(MustGet(*runner, odd_key).steps.at(0).payload, odd_key);
  EXPECT_THAT(runner->Get(std::string("a")), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(runner->Get(std::string("a\0b", 3)), StatusIs(absl::StatusCode::kNotFound));
}

// The input and the steps' results are bytes: NULs, invalid UTF-8, and sizes well
// past a VARCHAR come back exactly.
TEST_P(StepsConformanceTest, InputAndResultsAreOpaqueBytes) {
  std::string input("\0\x01{}\xfe", 5);
  input += std::string(100000, '\xab');
  std::string payload;
  for (int i = 0; i < 70000; ++i) payload.push_back(static_cast<char>(i % 256));
  OperationType type{
      .name = "bytes",
      .steps = {Step{.name = "make",
                     .execute = [&](StepContext& c) -> absl::StatusOr<std::string> {
                       Record(c, "exec", 1);
                       return payload;
                     }},
                Step{.name = "use", .execute = [&](StepContext& c) -> absl::StatusOr<std::string> {
                       Record(c, "exec", 2);
                       return std::string();
                     }}}};
  auto runner = NewRunner(Options(true), {type});
  ASSERT_OK_AND_ASSIGN(OperationState op, runner->Run(Req("K", "bytes", input)));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  ASSERT_EQ(op.steps.size(), 2u);
  EXPECT_TRUE(op.steps[0].payload == payload)
      << "payload of " << op.steps[0].payload.size() << " bytes differs";
  EXPECT_EQ(op.steps[1].payload, "");
  const OperationState got = MustGet(*runner, "K");
  EXPECT_TRUE(got.input == input) << "input of " << got.input.size() << " bytes differs";
  ASSERT_EQ(Count("K", "exec:2"), 1);
  const Call use = Calls("K", "exec:2")[0];
  EXPECT_TRUE(use.input == input);
  EXPECT_TRUE(use.results.at(1) == payload);
  // Same bytes again: still the same operation.
  ASSERT_OK_AND_ASSIGN(OperationState again, runner->Run(Req("K", "bytes", input)));
  EXPECT_EQ(OpStatus(again), "SUCCESS");
  EXPECT_EQ(Count("K", "exec:1"), 1);
}

// A Run that may wait finishes an operation another runner left waiting for a
// retry: it sleeps (on the injected clock) until next_retry_at.
TEST_P(StepsConformanceTest, RunThatMayWaitFinishesAPendingOperation) {
  auto nowait = NewRunner(Options(false), {Refund()});
  Push("R-1", "exec:2", Fail(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(OperationState op, nowait->Run(Req("R-1")));
  ASSERT_EQ(OpStatus(op), "PENDING");
  const absl::Time due = op.next_retry_at;
  auto waiting = NewRunner(Options(true), {Refund()});
  ASSERT_OK_AND_ASSIGN(op, waiting->Run(Req("R-1")));
  EXPECT_EQ(OpStatus(op), "SUCCESS");
  EXPECT_GE(clock_.Now(), due);
  EXPECT_GT(clock_.slept(), absl::ZeroDuration());
  EXPECT_EQ(Count("R-1", "exec:1"), 1);
  EXPECT_EQ(Count("R-1", "exec:2"), 2);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST(StepsTest, StatusNamesAndFinality) {
  EXPECT_EQ(StepStatusName(StepStatus::kPending), "PENDING");
  EXPECT_EQ(StepStatusName(StepStatus::kSuccess), "SUCCESS");
  EXPECT_EQ(StepStatusName(StepStatus::kFailed), "FAILED");
  EXPECT_EQ(StepStatusName(StepStatus::kUnknown), "UNKNOWN");
  EXPECT_EQ(StepStatusName(StepStatus::kCompensated), "COMPENSATED");
  EXPECT_EQ(OperationStatusName(OperationStatus::kPending), "PENDING");
  EXPECT_EQ(OperationStatusName(OperationStatus::kSuccess), "SUCCESS");
  EXPECT_EQ(OperationStatusName(OperationStatus::kCompensating), "COMPENSATING");
  EXPECT_EQ(OperationStatusName(OperationStatus::kCompensated), "COMPENSATED");
  EXPECT_EQ(OperationStatusName(OperationStatus::kCompensationRequired), "COMPENSATION_REQUIRED");
  EXPECT_FALSE(IsFinal(OperationStatus::kPending));
  EXPECT_FALSE(IsFinal(OperationStatus::kCompensating));
  EXPECT_TRUE(IsFinal(OperationStatus::kSuccess));
  EXPECT_TRUE(IsFinal(OperationStatus::kCompensated));
  EXPECT_TRUE(IsFinal(OperationStatus::kCompensationRequired));
}

TEST(StepsTest, MemoryStoreIsRefused) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore("memory://");
  ASSERT_OK(store);
  StepRunner runner(**store);
  (void)runner.Register(OperationType{
      .name = "noop",
      .steps = {Step{.name = "n", .execute = [](StepContext&) -> absl::StatusOr<std::string> {
                       ADD_FAILURE() << "a step ran on memory://";
                       return std::string();
                     }}}});
  EXPECT_THAT(runner.Migrate(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(runner.Run({.type = "noop", .biz_key = "K"}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// The one instantiation for the binary: the TEST_Ps of the other steps_*_test.cc
// files share the fixture type, and run on these backends too.
INSTANTIATE_TEST_SUITE_P(SqlBackends, StepsConformanceTest,
                         ::testing::ValuesIn(testing::SqlBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem::steps_conformance
