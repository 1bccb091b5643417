// Request fingerprints: a retry must carry the same payload, and the
// fingerprint is how idem tells. A fingerprint is any caller-chosen string; this
// helper makes the usual one, the lowercase hex SHA-256 of the request bytes.
//
// Thread safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace idem {

// Returns the lowercase hexadecimal SHA-256 digest (64 characters) of `bytes`.
std::string Fingerprint(std::string_view bytes);

}  // namespace idem
