// Debian 12's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat/StrSplit do not take std::string_view. These
// conversions bridge idem's std::string_view API and Abseil's string helpers.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace idem {

inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view SV(absl::string_view s) { return std::string_view(s.data(), s.size()); }
// A copy, e.g. of an absl::Status's message().
inline std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

}  // namespace idem
