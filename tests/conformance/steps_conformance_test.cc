// The step machine's contract (include/idem/steps.h, SPEC §4–§5), run against every
// SQL backend. Steps are lambdas over in-test state: a fake external channel that
// counts effects per request id (scripted failures, some after the effect happened)
// and a real `ledger` table written through ctx.tx() by local steps. Time is a
// FakeClock: a runner that waits for a retry advances it instead of sleeping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "idem/retry.h"
#include "idem/steps.h"
#include "store/backend.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::idem::testing::FakeClock;
using ::idem::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// String concatenation over std::string_view and integers (Debian's Abseil has an
// absl::string_view of its own, which absl::StrCat does not take std::string_view for).
inline void AppendTo(std::string& out, std::string_view s) { out.append(s); }
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
void AppendTo(std::string& out, Int i) {
  out.append(std::to_string(i));
}
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (AppendTo(out, parts), ...);
  return out;
}

// Backoff jitter that always draws the middle of the range: each delay is exactly
// half its ceiling, so "not yet due" and "due" stay whole seconds apart whatever
// time precision a backend stores.
class MidpointRandom final : public Random {
 public:
  double Uniform() override { return 0.5; }
};

// The tests' retry policy: ceilings 4 s, 8 s, 8 s… (so delays of 2 s, 4 s, 4 s with
// MidpointRandom), all well inside the default 30 s lease.
RetryPolicy Policy(int max_attempts) {
  return RetryPolicy{.initial_delay = absl::Seconds(4),
                     .multiplier = 2.0,
                     .max_delay = absl::Seconds(8),
                     .max_attempts = max_attempts};
}

// Far enough to make any scheduled retry (<= 8 s) due and any lease (30 s) expire.
constexpr absl::Duration kPastEverything = absl::Seconds(31);

// One scripted answer of a step function.
struct Scripted {
  absl::Status status;        // returned by the call (OK: its normal answer)
  bool effect_first = false;  // external execute: the effect happens, then `status`
  bool unknown = false;       // query: answers QueryAnswer::kUnknown
};
Scripted Fail(absl::StatusCode code) { return {absl::Status(code, "scripted failure")}; }
Scripted FailAfterEffect(absl::StatusCode code) {
  return {absl::Status(code, "scripted failure after the effect"), true};
}
Scripted AnswerUnknown() { return {absl::OkStatus(), false, true}; }

// A call one of the step functions received.
struct Call {
  std::string biz_key;
  std::string what;  // "exec:2", "query:1", "comp:3"
  int attempt = 0;
  std::string input;
  std::string request_id;
  std::string payload;
  bool has_tx = false;
  std::vector<std::string> results;  // result_of(0..4), "<null>" for nullptr
};

// The fake external system (a payment channel): effects and cancellations by
// request id.
class Channel {
 public:
  void Send(std::string_view request_id) {
    absl::MutexLock lock(&mu_);
    ++effects_[std::string(request_id)];
  }
  void Cancel(std::string_view request_id) {
    absl::MutexLock lock(&mu_);
    ++cancels_[std::string(request_id)];
  }
  int Effects(std::string_view request_id) const {
    absl::MutexLock lock(&mu_);
    auto it = effects_.find(std::string(request_id));
    return it == effects_.end() ? 0 : it->second;
  }
  int Cancels(std::string_view request_id) const {
    absl::MutexLock lock(&mu_);
    auto it = cancels_.find(std::string(request_id));
    return it == cancels_.end() ? 0 : it->second;
  }
  int TotalEffects() const {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [id, count] : effects_) n += count;
    return n;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int> effects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> cancels_ ABSL_GUARDED_BY(mu_);
};

std::vector<std::string> StepStatuses(const OperationState& op) {
  std::vector<std::string> out;
  for (const StepRecord& s : op.steps) out.emplace_back(StepStatusName(s.status));
  return out;
}
std::string OpStatus(const OperationState& op) {
  return std::string(OperationStatusName(op.status));
}
std::vector<std::string> BizKeys(const std::vector<OperationState>& ops) {
  std::vector<std::string> out;
  for (const OperationState& op : ops) out.push_back(op.biz_key);
  return out;
}

// A Store decorator whose database can be "unplugged": while down, Begin and Get
// answer kUnavailable. Everything else is the wrapped store's.
class SwitchableStore final : public StoreBackend {
 public:
  explicit SwitchableStore(Store& inner) : inner_(inner) {}
  void set_down(bool down) { down_.store(down); }

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    if (down_.load()) return absl::UnavailableError("store is down (test)");
    return inner_.Begin();
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    if (down_.load()) return absl::UnavailableError("store is down (test)");
    return inner_.Get(tenant, key);
  }
  absl::Status Ping() override {
    return down_.load() ? absl::UnavailableError("store is down (test)") : inner_.Ping();
  }
  const SqlDialect* sql_dialect() const override { return Backend(inner_).sql_dialect(); }
  std::string_view url() const override { return inner_.url(); }

 private:
  Store& inner_;
  std::atomic<bool> down_{false};
};

class StepsConformanceTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    url_ = testing::WithParams(GetParam().url(dir_.path()), GetParam().fast_params);
    ASSERT_OK_AND_ASSIGN(store_, testing::OpenBackendStore(GetParam(), url_));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store_->Begin());
    ASSERT_OK(tx->Exec("CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount INTEGER)"));
    ASSERT_OK(tx->Commit());
    start_ = clock_.Now();
  }

  // Another Store object on the same database (as another process would have).
  std::unique_ptr<Store> OpenSecondStore() {
    absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(GetParam(), url_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // wait_for_retries = true: retries sleep on the fake clock (seeded jitter).
  // false: the midpoint jitter, so scheduled times are easy to reason about.
  StepRunnerOptions Options(bool wait) {
    StepRunnerOptions o;
    o.clock = &clock_;
    o.random = wait ? seeded_.get() : &midpoint_;
    o.wait_for_retries = wait;
    return o;
  }

  std::unique_ptr<StepRunner> NewRunner(StepRunnerOptions options, std::vector<OperationType> types,
                                        Store* store = nullptr) {
    auto runner = std::make_unique<StepRunner>(store != nullptr ? *store : *store_, options);
    for (OperationType& t : types) EXPECT_OK(runner->Register(std::move(t)));
    return runner;
  }

  // ---- the step functions ----

  void Record(const StepContext& c, std::string_view what, int seq) {
    if (c.step_seq() != seq) {
      ADD_FAILURE() << what << " of step " << seq << " saw step_seq() == " << c.step_seq();
    }
    Call call{.biz_key = std::string(c.biz_key()),
              .what = Cat(what, ":", seq),
              .attempt = c.attempt(),
              .input = std::string(c.input()),
              .request_id = std::string(c.request_id()),
              .payload = std::string(c.payload()),
              .has_tx = c.tx() != nullptr};
    for (int j = 0; j <= 4; ++j) {
      const std::string* r = c.result_of(j);
      call.results.push_back(r != nullptr ? *r : "<null>");
    }
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }

  // The next scripted answer for (biz_key, "exec:2"): a queued one, else an
  // "always" one, else the normal answer. "*" matches every biz_key.
  Scripted Next(std::string_view biz_key, std::string_view what, int seq) {
    const std::string call = Cat(what, ":", seq);
    absl::MutexLock lock(&mu_);
    for (const std::string& key : {std::string(biz_key), std::string("*")}) {
      auto q = queued_.find({key, call});
      if (q != queued_.end() && !q->second.empty()) {
        Scripted s = q->second.front();
        q->second.pop_front();
        return s;
      }
    }
    for (const std::string& key : {std::string(biz_key), std::string("*")}) {
      auto a = always_.find({key, call});
      if (a != always_.end()) return a->second;
    }
    return Scripted{};
  }
  void Push(const std::string& biz_key, const std::string& call, Scripted s) {
    absl::MutexLock lock(&mu_);
    queued_[{biz_key, call}].push_back(std::move(s));
  }
  void Always(const std::string& biz_key, const std::string& call, Scripted s) {
    absl::MutexLock lock(&mu_);
    always_[{biz_key, call}] = std::move(s);
  }

  // An external step over channel_: execute sends (an effect per request id),
  // query reports whether the effect exists, compensate cancels it.
  Step External(int seq, std::string name, int max_attempts = 5, bool compensate = true) {
    Step step{.name = std::move(name), .external = true, .retry = Policy(max_attempts)};
    step.execute = [this, seq](StepContext& c) -> absl::StatusOr<std::string> {
      Record(c, "exec", seq);
      Scripted s = Next(c.biz_key(), "exec", seq);
      if (s.status.ok() || s.effect_first) channel_.Send(c.request_id());
      if (on_external_exec_) on_external_exec_(c);
      if (!s.status.ok()) return s.status;
      return Cat("sent:", c.request_id());
    };
    step.query = [this, seq](StepContext& c) -> absl::StatusOr<QueryResult> {
      Record(c, "query", seq);
      Scripted s = Next(c.biz_key(), "query", seq);
      if (!s.status.ok()) return s.status;
      if (s.unknown) return QueryResult{.answer = QueryAnswer::kUnknown};
      if (channel_.Effects(c.request_id()) > 0) {
        return QueryResult{.answer = QueryAnswer::kDone, .payload = Cat("found:", c.request_id())};
      }
      return QueryResult{.answer = QueryAnswer::kNotFound};
    };
    if (compensate) {
      step.compensate = [this, seq](StepContext& c) -> absl::Status {
        Record(c, "comp", seq);
        Scripted s = Next(c.biz_key(), "comp", seq);
        if (!s.status.ok()) return s.status;
        channel_.Cancel(c.request_id());
        return absl::OkStatus();
      };
    }
    return step;
  }

  static std::string OrderNo(std::string_view biz_key, int seq) { return Cat(biz_key, "#", seq); }

  // A local step that inserts ledger row "<biz_key>#<seq>" through ctx.tx(), then
  // answers as scripted (so a scripted failure comes after the write).
  Step Ledger(int seq, std::string name, int max_attempts = 5, bool compensate = true) {
    Step step{.name = std::move(name), .retry = Policy(max_attempts)};
    step.execute = [this, seq](StepContext& c) -> absl::StatusOr<std::string> {
      Record(c, "exec", seq);
      if (c.tx() == nullptr) return absl::FailedPreconditionError("local step without tx()");
      const std::string order_no = OrderNo(c.biz_key(), seq);
      IDEM_RETURN_IF_ERROR(c.tx()->Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                                        {Value(order_no), Value(seq * 100)}));
      Scripted s = Next(c.biz_key(), "exec", seq);
      if (!s.status.ok()) return s.status;
      return Cat("row:", order_no);
    };
    if (compensate) {
      step.compensate = [this, seq](StepContext& c) -> absl::Status {
        Record(c, "comp", seq);
        Scripted s = Next(c.biz_key(), "comp", seq);
        if (!s.status.ok()) return s.status;
        if (c.tx() == nullptr)
          return absl::FailedPreconditionError("local compensate without tx()");
        return c.tx()
            ->Exec("DELETE FROM ledger WHERE order_no = ?", {Value(OrderNo(c.biz_key(), seq))})
            .status();
      };
    }
    return step;
  }

  // A local step that writes nothing: it reads how many ledger rows its operation
  // has (through ctx.tx()) and returns "seen:<n>".
  Step Notify(int seq, std::string name, int max_attempts = 5) {
    Step step{.name = std::move(name), .retry = Policy(max_attempts)};
    step.execute = [this, seq](StepContext& c) -> absl::StatusOr<std::string> {
      Record(c, "exec", seq);
      if (c.tx() == nullptr) return absl::FailedPreconditionError("local step without tx()");
      IDEM_ASSIGN_OR_RETURN(Rows rows,
                            c.tx()->Query("SELECT COUNT(*) FROM ledger WHERE order_no LIKE ?",
                                          {Value(Cat(c.biz_key(), "#%"))}));
      Scripted s = Next(c.biz_key(), "exec", seq);
      if (!s.status.ok()) return s.status;
      return Cat("seen:", rows.rows.at(0).at(0).as_int());
    };
    return step;
  }

  // The seed-0 refund: channel reversal (external), ledger row, notification.
  OperationType Refund(int ext_attempts = 5, int ledger_attempts = 5, int notify_attempts = 5) {
    return OperationType{
        .name = "refund",
        .steps = {External(1, "channel_reversal", ext_attempts),
                  Ledger(2, "ledger", ledger_attempts), Notify(3, "notify", notify_attempts)}};
  }

  static RunRequest Req(std::string biz_key, std::string type = "refund",
                        std::string input = "{\"order\":\"O-1\",\"amount\":150}",
                        std::string object_key = "") {
    return RunRequest{.type = std::move(type),
                      .biz_key = std::move(biz_key),
                      .input = std::move(input),
                      .object_key = std::move(object_key)};
  }

  // ---- observations ----

  OperationState MustGet(StepRunner& runner, std::string_view biz_key) {
    absl::StatusOr<OperationState> op = runner.Get(biz_key);
    EXPECT_TRUE(op.ok()) << biz_key << ": " << op.status();
    return op.ok() ? *std::move(op) : OperationState{};
  }

  std::vector<Call> Calls(std::string_view biz_key, std::string_view what) {
    absl::MutexLock lock(&mu_);
    std::vector<Call> out;
    for (const Call& c : calls_) {
      if (c.biz_key == biz_key && c.what == what) out.push_back(c);
    }
    return out;
  }
  int Count(std::string_view biz_key, std::string_view what) {
    return static_cast<int>(Calls(biz_key, what).size());
  }
  // The calls of `biz_key` whose name starts with `prefix` ("comp"), in order.
  std::vector<std::string> Sequence(std::string_view biz_key, std::string_view prefix) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const Call& c : calls_) {
      if (c.biz_key == biz_key && c.what.rfind(prefix, 0) == 0) out.push_back(c.what);
    }
    return out;
  }
  int TotalCalls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(calls_.size());
  }
  std::vector<int> Attempts(std::string_view biz_key, std::string_view what) {
    std::vector<int> out;
    for (const Call& c : Calls(biz_key, what)) out.push_back(c.attempt);
    return out;
  }
  // Index in the call log of the first/last call of `biz_key`; -1 when none.
  int FirstCall(std::string_view biz_key) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i].biz_key == biz_key) return static_cast<int>(i);
    }
    return -1;
  }
  int LastCall(std::string_view biz_key) {
    absl::MutexLock lock(&mu_);
    for (size_t i = calls_.size(); i-- > 0;) {
      if (calls_[i].biz_key == biz_key) return static_cast<int>(i);
    }
    return -1;
  }

  int64_t LedgerRows(std::string_view where = "", std::vector<Value> params = {}) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    EXPECT_TRUE(tx.ok()) << tx.status();
    if (!tx.ok()) return -1;
    absl::StatusOr<Rows> rows = (*tx)->Query(Cat("SELECT COUNT(*) FROM ledger", where), params);
    EXPECT_TRUE(rows.ok()) << rows.status();
    (*tx)->Rollback();
    return rows.ok() ? rows->rows[0][0].as_int() : -1;
  }
  bool LedgerHas(std::string_view order_no) {
    return LedgerRows(" WHERE order_no = ?", {Value(order_no)}) == 1;
  }

  testing::TempDir dir_;
  std::string url_;
  FakeClock clock_;
  absl::Time start_;
  std::unique_ptr<Random> seeded_ = NewSeededRandom(20240618);
  MidpointRandom midpoint_;
  std::unique_ptr<Store> store_;
  Channel channel_;
  // Called by every External execute after its effect (if any), before it returns.
  std::function<void(StepContext&)> on_external_exec_;

  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::deque<Scripted>> queued_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, Scripted> always_ ABSL_GUARDED_BY(mu_);
};

const std::regex kRequestIdPattern("idem-[0-9a-fA-F]{32}");

// ---- 1. the happy path ----

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

// ---- 2. re-running a finished operation ----

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

// ---- 3. partial failure and retry (seed 0's incident) ----

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

// ---- 4. external calls whose outcome was not observed ----

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

// ---- 5. a local step's writes commit with its journal update ----

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

// ---- 6. giving up: compensation in reverse order ----

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

// SPEC §3/§4: a store error is not the step's failure. A local step whose table is
// missing (here: renamed after the channel reversal went through) is retried, and
// past its budget the operation goes to a person: the reversal is never cancelled
// because the database was broken (the seed's refund incident, the other way round).
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

// ---- 7. compensation that cannot finish ----

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

// ---- 8. an UNKNOWN step when the operation gives up ----

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

// ---- 9. validation ----

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

// SPEC §2: keys are opaque bytes up to 255 bytes (the Guard takes them so), and
// steps.h says biz_key follows "SPEC §2 rules".
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

// ---- 10. leases ----

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

// ---- 11. the per-object lock ----

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

// ---- ListStuck ----

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

// ---- 12. the worker ----

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

// ---- 13–14. concurrency ----

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

// ---- more edges ----

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

// The crash window of SPEC §3: the channel call happened, then the store went away
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

INSTANTIATE_TEST_SUITE_P(SqlBackends, StepsConformanceTest,
                         ::testing::ValuesIn(testing::SqlBackends()),
                         [](const auto& info) { return info.param.name; });

// ---- not parameterized ----

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

}  // namespace
}  // namespace idem
