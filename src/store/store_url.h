// What every store URL shares, for every backend and every message that names one.
// Not part of the public API.
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <string_view>

namespace idem::store {

// `url` without its secrets, for messages, logs, metric labels and problem details:
// the password of `user:password@` is dropped (`user@host`), and so are query
// parameters named password, pass, passwd or secret. Works on malformed URLs too
// (it never fails): a URL without "://" is returned unchanged only when it has no
// '@' (else everything up to the last '@' is dropped).
std::string RedactUrl(std::string_view url);

}  // namespace idem::store
