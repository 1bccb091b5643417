#include "chaos/scenario.h"

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "chaos/databases.h"
#include "chaos/servers.h"

namespace idem::chaos {
namespace {

// Sets an environment variable for the servers started while it lives.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (!value.empty()) ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

absl::StatusOr<RunResult> RunScenario(const ScenarioOptions& options) {
  const std::string& b = options.backend;
  if (b != "rocksdb" && b != "postgres" && b != "mysql") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", b, "' (rocksdb, postgres or mysql)"));
  }
  std::error_code ec;
  std::filesystem::remove_all(options.work_dir, ec);
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", options.work_dir, ": ", ec.message()));
  }
  DriverOptions d = options.driver;
  d.effect_log_path = options.work_dir + "/effects.log";
  const std::string seed = absl::StrCat("seed=", d.seed, ": ");

  std::unique_ptr<PrivateDatabase> db;
  std::vector<std::string> urls;
  if (b == "rocksdb") {
    urls = {"rocksdb://" + options.work_dir + "/db"};
  } else {
    absl::StatusOr<std::unique_ptr<PrivateDatabase>> started = PrivateDatabase::Start(
        b == "postgres" ? PrivateDatabase::Kind::kPostgres : PrivateDatabase::Kind::kMysql,
        options.services_sh, options.work_dir + "/services");
    if (!started.ok()) {
      return absl::Status(started.status().code(), seed + std::string(started.status().message()));
    }
    db = *std::move(started);
    urls = {db->url(), db->url()};  // two servers sharing the store
  }
  ScopedEnv password("IDEM_STORE_PASSWORD", db != nullptr ? db->password() : "");
  ScopedEnv failpoints("IDEM_FAILPOINTS", options.serve_failpoints);
  absl::StatusOr<std::unique_ptr<ServeSet>> servers =
      ServeSet::Start(options.work_dir, urls, d.token);
  if (!servers.ok()) {
    return absl::Status(servers.status().code(), seed + std::string(servers.status().message()));
  }
  std::vector<FaultKind> faults;
  if (options.inject_faults) {
    faults = (*servers)->Faults(d.lease_ms);
    if (db != nullptr) {
      std::vector<FaultKind> more = db->Faults();
      faults.insert(faults.end(), more.begin(), more.end());
    }
  }
  return RunChaos(d, (*servers)->endpoints(), faults);
}

}  // namespace idem::chaos
