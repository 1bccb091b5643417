#include "chaos/servers.h"

#include <signal.h>

#include "absl/strings/str_cat.h"

namespace idem::chaos {

absl::StatusOr<std::unique_ptr<ServeSet>> ServeSet::Start(const std::string& dir,
                                                          std::vector<std::string> store_urls,
                                                          const std::string& token,
                                                          std::vector<std::string> extra_args) {
  std::unique_ptr<ServeSet> set(
      new ServeSet(dir, std::move(store_urls), token, std::move(extra_args)));
  set->procs_.resize(set->urls_.size());
  set->starts_.assign(set->urls_.size(), 0);
  for (size_t i = 0; i < set->urls_.size(); ++i) {
    if (absl::Status s = set->StartOne(i); !s.ok()) return s;
  }
  return set;
}

absl::Status ServeSet::StartOne(size_t i) {
  const std::string err = absl::StrCat(dir_, "/serve", i, "-", starts_[i]++, ".err");
  auto p = std::make_unique<testing::ServeProcess>(err);
  std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--store", urls_[i], "--tenant",
                                   "chaos:" + token_, "--log-level", "warn"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  const std::string line = p->Start(args);
  if (!line.starts_with("listening on ") || p->port() == 0) {
    return absl::UnavailableError(absl::StrCat("serve", i, " did not start (", line,
                                               "); stderr: ", testing::ReadWholeFile(err)));
  }
  endpoints_.set_port(i, p->port());
  procs_[i] = std::move(p);
  return absl::OkStatus();
}

absl::Status ServeSet::Restart(size_t i) {
  if (procs_[i] != nullptr) {
    procs_[i]->Stop(SIGKILL);
  }
  return StartOne(i);
}

absl::Status ServeSet::Stall(size_t i) {
  if (kill(procs_[i]->pid(), SIGSTOP) != 0) return absl::InternalError("SIGSTOP failed");
  return absl::OkStatus();
}

absl::Status ServeSet::Resume(size_t i) {
  if (kill(procs_[i]->pid(), SIGCONT) != 0) return absl::InternalError("SIGCONT failed");
  return absl::OkStatus();
}

std::string ServeSet::StderrTail(size_t i) const {
  const std::string text = procs_[i] != nullptr ? procs_[i]->stderr_text() : "";
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

std::vector<FaultKind> ServeSet::Faults(int64_t lease_ms) {
  std::vector<FaultKind> out;
  for (size_t i = 0; i < procs_.size(); ++i) {
    const std::string name = absl::StrCat("serve", i);
    out.push_back({.name = "kill " + name,
                   .inject =
                       [this, i] {
                         procs_[i]->Stop(SIGKILL);
                         return absl::OkStatus();
                       },
                   .heal = [this, i] { return StartOne(i); },
                   .min_hold = std::chrono::milliseconds(0),
                   .max_hold = std::chrono::milliseconds(500)});
    out.push_back({.name = "stall " + name,
                   .inject = [this, i] { return Stall(i); },
                   .heal = [this, i] { return Resume(i); },
                   .min_hold = std::chrono::milliseconds(lease_ms * 3 / 2),
                   .max_hold = std::chrono::milliseconds(lease_ms * 5 / 2)});
  }
  return out;
}

}  // namespace idem::chaos
