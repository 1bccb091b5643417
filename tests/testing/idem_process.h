// Test support: run the real `idem` binary, the one launcher every test uses.
// RunIdem() runs a subcommand to its end (RunProgram() any program), RunIdemIn() runs
// it inside a directory (relative paths land there), SpawnIdem() starts it with
// stdout on a descriptor of the caller's; ExpectOneLineFailure() checks the
// one-line "idem: ..." failure every subcommand reports. ServeProcess runs
// `idem serve` (or another long-running command) in the background and reads its
// "listening on HOST:PORT" line. The binary is $IDEM_BIN, else IDEM_BIN_DEFAULT (compiled in by CMake).
//
// Thread safety: one ServeProcess per thread; RunIdem, RunIdemIn and RunProgram may
// be called concurrently.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/wait_until.h"

#ifndef IDEM_BIN_DEFAULT
#define IDEM_BIN_DEFAULT ""
#endif

namespace idem::testing {

inline std::string IdemBinary() {
  const char* env = std::getenv("IDEM_BIN");
  return env != nullptr && *env ? env : IDEM_BIN_DEFAULT;
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or could not run
  std::string out;
  std::string err;
};

// `idem args...` as an argv.
inline std::vector<std::string> IdemArgv(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {IdemBinary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return argv_s;
}

// Forks and execs the program `argv_s[0]` (a path) with its arguments in `dir` (so
// relative paths land there; the test's own directory when empty), stdin from
// /dev/null, stdout to `stdout_fd`, stderr to the file `err_path`. Returns the
// child's pid (or -1); only the parent returns.
inline pid_t SpawnProgram(std::vector<std::string> argv_s, const std::string& dir, int stdout_fd,
                          const std::string& err_path) {
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);  // never the test's own stdin
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || err < 0 || (!dir.empty() && chdir(dir.c_str()) != 0)) _exit(127);
    dup2(in, STDIN_FILENO);
    dup2(stdout_fd, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Runs `argv_s` in `dir` as SpawnProgram does, to completion, with stdout and
// stderr in the files `out_path` and `err_path`.
inline RunResult RunToFiles(std::vector<std::string> argv_s, const std::string& dir,
                            const std::string& out_path, const std::string& err_path) {
  RunResult r;
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return r;
  const pid_t pid = SpawnProgram(std::move(argv_s), dir, out, err_path);
  close(out);
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  r.out = ReadWholeFile(out_path);
  r.err = ReadWholeFile(err_path);
  return r;
}

// Runs the program `argv_s[0]` (a path) with its arguments, stdin from /dev/null,
// stdout and stderr captured in files of their own under `scratch_dir`.
inline RunResult RunProgram(std::vector<std::string> argv_s, const std::string& scratch_dir) {
  static int counter = 0;
  const std::string base = scratch_dir + "/run" + std::to_string(getpid()) + "_" +
                           std::to_string(__atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST));
  return RunToFiles(std::move(argv_s), "", base + ".out", base + ".err");
}

// Runs `idem args...` as RunProgram does.
inline RunResult RunIdem(const std::vector<std::string>& args, const std::string& scratch_dir) {
  return RunProgram(IdemArgv(args), scratch_dir);
}

// Starts `idem args...` in `dir` as SpawnProgram does.
inline pid_t SpawnIdem(const std::vector<std::string>& args, const std::string& dir,
                       int stdout_fd, const std::string& err_path) {
  return SpawnProgram(IdemArgv(args), dir, stdout_fd, err_path);
}

// Runs `idem args...` in `dir` to completion; stdout and stderr go through files
// in `dir` ("stdout", "stderr").
inline RunResult RunIdemIn(const std::string& dir, const std::vector<std::string>& args) {
  return RunToFiles(IdemArgv(args), dir, dir + "/stdout", dir + "/stderr");
}

// Expects exit `status` with exactly one "idem: ..." line on stderr, and nothing on
// stdout unless `stdout_may_have_output`.
inline void ExpectOneLineFailure(const RunResult& r, int status,
                                 bool stdout_may_have_output = false) {
  EXPECT_EQ(r.exit_code, status) << r.err;
  if (!stdout_may_have_output) {
    EXPECT_EQ(r.out, "");
  }
  EXPECT_THAT(r.err, ::testing::StartsWith("idem: "));
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
}

// `--store URL` for a subcommand, with a password the URL carries moved into a
// file under `scratch_dir` (`--store-password-file`), as an operator passes it: a
// password on the command line is warned about. URLs of the plain form
// scheme://user:password@host... only (the test services' URLs).
inline std::vector<std::string> StoreArgs(const std::string& url, const std::string& scratch_dir) {
  const size_t start = url.find("://");
  const size_t at = url.find('@');
  const size_t colon = start == std::string::npos ? std::string::npos : url.find(':', start + 3);
  if (start == std::string::npos || at == std::string::npos || colon == std::string::npos ||
      colon > at) {
    return {"--store", url};
  }
  const std::string file = scratch_dir + "/store-password";
  std::ofstream(file) << url.substr(colon + 1, at - colon - 1) << "\n";
  chmod(file.c_str(), 0600);
  return {"--store", url.substr(0, colon) + url.substr(at), "--store-password-file", file};
}

// One long-running child (`idem serve`, `idem proxy`, `idem worker`, ...): stdin
// from /dev/null, stdout on a pipe (a server's first line announces its port),
// stderr in a file. Killed (SIGKILL) when destroyed if still running.
class ServeProcess {
 public:
  explicit ServeProcess(std::string stderr_path) : stderr_path_(std::move(stderr_path)) {}
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
    // A sanitizer's report ends the server (halt_on_error) and the test then sees
    // only a dropped connection: show the report with the test's output.
    const std::string err = stderr_text();
    if (err.find("Sanitizer") != std::string::npos ||
        err.find("runtime error:") != std::string::npos) {
      fprintf(stderr, "== stderr of the server (%s):\n%s\n", stderr_path_.c_str(),
              err.substr(0, 64 * 1024).c_str());
    }
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Starts `idem serve args...` and returns its first stdout line ("" if it exits
  // or stays silent for 30 s).
  std::string Start(const std::vector<std::string>& args) {
    std::vector<std::string> argv_s = IdemArgv({"serve"});
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    return StartProgram(argv_s);
  }

  // Starts `argv` (a program that announces "listening on HOST:PORT" first, e.g.
  // `idem proxy`) and returns its first stdout line, as Start().
  std::string StartProgram(std::vector<std::string> argv_s) {
    if (!Spawn(std::move(argv_s))) return "";
    const std::string line = ReadLine(std::chrono::seconds(30));
    size_t colon = line.rfind(':');
    if (line.starts_with("listening on ") && colon != std::string::npos) {
      port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
    }
    return line;
  }

  // Starts `argv` without reading its output (a program that announces nothing,
  // e.g. `idem worker`). False when it could not be started.
  bool Spawn(std::vector<std::string> argv_s) {
    // Everything the child needs is made before fork(): the test's other threads
    // may hold malloc's lock at the fork, so the child must not allocate.
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      bool replaced = false;
      for (const auto& [name, value] : env_) {
        replaced = replaced || (entry.starts_with(name) && entry.size() > name.size() &&
                                entry[name.size()] == '=');
      }
      if (!replaced) env_s.emplace_back(entry);
    }
    for (const auto& [name, value] : env_) env_s.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      if (nofile_limit_ > 0) {
        const rlimit lim{nofile_limit_, nofile_limit_};
        setrlimit(RLIMIT_NOFILE, &lim);
      }
      int in = open("/dev/null", O_RDONLY);  // never the test's own stdin
      dup2(in, STDIN_FILENO);
      dup2(fds[1], STDOUT_FILENO);
      int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    stdout_fd_ = fds[0];
    return pid_ > 0;
  }

  // The next stdout line, or "" at EOF or after `timeout`.
  std::string ReadLine(std::chrono::milliseconds timeout) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      ssize_t n = read(stdout_fd_, &c, 1);
      if (n <= 0 || c == '\n') break;
      line += c;
    }
    return line;
  }

  // True once stderr contains `text` (polled up to `timeout`).
  bool WaitForStderr(const std::string& text, std::chrono::milliseconds timeout) {
    return WaitUntil([&] { return stderr_text().find(text) != std::string::npos; }, timeout);
  }

  // Sends `sig` (if non-zero) and waits up to `timeout` for the exit; returns the exit
  // status, or -1 on timeout / a death by signal.
  int Stop(int sig = SIGTERM, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (pid_ <= 0) return -1;
    if (sig != 0) kill(pid_, sig);
    int status = 0;
    const bool exited = WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                                  timeout, std::chrono::milliseconds(5));
    if (!exited) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // Waits for the process to exit by itself.
  int WaitExit() { return Stop(0); }

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string stderr_text() const { return ReadWholeFile(stderr_path_); }

  // Before Start(): the server runs with RLIMIT_NOFILE = n (soft and hard).
  void set_nofile_limit(rlim_t n) { nofile_limit_ = n; }
  // Before Start(): the server's environment also has `name`=`value` (e.g.
  // IDEM_FAILPOINTS), the test's own is left alone.
  void set_env(std::string name, std::string value) {
    env_.emplace_back(std::move(name), std::move(value));
  }

 private:
  rlim_t nofile_limit_ = 0;
  std::vector<std::pair<std::string, std::string>> env_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  uint16_t port_ = 0;
};

// Kilobytes of the process's resident set: "VmRSS" now, "VmHWM" its peak.
inline int64_t MemoryKb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Whether the process runs ThreadSanitizer's runtime: the TSan run starts the TSan-built
// `idem` from this (GCC-built) test binary (scripts/sanitize.sh), so the test's own
// build says nothing about the server's; a TSan-built server maps libtsan either way.
inline bool UnderThreadSanitizer(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(in, line);) {
    if (line.find("/libtsan.so") != std::string::npos) return true;
  }
  return false;
}

}  // namespace idem::testing
