// Bearer tokens and session ids: `idem token new`'s tenant and console-admin tokens,
// serve's development token, the operator console's sessions and CSRF tokens.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <string>

namespace idem {

// A new token: 256 bits from the kernel's CSPRNG (getrandom) as 64 lowercase hex
// digits. False when the random source cannot be read.
bool NewToken(std::string* out);

}  // namespace idem
