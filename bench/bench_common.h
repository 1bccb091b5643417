// What the benchmarks share: unique keys, the per-variant results behind the
// ratio tables, timing one operation per iteration, and a console reporter that
// keeps each benchmark's time for those tables. Header-only; bench/ only.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "benchmark/benchmark.h"

namespace idem::bench {

// A key no other run or iteration uses: `prefix`-PID-N.
inline std::string NextKey(const std::string& prefix) {
  static std::atomic<long> n{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(n.fetch_add(1));
}

// µs per operation by "store/variant", filled by TimeEach for the ratio tables.
inline std::map<std::string, double>& Results() {
  static auto* results = new std::map<std::string, double>();
  return *results;
}

// Times `once(key)` per iteration, with a fresh key made outside the timed part,
// and records the mean under `name`. A failed operation stops the benchmark.
template <typename Once>
void TimeEach(benchmark::State& state, const std::string& name, const char* key_prefix,
              Once once) {
  double seconds = 0;
  for (auto _ : state) {
    const std::string key = NextKey(key_prefix);
    auto start = std::chrono::steady_clock::now();
    absl::Status s = once(key);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  if (state.iterations() > 0) {
    Results()[name] = 1e6 * seconds / static_cast<double>(state.iterations());
  }
}

// Console output as usual, and each benchmark's time per iteration kept for the
// ratio table (in the benchmark's own unit; they all use microseconds).
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  // Colors only on a terminal, as the library's own default reporter does.
  RecordingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      // Keyed by the registered name, without the "/min_time:…/real_time" suffixes.
      micros_[run.run_name.function_name] = run.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  const std::map<std::string, double>& micros() const { return micros_; }

 private:
  std::map<std::string, double> micros_;
};

}  // namespace idem::bench
