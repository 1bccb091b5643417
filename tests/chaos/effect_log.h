// The effect log of a chaos run: an append-only file with one line per external
// effect a client performed (the "payment sent" of a real caller), written between
// the claim's 201 and the complete. Each Append is written with one write(2) and
// fdatasync'd before it returns, so every effect a client performed is on disk
// before the client goes on, whatever is killed afterwards (idem serve, a database,
// the connections in between).
//
// Line format (text, one effect per line, fields separated by one space):
//   <key> <token> <client> <steady-clock nanoseconds>
// A key holds no space or control byte (Append refuses one), so a line never holds a
// separator or a newline of its own.
//
// Get one with EffectLog::Open(path); read one back with ReadEffectLog(path).
// Thread safety: Append may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chaos/history.h"

namespace idem::chaos {

struct Effect {
  std::string key;
  int64_t token = 0;  // the fencing token the client held when it performed the effect
  int client = 0;
  Clock::time_point at;  // when it was performed (steady clock of the run's process)
};

class EffectLog {
 public:
  // Opens (creating, or appending to) the log at `path`. Returns kUnavailable when
  // the file cannot be opened for appending. Closes the file when destroyed.
  static absl::StatusOr<std::unique_ptr<EffectLog>> Open(const std::string& path);
  ~EffectLog();
  EffectLog(const EffectLog&) = delete;
  EffectLog& operator=(const EffectLog&) = delete;

  // Appends `effect` as one line and fdatasyncs the file; blocks for the disk.
  // Returns kInvalidArgument for an empty key or one with a space or control byte,
  // kUnavailable (naming the path) when the write or the sync fails: the caller
  // must then not treat the effect as recorded.
  absl::Status Append(const Effect& effect);

  const std::string& path() const { return path_; }

 private:
  EffectLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;
  std::mutex mu_;  // one line at a time, so lines never interleave
};

// Reads every effect of the log at `path`, in file order. Returns kNotFound when the
// file does not exist, kDataLoss naming "path:line" for a line that is not four
// fields, a bad number or escape, or a last line without its newline (a torn
// append).
absl::StatusOr<std::vector<Effect>> ReadEffectLog(const std::string& path);

}  // namespace idem::chaos
