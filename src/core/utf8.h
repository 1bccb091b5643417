// UTF-8 validity, shared by the step journal's key checks and the CLI's output.
//
// Thread safety: pure function.
#pragma once

#include <string_view>

namespace idem {

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF), as nlohmann::json requires of the strings it writes.
bool IsUtf8(std::string_view s);

}  // namespace idem
