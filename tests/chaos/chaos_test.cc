// Short seeded chaos runs, one per backend: clients claim, perform an
// effect and complete while servers are killed and stalled and, for the shared
// stores, the database is crashed and the connections to it are cut, black-holed
// and delayed. The checker's table is printed; any violation fails the test with
// the seed. IDEM_CHAOS_SEED overrides the seed (a failure names the one to use).
//
// And the checker catches a seeded bug: with the failpoint
// guard.finish.skip_token_check armed in the servers, a stale token's complete is
// accepted, and the checker must report it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "chaos/scenario.h"

namespace idem::chaos {
namespace {

using ::testing::HasSubstr;

ScenarioOptions Options(const std::string& backend, uint64_t seed) {
  ScenarioOptions o;
  o.backend = backend;
  o.work_dir = std::string(IDEM_CHAOS_WORK_DIR) + "/" + backend + "-" + std::to_string(getpid());
  o.services_sh = IDEM_SERVICES_SH;
  o.driver.seed = seed;
  o.driver.clients = 8;
  o.driver.duration = std::chrono::seconds(20);
  o.driver.pause_probability = 0.05;
  return o;
}

// Runs `o` and expects no violation; returns the run's takeovers (claims answered
// 201 with takeover: true).
int ExpectClean(const ScenarioOptions& o, size_t min_fault_kinds = 2) {
  absl::StatusOr<RunResult> r = RunScenario(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 0;
  std::cout << r->Summary();
  for (const std::string& f : r->fault_log) std::cout << "  fault " << f << "\n";
  EXPECT_TRUE(r->report.ok()) << "seed=" << r->seed << " (rerun with IDEM_CHAOS_SEED="
                              << r->seed << ")\n"
                              << r->report.Table();
  // Not a run that did nothing: keys finished and faults landed.
  EXPECT_GE(r->report.Get(kDurable).checked, 20) << r->Summary();
  EXPECT_GE(r->faults.size(), min_fault_kinds) << r->Summary();
  if (r->report.ok()) std::filesystem::remove_all(o.work_dir);
  int takeovers = 0;
  for (const Operation& op : r->history) takeovers += op.takeover ? 1 : 0;
  return takeovers;
}

TEST(Chaos, Rocksdb) { ExpectClean(Options("rocksdb", SeedFromEnv(1501))); }

TEST(Chaos, Postgres) { ExpectClean(Options("postgres", SeedFromEnv(1502))); }

TEST(Chaos, Mysql) { ExpectClean(Options("mysql", SeedFromEnv(1503))); }

// Clients that stall past their leases half the time, so keys are taken over and
// the old holders complete late with their stale tokens.
ScenarioOptions StallingClients(uint64_t seed, const std::string& suffix) {
  ScenarioOptions o = Options("rocksdb", seed);
  o.work_dir += suffix;
  o.inject_faults = false;
  o.driver.duration = std::chrono::seconds(8);
  o.driver.pause_probability = 0.5;
  o.driver.fail_probability = 0;
  return o;
}

// The control of the next test: the same clients, no bug, no violation.
TEST(Chaos, StallingClientsWithoutTheBugAreClean) {
  // Stale completes were sent (keys were taken over) and all of them lost.
  EXPECT_GT(ExpectClean(StallingClients(SeedFromEnv(1504), "-control"), 0), 5);
}

TEST(Chaos, CheckerCatchesTheSeededStaleTokenBug) {
  ScenarioOptions o = StallingClients(SeedFromEnv(1504), "-bug");
  o.serve_failpoints = "guard.finish.skip_token_check=on";
  absl::StatusOr<RunResult> r = RunScenario(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << r->Summary();
  const PropertyResult& fencing = r->report.Get(kSingleHolder);
  EXPECT_GT(fencing.violations, 0) << r->Summary();
  EXPECT_THAT(fencing.first_example, HasSubstr("stale token accepted")) << r->Summary();
  EXPECT_THAT(r->Summary(), HasSubstr("seed=" + std::to_string(r->seed) + ": "));
  std::filesystem::remove_all(o.work_dir);
}

}  // namespace
}  // namespace idem::chaos
