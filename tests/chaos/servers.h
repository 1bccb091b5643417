// The `idem serve` processes of a chaos run and the faults that hit them: SIGKILL and
// restart (on the same store; the port may change, Endpoints follows it) and
// SIGSTOP/SIGCONT held past the lease (a GC-pause-like stall: the clients' requests
// to it hang, their leases run out, other clients take over, and the stalled
// server then answers the requests it had read).
//
// The binary is idem::testing::IdemBinary() ($IDEM_BIN, else the path CMake compiled
// in). A store password, when the store needs one, goes in IDEM_STORE_PASSWORD of
// this process's environment (inherited), never on the command line.
//
// Thread safety: Kill/Restart/Stall/Resume of one server must not run concurrently
// (the fault scheduler calls them one at a time); endpoints() may be read anywhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chaos/driver.h"
#include "testing/idem_process.h"

namespace idem::chaos {

class ServeSet {
 public:
  // Starts `store_urls.size()` servers, server i on store_urls[i] (the same URL
  // twice: two servers sharing one store), each with tenant token `token`, logs in
  // `dir`/serve<i>-<n>.err. Returns kUnavailable (with the stderr tail) when one
  // does not announce its port.
  static absl::StatusOr<std::unique_ptr<ServeSet>> Start(const std::string& dir,
                                                         std::vector<std::string> store_urls,
                                                         const std::string& token,
                                                         std::vector<std::string> extra_args = {});

  Endpoints& endpoints() { return endpoints_; }
  size_t size() const { return procs_.size(); }

  // SIGKILLs server i and starts it again on the same store; blocks until it
  // listens. Returns kUnavailable when it does not come back.
  absl::Status Restart(size_t i);
  // SIGSTOP / SIGCONT of server i.
  absl::Status Stall(size_t i);
  absl::Status Resume(size_t i);
  // The last lines of server i's current stderr log.
  std::string StderrTail(size_t i) const;

  // For every server: "kill serve<i>" (SIGKILL, hold, restart) and "stall serve<i>"
  // (SIGSTOP held for 1.5-2.5 leases of `lease_ms`, SIGCONT).
  std::vector<FaultKind> Faults(int64_t lease_ms);

 private:
  ServeSet(std::string dir, std::vector<std::string> urls, std::string token,
           std::vector<std::string> extra)
      : dir_(std::move(dir)),
        urls_(std::move(urls)),
        token_(std::move(token)),
        extra_(std::move(extra)),
        endpoints_(urls_.size()) {}
  absl::Status StartOne(size_t i);

  const std::string dir_;
  const std::vector<std::string> urls_;
  const std::string token_;
  const std::vector<std::string> extra_;
  Endpoints endpoints_;
  std::vector<std::unique_ptr<testing::ServeProcess>> procs_;
  std::vector<int> starts_;  // per server: how many times started (names its log)
};

}  // namespace idem::chaos
