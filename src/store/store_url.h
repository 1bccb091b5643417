// What every store URL shares, for every backend and every message that names one:
// one parser for the authority form (scheme://user:password@host:port/path?k=v&…,
// IPv6 hosts in brackets) and the redaction every message, log line and problem
// detail goes through. Not part of the public API.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace idem::store {

// `url` without its secrets, for messages, logs, metric labels and problem details:
// the password of `user:password@` is dropped (`user@host`; the userinfo ends at
// the authority's last '@', so a password may hold '@' and ':'), and so are query
// parameters named password, pass, passwd or secret (names read percent-decoded, as
// the parser and the drivers read them: "pass%77ord" is password). A URL whose
// password may hold a raw '/', '?' or '#' ("u:pa/ss@db": an '@' after the first of
// them, with a ':' before it; the parsers refuse it) loses everything from that ':'
// to the last '@'. Works on malformed input too (it never fails): text that is no
// "scheme://" URL has the values of its secret keywords replaced by "***"
// ("host=db password=***", libpq's keyword form) and, when it holds an '@',
// everything up to the last '@' dropped; a server URL with white space (which no
// parser takes) keeps only its "scheme://".
std::string RedactUrl(std::string_view url);

// `text` (a driver's message, which may quote the URL it was given) with every
// secret of `url` in it (the password, raw, percent-decoded and percent-encoded, the
// values of its secret parameters or keywords, and all RedactUrl hides of an
// ambiguous URL) replaced by "***", and so is the value of every secret keyword
// ("password=…", quoted or not) whatever its URL.
std::string RedactSecretsIn(std::string_view text, std::string_view url);

// `status` with RedactSecretsIn applied to its message (code and payloads kept).
absl::Status RedactSecretsIn(const absl::Status& status, std::string_view url);

// `url` with `password` written into its userinfo (percent-encoded), so that a
// password kept out of the command line (a file, the environment) reaches the
// backend: "postgres://idem@db/x" → "postgres://idem:PW@db/x"; no user → ":PW@".
// kInvalidArgument when `url` has no "scheme://", is a path URL (sqlite://,
// memory://, rocksdb://: they have no password) or already carries a password, or
// has an '@' in its path or query (with a password it would be ambiguous).
absl::StatusOr<std::string> WithPassword(std::string_view url, std::string_view password);

// `url` with its user and password percent-encoded as WithPassword writes them, so
// that a driver which reads the userinfo up to the first '@' (libpq) reads the user
// and password ParseStoreUrl reads: "postgres://u:p@ss@db" → "postgres://u:p%40ss@db".
// kInvalidArgument (the URL redacted) for a URL without "scheme://", a bad percent
// escape in the userinfo, white space, or an ambiguous URL (see RedactUrl).
absl::StatusOr<std::string> WithCanonicalUserinfo(std::string_view url);

// A parsed URL of the authority form. Every string is percent-decoded.
struct StoreUrl {
  std::string scheme;                   // lower case, without "://"
  std::string user;
  std::optional<std::string> password;  // set when the userinfo has a ':'
  std::string host;                     // without the brackets of an IPv6 address
  std::optional<int> port;              // 1..65535 when given
  std::string path;                     // after the authority's '/', without it
  std::vector<std::pair<std::string, std::string>> params;  // the query, in order
  std::string redacted;                 // RedactUrl of the original

  // The value of the last `name` parameter, or nullptr.
  const std::string* Param(std::string_view name) const;

  // The integer value of `name` in [lo, hi], `fallback` when it is absent.
  // kInvalidArgument naming the parameter and the range otherwise.
  absl::StatusOr<int64_t> IntParam(std::string_view name, int64_t fallback, int64_t lo,
                                   int64_t hi) const;

  // kInvalidArgument naming the first parameter that is not in `known`.
  absl::Status OnlyParams(std::initializer_list<std::string_view> known) const;
};

// Parses `url`, which must have the scheme `scheme` (or one of `aliases`). Errors:
// kInvalidArgument naming what is wrong (the scheme, a bad percent escape, an
// unclosed '[', a port that is not 1..65535, an ambiguous '@' (see RedactUrl),
// white space), with the URL redacted.
absl::StatusOr<StoreUrl> ParseStoreUrl(std::string_view url, std::string_view scheme,
                                       std::initializer_list<std::string_view> aliases = {});

// The path form (sqlite://PATH?k=v&…): everything between "://" and '?' is the
// path, as written (not percent-decoded); host, user and port are empty.
absl::StatusOr<StoreUrl> ParsePathUrl(std::string_view url, std::string_view scheme);

// `value` of the URL parameter `name` as an integer in [lo, hi]; kInvalidArgument
// naming the parameter and the range otherwise (StoreUrl::IntParam; also for
// parsers that hand the rest of a URL to a driver).
absl::StatusOr<int64_t> ParseIntParam(std::string_view scheme, std::string_view name,
                                      std::string_view value, int64_t lo, int64_t hi);

}  // namespace idem::store
