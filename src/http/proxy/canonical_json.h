// The canonical form of a JSON text (RFC 8785, JSON Canonicalization Scheme), for
// the proxy's request fingerprints: two bodies that differ only in member order,
// whitespace or the spelling of a string or number ("\u0041" and "A", 1.0 and 1)
// have the same canonical form, so a client's retry that re-serialises its body is
// still recognised as the same request.
//
// Thread safety: a pure function (each call uses its own parser).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace idem::http {

// The RFC 8785 form of `json`: members sorted by the UTF-16 code units of their
// names, no insignificant whitespace, strings with only the required escapes,
// numbers as ECMAScript prints an IEEE 754 double. nullopt when `json` is not one
// valid JSON value, has a duplicate member name, or a number outside what a double
// holds (RFC 8785 §3.2.2.3): the caller then uses the bytes as they are.
std::optional<std::string> CanonicalJson(std::string_view json);

}  // namespace idem::http
