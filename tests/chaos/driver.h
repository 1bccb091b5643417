// The chaos driver: N client threads against one or more `idem serve` endpoints
// (the HTTP API, docs/openapi.yaml) while a seeded fault scheduler injects faults, then a
// final read of every key and the checker's verdict (checker.h).
//
// Each client works through a sequence of keys it shares with
// DriverOptions::clients_per_key - 1 other clients (so claims race, attach and take
// over), and for each key: claim (sometimes with wait_ms, to attach) → on 201 the
// external effect, appended to the effect log (effect_log.h) → complete with a
// result that names the key and token; sometimes the effect is refused instead and
// the client sends a retryable fail and claims again. Every answer that is not
// final is retried as a client should: 503 and no answer with exponential backoff and
// full jitter (100 ms doubling, capped at 1 s here: the test leases are ~1 s),
// 409 in_progress after a short wait, 409 lease_lost by claiming again (a replay or
// a takeover). Each request goes to an endpoint picked at random.
//
// The fault scheduler sleeps a random gap, picks one of the FaultKinds at random,
// injects it, holds it for a random time, heals it, and so on until the run's
// duration is over; all its choices come from the seed, which RunResult::Summary
// prints first. Faults are supplied by the caller (servers.h and databases.h build
// them for `idem serve` processes and private databases; a cluster test adds its own).
//
// Thread safety: RunChaos blocks its caller; the FaultKind callbacks run on the
// scheduler thread only, one at a time; Endpoints may be read and set from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chaos/checker.h"
#include "chaos/effect_log.h"
#include "chaos/history.h"

namespace idem::chaos {

// The ports of the `idem serve` processes the clients talk to (on 127.0.0.1). A
// restarted server may come back on another port: whoever restarts it sets it.
class Endpoints {
 public:
  explicit Endpoints(size_t count);
  size_t size() const { return count_; }
  uint16_t port(size_t i) const { return ports_[i].load(); }
  void set_port(size_t i, uint16_t port) { ports_[i].store(port); }

 private:
  size_t count_;
  std::unique_ptr<std::atomic<uint16_t>[]> ports_;
};

// One kind of fault. `inject` starts it and `heal` ends it (both block until done,
// e.g. until a restarted server answers); the scheduler holds it for a random time
// in [min_hold, max_hold] in between. An error from either ends the run with that
// error (the harness, not idem, failed).
struct FaultKind {
  std::string name;
  std::function<absl::Status()> inject;
  std::function<absl::Status()> heal;
  std::chrono::milliseconds min_hold{0};
  std::chrono::milliseconds max_hold{0};
};

// Where the fault scheduler (ScheduleFaults) runs and what it records.
struct FaultSchedule {
  uint64_t seed = 1;  // every choice (gap, fault, hold) comes from it
  std::chrono::milliseconds gap_min{300};
  std::chrono::milliseconds gap_max{1500};
  std::chrono::steady_clock::time_point start;  // "+Nms" in the log counts from here
  std::chrono::steady_clock::time_point end;    // no fault starts a gap after this
  const std::atomic<bool>* aborted = nullptr;   // optional: stop early once it holds
  std::mutex* mu = nullptr;                      // REQUIRED: guards `log` and `counts`
  std::vector<std::string>* log = nullptr;       // REQUIRED: "+1234ms kill serve0 (hold 300ms)"
  std::map<std::string, int>* counts = nullptr;  // REQUIRED: fault kind → times healed
};

// "N faults (kind=n, kind=n)" or "0 faults (none)", for the runs' summaries.
std::string FaultSummary(const std::map<std::string, int>& counts);

// $IDEM_CHAOS_SEED when it is set to a number, else `fallback`: a test's runs are
// reproducible, and a failing seed can be run again.
uint64_t SeedFromEnv(uint64_t fallback);

// The fault scheduler: until `o.end`, waits a random gap, injects a random one of
// `faults`, holds it and heals it; it returns at `o.end` (or once aborted) with every
// fault it injected healed. Each fault is logged before it is injected and counted
// once healed. Returns the first inject or heal error, prefixed with the fault
// (the harness failed, not idem). Blocks.
absl::Status ScheduleFaults(const FaultSchedule& o, const std::vector<FaultKind>& faults);

struct DriverOptions {
  uint64_t seed = 1;
  int clients = 8;
  int clients_per_key = 2;                   // clients that race on the same keys
  std::chrono::milliseconds duration{10000};  // how long faults are injected
  std::chrono::milliseconds fault_gap_min{300};
  std::chrono::milliseconds fault_gap_max{1500};
  int64_t lease_ms = 1000;                       // the lease every claim asks for
  std::chrono::milliseconds request_timeout{2000};  // per request (plus its wait_ms)
  // After `duration`: how long clients may still take to finish their current key,
  // faults healed; and the budget of the final reads.
  std::chrono::milliseconds heal_timeout{30000};
  double wait_probability = 0.3;   // a claim asks to attach (wait_ms = lease_ms)
  double fail_probability = 0.05;  // the effect is refused: a retryable fail instead
  // The client stalls for 1.5 leases between its effect and its complete (a client
  // GC pause): its lease runs out and another client takes the key over.
  double pause_probability = 0.0;
  std::string token = "tok";    // the bearer token of the tenant the servers know
  std::string biz_type = "pay";
  std::string effect_log_path;  // REQUIRED: created fresh (an existing file is replaced)
};

struct RunResult {
  uint64_t seed = 0;
  std::vector<Operation> history;
  std::vector<Effect> effects;
  Report report;
  std::map<std::string, int> faults;   // fault kind → times injected and healed
  std::vector<std::string> fault_log;  // "+1234ms kill serve0 (hold 300ms)", in order
  int64_t keys = 0;
  std::chrono::milliseconds elapsed{0};

  // "seed=S: ops, keys, effects, faults by kind" and the checker's table.
  std::string Summary() const;
};

// Runs the clients and the fault scheduler for `options.duration`, heals, lets the
// clients finish, reads every key once more, and checks. `endpoints` and the fault
// callbacks must outlive the call. Returns kInvalidArgument for bad options
// (no effect log path, no endpoint, clients < 1), kUnavailable when the effect log
// cannot be written, and the error of a fault that could not be injected or healed
// (prefixed with the seed and the fault). A run whose history breaks a property is
// not an error: see RunResult::report.
absl::StatusOr<RunResult> RunChaos(const DriverOptions& options, Endpoints& endpoints,
                                   const std::vector<FaultKind>& faults);

}  // namespace idem::chaos
