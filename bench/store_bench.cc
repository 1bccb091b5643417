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
//
// Backends come from the environment (scripts/services.sh start DIR; source
// DIR/env.sh): IDEM_TEST_POSTGRES_URL, IDEM_TEST_MYSQL_URL; an unset one is left out
// with a note. A table with the ratios follows Google Benchmark's output.
//
//   store_bench [--benchmark_filter=...]
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

namespace {

using idem::bench::NextKey;
using idem::bench::Results;
using idem::bench::TimeEach;

struct Target {
  std::string name;
  std::unique_ptr<idem::Store> store;
  std::string ledger;  // this run's ledger table
};

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

bool AddTarget(const std::string& name, const char* env) {
  const char* url = std::getenv(env);
  if (url == nullptr || *url == '\0') {
    std::fprintf(stderr, "store_bench: %s is not set; %s left out\n", env, name.c_str());
    return false;
  }
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "store_bench: %s: %s\n", name.c_str(),
                 std::string(store.status().message()).c_str());
    return false;
  }
  Target t{name, *std::move(store), "bench_ledger_" + std::to_string(getpid())};
  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t.store->Begin();
  absl::Status s = tx.status();
  if (s.ok()) {
    s = (*tx)->Exec("CREATE TABLE " + t.ledger +
                    " (order_no VARCHAR(64) PRIMARY KEY, amount INTEGER NOT NULL)")
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
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

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
  return 0;
}
