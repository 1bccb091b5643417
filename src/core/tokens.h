// Bearer tokens and session ids (`idem token new`'s tenant and console-admin tokens,
// serve's development token, the operator console's sessions and CSRF tokens): making
// them, and comparing them or their digests.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <string>
#include <string_view>

namespace idem {

// A new token: 256 bits from the kernel's CSPRNG (getrandom) as 64 lowercase hex
// digits. False when the random source cannot be read.
bool NewToken(std::string* out);

// a == b, compared without an early exit, so the time taken does not reveal how much
// of a token or digest matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace idem
