// What the step journal costs (include/idem/steps.h): one operation of three local steps, each
// inserting a row, against the same three inserts in one bare transaction of the
// same store. The journal adds, per operation, its own rows (operation + 3 steps)
// and one transaction per step (a step's rows commit with its journal update), so
// a crash loses at most the step in flight.
//
//   steps_bench [--benchmark_filter=...]
//
// Stores: a SQLite file under /tmp (synchronous=normal and =full), and
// PostgreSQL/MariaDB from IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL when set
// (scripts/services.sh start DIR; source DIR/env.sh). A table with the ratios
// follows Google Benchmark's output.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "bench_common.h"
#include "idem/idem.h"
#include "idem/steps.h"

namespace {

using idem::bench::NextKey;
using idem::bench::Results;
using idem::bench::TimeEach;

struct Target {
  std::string name;
  std::unique_ptr<idem::Store> store;
  std::string table;
  std::unique_ptr<idem::StepRunner> runner;
};

std::vector<std::unique_ptr<Target>>& Targets() {
  static auto* targets = new std::vector<std::unique_ptr<Target>>();
  return *targets;
}

absl::Status InsertRow(idem::Transaction& tx, const std::string& table, const std::string& key,
                       int step) {
  return tx.Exec("INSERT INTO " + table + " (k, step) VALUES (?, ?)",
                 {idem::Value(key), idem::Value(step)})
      .status();
}

idem::OperationType ThreeSteps(const std::string& table) {
  idem::OperationType type{.name = "bench"};
  for (int i = 1; i <= 3; ++i) {
    idem::Step step{.name = "step" + std::to_string(i)};
    step.execute = [table, i](idem::StepContext& c) -> absl::StatusOr<std::string> {
      absl::Status s = InsertRow(*c.tx(), table, std::string(c.biz_key()), i);
      if (!s.ok()) return s;
      return std::string("ok");
    };
    type.steps.push_back(std::move(step));
  }
  return type;
}

void BM_Bare(benchmark::State& state, Target* t) {
  TimeEach(state, t->name + "/bare", "bare", [t](const std::string& key) -> absl::Status {
    absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t->store->Begin();
    if (!tx.ok()) return tx.status();
    for (int i = 1; i <= 3; ++i) {
      absl::Status s = InsertRow(**tx, t->table, key, i);
      if (!s.ok()) return s;
    }
    return (*tx)->Commit();
  });
}

void BM_Steps(benchmark::State& state, Target* t) {
  TimeEach(state, t->name + "/steps", "steps", [t](const std::string& key) -> absl::Status {
    absl::StatusOr<idem::OperationState> op =
        t->runner->Run({.type = "bench", .biz_key = key, .input = "{}"});
    if (!op.ok()) return op.status();
    if (op->status != idem::OperationStatus::kSuccess) return absl::InternalError("not SUCCESS");
    return absl::OkStatus();
  });
}

void AddTarget(const std::string& name, const std::string& url) {
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "steps_bench: %s: %s\n", name.c_str(),
                 std::string(store.status().message()).c_str());
    return;
  }
  auto t = std::make_unique<Target>();
  t->name = name;
  t->store = *std::move(store);
  t->table = "bench_steps_" + std::to_string(getpid());
  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = t->store->Begin();
  absl::Status s = tx.status();
  if (s.ok()) {
    s = (*tx)->Exec("CREATE TABLE " + t->table + " (k VARCHAR(64) NOT NULL, step INTEGER NOT NULL)")
            .status();
  }
  if (s.ok()) s = (*tx)->Commit();
  t->runner = std::make_unique<idem::StepRunner>(*t->store);
  if (s.ok()) s = t->runner->Register(ThreeSteps(t->table));
  if (s.ok()) s = t->runner->Migrate();
  if (!s.ok()) {
    std::fprintf(stderr, "steps_bench: %s: %s\n", name.c_str(), std::string(s.message()).c_str());
    return;
  }
  Targets().push_back(std::move(t));
}

}  // namespace

int main(int argc, char** argv) {
  char dir[] = "/tmp/idem-steps-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  AddTarget("sqlite-normal", absl::StrFormat("sqlite://%s/normal.db?synchronous=normal", dir));
  AddTarget("sqlite-full", absl::StrFormat("sqlite://%s/full.db", dir));
  for (const auto& [name, env] : {std::pair<const char*, const char*>{"postgres",
                                                                      "IDEM_TEST_POSTGRES_URL"},
                                  {"mysql", "IDEM_TEST_MYSQL_URL"}}) {
    const char* url = std::getenv(env);
    if (url == nullptr || *url == '\0') {
      std::fprintf(stderr, "steps_bench: %s is not set; %s left out\n", env, name);
      continue;
    }
    AddTarget(name, url);
  }
  for (auto& t : Targets()) {
    benchmark::RegisterBenchmark((t->name + "/bare").c_str(), BM_Bare, t.get())->MinTime(1.0);
    benchmark::RegisterBenchmark((t->name + "/steps").c_str(), BM_Steps, t.get())->MinTime(1.0);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::printf("\n%-14s %10s %10s %7s\n", "store", "bare_us", "steps_us", "ratio");
  for (const auto& t : Targets()) {
    auto get = [&](const char* what) {
      auto it = Results().find(t->name + "/" + what);
      return it == Results().end() ? -1.0 : it->second;
    };
    const double bare = get("bare"), steps = get("steps");
    std::printf("%-14s %10.1f %10.1f %7.3f\n", t->name.c_str(), bare, steps,
                bare > 0 && steps > 0 ? steps / bare : 0.0);
  }
  std::printf(
      "\nbare = the three inserts in one transaction; steps = StepRunner::Run of an operation\n"
      "of three local steps doing the same inserts (journal rows, one transaction per step).\n");
  return 0;
}
