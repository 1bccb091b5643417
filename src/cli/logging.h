// The process's log (spdlog's default logger, on stderr): its level and format,
// from the root options --log-level and --log-format. Internal to src/cli.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace idem::cli {

// `level`: trace, debug, info, warn, error, critical or off. `format`: text (the
// default spdlog line, "[time] [idem] [level] msg", msg with backslash and control
// characters escaped by idem::EscapeControl so that it stays one line) or json (one
// object per line: time in UTC RFC 3339 with microseconds, level, msg; msg escaped
// as a JSON string). kInvalidArgument naming the value otherwise.
absl::Status ConfigureLogging(std::string_view level, std::string_view format);

}  // namespace idem::cli
