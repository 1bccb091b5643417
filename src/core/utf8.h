// UTF-8 validity, shared by the step journal's key checks and the CLI's output.
//
// Thread safety: pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace idem {

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF), as nlohmann::json requires of the strings it writes.
bool IsUtf8(std::string_view s);

// The length of the well-formed UTF-8 sequence `s` starts with (1 to 4 bytes, by
// the same rules), or 0 when it starts with none (or is empty).
size_t Utf8SequenceLength(std::string_view s);

}  // namespace idem
