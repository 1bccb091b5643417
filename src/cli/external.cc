#include "cli/external.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/reason.h"

namespace idem::cli {
namespace {

constexpr std::string_view kPrefix = "idem-";

bool IsCommandName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::vector<std::string> ExternalCommandDirs() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return {};
  std::string dir = exe.substr(0, slash == 0 ? 1 : slash);
  return {dir, dir + "/../libexec/idem"};
}

std::optional<std::string> FindExternalCommand(std::string_view name) {
  if (!IsCommandName(name)) return std::nullopt;
  for (const std::string& dir : ExternalCommandDirs()) {
    std::string path = dir + "/" + std::string(kPrefix) + std::string(name);
    if (IsExecutableFile(path)) return path;
  }
  return std::nullopt;
}

std::vector<std::string> ListExternalCommands() {
  std::vector<std::string> names;
  for (const std::string& dir : ExternalCommandDirs()) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = readdir(d)) {
      std::string_view file = e->d_name;
      if (!file.starts_with(kPrefix)) continue;
      std::string_view name = file.substr(kPrefix.size());
      if (IsCommandName(name) && IsExecutableFile(dir + "/" + std::string(file))) {
        names.emplace_back(name);
      }
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

int ExecExternalCommand(const std::string& path, int argc, char** argv, int skip) {
  std::vector<char*> args;
  args.push_back(const_cast<char*>(path.c_str()));
  for (int i = 1; i < argc; ++i) {
    if (i != skip) args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  PrintReason(absl::StrCat("cannot run ", path, ": ", std::strerror(errno)));
  return kExitFailure;
}

}  // namespace idem::cli
