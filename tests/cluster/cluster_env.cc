#include "cluster/cluster_env.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "testing/idem_process.h"

#ifndef IDEM_SOURCE_DIR
#error "IDEM_SOURCE_DIR must name the source tree (it holds scripts/cluster.sh)"
#endif

namespace idem::cluster_testing {
namespace {

// The last `lines` lines of `text`.
std::string Tail(const std::string& text, size_t lines) {
  std::vector<std::string> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<std::ptrdiff_t>(from), all.end(), "\n");
}

}  // namespace

ClusterEnv::ClusterEnv(std::string kind, std::string dir, std::map<std::string, std::string> env)
    : kind_(std::move(kind)), dir_(std::move(dir)), env_(std::move(env)) {}

ClusterEnv::~ClusterEnv() {
  if (started_) Script({"stop", kind_, dir_ + "/cluster"}).IgnoreError();  // best effort
}

absl::Status ClusterEnv::Start() {
  started_ = true;  // a failed start may leave servers behind: stop them anyway
  absl::Status s = Script({"start", kind_, dir_ + "/cluster"});
  if (!s.ok()) return s;
  return ReadEnv();
}

absl::Status ClusterEnv::Run(const std::string& command, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {command, kind_, dir_ + "/cluster"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::Status s = Script(argv);
  if (!s.ok()) return s;
  return ReadEnv();
}

std::string ClusterEnv::Var(const std::string& name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? "" : it->second;
}

absl::Status ClusterEnv::Script(const std::vector<std::string>& args) {
  // env(1) puts env_ into the script's environment only.
  std::vector<std::string> argv = {"/usr/bin/env"};
  for (const auto& [k, v] : env_) argv.push_back(k + "=" + v);
  argv.insert(argv.end(), {"/bin/bash", IDEM_SOURCE_DIR "/scripts/cluster.sh"});
  argv.insert(argv.end(), args.begin(), args.end());
  const ::idem::testing::RunResult r = ::idem::testing::RunProgram(std::move(argv), dir_);
  if (r.exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("scripts/cluster.sh ", absl::StrJoin(args, " "),
                                               " failed (exit ", r.exit_code,
                                               "); its last words:\n", Tail(r.err, 25)));
  }
  return absl::OkStatus();
}

absl::Status ClusterEnv::ReadEnv() {
  std::ifstream in(dir_ + "/cluster/env.sh");
  if (!in) return absl::UnavailableError("scripts/cluster.sh wrote no env.sh under " + dir_);
  vars_.clear();
  constexpr std::string_view kExport = "export ";
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(kExport)) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    vars_[line.substr(kExport.size(), eq - kExport.size())] = line.substr(eq + 1);
  }
  return absl::OkStatus();
}

}  // namespace idem::cluster_testing
