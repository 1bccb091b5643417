// What the fuzzers (tests/fuzz/) share: a property check that aborts with a
// message, so libFuzzer saves the input as a crash, and a scratch file for the
// readers that take a path.
//
// Thread safety: plain functions.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define IDEM_FUZZ_HAS_SANITIZER_REPORT 1
#endif

namespace idem::fuzz {

// Aborts with `what` (and `detail`) unless `ok`. The message goes where the
// sanitizer's reports go: stderr, or libFuzzer's copy of it when the target's own
// stderr is closed (-close_fd_mask=2, as bench/fuzz.sh runs them).
inline void Check(bool ok, std::string_view what, std::string_view detail = {}) {
  if (ok) return;
  std::string line = "fuzz property violated: ";
  line.append(what);
  if (!detail.empty()) line.append(": ").append(detail);
#ifdef IDEM_FUZZ_HAS_SANITIZER_REPORT
  __sanitizer_report_error_summary(line.c_str());
#else
  std::fprintf(stderr, "%s\n", line.c_str());
#endif
  std::abort();
}

// An error a parser reports on bad input: kInvalidArgument with a message.
inline void CheckBadInput(const absl::Status& s, std::string_view what) {
  Check(s.code() == absl::StatusCode::kInvalidArgument,
        "an error on bad input is kInvalidArgument", what);
  Check(!s.message().empty(), "an error on bad input says what is wrong", what);
}

// A file of this process's own under $TMPDIR, else /dev/shm (memory) when there is
// one, else /tmp: "idem-fuzz-NAME-XXXXXX", made at the first call and removed when
// the process exits (libFuzzer ends with exit(); a crash leaves it). One per
// process: the first call's `name` wins. Not on a disk by default: there, one
// open(O_TRUNC) of it waited 11 s for the journal while the test suite wrote, and
// libFuzzer reported the input as a timeout of the reader (which takes 50 ms).
inline std::string* scratch_file = nullptr;
inline void RemoveScratchFile() { ::unlink(scratch_file->c_str()); }
inline const std::string& ScratchFile(std::string_view name) {
  if (scratch_file == nullptr) {
    const char* env = std::getenv("TMPDIR");
    std::string dir = env != nullptr && *env != '\0' ? env : "";
    if (dir.empty()) dir = ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string templ = dir + "/idem-fuzz-" + std::string(name) + "-XXXXXX";
    const int fd = ::mkstemp(templ.data());
    Check(fd >= 0, "mkstemp for a scratch file", templ);
    ::close(fd);
    scratch_file = new std::string(templ);
    std::atexit(RemoveScratchFile);
  }
  return *scratch_file;
}

// Replaces the content of the file `path` with `size` bytes at `data`.
inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  Check(fd >= 0, "open a scratch file", path);
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    Check(n > 0, "write a scratch file", path);
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace idem::fuzz
