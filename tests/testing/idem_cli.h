// Running the real `idem` binary from a test: its path, one run with stdout and
// stderr captured, and the one-line failure contract of SPEC §12.
//
// The binary comes from IDEM_BIN, else from the IDEM_BIN_DEFAULT macro the test's
// CMake target defines. Header-only; used by tests/cli.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace idem::testing {

inline std::string IdemBin() {
  const char* bin = std::getenv("IDEM_BIN");
#ifdef IDEM_BIN_DEFAULT
  if (bin == nullptr || *bin == '\0') bin = IDEM_BIN_DEFAULT;
#endif
  return bin == nullptr ? "" : bin;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Exec {
  int status = -1;  // exit status, or -1 when the process did not exit normally
  std::string out;
  std::string err;
};

// Forks and execs `idem args...` in `dir` (so relative paths land there), stdin
// from /dev/null, stdout to `stdout_fd`, stderr to the file `err_path`. Returns
// the child's pid (or -1); only the parent returns.
inline pid_t SpawnIdem(const std::vector<std::string>& args, const std::string& dir,
                       int stdout_fd, const std::string& err_path) {
  std::vector<std::string> argv_store = {IdemBin()};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || err < 0 || chdir(dir.c_str()) != 0) _exit(127);
    dup2(in, 0);
    dup2(stdout_fd, 1);
    dup2(err, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Runs `idem args...` in `dir` to completion; stdout and stderr go through files
// in `dir` ("stdout", "stderr").
inline Exec RunIdemIn(const std::string& dir, const std::vector<std::string>& args) {
  const std::string out_path = dir + "/stdout";
  const std::string err_path = dir + "/stderr";
  Exec run;
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return run;
  const pid_t pid = SpawnIdem(args, dir, out, err_path);
  close(out);
  int wstatus = 0;
  if (pid > 0 && waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus)) {
    run.status = WEXITSTATUS(wstatus);
  }
  run.out = ReadFile(out_path);
  run.err = ReadFile(err_path);
  return run;
}

// Expects exit `status` with exactly one "idem: …" line on stderr (SPEC §12), and
// nothing on stdout unless `stdout_may_have_output`.
inline void ExpectOneLineFailure(const Exec& r, int status, bool stdout_may_have_output = false) {
  EXPECT_EQ(r.status, status) << r.err;
  if (!stdout_may_have_output) {
    EXPECT_EQ(r.out, "");
  }
  EXPECT_THAT(r.err, ::testing::StartsWith("idem: "));
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
}

}  // namespace idem::testing
