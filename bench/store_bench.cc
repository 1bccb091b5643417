// Guard overhead on the server stores (issue: PostgreSQL and MariaDB/MySQL stores).
//
//   bare      Store::Begin(); INSERT INTO <ledger>(order_no, amount) VALUES (?, ?); Commit()
//             through idem's own store transaction (same pool, same connection
//             settings), so the ratio isolates what the guard adds
//   guarded   the same INSERT inside Guard::Run: the claim, the handler's INSERT,
//             the result UPDATE and the COMMIT (on PostgreSQL the BEGIN rides with
//             the first statement and the UPDATE with the COMMIT: 3 round trips)
//   guarded+first  the same, with the INSERT given to Guard::Run as its first
//             statement: PostgreSQL sends it with the claim (BEGIN + claim + INSERT,
//             then UPDATE + COMMIT: 2 round trips, as many as bare); other stores
//             run it after the claim as before
//   replayed  Guard::Run on a key that is already done (the duplicate path)
//   payment   the seed's payment, bare and guarded: debit the account if it has
//             the funds (UPDATE … WHERE balance >= ?), write the ledger row
//             (INSERT), COMMIT; the debit is the Guard's first statement
//
// Backends come from the environment (scripts/services.sh start DIR; source
// DIR/env.sh): IDEM_TEST_POSTGRES_URL, IDEM_TEST_MYSQL_URL; an unset one is left out
// with a note. A table with the ratios follows Google Benchmark's output.
//
// --rtt_us=N puts a LatencyProxy (bench/latency_proxy.h) between idem and each
// server, adding N µs to every round trip, as a database on another machine
// would; the default, 0, measures loopback, where a round trip costs about as
// much as two statements and the ratios are at their worst.
//
//   store_bench [--rtt_us=N] [--benchmark_filter=...]
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "bench_common.h"
#include "idem/idem.h"
#include "latency_proxy.h"

namespace {

using idem::bench::NextKey;
using idem::bench::Results;
using idem::bench::TimeEach;

struct Target {
  std::string name;
  std::unique_ptr<idem::Store> store;
  std::string ledger;    // this run's ledger table
  std::string accounts;  // this run's accounts table (kAccounts rows)
};

constexpr int kAccounts = 1000;

std::vector<Target>& Targets() {
  static auto* targets = new std::vector<Target>();
  return *targets;
}

absl::Status InsertLedger(idem::Transaction& tx, const std::string& ledger,
                          const std::string& order_no) {
  return tx.Exec("INSERT INTO " + ledger + " (order_no, amount) VALUES (?, ?)",
                 {idem::Value(order_no), idem::Value(100)})
      .status();
}

// One first arrival of each variant; OK when it committed as expected.
absl::Status BareOnce(Target* t, const std::string& key) {
  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t->store->Begin();
  absl::Status s = tx.status();
  if (s.ok()) s = InsertLedger(**tx, t->ledger, key);
  if (s.ok()) s = (*tx)->Commit();
  return s;
}

absl::Status Executed(const absl::StatusOr<idem::Result>& r) {
  if (!r.ok()) return r.status();
  if (r->outcome != idem::Outcome::kExecuted) return absl::InternalError("not executed");
  return absl::OkStatus();
}

absl::Status GuardedOnce(idem::Guard& guard, Target* t, const std::string& key) {
  return Executed(guard.Run({.biz_type = "bench", .key = key},
                            [&](idem::Transaction& tx) -> absl::StatusOr<std::string> {
                              IDEM_RETURN_IF_ERROR(InsertLedger(tx, t->ledger, key));
                              return std::string(R"({"ok":true})");
                            }));
}

absl::Status GuardedFirstOnce(idem::Guard& guard, Target* t, const std::string& key) {
  return Executed(guard.Run(
      {.biz_type = "bench", .key = key},
      idem::Statement{"INSERT INTO " + t->ledger + " (order_no, amount) VALUES (?, ?)",
                      {idem::Value(key), idem::Value(100)}},
      [](idem::Transaction&, int64_t) -> absl::StatusOr<std::string> {
        return std::string(R"({"ok":true})");
      }));
}

// The payment's debit: the account pays if it has the funds (1 row) or not (0).
idem::Statement Debit(const Target& t, int account) {
  return {"UPDATE " + t.accounts + " SET balance = balance - ? WHERE id = ? AND balance >= ?",
          {idem::Value(100), idem::Value(account), idem::Value(100)}};
}

absl::Status BarePaymentOnce(Target* t, int account, const std::string& key) {
  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t->store->Begin();
  IDEM_RETURN_IF_ERROR(tx.status());
  const idem::Statement debit = Debit(*t, account);
  IDEM_ASSIGN_OR_RETURN(int64_t paid, (*tx)->Exec(debit.sql, debit.params));
  if (paid != 1) return absl::FailedPreconditionError("insufficient funds");
  IDEM_RETURN_IF_ERROR(InsertLedger(**tx, t->ledger, key));
  return (*tx)->Commit();
}

// The debit is the Guard's first statement: on PostgreSQL it travels with the
// claim, as in the bare transaction it travels with the BEGIN.
absl::Status GuardedPaymentOnce(idem::Guard& guard, Target* t, int account,
                                const std::string& key) {
  return Executed(guard.Run({.biz_type = "bench", .key = key}, Debit(*t, account),
                            [&](idem::Transaction& tx, int64_t paid) -> absl::StatusOr<std::string> {
                              if (paid != 1) return absl::FailedPreconditionError("insufficient funds");
                              IDEM_RETURN_IF_ERROR(InsertLedger(tx, t->ledger, key));
                              return std::string(R"({"ok":true})");
                            }));
}

// Bare and guarded payments in turn, as BM_Interleaved does for the one INSERT.
void BM_Payment(benchmark::State& state, Target* t) {
  idem::Guard guard(*t->store);
  double bare = 0, guarded = 0;
  int account = 0;
  auto clock = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  for (auto _ : state) {
    const std::string k1 = NextKey("pbare"), k2 = NextKey("pguard");
    account = account % kAccounts + 1;
    auto t0 = clock();
    absl::Status s1 = BarePaymentOnce(t, account, k1);
    auto t1 = clock();
    absl::Status s2 = GuardedPaymentOnce(guard, t, account, k2);
    auto t2 = clock();
    bare += secs(t1 - t0);
    guarded += secs(t2 - t1);
    if (!s1.ok() || !s2.ok()) {
      state.SkipWithError("a payment failed");
      return;
    }
  }
  const double n = static_cast<double>(state.iterations());
  if (n > 0) {
    Results()[t->name + "/p-bare"] = 1e6 * bare / n;
    Results()[t->name + "/p-guarded"] = 1e6 * guarded / n;
  }
}

void BM_Bare(benchmark::State& state, Target* t) {
  TimeEach(state, t->name + "/bare", "bare", [t](const std::string& key) { return BareOnce(t, key); });
}

void BM_Guarded(benchmark::State& state, Target* t) {
  idem::Guard guard(*t->store);
  TimeEach(state, t->name + "/guarded", "guarded",
           [&](const std::string& key) { return GuardedOnce(guard, t, key); });
}

void BM_GuardedFirst(benchmark::State& state, Target* t) {
  idem::Guard guard(*t->store);
  TimeEach(state, t->name + "/guarded+first", "first",
           [&](const std::string& key) { return GuardedFirstOnce(guard, t, key); });
}

// The three first-arrival variants in turn, one of each per iteration, so that
// drift of a shared 2-core machine (a build, CPU frequency) hits all of them
// alike; the table's ratios come from here when it ran.
void BM_Interleaved(benchmark::State& state, Target* t) {
  idem::Guard guard(*t->store);
  double bare = 0, guarded = 0, first = 0;
  auto clock = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  for (auto _ : state) {
    const std::string k1 = NextKey("ibare"), k2 = NextKey("iguard"), k3 = NextKey("ifirst");
    auto t0 = clock();
    absl::Status s1 = BareOnce(t, k1);
    auto t1 = clock();
    absl::Status s2 = GuardedOnce(guard, t, k2);
    auto t2 = clock();
    absl::Status s3 = GuardedFirstOnce(guard, t, k3);
    auto t3 = clock();
    bare += secs(t1 - t0);
    guarded += secs(t2 - t1);
    first += secs(t3 - t2);
    if (!s1.ok() || !s2.ok() || !s3.ok()) {
      state.SkipWithError("an interleaved operation failed");
      return;
    }
  }
  const double n = static_cast<double>(state.iterations());
  if (n > 0) {
    Results()[t->name + "/i-bare"] = 1e6 * bare / n;
    Results()[t->name + "/i-guarded"] = 1e6 * guarded / n;
    Results()[t->name + "/i-first"] = 1e6 * first / n;
  }
}

void BM_Replayed(benchmark::State& state, Target* t) {
  idem::Guard guard(*t->store);
  const std::string key = NextKey("replayed");
  auto handler = [&](idem::Transaction& tx) -> absl::StatusOr<std::string> {
    IDEM_RETURN_IF_ERROR(InsertLedger(tx, t->ledger, key));
    return std::string(R"({"ok":true})");
  };
  if (!guard.Run({.biz_type = "bench", .key = key}, handler).ok()) {
    state.SkipWithError("first run failed");
    return;
  }
  double seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<idem::Result> r = guard.Run({.biz_type = "bench", .key = key}, handler);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok() || r->outcome != idem::Outcome::kReplayed) {
      state.SkipWithError("not replayed");
      return;
    }
  }
  if (state.iterations() > 0) {
    Results()[t->name + "/replayed"] = 1e6 * seconds / static_cast<double>(state.iterations());
  }
}

std::vector<std::unique_ptr<idem::bench::LatencyProxy>>& Proxies() {
  static auto* proxies = new std::vector<std::unique_ptr<idem::bench::LatencyProxy>>();
  return *proxies;
}

// `url` (scheme://user:password@127.0.0.1:PORT/db…) pointed at a LatencyProxy in
// front of PORT that adds `rtt_us` to each round trip.
absl::StatusOr<std::string> ThroughProxy(const std::string& url, long rtt_us) {
  const size_t at = url.rfind('@', url.find('/', url.find("://") + 3));
  const size_t colon = url.find(':', at == std::string::npos ? url.find("://") + 3 : at);
  const size_t end = url.find_first_of("/?", colon);
  if (colon == std::string::npos || end == std::string::npos) {
    return absl::InvalidArgumentError("--rtt_us needs URLs of the form scheme://…@host:port/db");
  }
  const int port = std::atoi(url.substr(colon + 1, end - colon - 1).c_str());
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<idem::bench::LatencyProxy> proxy,
                        idem::bench::LatencyProxy::Start(port, std::chrono::microseconds(rtt_us / 2)));
  const std::string out = url.substr(0, colon + 1) + std::to_string(proxy->port()) + url.substr(end);
  Proxies().push_back(std::move(proxy));
  return out;
}

long rtt_us = 0;  // --rtt_us

bool AddTarget(const std::string& name, const char* env) {
  const char* env_url = std::getenv(env);
  if (env_url == nullptr || *env_url == '\0') {
    std::fprintf(stderr, "store_bench: %s is not set; %s left out\n", env, name.c_str());
    return false;
  }
  std::string url = env_url;
  if (rtt_us > 0) {
    absl::StatusOr<std::string> proxied = ThroughProxy(url, rtt_us);
    if (!proxied.ok()) {
      std::fprintf(stderr, "store_bench: %s: %s\n", name.c_str(),
                   std::string(proxied.status().message()).c_str());
      return false;
    }
    url = *proxied;
  }
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "store_bench: %s: %s\n", name.c_str(),
                 std::string(store.status().message()).c_str());
    return false;
  }
  Target t{name, *std::move(store), "bench_ledger_" + std::to_string(getpid()),
           "bench_accounts_" + std::to_string(getpid())};
  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t.store->Begin();
  absl::Status s = tx.status();
  if (s.ok()) {
    s = (*tx)->Exec("CREATE TABLE " + t.ledger +
                    " (order_no VARCHAR(64) PRIMARY KEY, amount INTEGER NOT NULL)")
            .status();
  }
  if (s.ok()) {
    s = (*tx)->Exec("CREATE TABLE " + t.accounts +
                    " (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL)")
            .status();
  }
  for (int id = 1; s.ok() && id <= kAccounts; ++id) {
    s = (*tx)->Exec("INSERT INTO " + t.accounts + " (id, balance) VALUES (?, ?)",
                    {idem::Value(id), idem::Value(1000000000)})
            .status();
  }
  if (s.ok()) s = (*tx)->Commit();
  if (!s.ok()) {
    std::fprintf(stderr, "store_bench: %s: %s\n", name.c_str(), std::string(s.message()).c_str());
    return false;
  }
  Targets().push_back(std::move(t));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // --rtt_us=N is ours; everything else goes to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--rtt_us=", 0) == 0) {
      char* end = nullptr;
      rtt_us = std::strtol(arg.c_str() + 9, &end, 10);
      if (end == arg.c_str() + 9 || *end != '\0' || rtt_us < 0 || rtt_us > 1000000) {
        std::fprintf(stderr, "store_bench: --rtt_us takes microseconds, 0 to 1000000: '%s'\n",
                     arg.c_str());
        return 2;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  AddTarget("postgres", "IDEM_TEST_POSTGRES_URL");
  AddTarget("mysql", "IDEM_TEST_MYSQL_URL");
  for (Target& t : Targets()) {
    benchmark::RegisterBenchmark((t.name + "/bare").c_str(), BM_Bare, &t)->MinTime(1.0);
    benchmark::RegisterBenchmark((t.name + "/guarded").c_str(), BM_Guarded, &t)->MinTime(1.0);
    benchmark::RegisterBenchmark((t.name + "/guarded+first").c_str(), BM_GuardedFirst, &t)
        ->MinTime(1.0);
    benchmark::RegisterBenchmark((t.name + "/replayed").c_str(), BM_Replayed, &t)->MinTime(1.0);
    benchmark::RegisterBenchmark((t.name + "/interleaved").c_str(), BM_Interleaved, &t)
        ->MinTime(3.0);
    benchmark::RegisterBenchmark((t.name + "/payment").c_str(), BM_Payment, &t)->MinTime(3.0);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::printf("\nround trip: loopback%s\n",
              rtt_us > 0 ? (" + " + std::to_string(rtt_us) + " us (latency proxy)").c_str() : "");
  std::printf("\n%-10s %9s %11s %7s %14s %7s %12s %7s\n", "store", "bare_us", "guarded_us",
              "ratio", "guarded+1st_us", "ratio", "replayed_us", "ratio");
  for (const Target& t : Targets()) {
    auto get = [&](const char* what) {
      auto it = Results().find(t.name + "/" + what);
      return it == Results().end() ? -1.0 : it->second;
    };
    const double bare = get("bare"), guarded = get("guarded"), first = get("guarded+first"),
                 replayed = get("replayed");
    auto ratio = [bare](double x) { return bare > 0 && x > 0 ? x / bare : 0.0; };
    std::printf("%-10s %9.1f %11.1f %7.3f %14.1f %7.3f %12.1f %7.3f\n", t.name.c_str(), bare,
                guarded, ratio(guarded), first, ratio(first), replayed, ratio(replayed));
  }
  std::printf("\nratio = time per operation / bare transaction's (same store, same pool).\n");
  std::printf("\nInterleaved (one bare, one guarded, one guarded+first per iteration):\n");
  std::printf("%-10s %9s %11s %7s %14s %7s\n", "store", "bare_us", "guarded_us", "ratio",
              "guarded+1st_us", "ratio");
  for (const Target& t : Targets()) {
    auto get = [&](const char* what) {
      auto it = Results().find(t.name + "/" + what);
      return it == Results().end() ? -1.0 : it->second;
    };
    const double bare = get("i-bare"), guarded = get("i-guarded"), first = get("i-first");
    if (bare <= 0) continue;
    std::printf("%-10s %9.1f %11.1f %7.3f %14.1f %7.3f\n", t.name.c_str(), bare, guarded,
                guarded / bare, first, first / bare);
  }
  std::printf("\nThe seed's payment (debit UPDATE, ledger INSERT, COMMIT), bare and guarded\n"
              "in turn:\n");
  std::printf("%-10s %9s %11s %7s\n", "store", "bare_us", "guarded_us", "ratio");
  for (const Target& t : Targets()) {
    auto it_bare = Results().find(t.name + "/p-bare");
    auto it_guarded = Results().find(t.name + "/p-guarded");
    if (it_bare == Results().end() || it_guarded == Results().end()) continue;
    std::printf("%-10s %9.1f %11.1f %7.3f\n", t.name.c_str(), it_bare->second,
                it_guarded->second, it_guarded->second / it_bare->second);
  }
  return 0;
}
