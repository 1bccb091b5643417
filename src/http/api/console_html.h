// The operator console's small HTML toolkit: escaping what a page shows (keys,
// results and errors are chosen by clients, so by attackers), encoding what a link
// carries, and reading what a browser sends (form bodies, query strings, cookies).
// The console renders pages from these; nothing here knows a route.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace idem::http {

// Appends `text` to `out` as HTML text or attribute value: & < > " ' are
// escaped, control characters other than tab and newline become U+FFFD, and so
// does every byte that is not part of well-formed UTF-8, so a page always holds
// valid UTF-8 whatever the record held.
void AppendHtml(std::string& out, std::string_view text);
std::string Html(std::string_view text);

// Percent-encodes every byte but ALPHA / DIGIT / "-" / "." / "_" / "~": safe in a
// query string and in a path segment.
std::string UrlEncode(std::string_view bytes);

// application/x-www-form-urlencoded (a form's body, a query string): name ->
// value, '+' as a space and percent-escapes decoded; the first of a repeated
// name wins; a malformed escape is kept as it was written.
std::map<std::string, std::string, std::less<>> ParseForm(std::string_view body);

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "".
std::string_view CookieValue(std::string_view header, std::string_view name);

// `json` indented for people when it is valid JSON, else `json` as it is.
std::string PrettyJson(std::string_view json);

}  // namespace idem::http
