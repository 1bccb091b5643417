// Black-box tests of `idem stuck` and `idem worker`: this
// process writes step journals with the C++ API on a SQLite file, then the real
// binary lists them and resumes them. Time in the journal comes from a FakeClock
// set an hour back (due now) or a day ahead (not due yet), so nothing waits on a
// backoff. The refund operations the worker resumes run against the demo's fake
// payment channel, started as `idem demo channel`.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "nlohmann/json.hpp"
#include "refund/channel_client.h"
#include "testing/fake_clock.h"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/step_types.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using testing::ExpectOneLineFailure;
using testing::IdemBinary;
using testing::kGenerousDeadline;
using testing::RunIdemIn;
using testing::RunResult;
using testing::ServeProcess;
using testing::WaitUntil;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Whole seconds, so a FakeClock time prints as "...:SS.000Z" and a jitter below
// 1 ms does not show.
absl::Time WholeSecond(absl::Time t) { return absl::FromUnixSeconds(absl::ToUnixSeconds(t)); }

std::string Utc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

RetryPolicy Policy(absl::Duration delay, int attempts = 5) {
  RetryPolicy p;
  p.initial_delay = delay;
  p.max_delay = delay;
  p.max_attempts = attempts;
  return p;
}

// The refund example's input (refund/refund_operation.h EncodeOrder).
std::string OrderJson(const std::string& order_no, int64_t amount) {
  return nlohmann::json{{"run_id", "cli"}, {"order_no", order_no}, {"amount", amount}}.dump();
}

class StepsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(IdemBinary().empty()) << "set IDEM_BIN to the idem binary";
    ASSERT_TRUE(std::filesystem::exists(IdemBinary())) << IdemBinary();
    url_ = "sqlite://" + dir_.file("x.db");
    past_.Set(WholeSecond(absl::Now() - absl::Hours(1)));
    future_.Set(WholeSecond(absl::Now() + absl::Hours(24)));
  }

  RunResult Idem(const std::vector<std::string>& args) { return RunIdemIn(dir_.path(), args); }


  std::unique_ptr<Store> Open() {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    EXPECT_OK(store);
    return store.ok() ? *std::move(store) : nullptr;
  }

  static StepRunnerOptions NoWait(const Clock* clock) {
    StepRunnerOptions o;
    o.clock = clock;
    o.wait_for_retries = false;
    return o;
  }

  // Runs `type` once for `biz_key` on the test store with `clock`, without waiting
  // for retries, and returns the state it was left in.
  OperationState RunOnce(const OperationType& type, const std::string& biz_key,
                         const std::string& input, const Clock* clock) {
    std::unique_ptr<Store> store = Open();
    if (store == nullptr) return {};
    StepRunner runner(*store, NoWait(clock));
    EXPECT_OK(runner.Register(type));
    absl::StatusOr<OperationState> op =
        runner.Run({.type = type.name, .biz_key = biz_key, .input = input});
    EXPECT_OK(op);
    return op.ok() ? *op : OperationState{};
  }

  // The state of `biz_key` as stored.
  OperationState Get(const std::string& biz_key) {
    std::unique_ptr<Store> store = Open();
    if (store == nullptr) return {};
    StepRunner runner(*store);
    absl::StatusOr<OperationState> op = runner.Get(biz_key);
    EXPECT_OK(op);
    return op.ok() ? *op : OperationState{};
  }

  // One local step that fails retryably ("gateway busy") every time.
  static OperationType Flaky(absl::Duration delay) {
    Step charge;
    charge.name = "charge";
    charge.retry = Policy(delay);
    charge.execute = [](StepContext&) -> absl::StatusOr<std::string> {
      return absl::UnavailableError("gateway busy");
    };
    return OperationType{.name = "test.flaky", .steps = {std::move(charge)}};
  }

  // An external step whose answer never comes: left UNKNOWN.
  static OperationType Remote() {
    Step send;
    send.name = "send";
    send.external = true;
    send.retry = Policy(absl::Hours(1));
    send.execute = [](StepContext&) -> absl::StatusOr<std::string> {
      return absl::DeadlineExceededError("no answer");
    };
    send.query = [](StepContext&) -> absl::StatusOr<QueryResult> {
      return QueryResult{QueryAnswer::kUnknown, ""};
    };
    return OperationType{.name = "test.remote", .steps = {std::move(send)}};
  }

  // Step 1 succeeds and cannot be undone; step 2 fails for good: a person must act.
  static OperationType Undoable() { return idem::testing::NeedsAPerson("test.undo"); }

  // The refund example's operation as this binary's worker knows it (three steps,
  // refund/refund_operation.h), but whose channel call this process decides:
  // `send` runs in place of the POST and then the answer is "lost".
  static OperationType RefundWithLostAnswer(std::function<void(StepContext&)> send) {
    Step reversal;
    reversal.name = "channel_reversal";
    reversal.external = true;
    reversal.retry = Policy(absl::Milliseconds(1));
    reversal.execute = [send](StepContext& c) -> absl::StatusOr<std::string> {
      send(c);
      return absl::UnavailableError("connection closed without an answer");
    };
    reversal.query = [](StepContext&) -> absl::StatusOr<QueryResult> {
      return QueryResult{QueryAnswer::kUnknown, ""};
    };
    reversal.compensate = [](StepContext&) { return absl::OkStatus(); };
    auto unreached = [](StepContext&) -> absl::StatusOr<std::string> {
      return absl::InternalError("not reached in this process");
    };
    Step ledger{.name = "ledger", .execute = unreached};
    Step notification{.name = "notification", .execute = unreached};
    return OperationType{
        .name = "refund",
        .steps = {std::move(reversal), std::move(ledger), std::move(notification)}};
  }

  // Creates the refund example's ledger and inbox tables (and the journal) the way
  // a user would: one clean demo run on the store.
  void RunCleanDemo(int orders) {
    RunResult r = Idem({"demo", "refund", "--orders", std::to_string(orders), "--fault-rate", "0",
                   "--store", url_, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
    ASSERT_EQ(j["missing"], 0);
    ASSERT_EQ(j["channel_reversals"], orders);
  }

  int64_t CountRows(const std::string& table, const std::string& order_no) {
    std::unique_ptr<Store> store = Open();
    if (store == nullptr) return -1;
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store->Begin();
    EXPECT_OK(tx);
    if (!tx.ok()) return -1;
    absl::StatusOr<Rows> rows =
        (*tx)->Query("SELECT COUNT(*) FROM " + table + " WHERE order_no = ?", {Value(order_no)});
    (*tx)->Rollback();
    EXPECT_OK(rows);
    if (!rows.ok() || rows->rows.empty() || !rows->rows[0][0].is_int()) return -1;
    return rows->rows[0][0].as_int();
  }

  testing::TempDir dir_;
  std::string url_;
  testing::FakeClock past_;    // an hour ago: what it schedules is due now
  testing::FakeClock future_;  // tomorrow: what it schedules is not due yet
};

// --- idem stuck --------------------------------------------------------------

TEST_F(StepsCliTest, StuckIsEmptyAfterACleanDemoRun) {
  RunCleanDemo(5);
  RunResult r = Idem({"stuck", "--store", url_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no stuck operations in " + url_ + "\n");
  EXPECT_EQ(r.err, "");

  r = Idem({"stuck", "--store", url_, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json({{"store", url_}, {"operations", nlohmann::json::array()}}));
  EXPECT_EQ(r.err, "");
}

TEST_F(StepsCliTest, StuckListsADueOperationWithItsSteps) {
  OperationState op = RunOnce(Flaky(absl::Milliseconds(1)), "K-due", "{}", &past_);
  ASSERT_EQ(op.status, OperationStatus::kPending);
  ASSERT_LE(op.next_retry_at, past_.Now() + absl::Milliseconds(1));

  RunResult r = Idem({"stuck", "--store", url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string step_status(StepStatusName(op.steps[0].status));
  EXPECT_EQ(r.out, absl::StrCat("K-due  test.flaky  PENDING  (due, no runner)\n", "  next retry  ",
                                Utc(past_.Now()), "\n",                 //
                                "  last error  ", op.last_error, "\n",  //
                                "  1. charge  ", step_status, "  retries 1\n", "1 operation(s) in " + url_ + "\n"));
  EXPECT_THAT(op.last_error, HasSubstr("gateway busy"));

  r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["operations"].size(), 1u) << r.out;
  const nlohmann::json& o = j["operations"][0];
  EXPECT_EQ(o["biz_key"], "K-due");
  EXPECT_EQ(o["type"], "test.flaky");
  EXPECT_EQ(o["object_key"], nullptr);  // none: absent values are null
  EXPECT_EQ(o["status"], "PENDING");
  EXPECT_EQ(o["why"], "due, no runner");
  EXPECT_EQ(o["next_retry_at"], Utc(past_.Now()));
  EXPECT_EQ(o["lease_until"], nullptr);  // Run gave the lease up when it stopped waiting
  EXPECT_EQ(o["last_error"], op.last_error);
  EXPECT_EQ(o["created_at"], Utc(past_.Now()));
  EXPECT_TRUE(o["updated_at"].is_string());
  ASSERT_EQ(o["steps"].size(), 1u);
  const nlohmann::json& s = o["steps"][0];
  EXPECT_EQ(s["step_seq"], 1);
  EXPECT_EQ(s["name"], "charge");
  EXPECT_EQ(s["status"], std::string(StepStatusName(op.steps[0].status)));
  EXPECT_EQ(s["retry_count"], 1);
  EXPECT_EQ(s["request_id"], nullptr);  // a local step has none
  EXPECT_EQ(s["next_retry_at"], Utc(past_.Now()));
  EXPECT_THAT(s["last_error"].get<std::string>(), HasSubstr("gateway busy"));
}

TEST_F(StepsCliTest, StuckSkipsWhatIsNotDueYetOrDone) {
  OperationState waiting = RunOnce(Flaky(absl::Hours(1)), "K-later", "{}", &future_);
  ASSERT_EQ(waiting.status, OperationStatus::kPending);
  Step ok{.name = "ok", .execute = [](StepContext&) -> absl::StatusOr<std::string> {
            return std::string("fine");
          }};
  OperationState done =
      RunOnce(OperationType{.name = "test.ok", .steps = {ok}}, "K-done", "{}", &past_);
  ASSERT_EQ(done.status, OperationStatus::kSuccess);

  RunResult r = Idem({"stuck", "--store", url_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no stuck operations in " + url_ + "\n");
}

TEST_F(StepsCliTest, StuckListsUnknownStepsEvenBeforeTheyAreDue) {
  OperationState op = RunOnce(Remote(), "K-unknown", "{}", &future_);
  ASSERT_EQ(op.status, OperationStatus::kPending);
  ASSERT_EQ(op.steps[0].status, StepStatus::kUnknown);

  RunResult r = Idem({"stuck", "--store", url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("K-unknown  test.remote  PENDING  (step 1 outcome unknown)\n"));
  EXPECT_THAT(r.out, HasSubstr("\n  1. send  UNKNOWN  retries 1  request_id " +
                               op.steps[0].request_id + "\n"));
  EXPECT_THAT(op.steps[0].request_id, StartsWith("idem-"));

  r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json o = nlohmann::json::parse(r.out)["operations"].at(0);
  EXPECT_EQ(o["why"], "step 1 outcome unknown");
  EXPECT_EQ(o["steps"][0]["status"], "UNKNOWN");
  EXPECT_EQ(o["steps"][0]["request_id"], op.steps[0].request_id);
}

TEST_F(StepsCliTest, StuckListsCompensationRequired) {
  OperationState op = RunOnce(Undoable(), "K-manual", "{}", &past_);
  ASSERT_EQ(op.status, OperationStatus::kCompensationRequired);

  RunResult r = Idem({"stuck", "--store", url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("K-manual  test.undo  COMPENSATION_REQUIRED  "
                                "(compensation required)\n"));
  EXPECT_THAT(r.out, HasSubstr("reservation is locked"));
  EXPECT_THAT(r.out, HasSubstr("\n  1. reserve  SUCCESS"));
  EXPECT_THAT(r.out, HasSubstr("\n  2. charge  "));
  EXPECT_THAT(r.out, HasSubstr("\n1 operation(s) in " + url_ + "\n"));

  r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json o = nlohmann::json::parse(r.out)["operations"].at(0);
  EXPECT_EQ(o["biz_key"], "K-manual");
  EXPECT_EQ(o["status"], "COMPENSATION_REQUIRED");
  EXPECT_EQ(o["why"], "compensation required");
  EXPECT_THAT(o["last_error"].get<std::string>(), HasSubstr("reservation is locked"));
  ASSERT_EQ(o["steps"].size(), 2u);
  EXPECT_EQ(o["steps"][0]["name"], "reserve");
  EXPECT_EQ(o["steps"][0]["status"], "SUCCESS");  // not undone: a person must
  EXPECT_EQ(o["steps"][1]["name"], "charge");
}

// A person who settled a COMPENSATION_REQUIRED operation says so; it leaves the
// list and becomes COMPENSATED.
TEST_F(StepsCliTest, StuckResolveSettlesACompensationRequiredOperation) {
  OperationState op = RunOnce(Undoable(), "K-manual", "{}", &past_);
  ASSERT_EQ(op.status, OperationStatus::kCompensationRequired);

  ExpectOneLineFailure(Idem({"stuck", "--store", url_, "--resolve", "K-manual"}), 2);
  ExpectOneLineFailure(Idem({"stuck", "--store", url_, "--note", "x"}), 2);
  RunResult r = Idem({"stuck", "--store", url_, "--resolve", "K-none", "--note", "x"});
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("no operation with biz_key K-none"));

  r = Idem({"stuck", "--store", url_, "--resolve", "K-manual", "--note",
            "charge refunded by hand, ticket 42"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "resolved K-manual: COMPENSATED\n");
  r = Idem({"stuck", "--store", url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("no stuck operations in "));

  r = Idem({"stuck", "--store", url_, "--resolve", "K-manual", "--note", "again"});
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("is COMPENSATED"));
}

TEST_F(StepsCliTest, StuckListsOldestFirstUpToTheLimit) {
  testing::FakeClock older(past_.Now() - absl::Minutes(10));
  ASSERT_EQ(RunOnce(Undoable(), "K-newer", "{}", &past_).status,
            OperationStatus::kCompensationRequired);
  ASSERT_EQ(RunOnce(Flaky(absl::Milliseconds(1)), "K-older", "{}", &older).status,
            OperationStatus::kPending);

  RunResult r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> keys;
  const nlohmann::json list = nlohmann::json::parse(r.out);
  for (const nlohmann::json& o : list["operations"]) {
    keys.push_back(o["biz_key"]);
  }
  EXPECT_THAT(keys, ElementsAre("K-older", "K-newer"));

  r = Idem({"stuck", "--store", url_, "--limit", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("K-older  "));
  EXPECT_THAT(r.out, Not(HasSubstr("K-newer")));
  EXPECT_THAT(r.out, HasSubstr("\n1 operation(s) in " + url_ + "\n"));
}

// Business keys are opaque bytes: control bytes are escaped in the
// listing; in JSON a UTF-8 key is a string and any other one is base64.
TEST_F(StepsCliTest, StuckShowsOpaqueKeysEscapedOrBase64) {
  const std::string text_key = "K\n1\x01";
  const std::string byte_key = "K\n1\xff";
  ASSERT_EQ(RunOnce(Undoable(), text_key, "{}", &past_).status,
            OperationStatus::kCompensationRequired);
  testing::FakeClock later(past_.Now() + absl::Minutes(1));
  ASSERT_EQ(RunOnce(Undoable(), byte_key, "{}", &later).status,
            OperationStatus::kCompensationRequired);
  RunResult r = Idem({"stuck", "--store", url_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("K\\n1\\x01  test.undo  "));
  EXPECT_THAT(r.out, HasSubstr("\nK\\n1\\xff  test.undo  "));
  r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["operations"].size(), 2u) << r.out;
  EXPECT_EQ(j["operations"][0]["biz_key"], text_key);
  EXPECT_FALSE(j["operations"][1].contains("biz_key"));
  EXPECT_EQ(j["operations"][1]["biz_key_base64"], "Swox/w==");
}

TEST_F(StepsCliTest, StuckMissingSqliteFileExitsOneAndCreatesNothing) {
  const std::string missing = dir_.file("missing.db");
  RunResult r = Idem({"stuck", "--store", "sqlite://" + missing});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: store sqlite://" + missing + ": database file " + missing +
                       " does not exist; `idem migrate` creates one\n");
  EXPECT_FALSE(std::filesystem::exists(missing));

  // The default store is ./idem.db: missing in the empty working directory too.
  r = Idem({"stuck"});
  ExpectOneLineFailure(r, 1);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem.db")));
}

TEST_F(StepsCliTest, StuckUsageErrors) {
  RunCleanDemo(1);
  for (const char* limit : {"0", "-1", "100001"}) {
    RunResult r = Idem({"stuck", "--store", url_, "--limit", limit});
    ExpectOneLineFailure(r, 2);
    EXPECT_EQ(r.err, "idem: stuck: --limit must be between 1 and 100000\n") << limit;
  }
  ExpectOneLineFailure(Idem({"stuck", "--store", url_, "--limit", "many"}), 2);
  ExpectOneLineFailure(Idem({"stuck", "--store", url_, "--frobnicate"}), 2);
  for (const char* store : {"bogus://x", "sqlite://", "memory://"}) {
    RunResult r = Idem({"stuck", "--store", store});
    ExpectOneLineFailure(r, 2);
  }
  RunResult r = Idem({"stuck", "--store", "memory://"});
  EXPECT_THAT(r.err, HasSubstr("SQL"));
}

TEST_F(StepsCliTest, StuckUnreachableStoreExitsOne) {
  std::filesystem::create_directory(dir_.file("adir.db"));
  ExpectOneLineFailure(Idem({"stuck", "--store", "sqlite://" + dir_.file("adir.db")}), 1);
  ExpectOneLineFailure(
      Idem({"stuck", "--store", "postgres://idem@127.0.0.1:1/none?connect_timeout=2"}), 1);
}

TEST_F(StepsCliTest, StuckHelp) {
  RunResult r = Idem({"stuck", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: idem stuck"));
  EXPECT_THAT(r.out, HasSubstr("--store"));
  EXPECT_THAT(r.out, HasSubstr("--limit"));
  EXPECT_THAT(r.out, HasSubstr("--json"));
  EXPECT_EQ(r.err, "");
}

// --- idem worker -------------------------------------------------------------

// A worker resumes an existing journal: a mistyped SQLite path is an error, not a
// new empty database polled forever.
TEST_F(StepsCliTest, WorkerMissingSqliteFileExitsOneAndCreatesNothing) {
  const std::string missing = dir_.file("typo.db");
  RunResult r = Idem({"worker", "--once", "--store", "sqlite://" + missing, "--refund-channel",
                 "http://127.0.0.1:1"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: store sqlite://" + missing + ": database file " + missing +
                       " does not exist; `idem migrate` creates one\n");
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(StepsCliTest, WorkerOnceWithNothingDue) {
  RunCleanDemo(3);
  RunResult r = Idem({"worker", "--once", "--store", url_, "--refund-channel", "http://127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "resumed 0 operation(s) in " + url_ + "\n");
}

// Two refunds a runner left UNKNOWN at the channel call: for one the channel made
// the reversal and the answer was lost, for the other the request never arrived.
// `idem worker --once` asks the channel before it re-sends: each order ends with
// exactly one reversal, one ledger row and one notification.
TEST_F(StepsCliTest, WorkerOnceResumesDueRefundsExactlyOnce) {
  RunCleanDemo(1);  // the ledger and inbox tables
  ServeProcess channel(dir_.file("channel.err"));
  const std::string listening = channel.StartProgram(
      {IdemBinary(), "demo", "channel", "--listen", "127.0.0.1:0", "--fault-rate", "0"});
  ASSERT_THAT(listening, StartsWith("listening on ")) << channel.stderr_text();
  const std::string channel_url = "http://" + listening.substr(std::string("listening on ").size());
  absl::StatusOr<refund::ChannelClient> client = refund::ChannelClient::FromUrl(channel_url);
  ASSERT_OK(client);

  const std::string sent = "R-cli-000001", unsent = "R-cli-000002";
  OperationState a = RunOnce(RefundWithLostAnswer([&](StepContext& c) {
                               ASSERT_OK(client->Reverse(c.request_id(), sent, 1111));
                             }),
                             "refund:" + sent, OrderJson(sent, 1111), &past_);
  OperationState b = RunOnce(RefundWithLostAnswer([](StepContext&) {}), "refund:" + unsent,
                             OrderJson(unsent, 2222), &past_);
  for (const OperationState* op : {&a, &b}) {
    ASSERT_EQ(op->status, OperationStatus::kPending);
    ASSERT_EQ(op->steps[0].status, StepStatus::kUnknown);
  }

  RunResult r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(nlohmann::json::parse(r.out)["operations"].size(), 2u) << r.out;

  // A channel that cannot be reached: both are tried (the lookup fails), nothing is
  // re-sent, and both stay stuck.
  r = Idem({"worker", "--once", "--store", url_, "--refund-channel", "http://127.0.0.1:1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "resumed 2 operation(s) in " + url_ + "\n");
  for (const std::string& order : {sent, unsent}) {
    OperationState op = Get("refund:" + order);
    EXPECT_EQ(op.status, OperationStatus::kPending) << order;
    EXPECT_EQ(op.steps[0].status, StepStatus::kUnknown) << order;
    EXPECT_EQ(op.steps[0].retry_count, 2) << order;
    EXPECT_EQ(CountRows("demo_refund_ledger", order), 0);
  }
  r = Idem({"stuck", "--store", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["operations"].size(), 2u) << r.out;

  // The demo's retry policy waits at most 200 ms on the real clock: once both are
  // due, the real channel.
  EXPECT_TRUE(WaitUntil([&] {
    for (const std::string& order : {sent, unsent}) {
      if (Get("refund:" + order).next_retry_at > absl::Now()) return false;
    }
    return true;
  })) << "the retries never came due";
  r = Idem({"worker", "--once", "--store", url_, "--refund-channel", channel_url});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "resumed 2 operation(s) in " + url_ + "\n");
  for (const std::string& order : {sent, unsent}) {
    OperationState op = Get("refund:" + order);
    EXPECT_EQ(op.status, OperationStatus::kSuccess) << order << ": " << op.last_error;
    absl::StatusOr<std::vector<refund::Reversal>> reversals = client->LookupOrder(order);
    ASSERT_OK(reversals);
    EXPECT_EQ(reversals->size(), 1u) << order;
    EXPECT_EQ(CountRows("demo_refund_ledger", order), 1) << order;
    EXPECT_EQ(CountRows("demo_refund_inbox", order), 1) << order;
  }
  r = Idem({"stuck", "--store", url_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no stuck operations in " + url_ + "\n");

  // Final operations are not resumed again.
  r = Idem({"worker", "--once", "--store", url_, "--refund-channel", channel_url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "resumed 0 operation(s) in " + url_ + "\n");
  EXPECT_EQ(channel.Stop(SIGTERM, kGenerousDeadline), 0) << channel.stderr_text();
}

// The worker as a daemon: it resumes a due refund on its own, and SIGTERM stops it
// with exit 0 (that a stop does not wait out the interval is WorkerStopsOnSigint's).
TEST_F(StepsCliTest, WorkerDaemonResumesAndStopsOnSigterm) {
  RunCleanDemo(1);
  ServeProcess channel(dir_.file("channel.err"));
  const std::string listening = channel.StartProgram(
      {IdemBinary(), "demo", "channel", "--listen", "127.0.0.1:0", "--fault-rate", "0"});
  ASSERT_THAT(listening, StartsWith("listening on ")) << channel.stderr_text();
  const std::string channel_url = "http://" + listening.substr(std::string("listening on ").size());

  const std::string order = "R-cli-000003";
  ASSERT_EQ(RunOnce(RefundWithLostAnswer([](StepContext&) {}), "refund:" + order,
                    OrderJson(order, 3333), &past_)
                .status,
            OperationStatus::kPending);

  ServeProcess worker(dir_.file("worker.err"));
  ASSERT_TRUE(worker.Spawn({IdemBinary(), "worker", "--store", url_, "--refund-channel",
                            channel_url, "--interval", "50ms"}));
  OperationState op;
  EXPECT_TRUE(WaitUntil([&] {
    op = Get("refund:" + order);
    return op.status == OperationStatus::kSuccess;
  })) << OperationStatusName(op.status)
      << "\n"
      << worker.stderr_text();
  EXPECT_EQ(CountRows("demo_refund_ledger", order), 1);
  EXPECT_EQ(CountRows("demo_refund_inbox", order), 1);

  ASSERT_TRUE(worker.WaitForStderr("worker: resuming", kGenerousDeadline)) << worker.stderr_text();
  EXPECT_EQ(worker.Stop(SIGTERM, kGenerousDeadline), 0) << worker.stderr_text();
  EXPECT_THAT(worker.stderr_text(), HasSubstr("1 operation(s) resumed"));
  EXPECT_EQ(channel.Stop(SIGTERM, kGenerousDeadline), 0) << channel.stderr_text();
}

// A stop does not wait out the interval: with an hour between passes, only a stop
// that wakes the waiting worker exits within Stop's deadline.
TEST_F(StepsCliTest, WorkerStopsOnSigint) {
  RunCleanDemo(1);
  ServeProcess worker(dir_.file("worker.err"));
  ASSERT_TRUE(worker.Spawn({IdemBinary(), "worker", "--store", url_, "--refund-channel",
                            "http://127.0.0.1:1", "--interval", "1h"}));
  ASSERT_TRUE(worker.WaitForStderr("worker: resuming", kGenerousDeadline)) << worker.stderr_text();
  EXPECT_EQ(worker.Stop(SIGINT, kGenerousDeadline), 0) << worker.stderr_text();
}

TEST_F(StepsCliTest, WorkerUsageErrors) {
  RunCleanDemo(1);
  const std::vector<std::string> base = {"worker", "--once", "--store", url_};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::string channel = "http://127.0.0.1:1";

  RunResult r = Idem(base);  // no operation types to resume
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("--refund-channel"));

  for (const char* interval : {"0s", "soon", "-1s", "5", ""}) {
    r = Idem(with({"--refund-channel", channel, "--interval", interval}));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr("--interval")) << interval;
  }
  for (const char* batch : {"0", "10001", "lots"}) {
    r = Idem(with({"--refund-channel", channel, "--batch", batch}));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr("--batch")) << batch;
  }
  for (const char* bad : {"ftp://x", "127.0.0.1:1", "http://", "http://h:0", "http://h:1/path"}) {
    r = Idem(with({"--refund-channel", bad}));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr("--refund-channel")) << bad;
  }
  r = Idem(with({"--refund-channel", channel, "--frobnicate"}));
  ExpectOneLineFailure(r, 2);
  for (const char* store : {"bogus://x", "memory://"}) {
    r = Idem({"worker", "--once", "--store", store, "--refund-channel", channel});
    ExpectOneLineFailure(r, 2);
  }
}

TEST_F(StepsCliTest, WorkerUnreachableStoreExitsOne) {
  std::filesystem::create_directory(dir_.file("adir.db"));
  ExpectOneLineFailure(Idem({"worker", "--once", "--store", "sqlite://" + dir_.file("adir.db"),
                             "--refund-channel", "http://127.0.0.1:1"}),
                       1);
  ExpectOneLineFailure(
      Idem({"worker", "--once", "--store", "postgres://idem@127.0.0.1:1/none?connect_timeout=2",
            "--refund-channel", "http://127.0.0.1:1"}),
      1);
}

TEST_F(StepsCliTest, WorkerHelp) {
  RunResult r = Idem({"worker", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: idem worker"));
  for (const char* flag : {"--store", "--refund-channel", "--interval", "--batch", "--once"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace idem
