// What exactly-once costs over a bare local transaction (Guard::Run in the same transaction).
//
//   bare      BEGIN IMMEDIATE; INSERT INTO ledger(order_no, amount) ...; COMMIT
//             through raw sqlite3, same PRAGMAs as the sqlite:// store
//             (journal_mode=WAL, synchronous=FULL or NORMAL, foreign_keys=ON)
//   guarded   the same INSERT inside idem::Guard::Run on sqlite://<tmp>/... with a
//             fresh key each iteration (claim + handler + result in one transaction)
//   replayed  Guard::Run on a key that is already done: the duplicate path (kReplayed)
//
// each with ?synchronous=full (the default) and ?synchronous=normal. After the
// Google Benchmark output a table prints the per-operation times and the ratio
// guarded / bare. Databases live in a temp dir (under $TMPDIR) removed at exit.
//
//   guard_bench [--benchmark_filter=...] [--benchmark_min_time=...]
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "bench_common.h"
#include "idem/idem.h"

namespace {

constexpr char kLedgerDdl[] =
    "CREATE TABLE IF NOT EXISTS ledger(order_no TEXT PRIMARY KEY, amount INTEGER NOT NULL)";
constexpr char kLedgerInsert[] = "INSERT INTO ledger(order_no, amount) VALUES (?, ?)";
constexpr double kMinTimeSeconds = 1.0;

std::string g_dir;  // the temp dir holding every database of this run

// The bare business transaction through raw sqlite3: prepared once, as the store
// caches its statements too.
class BareDb {
 public:
  ~BareDb() {
    for (sqlite3_stmt* s : {begin_, insert_, commit_, rollback_}) sqlite3_finalize(s);
    if (db_ != nullptr) sqlite3_close_v2(db_);
  }

  // Returns an empty string on success, else what went wrong.
  std::string Open(const std::string& path, const std::string& synchronous) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      return Error("open");
    }
    sqlite3_busy_timeout(db_, 5000);
    std::string pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=" + synchronous +
                          "; PRAGMA foreign_keys=ON; " + kLedgerDdl + ";";
    if (sqlite3_exec(db_, pragmas.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
      return Error("pragmas");
    }
    if (sqlite3_prepare_v2(db_, "BEGIN IMMEDIATE", -1, &begin_, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db_, kLedgerInsert, -1, &insert_, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db_, "COMMIT", -1, &commit_, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db_, "ROLLBACK", -1, &rollback_, nullptr) != SQLITE_OK) {
      return Error("prepare");
    }
    return "";
  }

  std::string Insert(const std::string& order_no, int64_t amount) {
    if (Step(begin_) != SQLITE_DONE) return Error("begin");
    sqlite3_bind_text(insert_, 1, order_no.data(), static_cast<int>(order_no.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(insert_, 2, amount);
    if (Step(insert_) != SQLITE_DONE) {
      std::string e = Error("insert");
      Step(rollback_);
      return e;
    }
    if (Step(commit_) != SQLITE_DONE) return Error("commit");
    return "";
  }

 private:
  static int Step(sqlite3_stmt* s) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc;
  }
  std::string Error(const char* what) const {
    return absl::StrCat("sqlite ", what, ": ", db_ != nullptr ? sqlite3_errmsg(db_) : "no db");
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* rollback_ = nullptr;
};

// A store with the ledger table, and a Guard on it.
struct GuardedDb {
  std::unique_ptr<idem::Store> store;
  std::unique_ptr<idem::Guard> guard;

  std::string Open(const std::string& path, const std::string& synchronous) {
    std::string url = absl::StrCat("sqlite://", path, "?synchronous=", synchronous);
    absl::StatusOr<std::unique_ptr<idem::Store>> s = idem::OpenStore(url);
    if (!s.ok()) return s.status().ToString();
    store = *std::move(s);
    absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = store->Begin();
    if (!tx.ok()) return tx.status().ToString();
    if (absl::StatusOr<int64_t> r = (*tx)->Exec(kLedgerDdl); !r.ok()) return r.status().ToString();
    if (absl::Status c = (*tx)->Commit(); !c.ok()) return c.ToString();
    guard = std::make_unique<idem::Guard>(*store);
    return "";
  }
};

absl::StatusOr<idem::Result> GuardedInsert(idem::Guard& guard, const std::string& key) {
  return guard.Run({.biz_type = "ledger", .key = key},
                   [&key](idem::Transaction& tx) -> absl::StatusOr<std::string> {
                     const idem::Value params[] = {key, 100};
                     absl::StatusOr<int64_t> n = tx.Exec(kLedgerInsert, params);
                     if (!n.ok()) return n.status();
                     return std::string(R"({"ok":true})");
                   });
}

void BM_Bare(benchmark::State& state, std::string synchronous) {
  // A new database per call keeps runs independent (Google Benchmark calls this
  // several times while it sizes the iteration count).
  static int call = 0;
  BareDb db;
  std::string err =
      db.Open(absl::StrCat(g_dir, "/bare-", synchronous, "-", call++, ".db"), synchronous);
  if (!err.empty()) {
    state.SkipWithError(err.c_str());
    return;
  }
  int64_t n = 0;
  for (auto _ : state) {
    err = db.Insert(absl::StrCat("K-", n++), 100);
    if (!err.empty()) {
      state.SkipWithError(err.c_str());
      break;
    }
  }
}

void BM_Guarded(benchmark::State& state, std::string synchronous) {
  static int call = 0;
  GuardedDb db;
  std::string err =
      db.Open(absl::StrCat(g_dir, "/guarded-", synchronous, "-", call++, ".db"), synchronous);
  if (!err.empty()) {
    state.SkipWithError(err.c_str());
    return;
  }
  int64_t n = 0;
  for (auto _ : state) {
    absl::StatusOr<idem::Result> r = GuardedInsert(*db.guard, absl::StrCat("K-", n++));
    if (!r.ok() || r->outcome != idem::Outcome::kExecuted) {
      state.SkipWithError(r.ok() ? "expected kExecuted" : r.status().ToString().c_str());
      break;
    }
  }
}

void BM_Replayed(benchmark::State& state, std::string synchronous) {
  static int call = 0;
  GuardedDb db;
  std::string err =
      db.Open(absl::StrCat(g_dir, "/replayed-", synchronous, "-", call++, ".db"), synchronous);
  if (!err.empty()) {
    state.SkipWithError(err.c_str());
    return;
  }
  const std::string key = "K-dup";
  if (absl::StatusOr<idem::Result> first = GuardedInsert(*db.guard, key); !first.ok()) {
    state.SkipWithError(first.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<idem::Result> r = GuardedInsert(*db.guard, key);
    if (!r.ok() || r->outcome != idem::Outcome::kReplayed) {
      state.SkipWithError(r.ok() ? "expected kReplayed" : r.status().ToString().c_str());
      break;
    }
  }
}

void PrintTable(const std::map<std::string, double>& us) {
  auto get = [&us](const std::string& name) -> double {
    auto it = us.find(name);
    return it == us.end() ? -1 : it->second;
  };
  std::printf("\n%-12s %10s %11s %7s %12s %7s\n", "synchronous", "bare_us", "guarded_us", "ratio",
              "replayed_us", "ratio");
  for (const char* sync : {"full", "normal"}) {
    double bare = get(absl::StrCat("bare/synchronous=", sync));
    double guarded = get(absl::StrCat("guarded/synchronous=", sync));
    double replayed = get(absl::StrCat("replayed/synchronous=", sync));
    auto cell = [](double v) { return v < 0 ? std::string("-") : absl::StrFormat("%.1f", v); };
    auto ratio = [](double a, double b) {
      return a < 0 || b <= 0 ? std::string("-") : absl::StrFormat("%.3f", a / b);
    };
    std::printf("%-12s %10s %11s %7s %12s %7s\n", sync, cell(bare).c_str(), cell(guarded).c_str(),
                ratio(guarded, bare).c_str(), cell(replayed).c_str(),
                ratio(replayed, bare).c_str());
  }
  std::printf(
      "\nratio = time per operation / bare transaction's. guarded: claim + INSERT + result in one "
      "transaction;\nreplayed: a duplicate answered from the stored record (no handler, "
      "rolled back).\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/idem-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("guard_bench: mkdtemp");
    return 1;
  }
  g_dir = tmpl;

  for (std::string sync : {"full", "normal"}) {
    benchmark::RegisterBenchmark(("bare/synchronous=" + sync).c_str(), BM_Bare, sync)
        ->MinTime(kMinTimeSeconds)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("guarded/synchronous=" + sync).c_str(), BM_Guarded, sync)
        ->MinTime(kMinTimeSeconds)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("replayed/synchronous=" + sync).c_str(), BM_Replayed, sync)
        ->MinTime(kMinTimeSeconds)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  idem::bench::RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  PrintTable(reporter.micros());

  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
  return 0;
}
