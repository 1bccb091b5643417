// idem on a three-node MariaDB Galera cluster (many servers on one database act as one): two `idem
// serve` processes on different nodes, eight clients racing for the same keys across
// them, and the second node SIGKILLed and rejoined while the load runs. Galera
// decides conflicting writes of two nodes at commit (certification); the loser's
// transaction is rolled back with a deadlock error, which idem must turn into a retry
// (its claim retries, or 409/503 to the client), never into a second winner. The
// chaos checker judges the whole history: one holder per effect, acked completes
// durable and byte-identical, one result per key, only errors the API allows, every
// key converged (read by a server on the third node without the in-process cache);
// the rejoined node's server then replays the same bytes for every key.
//
// The cluster is started for the test by scripts/cluster.sh (fails without
// mariadb-server, galera-4 or rsync).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <thread>

#include "chaos/checker.h"
#include "cluster/cluster_env.h"
#include "cluster/load.h"
#include "http/client.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::cluster_testing {
namespace {

using ::idem::http::testing::Fetch;
using ::idem::testing::ServeProcess;
using ::idem::testing::TempDir;
using ::idem::testing::WaitUntil;

// A global status counter of one node, read over its socket as the database's
// admin (mariadb-install-db gives the OS user running it socket access).
int64_t NodeStatus(const std::string& dir, int node, const std::string& name) {
  const std::string cmd = "mariadb --no-defaults --socket=" + dir + "/cluster/galera/node" +
                          std::to_string(node) + "/mysqld.sock -u root -N -B -e \"SHOW GLOBAL " +
                          "STATUS LIKE '" + name + "'\" 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[256] = {0};
  std::string out;
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  const size_t tab = out.find('\t');
  return tab == std::string::npos ? -1 : std::atoll(out.c_str() + tab + 1);
}

std::map<std::string, int> CountAnswers(const std::vector<chaos::Operation>& ops,
                                        chaos::OpKind kind) {
  std::map<std::string, int> by;
  for (const chaos::Operation& op : ops) {
    if (op.kind != kind) continue;
    ++by[std::to_string(op.status) + (op.error.empty() || op.status == 0 ? "" : " " + op.error)];
  }
  return by;
}

std::string Show(const std::map<std::string, int>& by) {
  std::string s;
  for (const auto& [k, v] : by) s += (s.empty() ? "" : ", ") + k + ": " + std::to_string(v);
  return s;
}

TEST(Galera, TwoServersOnTwoNodesOneWinnerPerKeyThroughANodeRestart) {
  TempDir dir;
  ClusterEnv cluster("galera", dir.path());
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status up = cluster.Start();
  ASSERT_TRUE(up.ok()) << up.message();
  const auto brought_up = std::chrono::steady_clock::now() - t0;

  ServeProcess a(dir.file("a.err")), b(dir.file("b.err"));
  auto args = [](const std::string& url) {
    return std::vector<std::string>{"--listen", "127.0.0.1:0", "--store", url, "--tenant",
                                    "t:tok"};
  };
  // Started together: both may create the schema at once, on different nodes (DDL
  // is replicated in total order).
  auto started_a = std::async(std::launch::async,
                              [&] { return a.Start(args(cluster.Var("IDEM_CLUSTER_GALERA_URL_1"))); });
  auto started_b = std::async(std::launch::async,
                              [&] { return b.Start(args(cluster.Var("IDEM_CLUSTER_GALERA_URL_2"))); });
  ASSERT_THAT(started_a.get(), ::testing::StartsWith("listening on ")) << a.stderr_text();
  ASSERT_THAT(started_b.get(), ::testing::StartsWith("listening on ")) << b.stderr_text();

  int64_t conflicts_before = 0;
  for (int node : {1, 2}) {
    conflicts_before += NodeStatus(dir.path(), node, "wsrep_local_cert_failures") +
                        NodeStatus(dir.path(), node, "wsrep_local_bf_aborts");
  }

  absl::StatusOr<std::unique_ptr<chaos::EffectLog>> effects =
      chaos::EffectLog::Open(dir.file("effects.log"));
  ASSERT_TRUE(effects.ok()) << effects.status();
  chaos::History history;
  Load load({.ports = {a.port(), b.port()}, .clients = 8, .lease_ms = 1500,
             .deadline = std::chrono::seconds(90 + LoadTailOperations() / 20)},
            &history, effects->get());
  std::atomic<int64_t> ops{0};
  std::atomic<bool> stop{false};
  std::thread runner([&] { load.Run(&ops, &stop); });

  // Node 2 dies once the load is under way; the load goes on through node 1 while it
  // is down, and node 2 rejoins (catching up by IST) while the load still runs.
  const bool underway = WaitUntil([&] { return ops.load() >= 150; }, std::chrono::seconds(60));
  absl::Status killed = cluster.Run("kill", {"2"});
  const int64_t at_kill = ops.load();
  WaitUntil([&] { return ops.load() >= at_kill + 150; }, std::chrono::seconds(10));
  const int64_t at_rejoin = ops.load();
  absl::Status rejoined = cluster.Run("rejoin", {"2"});
  const int64_t after_rejoin = ops.load();
  FinishLoad(ops, stop, runner);
  ASSERT_TRUE(underway) << "the load did not get going";
  ASSERT_TRUE(killed.ok()) << killed.message();
  ASSERT_TRUE(rejoined.ok()) << rejoined.message();

  // The final reads on a fresh server on node 3 without the in-process cache (what
  // the database holds, not what a server remembers); server B (node 2, rejoined)
  // must replay the same bytes for every key.
  ServeProcess audit(dir.file("audit.err"));
  std::vector<std::string> audit_args = args(cluster.Var("IDEM_CLUSTER_GALERA_URL_3"));
  audit_args.insert(audit_args.end(), {"--cache-entries", "0"});
  ASSERT_THAT(audit.Start(audit_args), ::testing::StartsWith("listening on "))
      << audit.stderr_text();
  load.FinalReads(audit.port());
  const std::vector<chaos::Operation> all = history.Operations();
  std::map<std::string, std::string> final_a;
  for (const chaos::Operation& op : all) {
    if (op.kind == chaos::OpKind::kReplay) final_a[op.key] = op.body;
  }
  int differ = 0;
  for (const auto& [key, body] : final_a) {
    http::testing::ClientResponse r;
    WaitUntil(  // node 2 applies the last write-sets shortly after
        [&] {
          r = Fetch(b.port(), "POST", "/v1/claims",
                    R"({"biz_type":"pay","key":")" + key + R"(","lease_ms":1500})", "tok");
          return r.status == 200 && r.body == body;
        },
        std::chrono::seconds(30), std::chrono::milliseconds(100));
    if (r.status != 200 || r.body != body) {
      ++differ;
      ADD_FAILURE() << key << ": node 3 replays " << body << ", server B " << r.status << " "
                    << r.body;
    }
  }
  EXPECT_EQ(differ, 0);

  int64_t conflicts_after = 0;
  for (int node : {1, 2}) {
    conflicts_after += NodeStatus(dir.path(), node, "wsrep_local_cert_failures") +
                       NodeStatus(dir.path(), node, "wsrep_local_bf_aborts");
  }
  absl::StatusOr<std::vector<chaos::Effect>> effect_list =
      chaos::ReadEffectLog(dir.file("effects.log"));
  ASSERT_TRUE(effect_list.ok()) << effect_list.status();
  const chaos::Report report = chaos::Check(all, *effect_list);
  std::cout << "galera: brought up in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(brought_up).count()
            << " ms; " << all.size() << " operations, " << effect_list->size()
            << " effects; node 2 killed after " << at_kill << ", rejoin started after "
            << at_rejoin << " and done after " << after_rejoin << " operations\n"
            << "claims: " << Show(CountAnswers(all, chaos::OpKind::kClaim)) << "\n"
            << "completes: " << Show(CountAnswers(all, chaos::OpKind::kComplete)) << "\n"
            << "certification failures + brute-force aborts on nodes 1 and 2 "
               "(node 2's since its restart): "
            << conflicts_after - conflicts_before << "\n"
            << report.Table();
  EXPECT_TRUE(report.ok()) << report.Table();
  EXPECT_EQ(a.Stop(), 0) << a.stderr_text();
  EXPECT_EQ(b.Stop(), 0) << b.stderr_text();
  EXPECT_EQ(audit.Stop(), 0) << audit.stderr_text();
}

}  // namespace
}  // namespace idem::cluster_testing
