// The step machine's conformance fixture (include/idem/steps.h), shared by the
// steps_*_test.cc files of one binary. Steps are lambdas over in-test state: a fake
// external channel that counts effects per request id (scripted failures, some after
// the effect happened) and a real `ledger` table written through ctx.tx() by local
// steps. Time is a FakeClock: a runner that waits for a retry advances it instead of
// sleeping. Not in an anonymous namespace: the TEST_Ps of every file must see one
// fixture type, or GoogleTest refuses the suite.
#pragma once

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

namespace idem::steps_conformance {

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
inline RetryPolicy Policy(int max_attempts) {
  return RetryPolicy{.initial_delay = absl::Seconds(4),
                     .multiplier = 2.0,
                     .max_delay = absl::Seconds(8),
                     .max_attempts = max_attempts};
}

// Far enough to make any scheduled retry (<= 8 s) due and any lease (30 s) expire.
inline constexpr absl::Duration kPastEverything = absl::Seconds(31);

// One scripted answer of a step function.
struct Scripted {
  absl::Status status;        // returned by the call (OK: its normal answer)
  bool effect_first = false;  // external execute: the effect happens, then `status`
  bool unknown = false;       // query: answers QueryAnswer::kUnknown
};
inline Scripted Fail(absl::StatusCode code) { return {absl::Status(code, "scripted failure")}; }
inline Scripted FailAfterEffect(absl::StatusCode code) {
  return {absl::Status(code, "scripted failure after the effect"), true};
}
inline Scripted AnswerUnknown() { return {absl::OkStatus(), false, true}; }

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

inline std::vector<std::string> StepStatuses(const OperationState& op) {
  std::vector<std::string> out;
  for (const StepRecord& s : op.steps) out.emplace_back(StepStatusName(s.status));
  return out;
}
inline std::string OpStatus(const OperationState& op) {
  return std::string(OperationStatusName(op.status));
}
inline std::vector<std::string> BizKeys(const std::vector<OperationState>& ops) {
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

  // The refund operation: channel reversal (external), ledger row, notification.
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

inline const std::regex kRequestIdPattern("idem-[0-9a-fA-F]{32}");

}  // namespace idem::steps_conformance
