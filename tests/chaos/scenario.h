// One chaos run on one backend, set up and torn down whole: what chaos_test and the
// chaos_driver binary (bench/chaos.sh) run.
//   rocksdb   one `idem serve` on rocksdb://; faults: kill and stall of the server
//   postgres  a private PostgreSQL (databases.h) behind a fault proxy, two servers
//             sharing it; faults: kill/stall of each server, the database crashed
//             (`pg_ctl stop -m immediate`) and restarted, the proxy's faults
//   mysql     the same with a private MariaDB (SIGKILL and restart)
//
// Thread safety: one scenario at a time per process (it sets IDEM_STORE_PASSWORD
// and IDEM_FAILPOINTS in this process's environment for the servers it starts).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "chaos/driver.h"

namespace idem::chaos {

struct ScenarioOptions {
  std::string backend;      // "rocksdb", "postgres" or "mysql"
  std::string work_dir;     // wiped and used for stores, logs and the effect log
  std::string services_sh;  // path of scripts/services.sh (postgres, mysql)
  bool inject_faults = true;
  // IDEM_FAILPOINTS for the servers (e.g. "guard.finish.skip_token_check=on"); ""
  // for none. Only a test build of idem reads it.
  std::string serve_failpoints;
  DriverOptions driver;  // effect_log_path is set to work_dir/effects.log
};

// Runs the scenario. Returns kInvalidArgument for an unknown backend, kUnavailable
// when a server or database does not start, and RunChaos's errors; a run that
// breaks a property is not an error (see RunResult::report). The error text and the
// result's Summary() name the seed.
absl::StatusOr<RunResult> RunScenario(const ScenarioOptions& options);

}  // namespace idem::chaos
