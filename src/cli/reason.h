// The one-line failure reason every `idem` subcommand prints.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace idem::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints `idem: <message>` to stderr as exactly one line: newlines inside the
// message (a key, a server's reply) become spaces. Flushes stderr.
void PrintReason(std::string_view message);

// The same, for an Abseil status message (Debian's absl::string_view is its own type).
inline void PrintReason(absl::string_view message) {
  PrintReason(std::string_view(message.data(), message.size()));
}
inline void PrintReason(const char* message) { PrintReason(std::string_view(message)); }
inline void PrintReason(const std::string& message) { PrintReason(std::string_view(message)); }

}  // namespace idem::cli
