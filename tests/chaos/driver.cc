#include "chaos/driver.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "http/client.h"

namespace idem::chaos {

Endpoints::Endpoints(size_t count)
    : count_(count), ports_(std::make_unique<std::atomic<uint16_t>[]>(count)) {}

std::string FaultSummary(const std::map<std::string, int>& counts) {
  int64_t injected = 0;
  std::string kinds;
  for (const auto& [name, n] : counts) {
    injected += n;
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", name, "=", n);
  }
  return absl::StrCat(injected, " faults (", kinds.empty() ? "none" : kinds, ")");
}

uint64_t SeedFromEnv(uint64_t fallback) {
  const char* env = std::getenv("IDEM_CHAOS_SEED");
  uint64_t seed = 0;
  return env != nullptr && absl::SimpleAtoi(env, &seed) ? seed : fallback;
}

std::string RunResult::Summary() const {
  return absl::StrCat("seed=", seed, ": ", history.size(), " operations, ", keys, " keys, ",
                      effects.size(), " effects, ", FaultSummary(faults), " in ",
                      elapsed.count(), " ms, ", report.violations(), " violations\n",
                      report.Table());
}

namespace {

// A key's result: names its key and token, with a number that a store converting
// numbers would not give back byte for byte.
std::string ResultFor(const std::string& key, int64_t token, int client) {
  return absl::StrCat(R"({"key":")", key, R"(","token":)", token, R"(,"client":)", client,
                      R"(,"amount":1.50})");
}

class HttpRun {
 public:
  HttpRun(const DriverOptions& o, Endpoints& endpoints, const std::vector<FaultKind>& faults,
      std::unique_ptr<EffectLog> log)
      : o_(o), endpoints_(endpoints), faults_(faults), log_(std::move(log)) {}

  absl::StatusOr<RunResult> Go() {
    const Clock::time_point start = Clock::now();
    fault_end_ = start + o_.duration;
    hard_end_ = fault_end_ + o_.heal_timeout;
    std::vector<std::thread> clients;
    for (int i = 0; i < o_.clients; ++i) clients.emplace_back([this, i] { ClientLoop(i); });
    std::thread scheduler([this, start] { Schedule(start); });
    scheduler.join();  // returns at fault_end_, every fault healed
    stop_ = true;      // clients finish the key they hold, then stop
    for (std::thread& t : clients) t.join();
    FinalReads();
    RunResult r;
    r.seed = o_.seed;
    r.history = history_.Operations();
    r.faults = fault_counts_;
    r.fault_log = fault_log_;
    r.keys = static_cast<int64_t>(keys_.size());
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (!harness_error_.ok()) return harness_error_;
    absl::StatusOr<std::vector<Effect>> effects = ReadEffectLog(log_->path());
    if (!effects.ok()) return effects.status();
    r.effects = *std::move(effects);
    r.report = Check(r.history, r.effects);
    return r;
  }

 private:
  void Fatal(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (harness_error_.ok()) {
      harness_error_ = absl::Status(s.code(), absl::StrCat("seed=", o_.seed, ": ", s.message()));
    }
    stop_ = true;
    aborted_ = true;
  }

  // Sleeps `d` in slices, returning early once the run is aborted.
  void Sleep(std::chrono::milliseconds d) {
    const Clock::time_point until = Clock::now() + d;
    while (!aborted_ && Clock::now() < until) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(),
                                                            std::chrono::milliseconds(20)));
    }
  }

  void Schedule(Clock::time_point start) {
    absl::Status s = ScheduleFaults({.seed = o_.seed,
                                     .gap_min = o_.fault_gap_min,
                                     .gap_max = o_.fault_gap_max,
                                     .start = start,
                                     .end = fault_end_,
                                     .aborted = &aborted_,
                                     .mu = &mu_,
                                     .log = &fault_log_,
                                     .counts = &fault_counts_},
                                    faults_);
    if (!s.ok()) Fatal(std::move(s));
  }

  // One request, recorded as `op` (kind, key, client and the request fields set).
  void Send(Operation& op, const std::string& target, const std::string& body,
            std::chrono::milliseconds extra_timeout, std::mt19937_64& rng) {
    const uint16_t port = endpoints_.port(rng() % endpoints_.size());
    op.invoke = Clock::now();
    http::testing::Client c(port, o_.request_timeout, o_.request_timeout + extra_timeout);
    http::testing::ClientResponse res;
    if (c.connected()) {
      res = c.Send("POST", target, body, o_.token);
    } else {
      res.error = "connect: failed";
    }
    op.complete = Clock::now();
    FillAnswer(&op, res.status, res.body, res.error);
    history_.Record(op);
  }

  static Operation NewOp(int client, const std::string& key, OpKind kind) {
    Operation op;
    op.client = client;
    op.key = key;
    op.kind = kind;
    return op;
  }

  Operation Claim(int client, const std::string& key, int64_t wait_ms, OpKind kind,
                  std::mt19937_64& rng) {
    Operation op = NewOp(client, key, kind);
    op.lease_ms = o_.lease_ms;
    std::string body = absl::StrCat(R"({"biz_type":")", o_.biz_type, R"(","key":")", key,
                                    R"(","lease_ms":)", o_.lease_ms);
    if (wait_ms > 0) absl::StrAppend(&body, R"(,"wait_ms":)", wait_ms);
    Send(op, "/v1/claims", body + "}", std::chrono::milliseconds(wait_ms), rng);
    return op;
  }

  Operation Finish(int client, const std::string& key, int64_t token, bool fail,
                   std::mt19937_64& rng) {
    Operation op = NewOp(client, key, fail ? OpKind::kFail : OpKind::kComplete);
    op.token = token;
    std::string body = absl::StrCat(R"({"biz_type":")", o_.biz_type, R"(","key":")", key,
                                    R"(","token":)", token);
    if (fail) {
      op.retryable = true;
      absl::StrAppend(&body, R"(,"retryable":true,"error":{"refused":true}})");
      Send(op, "/v1/claims/fail", body, {}, rng);
    } else {
      op.result = ResultFor(key, token, client);
      absl::StrAppend(&body, R"(,"result":)", op.result, "}");
      Send(op, "/v1/claims/complete", body, {}, rng);
    }
    return op;
  }

  // Exponential backoff with full jitter (100 ms doubling), capped at 1 s.
  void Backoff(int attempt, std::mt19937_64& rng) {
    const int64_t cap = std::min<int64_t>(1000, int64_t{100} << std::min(attempt, 4));
    Sleep(std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(0, cap)(rng)));
  }

  static bool Retryable(const Operation& op) { return op.status == 0 || op.status == 503; }

  // Sends complete (or fail) of `token` until it gets a final answer. Returns the
  // answer's operation; status 0 only when the run ran out of time.
  Operation FinishUntilAnswered(int client, const std::string& key, int64_t token, bool fail,
                                std::mt19937_64& rng) {
    for (int attempt = 0;; ++attempt) {
      Operation op = Finish(client, key, token, fail, rng);
      if (!Retryable(op) || Clock::now() >= hard_end_ || aborted_) return op;
      Backoff(attempt, rng);
    }
  }

  // Works on `key` until it has a result (or the run is out of time).
  void DoKey(int client, const std::string& key, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> coin(0, 1);
    for (int attempt = 0; Clock::now() < hard_end_ && !aborted_; ++attempt) {
      const int64_t wait_ms = coin(rng) < o_.wait_probability ? o_.lease_ms : 0;
      const Operation claim = Claim(client, key, wait_ms, OpKind::kClaim, rng);
      if (claim.status == 200) return;  // replayed or cached_failure: done
      if (claim.status == 409 && claim.error == "in_progress") {
        Sleep(std::chrono::milliseconds(50));
        continue;
      }
      if (Retryable(claim)) {
        Backoff(attempt, rng);
        continue;
      }
      if (claim.status != 201 || claim.token <= 0) return;  // not allowed: the checker says so
      // A takeover was told that an earlier attempt may have had its effect: a real
      // client probes and never just lets the key go (the checker relies on it),
      // so only a fresh claim's effect is refused.
      if (!claim.takeover && coin(rng) < o_.fail_probability) {
        const Operation f = FinishUntilAnswered(client, key, claim.token, true, rng);
        if (f.status != 200 && !(f.status == 409 && f.error == "lease_lost")) return;
        continue;
      }
      if (absl::Status s = log_->Append({.key = key, .token = claim.token, .client = client,
                                         .at = Clock::now()});
          !s.ok()) {
        Fatal(s);
        return;
      }
      if (coin(rng) < o_.pause_probability) {
        Sleep(std::chrono::milliseconds(o_.lease_ms * 3 / 2));
      }
      const Operation done = FinishUntilAnswered(client, key, claim.token, false, rng);
      if (done.status == 200) return;
      if (done.status == 409 && done.error == "lease_lost") continue;  // replay or take over
      return;  // out of time, or an answer the checker will flag
    }
  }

  void ClientLoop(int client) {
    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(client));
    const int group = client / std::max(1, o_.clients_per_key);
    for (int n = 0; !stop_; ++n) {
      const std::string key = absl::StrCat("s", o_.seed, "-g", group, "-", n);
      {
        std::lock_guard<std::mutex> lock(mu_);
        keys_.insert(key);
      }
      DoKey(client, key, rng);
    }
  }

  // Faults healed: one more claim of every key, retried while the store is briefly
  // unavailable or a dead attempt's lease is still running out.
  void FinalReads() {
    if (aborted_) return;
    std::mt19937_64 rng(o_.seed ^ 0x5eedULL);
    const Clock::time_point end = Clock::now() + o_.heal_timeout;
    for (const std::string& key : keys_) {
      for (int attempt = 0;; ++attempt) {
        const Operation op = Claim(-1, key, 0, OpKind::kReplay, rng);
        const bool again = Retryable(op) || (op.status == 409 && op.error == "in_progress");
        if (!again || Clock::now() >= end) break;
        Backoff(attempt, rng);
      }
    }
  }

  const DriverOptions& o_;
  Endpoints& endpoints_;
  const std::vector<FaultKind>& faults_;
  const std::unique_ptr<EffectLog> log_;
  History history_;
  Clock::time_point fault_end_, hard_end_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::set<std::string> keys_;                 // guarded by mu_ while clients run
  std::map<std::string, int> fault_counts_;    // guarded by mu_
  std::vector<std::string> fault_log_;         // guarded by mu_
  absl::Status harness_error_;                 // guarded by mu_
};

}  // namespace

absl::Status ScheduleFaults(const FaultSchedule& o, const std::vector<FaultKind>& faults) {
  using Clock = std::chrono::steady_clock;
  std::mt19937_64 rng(o.seed);
  const auto aborted = [&] { return o.aborted != nullptr && o.aborted->load(); };
  // Sleeps `d` in slices, returning early once the run is aborted.
  const auto sleep = [&](Clock::duration d) {
    const Clock::time_point until = Clock::now() + d;
    while (!aborted() && Clock::now() < until) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(20)));
    }
  };
  const auto ms_since = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - o.start).count();
  };
  const auto uniform_ms = [&](std::chrono::milliseconds lo, std::chrono::milliseconds hi) {
    return std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(lo.count(), std::max(lo, hi).count())(rng));
  };
  while (!faults.empty() && !aborted()) {
    const auto gap = uniform_ms(o.gap_min, o.gap_max);
    if (Clock::now() + gap >= o.end) break;
    sleep(gap);
    const FaultKind& f = faults[rng() % faults.size()];
    const auto hold = uniform_ms(f.min_hold, f.max_hold);
    {
      std::lock_guard<std::mutex> lock(*o.mu);
      o.log->push_back(
          absl::StrCat("+", ms_since(), "ms ", f.name, " (hold ", hold.count(), "ms)"));
    }
    if (absl::Status s = f.inject(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("injecting ", f.name, ": ", s.message()));
    }
    sleep(hold);
    if (absl::Status s = f.heal(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("healing ", f.name, ": ", s.message()));
    }
    std::lock_guard<std::mutex> lock(*o.mu);
    ++(*o.counts)[f.name];
  }
  while (!aborted() && Clock::now() < o.end) sleep(std::chrono::milliseconds(50));
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunChaos(const DriverOptions& options, Endpoints& endpoints,
                                   const std::vector<FaultKind>& faults) {
  if (options.effect_log_path.empty()) {
    return absl::InvalidArgumentError("chaos driver: no effect log path");
  }
  if (endpoints.size() == 0) return absl::InvalidArgumentError("chaos driver: no endpoint");
  if (options.clients < 1) return absl::InvalidArgumentError("chaos driver: clients < 1");
  ::unlink(options.effect_log_path.c_str());  // a fresh log: effects of this run only
  absl::StatusOr<std::unique_ptr<EffectLog>> log = EffectLog::Open(options.effect_log_path);
  if (!log.ok()) return log.status();
  return HttpRun(options, endpoints, faults, *std::move(log)).Go();
}

}  // namespace idem::chaos
