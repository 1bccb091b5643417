#include "cluster/cluster_env.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef IDEM_SOURCE_DIR
#error "IDEM_SOURCE_DIR must name the source tree (it holds scripts/cluster.sh)"
#endif

namespace idem::cluster_testing {
namespace {

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
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
  const std::string err_path = dir_ + "/cluster-script.err";
  std::vector<std::string> argv_s = {"/bin/bash", IDEM_SOURCE_DIR "/scripts/cluster.sh"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [k, v] : env_) setenv(k.c_str(), v.c_str(), 1);
    const int in = open("/dev/null", O_RDONLY);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(in, STDIN_FILENO);
    dup2(err, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat("scripts/cluster.sh ", absl::StrJoin(args, " "),
                                               " failed; its last words:\n",
                                               Tail(err_path, 25)));
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
