// idem on a PostgreSQL primary with a streaming standby: `idem serve`
// runs with both hosts in its store URL (libpq multi-host with
// target_session_attrs=read-write, so it connects to whichever server takes writes),
// eight clients claim and complete, the standby is cut off from the primary, the
// primary is SIGKILLed and the standby promoted, and the load goes on there.
//
// The same run twice, the replication mode the only difference:
// - synchronous (synchronous_standby_names = the standby): while the standby is cut
//   off no commit is acknowledged (commits wait for it), so no acknowledged complete
//   can be lost; the chaos checker finds no violation.
// - asynchronous: commits are acknowledged without the standby; every complete
//   acknowledged between the cut and the failover is lost with the primary. The
//   checker reports those acknowledged completes as not durable: the loss the
//   synchronous mode prevents, shown deterministically (the cut is held for a fixed
//   number of acknowledged operations, not left to replication lag).
//
// The topology is started for each test by scripts/cluster.sh (fails without
// postgresql-15).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include "chaos/checker.h"
#include "cluster/cluster_env.h"
#include "cluster/load.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::cluster_testing {
namespace {

using ::idem::testing::ServeProcess;
using ::idem::testing::TempDir;
using ::idem::testing::WaitUntil;
using Clock = chaos::Clock;

struct FailoverRun {
  chaos::Report report;
  int64_t operations = 0;
  int64_t completes_acked = 0;
  // Completes answered 200 after the standby was cut off (its catch-up done) and
  // before the primary was killed.
  int64_t acked_while_cut = 0;
  // ... counted from when the cut began (it first waits for the standby to catch up)
  // to when the failover ended: until the failover kills it, the primary goes on
  // acknowledging what the standby never gets.
  int64_t acked_since_cut_began = 0;
  int64_t acked_after_failover = 0;
};

void RunFailover(bool synchronous, FailoverRun* out) {
  TempDir dir;
  ClusterEnv cluster("pgstandby", dir.path(),
                     {{"IDEM_CLUSTER_PG_SYNC", synchronous ? "1" : "0"}});
  const absl::Status up = cluster.Start();
  ASSERT_TRUE(up.ok()) << up.message();
  const std::string url = cluster.Var("IDEM_CLUSTER_PG_URL");
  ASSERT_THAT(url, ::testing::HasSubstr(",127.0.0.1:"));
  ASSERT_THAT(url, ::testing::HasSubstr("target_session_attrs=read-write"));

  ServeProcess serve(dir.file("serve.err"));
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();

  absl::StatusOr<std::unique_ptr<chaos::EffectLog>> effects =
      chaos::EffectLog::Open(dir.file("effects.log"));
  ASSERT_TRUE(effects.ok()) << effects.status();
  chaos::History history;
  Load load({.ports = {serve.port()}, .clients = 8, .lease_ms = 1500,
             .deadline = std::chrono::seconds(60 + LoadTailOperations() / 20)},
            &history, effects->get());
  std::atomic<int64_t> ops{0};
  std::atomic<bool> stop{false};
  std::thread runner([&] { load.Run(&ops, &stop); });

  const bool underway = WaitUntil([&] { return ops.load() >= 100; }, std::chrono::seconds(60));
  const auto cut_began = Clock::now();
  const absl::Status detached = cluster.Run("detach");
  const auto cut = Clock::now();
  // Held for 150 more operations (asynchronous: acknowledged by the primary alone),
  // or 2 s when nothing is acknowledged (synchronous: every commit waits).
  const int64_t at_cut = ops.load();
  WaitUntil([&] { return ops.load() >= at_cut + 150; }, std::chrono::seconds(2));
  const auto failover_began = Clock::now();
  const absl::Status failed_over = cluster.Run("failover");
  const auto failed_over_at = Clock::now();
  FinishLoad(ops, stop, runner);
  ASSERT_TRUE(underway) << "the load did not get going";
  ASSERT_TRUE(detached.ok()) << detached.message();
  ASSERT_TRUE(failed_over.ok()) << failed_over.message();

  // The final reads through a fresh server without the in-process cache: what the
  // promoted standby holds. (The load's server still remembers the results it saw
  // completed, lost or not, and answers their duplicates from memory.)
  ServeProcess audit(dir.file("audit.err"));
  ASSERT_THAT(audit.Start({"--listen", "127.0.0.1:0", "--store", url, "--tenant", "t:tok",
                           "--cache-entries", "0"}),
              ::testing::StartsWith("listening on "))
      << audit.stderr_text();
  load.FinalReads(audit.port());
  const std::vector<chaos::Operation> all = history.Operations();
  absl::StatusOr<std::vector<chaos::Effect>> effect_list =
      chaos::ReadEffectLog(dir.file("effects.log"));
  ASSERT_TRUE(effect_list.ok()) << effect_list.status();
  out->report = chaos::Check(all, *effect_list);
  out->operations = static_cast<int64_t>(all.size());
  std::map<int, int> claims, completes;
  for (const chaos::Operation& op : all) {
    if (op.kind == chaos::OpKind::kClaim) ++claims[op.status];
    if (op.kind != chaos::OpKind::kComplete) continue;
    ++completes[op.status];
    if (op.status != 200) continue;
    ++out->completes_acked;
    if (op.complete > cut && op.complete < failover_began) ++out->acked_while_cut;
    if (op.complete > cut_began && op.complete < failed_over_at) ++out->acked_since_cut_began;
    if (op.complete > failed_over_at) ++out->acked_after_failover;
  }
  auto show = [](const std::map<int, int>& m) {
    std::string s;
    for (auto [k, v] : m) s += (s.empty() ? "" : ", ") + std::to_string(k) + ": " + std::to_string(v);
    return s;
  };
  std::cout << (synchronous ? "synchronous" : "asynchronous") << " standby: " << all.size()
            << " operations, " << effect_list->size() << " effects; completes acknowledged: "
            << out->completes_acked << " (" << out->acked_while_cut
            << " while the standby was cut off, " << out->acked_since_cut_began
            << " from the cut to the end of the failover, " << out->acked_after_failover
            << " after the failover)\nclaims by status: " << show(claims)
            << "\ncompletes by status: " << show(completes) << "\nfailover took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(failed_over_at -
                                                                     failover_began)
                   .count()
            << " ms\n"
            << out->report.Table();
  EXPECT_EQ(serve.Stop(), 0) << serve.stderr_text();
  EXPECT_EQ(audit.Stop(), 0) << audit.stderr_text();
}

TEST(PostgresFailover, SynchronousStandbyLosesNoAcknowledgedComplete) {
  FailoverRun run;
  ASSERT_NO_FATAL_FAILURE(RunFailover(/*synchronous=*/true, &run));
  EXPECT_EQ(run.acked_while_cut, 0) << "a commit was acknowledged without the standby";
  EXPECT_GT(run.acked_after_failover, 0) << "the load did not go on on the promoted standby";
  EXPECT_TRUE(run.report.ok()) << run.report.Table();
}

TEST(PostgresFailover, AsynchronousStandbyLosesTheCompletesAcknowledgedWhileCutOff) {
  FailoverRun run;
  ASSERT_NO_FATAL_FAILURE(RunFailover(/*synchronous=*/false, &run));
  ASSERT_GT(run.acked_while_cut, 0) << "nothing was acknowledged while the standby was cut off";
  EXPECT_GT(run.acked_after_failover, 0) << "the load did not go on on the promoted standby";
  // Every complete acknowledged after the cut is gone from the promoted standby;
  // those acknowledged while the standby caught up, or during the failover (by the
  // primary before it was killed, or by the promoted standby), may or may not be.
  const chaos::PropertyResult& durable = run.report.Get(chaos::kDurable);
  EXPECT_GE(durable.violations, run.acked_while_cut);
  EXPECT_LE(durable.violations, run.acked_since_cut_began);
}

}  // namespace
}  // namespace idem::cluster_testing
