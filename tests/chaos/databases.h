// A private PostgreSQL or MariaDB server for one chaos run, which the run may stop
// and restart at will without touching the shared test servers other tests use.
// It is started by scripts/services.sh itself (IDEM_SERVICES=postgres|mysql, data
// under the given directory, a free port, a random password) and stopped by its pid:
//   PostgreSQL: `pg_ctl stop -m immediate` (no shutdown checkpoint: a crash), then
//               `pg_ctl start` with the options services.sh gave it;
//   MariaDB:    SIGKILL of mariadbd, then the same command line again.
// A FaultProxy (tests/testing/fault_proxy.h) sits between idem and the server; the
// store URL points at the proxy.
//
// Thread safety: Crash/Restart must not run concurrently (the fault scheduler calls
// them one at a time); url()/proxy() may be used anywhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chaos/driver.h"
#include "testing/fault_proxy.h"

namespace idem::chaos {

class PrivateDatabase {
 public:
  enum class Kind { kPostgres, kMysql };

  // Starts a server of `kind` under `dir` (wiped first) with `services_sh` (the path
  // of scripts/services.sh), and a FaultProxy in front of it. Blocks until it
  // answers (seconds). Returns kUnavailable with services.sh's stderr when it does
  // not start (e.g. the server's binaries are not installed).
  static absl::StatusOr<std::unique_ptr<PrivateDatabase>> Start(Kind kind,
                                                                 const std::string& services_sh,
                                                                 const std::string& dir);
  // Stops the server (services.sh stop) and the proxy.
  ~PrivateDatabase();

  // The store URL through the proxy, without the password (see password()).
  const std::string& url() const { return url_; }
  // The password, for IDEM_STORE_PASSWORD (never on a command line).
  const std::string& password() const { return password_; }
  testing::FaultProxy& proxy() { return *proxy_; }

  // Crashes the server (see above) / starts it again and waits until it answers.
  absl::Status Crash();
  absl::Status Restart();

  // "crash <db>" (crash, hold 0.5-2 s, restart) and the proxy's faults: "blackhole",
  // "reset", "delay" (every chunk 150 ms late), "cut before COMMIT" and "cut after
  // COMMIT" (the connection that sends a COMMIT is reset before / after forwarding
  // it), each held 0.3-1.5 s and healed by kPass.
  std::vector<FaultKind> Faults();

 private:
  PrivateDatabase(Kind kind, std::string services_sh, std::string dir)
      : kind_(kind), services_sh_(std::move(services_sh)), dir_(std::move(dir)) {}
  absl::Status Boot();
  absl::Status WaitReady();

  const Kind kind_;
  const std::string services_sh_;
  const std::string dir_;
  std::string url_;
  std::string password_;
  int port_ = 0;
  int pid_ = 0;
  std::vector<std::string> restart_argv_;  // MariaDB: its command line, to run again
  std::unique_ptr<testing::FaultProxy> proxy_;
};

}  // namespace idem::chaos
