#include "chaos/effect_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace idem::chaos {
namespace {

// A key that can stand in a line as one field.
bool PlainKey(std::string_view key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EffectLog>> EffectLog::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("effect log ", path, ": cannot open: ", std::strerror(errno)));
  }
  return std::unique_ptr<EffectLog>(new EffectLog(path, fd));
}

EffectLog::~EffectLog() { ::close(fd_); }

absl::Status EffectLog::Append(const Effect& effect) {
  if (!PlainKey(effect.key)) {
    return absl::InvalidArgumentError(
        "effect log: a key must be non-empty, without spaces or control bytes");
  }
  const std::string line =
      absl::StrCat(effect.key, " ", effect.token, " ", effect.client, " ",
                   std::chrono::duration_cast<std::chrono::nanoseconds>(
                       effect.at.time_since_epoch())
                       .count(),
                   "\n");
  std::lock_guard<std::mutex> lock(mu_);
  // O_APPEND and one write per line: a line is never split by another thread's.
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("effect log ", path_, ": write failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("effect log ", path_, ": fdatasync failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Effect>> ReadEffectLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("effect log ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<Effect> effects;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    ++line_no;
    const size_t nl = text.find('\n', pos);
    const auto bad = [&](std::string_view why) {
      return absl::DataLossError(absl::StrCat(path, ":", line_no, ": ", std::string(why)));
    };
    if (nl == std::string::npos) return bad("last line has no newline (a torn append)");
    const absl::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() != 4) return bad(absl::StrCat("expected 4 fields, found ", f.size()));
    Effect e;
    int64_t ns = 0;
    e.key = std::string(f[0].data(), f[0].size());
    if (!PlainKey(e.key)) return bad("bad key");
    if (!absl::SimpleAtoi(f[1], &e.token) || e.token <= 0) return bad("bad token");
    if (!absl::SimpleAtoi(f[2], &e.client)) return bad("bad client");
    if (!absl::SimpleAtoi(f[3], &ns)) return bad("bad time");
    e.at = Clock::time_point(std::chrono::nanoseconds(ns));
    effects.push_back(std::move(e));
  }
  return effects;
}

}  // namespace idem::chaos
