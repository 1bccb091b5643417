// Crash tests of the step machine: a child process runs a batch of
// three-step operations and is SIGKILLed at the Nth hit of a step failpoint —
// before an external call, after it but before its journal update, after the
// journal update, and around compensations. The parent then resumes every
// operation (ResumeDue once the dead runner's lease has ended, then Run) and
// checks that no external effect happened twice for one request_id, no done step
// was redone, no undone step was skipped, and every operation ended as expected.
//
// The operation: (1) an external step whose "external system" is a SQL table
// written in transactions of its own (it outlives the child, as a real channel
// would), (2) a local step writing a ledger row through ctx.tx(), (3) a local
// step writing another ledger row — or, in the compensation variant, failing for
// good so the operation compensates steps 2 and 1. Every call of a step function
// (execute, query, compensate) is also appended to a log file, which survives the
// SIGKILL, so the parent can count exactly how often each ran.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "conformance/store_factory.h"
#include "core/failpoint.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;

constexpr int kOps = 3;
constexpr int kSteps = 3;
constexpr char kType[] = "crash_refund";
constexpr char kInput[] = "{\"amount\":100}";

std::string BizKey(int i) { return "OP-" + std::to_string(i); }

// Column values come back as text or blobs, and counts as integers or text,
// depending on the backend.
std::string Str(const Value& v) {
  if (v.is_text()) return v.as_text();
  if (v.is_blob()) return v.as_blob();
  return std::string();
}
int64_t Int(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_text()) return std::stoll(v.as_text());
  return -1;
}

enum class Variant { kSuccess, kCompensate };

// ---------------------------------------------------------------------------
// The model: which failpoints one operation passes, in order, and what the
// journal shows when the process dies at one of them.

struct Hit {
  std::string failpoint;
  int step;  // the step being executed or compensated
};

std::vector<Hit> HitsOfOneOperation(Variant v) {
  std::vector<Hit> hits;
  for (int s = 1; s <= kSteps; ++s) {
    hits.push_back({"steps.before_call", s});
    hits.push_back({"steps.after_call", s});
    // Step 3 of the compensation variant fails: no journal update of a success.
    if (v == Variant::kSuccess || s < kSteps) hits.push_back({"steps.after_journal", s});
  }
  if (v == Variant::kCompensate) {
    for (int s : {2, 1}) {  // reverse order; step 3 failed and has nothing to undo
      hits.push_back({"steps.before_compensate", s});
      // External compensations: between the call and its journal update.
      if (s == 1) hits.push_back({"steps.after_compensate_call", s});
      hits.push_back({"steps.after_compensate", s});
    }
  }
  return hits;
}

struct KillPoint {
  int op = 0;        // index of the operation the child died in
  int position = 0;  // index into HitsOfOneOperation
  Hit hit;
};

// Where the Nth hit of `failpoint` lands when the child runs kOps operations one
// after another; nullopt when the child passes it fewer than N times.
std::optional<KillPoint> KillPointOf(Variant v, const std::string& failpoint, int n) {
  const std::vector<Hit> hits = HitsOfOneOperation(v);
  int seen = 0;
  for (int op = 0; op < kOps; ++op) {
    for (int p = 0; p < static_cast<int>(hits.size()); ++p) {
      if (hits[p].failpoint == failpoint && ++seen == n) return KillPoint{op, p, hits[p]};
    }
  }
  return std::nullopt;
}

// The journal of the operation the child died in, as the model predicts it.
struct JournalAtKill {
  OperationStatus status = OperationStatus::kPending;
  std::vector<StepStatus> steps = std::vector<StepStatus>(kSteps, StepStatus::kPending);
  int external_effects = 0;  // rows of the external system for this operation
};

JournalAtKill ExpectedAtKill(Variant v, const KillPoint& kill) {
  const std::vector<Hit> hits = HitsOfOneOperation(v);
  JournalAtKill j;
  for (int p = 0; p <= kill.position; ++p) {
    const Hit& h = hits[p];
    StepStatus& st = j.steps[h.step - 1];
    if (h.failpoint == "steps.before_call") {
      // An external step is journaled UNKNOWN before its call ("in flight").
      if (h.step == 1) st = StepStatus::kUnknown;
    } else if (h.failpoint == "steps.after_call") {
      if (h.step == 1) j.external_effects = 1;
    } else if (h.failpoint == "steps.after_journal") {
      st = StepStatus::kSuccess;
    } else {
      // A compensation hit: step 3's final failure was journaled before it.
      j.steps[kSteps - 1] = StepStatus::kFailed;
      j.status = OperationStatus::kCompensating;
      if (h.failpoint == "steps.after_compensate") st = StepStatus::kCompensated;
    }
  }
  return j;
}

OperationStatus FinalStatus(Variant v) {
  return v == Variant::kSuccess ? OperationStatus::kSuccess : OperationStatus::kCompensated;
}

std::vector<StepStatus> FinalSteps(Variant v) {
  if (v == Variant::kSuccess) return std::vector<StepStatus>(kSteps, StepStatus::kSuccess);
  return {StepStatus::kCompensated, StepStatus::kCompensated, StepStatus::kFailed};
}

std::string Names(const std::vector<StepStatus>& steps) {
  std::string out;
  for (StepStatus s : steps) {
    if (!out.empty()) out += ",";
    out += std::string(StepStatusName(s));
  }
  return out;
}
std::string Names(const std::vector<StepRecord>& steps) {
  std::vector<StepStatus> statuses;
  for (const StepRecord& r : steps) statuses.push_back(r.status);
  return Names(statuses);
}

// ---------------------------------------------------------------------------
// The operation type and its side effects.

// Appends "<biz_key> <step> <what>" to the call log: one write(2) with O_APPEND,
// which the kernel keeps when the process is killed right after.
void Log(const std::string& path, std::string_view biz_key, int step, const char* what) {
  const std::string line = std::string(biz_key) + " " + std::to_string(step) + " " + what + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!write(fd, line.data(), line.size());
  close(fd);
}

// Runs `sql` in a transaction of its own, committed at once: the "external
// system" shares the database only for convenience, never the runner's transaction.
absl::StatusOr<Rows> Autocommit(Store& store, const std::string& sql, std::vector<Value> params,
                                bool query) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  Rows rows;
  if (query) {
    IDEM_ASSIGN_OR_RETURN(rows, tx->Query(sql, params));
  } else {
    IDEM_RETURN_IF_ERROR(tx->Exec(sql, params).status());
  }
  IDEM_RETURN_IF_ERROR(tx->Commit());
  return rows;
}

OperationType CrashType(Store& store, const std::string& log, Variant v) {
  // Tiny delays: no retryable failure is expected, but one must not cost seconds.
  const RetryPolicy fast{.initial_delay = absl::Milliseconds(1),
                         .max_delay = absl::Milliseconds(10),
                         .max_attempts = 3};
  Step external{
      .name = "reserve",
      .external = true,
      .execute = [&store, log](StepContext& c) -> absl::StatusOr<std::string> {
        Log(log, c.biz_key(), 1, "send");
        IDEM_RETURN_IF_ERROR(
            Autocommit(store,
                       "INSERT INTO ext_effects (request_id, biz_key, undone) VALUES (?, ?, 0)",
                       {Value(c.request_id()), Value(c.biz_key())}, false)
                .status());
        return "sent:" + std::string(c.request_id());
      },
      .query = [&store, log](StepContext& c) -> absl::StatusOr<QueryResult> {
        Log(log, c.biz_key(), 1, "query");
        IDEM_ASSIGN_OR_RETURN(
            Rows rows, Autocommit(store, "SELECT COUNT(*) FROM ext_effects WHERE request_id = ?",
                                  {Value(c.request_id())}, true));
        if (Int(rows.rows.at(0).at(0)) > 0) {
          return QueryResult{QueryAnswer::kDone, "sent:" + std::string(c.request_id())};
        }
        return QueryResult{QueryAnswer::kNotFound, ""};
      },
      .compensate = [&store, log](StepContext& c) -> absl::Status {
        Log(log, c.biz_key(), 1, "undo");
        // Counts undos rather than setting a flag, so a second one would show.
        return Autocommit(store, "UPDATE ext_effects SET undone = 1 WHERE request_id = ?",
                          {Value(c.request_id())}, false)
            .status();
      },
      .retry = fast,
  };
  Step ledger{
      .name = "ledger",
      .execute = [log](StepContext& c) -> absl::StatusOr<std::string> {
        Log(log, c.biz_key(), 2, "execute");
        IDEM_RETURN_IF_ERROR(
            c.tx()
                ->Exec("INSERT INTO ledger (biz_key, step_seq, kind) VALUES (?, 2, 'charge')",
                       {Value(c.biz_key())})
                .status());
        return "ledger:" + std::string(c.biz_key());
      },
      .compensate = [log](StepContext& c) -> absl::Status {
        Log(log, c.biz_key(), 2, "compensate");
        return c.tx()
            ->Exec("INSERT INTO ledger (biz_key, step_seq, kind) VALUES (?, 2, 'reversal')",
                   {Value(c.biz_key())})
            .status();
      },
      .retry = fast,
  };
  Step notify{
      .name = "notify",
      .execute = [log, v](StepContext& c) -> absl::StatusOr<std::string> {
        Log(log, c.biz_key(), 3, "execute");
        // Written either way: on the final failure it must be rolled back with the step.
        IDEM_RETURN_IF_ERROR(
            c.tx()
                ->Exec("INSERT INTO ledger (biz_key, step_seq, kind) VALUES (?, 3, 'charge')",
                       {Value(c.biz_key())})
                .status());
        if (v == Variant::kCompensate) return absl::InvalidArgumentError("account closed");
        return std::string("notified");
      },
      .retry = fast,
  };
  return OperationType{.name = kType, .steps = {external, ledger, notify}};
}

RunRequest RequestFor(int i) { return {.type = kType, .biz_key = BizKey(i), .input = kInput}; }

// Forks a child that arms `failpoint` with kill@`hit` and runs every operation;
// returns its wait status. Exit codes: 0 all ran as expected, 3 store, 4 register,
// 5 Run failed, 6 an operation ended with an unexpected status.
int RunChild(const testing::Backend& backend, const std::string& url, const std::string& log,
             Variant v, const std::string& failpoint, int hit) {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    ArmFailpoint(failpoint, "kill@" + std::to_string(hit));
    absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(backend, url);
    if (!store.ok()) _exit(3);
    StepRunner runner(**store);
    if (!runner.Register(CrashType(**store, log, v)).ok()) _exit(4);
    for (int i = 0; i < kOps; ++i) {
      absl::StatusOr<OperationState> op = runner.Run(RequestFor(i));
      if (!op.ok()) {
        fprintf(stderr, "child: Run(%s): %s\n", BizKey(i).c_str(), op.status().ToString().c_str());
        _exit(5);
      }
      if (op->status != FinalStatus(v)) _exit(6);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// ---------------------------------------------------------------------------

struct CrashCase {
  Variant variant;
  std::string failpoint;
  int hit;  // the child dies at this hit of the failpoint (if it gets that far)
};

std::string VariantName(Variant v) { return v == Variant::kSuccess ? "success" : "compensate"; }

// Failure messages show the case, not the struct's bytes.
void PrintTo(const CrashCase& c, std::ostream* os) {
  *os << VariantName(c.variant) << " " << c.failpoint << " kill@" << c.hit;
}

class StepsCrashTest : public ::testing::TestWithParam<std::tuple<testing::Backend, CrashCase>> {
 protected:
  const testing::Backend& Backend() const { return std::get<0>(GetParam()); }
  const CrashCase& Case() const { return std::get<1>(GetParam()); }
};

TEST_P(StepsCrashTest, KilledRunnerThenResumeDoesEveryStepOnce) {
  const Variant v = Case().variant;
  testing::TempDir dir;
  const std::string url = Backend().url(dir.path());
  const std::string log = dir.file("calls.log");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(Backend(), url);
    ASSERT_OK(store);
    std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
    // No unique keys on purpose: a duplicate effect shows as a second row.
    ASSERT_OK(
        tx->Exec("CREATE TABLE ext_effects (request_id VARCHAR(64) NOT NULL,"
                 " biz_key VARCHAR(64) NOT NULL, undone INTEGER NOT NULL)"));
    ASSERT_OK(
        tx->Exec("CREATE TABLE ledger (biz_key VARCHAR(64) NOT NULL,"
                 " step_seq INTEGER NOT NULL, kind VARCHAR(16) NOT NULL)"));
    ASSERT_OK(tx->Commit());
  }

  const std::optional<KillPoint> kill = KillPointOf(v, Case().failpoint, Case().hit);
  const int status = RunChild(Backend(), url, log, v, Case().failpoint, Case().hit);
  if (kill.has_value()) {
    ASSERT_TRUE(WIFSIGNALED(status)) << "child was not killed; wait status " << status;
    ASSERT_EQ(WTERMSIG(status), SIGKILL);
  } else {
    ASSERT_TRUE(WIFEXITED(status)) << "child died; wait status " << status;
    ASSERT_EQ(WEXITSTATUS(status), 0) << "the child passed " << Case().failpoint << " fewer than "
                                      << Case().hit << " times but did not finish cleanly";
  }

  // The parent runs an hour later than the child: its 30 s leases have ended.
  absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(Backend(), url);
  ASSERT_OK(store);
  testing::FakeClock clock(absl::Now() + absl::Hours(1));
  StepRunner runner(**store, StepRunnerOptions{.clock = &clock});
  ASSERT_OK(runner.Register(CrashType(**store, log, v)));

  // What the child left behind, exactly as the model says.
  const int killed_op = kill.has_value() ? kill->op : kOps;
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE("at the kill: " + BizKey(i));
    absl::StatusOr<OperationState> op = runner.Get(BizKey(i));
    if (i > killed_op) {
      EXPECT_THAT(op, StatusIs(absl::StatusCode::kNotFound));
      continue;
    }
    ASSERT_OK(op);
    if (i < killed_op) {
      EXPECT_EQ(OperationStatusName(op->status), OperationStatusName(FinalStatus(v)));
      EXPECT_EQ(Names(op->steps), Names(FinalSteps(v)));
      continue;
    }
    const JournalAtKill expected = ExpectedAtKill(v, *kill);
    EXPECT_EQ(OperationStatusName(op->status), OperationStatusName(expected.status));
    EXPECT_EQ(Names(op->steps), Names(expected.steps))
        << "killed at " << kill->hit.failpoint << " of step " << kill->hit.step;
    ASSERT_EQ(op->steps.size(), static_cast<size_t>(kSteps));
    std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
    absl::StatusOr<Rows> rows = tx->Query("SELECT COUNT(*) FROM ext_effects WHERE request_id = ?",
                                          {Value(op->steps[0].request_id)});
    ASSERT_OK(rows);
    EXPECT_EQ(Int(rows->rows.at(0).at(0)), expected.external_effects);
  }

  // Worker passes take over exactly the operation the dead runner held. The
  // server rolls back the child's open transaction once it sees the connection
  // close; until then ResumeDue skips the still-locked row (SKIP LOCKED), so a
  // pass that finds nothing is repeated until it does (how soon is the server's).
  const int expected_resumed = kill.has_value() ? 1 : 0;
  int resumed = 0;
  absl::Status pass_error;
  EXPECT_TRUE(::idem::testing::WaitUntil([&] {
    absl::StatusOr<int> n = runner.ResumeDue();
    if (!n.ok()) {
      pass_error = n.status();
      return true;
    }
    resumed += *n;
    return resumed >= expected_resumed;
  })) << "the dead runner's operation was never resumed";
  ASSERT_OK(pass_error);
  EXPECT_EQ(resumed, expected_resumed);
  if (kill.has_value()) {
    absl::StatusOr<OperationState> op = runner.Get(BizKey(kill->op));
    ASSERT_OK(op);
    EXPECT_EQ(OperationStatusName(op->status), OperationStatusName(FinalStatus(v)));
  }
  // Then every operation is run again (the ones after the kill for the first time).
  std::vector<OperationState> finals;
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE("after the resume: " + BizKey(i));
    absl::StatusOr<OperationState> op = runner.Run(RequestFor(i));
    ASSERT_OK(op);
    EXPECT_FALSE(op->busy);
    EXPECT_TRUE(IsFinal(op->status));
    EXPECT_EQ(OperationStatusName(op->status), OperationStatusName(FinalStatus(v)));
    EXPECT_EQ(Names(op->steps), Names(FinalSteps(v))) << op->last_error;
    ASSERT_EQ(op->steps.size(), static_cast<size_t>(kSteps));
    const std::string& request_id = op->steps[0].request_id;
    EXPECT_EQ(request_id.size(), 37u) << request_id;
    EXPECT_TRUE(op->steps[1].request_id.empty());
    if (v == Variant::kSuccess) {
      EXPECT_EQ(op->steps[0].payload, "sent:" + request_id);
      EXPECT_EQ(op->steps[1].payload, "ledger:" + BizKey(i));
      EXPECT_EQ(op->steps[2].payload, "notified");
    }
    for (int s = 0; s < kSteps; ++s) {
      // Only step 3's final failure counts as a failed attempt; a crash is none.
      const int retries = (v == Variant::kCompensate && s == kSteps - 1) ? 1 : 0;
      EXPECT_EQ(op->steps[s].retry_count, retries) << "step " << s + 1;
    }
    finals.push_back(*std::move(op));
  }
  ASSERT_EQ(finals.size(), static_cast<size_t>(kOps));

  std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
  // The external system: one effect per request_id, undone once when compensated.
  {
    absl::StatusOr<Rows> rows =
        tx->Query("SELECT biz_key, request_id, undone FROM ext_effects ORDER BY biz_key");
    ASSERT_OK(rows);
    std::vector<std::string> got, want;
    for (const auto& row : rows->rows) {
      got.push_back(Str(row[0]) + " " + Str(row[1]) + " undone=" + std::to_string(Int(row[2])));
    }
    for (int i = 0; i < kOps; ++i) {
      want.push_back(BizKey(i) + " " + finals[i].steps[0].request_id +
                     " undone=" + (v == Variant::kCompensate ? "1" : "0"));
    }
    EXPECT_EQ(got, want);
  }
  // The ledger: every local effect once; step 3's failed writes rolled back.
  {
    absl::StatusOr<Rows> rows = tx->Query(
        "SELECT biz_key, step_seq, kind, COUNT(*) FROM ledger GROUP BY biz_key, step_seq, kind");
    ASSERT_OK(rows);
    std::map<std::string, int64_t> got, want;
    for (const auto& row : rows->rows) {
      got[Str(row[0]) + " " + std::to_string(Int(row[1])) + " " + Str(row[2])] = Int(row[3]);
    }
    for (int i = 0; i < kOps; ++i) {
      want[BizKey(i) + " 2 charge"] = 1;
      if (v == Variant::kSuccess) want[BizKey(i) + " 3 charge"] = 1;
      if (v == Variant::kCompensate) want[BizKey(i) + " 2 reversal"] = 1;
    }
    EXPECT_EQ(got, want);
  }
  tx->Rollback();

  // Every call of a step function, counted. Each runs once, except: a local step
  // killed after its call (before its transaction committed) runs once more, and
  // an external step killed around its call is asked (query) once, never re-sent.
  {
    std::map<std::string, int> got, want;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) ++got[line];
    for (int i = 0; i < kOps; ++i) {
      const std::string k = BizKey(i);
      const bool here = kill.has_value() && kill->op == i;
      const bool around_external_call =
          here && kill->hit.step == 1 &&
          (kill->hit.failpoint == "steps.before_call" || kill->hit.failpoint == "steps.after_call");
      want[k + " 1 send"] = 1;
      if (around_external_call) want[k + " 1 query"] = 1;
      for (int s : {2, 3}) {
        const bool rerun = here && kill->hit.step == s && kill->hit.failpoint == "steps.after_call";
        want[k + " " + std::to_string(s) + " execute"] = rerun ? 2 : 1;
      }
      if (v == Variant::kCompensate) {
        // Killed after the undo call, before its journal update: the undo is
        // called again (steps.h: compensate must be idempotent; this one is).
        const bool undo_again = here && kill->hit.failpoint == "steps.after_compensate_call";
        want[k + " 1 undo"] = undo_again ? 2 : 1;
        want[k + " 2 compensate"] = 1;
      }
    }
    EXPECT_EQ(got, want);
  }

  // Nothing is left for a person or a worker.
  absl::StatusOr<std::vector<OperationState>> stuck = runner.ListStuck();
  ASSERT_OK(stuck);
  EXPECT_TRUE(stuck->empty());
  absl::StatusOr<int> again = runner.ResumeDue();
  ASSERT_OK(again);
  EXPECT_EQ(*again, 0);
}

std::vector<CrashCase> Cases() {
  std::vector<CrashCase> out;
  // Hits 1–3 land in steps 1, 2 and 3 of the first operation (the compensation
  // variant passes after_journal only twice per operation: hit 3 is the second
  // operation's step 1; its compensations run step 2 then step 1).
  for (const char* fp : {"steps.before_call", "steps.after_call", "steps.after_journal"}) {
    for (int n : {1, 2, 3}) {
      out.push_back({Variant::kSuccess, fp, n});
      out.push_back({Variant::kCompensate, fp, n});
    }
  }
  for (const char* fp : {"steps.before_compensate", "steps.after_compensate"}) {
    for (int n : {1, 2, 3}) out.push_back({Variant::kCompensate, fp, n});
  }
  // Only the external step's undo passes it: once per operation.
  for (int n : {1, 2, 4}) out.push_back({Variant::kCompensate, "steps.after_compensate_call", n});
  // A kill in a later operation, and one the child never reaches (it passes each
  // forward failpoint 3 times per operation, each compensation one twice).
  out.push_back({Variant::kSuccess, "steps.after_call", 8});
  out.push_back({Variant::kSuccess, "steps.after_journal", 10});
  out.push_back({Variant::kCompensate, "steps.after_compensate", 7});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryStepFailpoint, StepsCrashTest,
                         ::testing::Combine(::testing::ValuesIn(testing::SqlBackends()),
                                            ::testing::ValuesIn(Cases())),
                         [](const auto& info) {
                           const CrashCase& c = std::get<1>(info.param);
                           return std::get<0>(info.param).name + "_" + VariantName(c.variant) +
                                  "_" + c.failpoint.substr(6) + "_hit" + std::to_string(c.hit);
                         });

}  // namespace
}  // namespace idem
