// What the cache tiers (include/idem/cache.h) save on the duplicate path:
// Guard::Run on a key that is already done, over sqlite://<tmp>/... (synchronous=full)
//
//   nocache     the database answers: BEGIN, INSERT … ON CONFLICT, read, ROLLBACK
//   l1          answered from the in-process LRU (no transaction)
//   redis_only  answered from Redis with L1 disabled (one GET round trip)
//
// The Redis case needs IDEM_BENCH_REDIS_URL or IDEM_TEST_REDIS_URL
// (redis://127.0.0.1:PORT); without one it reports an error and the others still run.
//
//   IDEM_BENCH_REDIS_URL=redis://127.0.0.1:6379 cache_bench [--benchmark_min_time=...]
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "bench_common.h"
#include "idem/cache.h"
#include "idem/idem.h"

namespace {

std::string g_dir;

std::string RedisUrl() {
  for (const char* name : {"IDEM_BENCH_REDIS_URL", "IDEM_TEST_REDIS_URL"}) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

enum class Tier { kNone, kL1, kRedisOnly };

void BM_Duplicate(benchmark::State& state, Tier tier) {
  static int call = 0;
  absl::StatusOr<std::unique_ptr<idem::Store>> store =
      idem::OpenStore(absl::StrCat("sqlite://", g_dir, "/dup-", call++, ".db"));
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return;
  }
  if (tier != Tier::kNone) {
    idem::CacheOptions options;
    if (tier == Tier::kRedisOnly) {
      options.l1_entries = 0;
      options.redis_url = RedisUrl();
      options.redis_key_prefix = absl::StrCat("idem:bench:", getpid(), ":", call, ":");
      if (options.redis_url.empty()) {
        state.SkipWithError("set IDEM_BENCH_REDIS_URL=redis://host:port");
        return;
      }
    }
    store = idem::NewCachingStore(*std::move(store), options);
    if (!store.ok()) {
      state.SkipWithError(store.status().ToString().c_str());
      return;
    }
  }
  idem::Guard guard(**store);
  const idem::Request request{.biz_type = "refund", .key = "K-dup", .fingerprint = "fp"};
  const idem::Handler handler = [](idem::Transaction&) -> absl::StatusOr<std::string> {
    return std::string(R"({"refund_id":"F-1"})");
  };
  if (absl::StatusOr<idem::Result> first = guard.Run(request, handler); !first.ok()) {
    state.SkipWithError(first.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<idem::Result> r = guard.Run(request, handler);
    if (!r.ok() || r->outcome != idem::Outcome::kReplayed) {
      state.SkipWithError(r.ok() ? "expected kReplayed" : r.status().ToString().c_str());
      break;
    }
  }
  if (std::optional<idem::CacheStats> stats = idem::GetCacheStats(**store)) {
    state.counters["l1_hits"] = static_cast<double>(stats->l1_hits);
    state.counters["l2_hits"] = static_cast<double>(stats->l2_hits);
    state.counters["misses"] = static_cast<double>(stats->misses);
    state.counters["redis_errors"] = static_cast<double>(stats->redis_errors);
  }
}

void PrintTable(const std::map<std::string, double>& us) {
  auto it = us.find("duplicate/nocache");
  const double base = it == us.end() ? -1 : it->second;
  std::printf("\n%-22s %12s %14s\n", "duplicate path", "us_per_op", "vs_nocache");
  for (const char* name : {"duplicate/nocache", "duplicate/l1", "duplicate/redis_only"}) {
    auto found = us.find(name);
    if (found == us.end()) {
      std::printf("%-22s %12s %14s\n", name, "-", "-");
      continue;
    }
    std::printf("%-22s %12.2f %14s\n", name, found->second,
                base > 0 ? absl::StrFormat("%.3f", found->second / base).c_str() : "-");
  }
  std::printf("\nvs_nocache = time per duplicate / the database's answer's time.\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/idem-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("cache_bench: mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  const std::pair<const char*, Tier> cases[] = {{"duplicate/nocache", Tier::kNone},
                                                {"duplicate/l1", Tier::kL1},
                                                {"duplicate/redis_only", Tier::kRedisOnly}};
  for (const auto& [name, tier] : cases) {
    benchmark::RegisterBenchmark(name, BM_Duplicate, tier)
        ->MinTime(1.0)
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
