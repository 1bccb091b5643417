// Steps: multi-step operations where every step happens once.
//
// An operation type declares ordered steps. StepRunner::Run(type, biz_key, input)
// keeps one journal row per step — (biz_key, step_seq, status, request_id,
// payload, retry_count, next_retry_at, updated_at) — in the store's database, so a
// partial failure plus a retry never redoes a done step and never skips an undone
// one:
//
//   idem::OperationType refund{.name = "refund", .steps = {
//       {.name = "channel_reversal", .external = true,
//        .execute = [&](idem::StepContext& c) { return channel.Reverse(c.request_id()); },
//        .query = [&](idem::StepContext& c) { return channel.Lookup(c.request_id()); },
//        .compensate = [&](idem::StepContext& c) { return channel.Cancel(c.request_id()); }},
//       {.name = "ledger",
//        .execute = [&](idem::StepContext& c) -> absl::StatusOr<std::string> {
//          IDEM_RETURN_IF_ERROR(c.tx()->Exec("INSERT INTO ledger ...", {...}));
//          return std::string();
//        }},
//   }};
//   idem::StepRunner runner(**store);
//   IDEM_RETURN_IF_ERROR(runner.Register(refund));
//   auto op = runner.Run({.type = "refund", .biz_key = "R-1", .input = order_json});
//
// Local steps (external = false) get a Transaction: their writes and their
// journal update commit together. External steps get a request_id derived from
// (biz_key, step_seq), persisted before the first call; a re-run asks `query`
// first and re-sends only on kNotFound. A call whose outcome was not observed (a
// timeout, a lost response) leaves the step UNKNOWN — never SUCCESS or FAILED by
// guess. Retryable failures wait `next_retry_at` (the step's RetryPolicy);
// exhausted or final failures compensate the done steps in reverse order, and a
// compensation that cannot finish leaves the operation COMPENSATION_REQUIRED for a
// person. A Worker resumes due operations after a crash.
//
// Needs a SQL store (sqlite://, postgres://, mysql://); memory:// is refused.
//
// Thread safety: a StepRunner is safe for concurrent use once its types are
// registered (Register is not concurrent with Run). Steps of one operation run
// one at a time, on the calling thread; different operations may run in
// parallel, in this process or in others sharing the database.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/retry.h"
#include "idem/store.h"

namespace idem {

// A step's journal status.
enum class StepStatus {
  kPending,      // not tried yet
  kSuccess,      // done; skipped by every re-run
  kFailed,       // the last attempt failed: retried at next_retry_at, or for good
                 // (next_retry_at unset) and the operation compensates
  kUnknown,      // an external call whose outcome was not observed; `query` resolves it
  kCompensated,  // done, then undone by `compensate`
};

// "PENDING", "SUCCESS", "FAILED", "UNKNOWN", "COMPENSATED".
std::string_view StepStatusName(StepStatus status);

// An operation's status. SUCCESS, COMPENSATED and COMPENSATION_REQUIRED are final.
enum class OperationStatus {
  kPending,               // steps still to run (now, or at next_retry_at)
  kSuccess,               // every step SUCCESS
  kCompensating,          // a step failed for good; undoing the done steps
  kCompensated,           // failed, and every done step was undone (or nothing was done)
  kCompensationRequired,  // a compensation could not finish: a person must act (it
                          // keeps its object lock until StepRunner::Resolve)
};

// "PENDING", "SUCCESS", "COMPENSATING", "COMPENSATED", "COMPENSATION_REQUIRED".
std::string_view OperationStatusName(OperationStatus status);

struct OperationState;
// Why a person should look at `op`, as `idem stuck` and the console say it:
// "compensation required", "step N outcome unknown", "waiting for object lock held
// by BIZ_KEY" (the holder's bytes as stored), "due, no runner", or "waiting".
std::string StuckReason(const OperationState& op, absl::Time now);

// True for SUCCESS, COMPENSATED and COMPENSATION_REQUIRED.
bool IsFinal(OperationStatus status);

// What an external system says about a request_id.
enum class QueryAnswer {
  kDone,      // the effect happened (`payload`: what to store as the step's result)
  kNotFound,  // it did not happen: the runner may (re-)send
  kUnknown,   // cannot tell yet: retried later, never re-sent
};

struct QueryResult {
  QueryAnswer answer = QueryAnswer::kUnknown;
  std::string payload;
};

struct StepContextBuilder;  // src/core/step_runner.cc

// What a step's functions see. Valid only during the call.
class StepContext {
 public:
  std::string_view biz_key() const { return biz_key_; }
  // 1-based position of the step in its operation type.
  int step_seq() const { return step_seq_; }
  // The deterministic request id of this step: "idem-" + 32 hex digits of
  // SHA-256(biz_key, step_seq). The same on every attempt, every process.
  std::string_view request_id() const { return request_id_; }
  // The operation's input bytes, as given to the first Run.
  std::string_view input() const { return input_; }
  // 1 on the first attempt of this call (execute, query or compensate).
  int attempt() const { return attempt_; }
  // compensate: the step's stored result. Otherwise empty.
  std::string_view payload() const { return payload_; }
  // The stored result of an earlier SUCCESS step (1-based), or nullptr.
  const std::string* result_of(int step_seq) const;
  // Local steps: the transaction their journal update commits in. External
  // steps: nullptr (no transaction is held across an external call).
  Transaction* tx() const { return tx_; }

 private:
  friend struct StepContextBuilder;
  std::string biz_key_;
  int step_seq_ = 0;
  std::string request_id_;
  std::string input_;
  int attempt_ = 1;
  std::string payload_;
  const std::vector<std::optional<std::string>>* results_ = nullptr;
  Transaction* tx_ = nullptr;
};

// One step of an operation type.
//
// execute: does the effect and returns the bytes to store as the step's result.
//   Its error is classified by ClassifyStatus: retryable ones are retried by
//   `retry`; for an external step kDeadlineExceeded and kUnavailable mean "the
//   outcome was not observed" and leave the step UNKNOWN, and any failed external
//   attempt is followed by `query` before a re-send. Any other code is a final
//   failure: no more attempts, the operation compensates — so an external step
//   returns a final code only when the external system surely did nothing.
// query (external steps, required): what the external system knows of
//   ctx.request_id(). An error counts as kUnknown.
// compensate (optional): undoes a SUCCESS step — and, for an external step, one
//   left UNKNOWN when the operation gives up, so it must treat "no such effect"
//   as done. Retried by `retry`, and called again after a crash between the call
//   and its journal update: it must be idempotent (cancel by request_id). A step
//   without it needs no undo (it stays SUCCESS when the operation compensates);
//   an external step left UNKNOWN without it makes the operation
//   COMPENSATION_REQUIRED.
struct Step {
  std::string name;  // [A-Za-z0-9_.-], 1–64 bytes
  bool external = false;
  std::function<absl::StatusOr<std::string>(StepContext&)> execute;
  std::function<absl::StatusOr<QueryResult>(StepContext&)> query;
  std::function<absl::Status(StepContext&)> compensate;
  RetryPolicy retry;
};

struct OperationType {
  std::string name;  // [A-Za-z0-9_.-], 1–64 bytes
  std::vector<Step> steps;  // 1–100 steps, run in this order
};

// One journal row.
struct StepRecord {
  int step_seq = 0;
  std::string name;
  StepStatus status = StepStatus::kPending;
  std::string request_id;  // external steps; empty for local ones
  std::string payload;     // the step's result once SUCCESS
  int retry_count = 0;     // failed attempts so far (execute, query and compensate)
  absl::Time next_retry_at = absl::InfinitePast();  // InfinitePast: not scheduled
  absl::Time updated_at = absl::InfinitePast();
  std::string last_error;
};

// An operation and its journal.
struct OperationState {
  std::string biz_key;
  std::string type;
  std::string object_key;  // the per-object lock it takes; empty: none
  OperationStatus status = OperationStatus::kPending;
  std::string input;
  absl::Time next_retry_at = absl::InfinitePast();  // when a worker may resume it
  absl::Time lease_until = absl::InfinitePast();    // a runner holds it until then
  std::string blocked_by;  // PENDING on the object lock: the holder's biz_key
  std::string last_error;
  absl::Time created_at = absl::InfinitePast();
  absl::Time updated_at = absl::InfinitePast();
  std::vector<StepRecord> steps;
  // Set by Run/Resume only: another runner holds the operation's lease and this
  // call did nothing (the state is as that runner last wrote it).
  bool busy = false;
};

struct RunRequest {
  std::string type;        // a registered OperationType
  std::string biz_key;     // the operation's business key: opaque bytes, 1-255
  std::string input;       // bytes handed to every step; fixed by the first Run
  std::string object_key;  // optional per-object lock (e.g. a refund and an order change)
};

struct StepRunnerOptions {
  const Clock* clock = Clock::Real();  // not owned
  Random* random = Random::Default();  // not owned; backoff jitter
  // How long a runner owns an operation without writing to it. A runner that
  // dies is replaced (by a Worker) once its lease ends; keep every external call
  // shorter than this.
  absl::Duration lease = absl::Seconds(30);
  // Run() sleeps through retry delays and object-lock waits (up to lock_wait) and
  // returns a final state when it can. false: it returns PENDING at the first
  // wait and a Worker finishes the operation.
  bool wait_for_retries = true;
  // An operation waiting for an object lock is retried after this.
  absl::Duration lock_retry = absl::Milliseconds(200);
  // Run() gives up waiting for an object lock after this (the operation stays
  // PENDING; a Worker resumes it).
  absl::Duration lock_wait = absl::Seconds(10);
};

// Counters of one StepRunner since it was made (for metrics).
struct StepStats {
  int64_t steps_succeeded = 0;       // steps that became SUCCESS (executed or found by query)
  int64_t step_retries = 0;          // failed attempts scheduled for another try
  int64_t steps_unknown = 0;         // attempts whose outcome was not observed (UNKNOWN)
  int64_t queries = 0;               // query calls before a re-send
  int64_t compensations = 0;         // steps undone
  int64_t operations_succeeded = 0;
  int64_t operations_compensated = 0;
  int64_t operations_compensation_required = 0;
};

class StepRunner {
 public:
  // `store` must be a SQL store and outlive the runner.
  explicit StepRunner(Store& store, StepRunnerOptions options = {});
  ~StepRunner();

  // Adds an operation type. Errors: kInvalidArgument naming the bad name, an
  // empty or oversized step list, a step without `execute`, an external step
  // without `query`, or an invalid RetryPolicy; kAlreadyExists for a type name
  // registered twice. REQUIRES: no Run/Resume in flight.
  absl::Status Register(OperationType type);

  // Creates the journal tables when missing (idempotent; done by the first
  // Run/Resume too). Errors: kFailedPrecondition for a store without SQL or a
  // journal written by a newer idem; kUnavailable.
  absl::Status Migrate();

  // Runs operation `request.biz_key`: creates it (and its journal rows) on the
  // first call, then runs every step that is not SUCCESS, in order. A later call
  // with the same biz_key resumes it, or returns its final state without running
  // anything. Returns the state it reached: final, or PENDING/COMPENSATING with
  // next_retry_at when it must wait (wait_for_retries = false, or a lock still
  // held after lock_wait), or `busy` when another runner holds it.
  // Errors: kInvalidArgument (bad biz_key or object_key), kNotFound (type not
  // registered), kFailedPrecondition (biz_key exists with another type, input
  // or object_key), kUnavailable (store unreachable: nothing was run), kAborted
  // (the lease was lost mid-run: another runner took over). Blocks.
  absl::StatusOr<OperationState> Run(const RunRequest& request);

  // Resumes an existing operation (as Run, with the stored type and input). It
  // never sleeps: a step whose next_retry_at has not come yet is left for later
  // (the operation comes back PENDING). kNotFound when there is no such operation
  // or its type is not registered here.
  absl::StatusOr<OperationState> Resume(std::string_view biz_key);

  // One worker pass: resumes up to `limit` operations that are due
  // (PENDING/COMPENSATING with next_retry_at <= now and no live lease), skipping
  // rows another worker has locked (FOR UPDATE SKIP LOCKED) and types not
  // registered here. Returns how many it resumed.
  absl::StatusOr<int> ResumeDue(int limit = 100);

  // For a person who settled a COMPENSATION_REQUIRED operation by hand: marks it
  // COMPENSATED with `note` in last_error and releases its object lock (which such
  // an operation keeps, so no other operation runs over a half-undone one).
  // Errors: kNotFound; kFailedPrecondition for any other status; kInvalidArgument
  // for an empty note.
  absl::StatusOr<OperationState> Resolve(std::string_view biz_key, std::string_view note);

  // The operation and its journal (a plain read: it does not wait for a runner);
  // kNotFound when there is none.
  absl::StatusOr<OperationState> Get(std::string_view biz_key);

  // Operations a person should look at: due ones no runner holds, ones with an
  // UNKNOWN step and no live lease (a call in flight is not stuck), and
  // COMPENSATION_REQUIRED ones; oldest first, at most `limit`.
  absl::StatusOr<std::vector<OperationState>> ListStuck(int limit = 100);

  const StepRunnerOptions& options() const { return options_; }

  // The counters so far. Thread-safe.
  StepStats stats() const;

 private:
  struct Impl;
  friend struct Impl;
  Store& store_;
  StepRunnerOptions options_;
  std::unique_ptr<Impl> impl_;
};

// Runs StepRunner::ResumeDue in a background thread every `interval` until
// stopped. Start() is idempotent; the destructor stops it.
struct WorkerOptions {
  absl::Duration interval = absl::Seconds(1);
  int batch = 100;
};

class Worker {
 public:
  // `runner` must outlive the Worker.
  explicit Worker(StepRunner& runner, WorkerOptions options = {});
  ~Worker();
  void Start();
  // Stops after the pass in flight; blocks until it has.
  void Stop();
  // Passes completed and operations resumed so far.
  int64_t passes() const;
  int64_t resumed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
