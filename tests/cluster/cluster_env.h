// Test support for the `cluster` tests: a replicated database topology
// of scripts/cluster.sh (a three-node Galera cluster, or a PostgreSQL primary with a
// streaming standby) started for one test in a directory of its own and stopped when
// the object goes away, and the script's fault commands (kill/rejoin a node, detach
// the standby, fail over).
//
// A missing server binary makes Start() fail with the script's one-line reason, so a
// test that needs the topology FAILS (never skips) on a machine without the packages.
//
// Thread safety: one object per test; Run() may be called from any thread, but the
// script's commands on one topology must not overlap.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace idem::cluster_testing {

class ClusterEnv {
 public:
  // `kind`: "galera" or "pgstandby"; `dir`: where the topology keeps all its data
  // (wiped first). `env` adds variables to the script's environment
  // (e.g. IDEM_CLUSTER_PG_SYNC=0).
  ClusterEnv(std::string kind, std::string dir, std::map<std::string, std::string> env = {});
  ~ClusterEnv();  // `scripts/cluster.sh stop KIND DIR` when Start() ran
  ClusterEnv(const ClusterEnv&) = delete;
  ClusterEnv& operator=(const ClusterEnv&) = delete;

  // `start KIND DIR`, then reads DIR/env.sh. Errors: kUnavailable with the last
  // lines the script wrote to stderr.
  absl::Status Start();

  // `scripts/cluster.sh COMMAND KIND DIR ARGS...` (kill, rejoin, detach, failover);
  // rereads DIR/env.sh afterwards (a rejoined node has a new pid). Blocks until the
  // script ends. Errors: kUnavailable with the script's stderr tail.
  absl::Status Run(const std::string& command, const std::vector<std::string>& args = {});

  // The value env.sh exports for `name`, "" when it exports none.
  std::string Var(const std::string& name) const;

 private:
  absl::Status Script(const std::vector<std::string>& args);
  absl::Status ReadEnv();

  const std::string kind_, dir_;
  const std::map<std::string, std::string> env_;
  std::map<std::string, std::string> vars_;
  bool started_ = false;
};

}  // namespace idem::cluster_testing
