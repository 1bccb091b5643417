#include "store/store_url.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"

namespace idem::store {
namespace {

bool IsSecretName(std::string_view name) {
  for (std::string_view secret : {"password", "pass", "passwd", "secret"}) {
    if (name == secret) return true;
  }
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in`; false on a malformed escape.
bool Decode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// Whether the query item "k=v" is a secret parameter. Its name is read as the
// parsers and the drivers read it, percent-decoded: "pass%77ord" is password.
bool IsSecretParam(std::string_view item) {
  std::string name;
  if (!Decode(item.substr(0, item.find('=')), &name)) return false;
  return IsSecretName(name);
}

// The non-empty "k=v" items of a query (the part after '?').
std::vector<std::string_view> QueryItems(std::string_view query) {
  std::vector<std::string_view> items;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    if (amp != 0) items.push_back(query.substr(0, amp));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return items;
}

// In an authority without '@', the position after a ':' whose suffix is not a port
// (digits), i.e. a password written without its host; npos when there is none.
size_t NonPortSuffix(std::string_view authority) {
  if (authority.starts_with("[")) return std::string_view::npos;  // [v6]:port
  const size_t colon = authority.find(':');
  if (colon == std::string_view::npos || colon + 1 >= authority.size()) return std::string_view::npos;
  for (char c : authority.substr(colon + 1)) {
    if (c < '0' || c > '9') return colon + 1;
  }
  return std::string_view::npos;
}

// Splits "?query" off `*rest`; the query without its '?', or nullopt when none.
std::optional<std::string_view> SplitQuery(std::string_view* rest) {
  const size_t q = rest->find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = rest->substr(q + 1);
  *rest = rest->substr(0, q);
  return query;
}

// The position of "://" after a well-formed scheme (RFC 3986: a letter, then
// letters, digits, '+', '-', '.'), npos otherwise: "host=h password=a://b" is no
// URL, and its text before "://" must not be taken for a scheme and shown.
size_t SchemeEnd(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0 || !absl::ascii_isalpha(url[0])) {
    return std::string_view::npos;
  }
  for (char c : url.substr(0, sep)) {
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return std::string_view::npos;
  }
  return sep;
}

// The authority of `rest` (what follows "://") as every function here reads it:
// it ends at the first '/', '?' or '#', and its userinfo at its last '@', so a
// password may hold '@' and ':' as they are. When the text before that end has a
// password (a ':' in the userinfo, or "user:xxx" without '@') and an '@' comes
// after it, the URL is ambiguous: "u:pa/ss@db" may be a password "pa/ss" written
// without percent-encoding, or a host "u", port "pa" and a path "ss@db". The
// parsers refuse such a URL (kAmbiguousAt) and the redaction hides everything from
// that ':' to the last '@'.
struct Authority {
  std::string_view userinfo;   // before the authority's last '@'
  bool has_at = false;         // whether there is a userinfo
  std::string_view host_port;  // after it
  std::optional<std::string_view> ambiguous;  // from after the ':' to the last '@'
};

Authority SplitAuthority(std::string_view rest) {
  Authority a;
  const size_t end = std::min(rest.find_first_of("/?#"), rest.size());
  const std::string_view authority = rest.substr(0, end);
  const size_t at = authority.rfind('@');
  a.has_at = at != std::string_view::npos;
  a.userinfo = a.has_at ? authority.substr(0, at) : std::string_view();
  a.host_port = a.has_at ? authority.substr(at + 1) : authority;
  const size_t last_at = rest.rfind('@');
  const bool password_before = a.has_at ? a.userinfo.find(':') != std::string_view::npos
                                        : authority.find(':') != std::string_view::npos;
  if (last_at != std::string_view::npos && last_at > end && password_before &&
      !rest.starts_with("[")) {
    const size_t colon = rest.find(':');
    a.ambiguous = rest.substr(colon + 1, last_at - colon - 1);
  }
  return a;
}

constexpr std::string_view kAmbiguousAt =
    "an '@' follows the first '/', '?' or '#' after a password (or a ':'): write a "
    "password's '/', '?', '#', '%' and '@' percent-encoded (%2F, %3F, %23, %25, %40), "
    "and an '@' in the path or query as %40";

bool HasSpace(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) { return absl::ascii_isspace(c); });
}

constexpr std::string_view kSpace = "white space (write a space as %20)";

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// One "NAME=VALUE" of a keyword connection string (libpq's "host=h password=x",
// spaces allowed around '='; a value is 'single-quoted' with backslash escapes, or
// runs to the next white space) whose NAME is a secret one.
struct KeywordSecret {
  size_t begin, end;  // the value as written, quotes included
  std::string value;  // unquoted and unescaped
};

std::vector<KeywordSecret> KeywordSecrets(std::string_view text) {
  std::vector<KeywordSecret> out;
  for (size_t eq = text.find('='); eq != std::string_view::npos; eq = text.find('=', eq + 1)) {
    size_t name_end = eq;
    while (name_end > 0 && absl::ascii_isspace(text[name_end - 1])) --name_end;
    size_t name_begin = name_end;
    while (name_begin > 0 && IsNameChar(text[name_begin - 1])) --name_begin;
    if (!IsSecretName(absl::AsciiStrToLower(AV(text.substr(name_begin, name_end - name_begin))))) {
      continue;
    }
    size_t i = eq + 1;
    while (i < text.size() && absl::ascii_isspace(text[i])) ++i;
    KeywordSecret s{i, i, ""};
    const bool quoted = i < text.size() && text[i] == '\'';
    if (quoted) ++i;
    for (; i < text.size(); ++i) {
      if (quoted ? text[i] == '\'' : absl::ascii_isspace(text[i])) break;
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      s.value += text[i];
    }
    s.end = std::min(text.size(), quoted ? i + 1 : i);
    if (s.end > s.begin) out.push_back(std::move(s));
  }
  return out;
}

// `text` with each run of covered characters replaced by one "***".
std::string CollapseCovered(std::string_view text, const std::vector<bool>& covered) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!covered[i]) {
      out += text[i];
    } else if (i == 0 || !covered[i - 1]) {
      out += "***";
    }
  }
  return out;
}

// `password` percent-encoded as WithPassword writes it (RFC 3986 unreserved
// characters as they are).
std::string EncodeUserinfoPart(std::string_view password) {
  std::string out;
  for (unsigned char c : password) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

// The secrets written in `url`, raw as written: the userinfo's password (or, in an
// ambiguous URL, everything that may be one), the values of secret parameters,
// and those of secret keywords when `url` is a keyword connection string.
std::vector<std::string> RawSecrets(std::string_view url) {
  std::vector<std::string> out;
  const size_t sep = SchemeEnd(url);
  if (sep == std::string_view::npos) {
    for (KeywordSecret& s : KeywordSecrets(url)) {
      std::string_view raw = url.substr(s.begin, s.end - s.begin);
      out.emplace_back(raw);
      if (raw.size() >= 2 && raw.front() == '\'' && raw.back() == '\'') {
        out.emplace_back(raw.substr(1, raw.size() - 2));  // quoted as written, unquoted
      }
      out.push_back(std::move(s.value));
    }
  }
  std::string_view rest = sep == std::string_view::npos ? url : url.substr(sep + 3);
  if (sep != std::string_view::npos) {
    if (std::optional<std::string_view> span = SplitAuthority(rest).ambiguous) {
      out.emplace_back(*span);
    }
  }
  const std::string_view query = SplitQuery(&rest).value_or("");
  const std::string_view authority =
      sep == std::string_view::npos ? rest : rest.substr(0, rest.find('/'));
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    if (size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
      if (colon + 1 < userinfo.size()) out.emplace_back(userinfo.substr(colon + 1));
    } else if (sep == std::string_view::npos && !userinfo.empty()) {
      out.emplace_back(userinfo);
    }
  } else if (size_t secret = NonPortSuffix(authority); secret != std::string_view::npos) {
    out.emplace_back(authority.substr(secret));
  }
  for (std::string_view item : QueryItems(query)) {
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos && IsSecretParam(item) && eq + 1 < item.size()) {
      out.emplace_back(item.substr(eq + 1));
    }
  }
  return out;
}

// RedactUrl, once the secret keyword values of a path URL are gone.
std::string RedactUrlAfterKeywords(std::string_view url);

}  // namespace

std::string RedactUrl(std::string_view url) {
  const size_t sep = SchemeEnd(url);
  const std::string scheme =
      sep == std::string_view::npos ? "" : absl::AsciiStrToLower(AV(url.substr(0, sep)));
  if (scheme != "sqlite" && scheme != "rocksdb" && scheme != "memory") {
    return RedactUrlAfterKeywords(url);
  }
  // A path may hold "… password='x@y' …": its secret keyword values go first, on the
  // whole URL, before the '@' of a quoted value could be read as the end of a
  // userinfo (which dropped the keyword's name and left the rest of its value; found
  // by tests/fuzz/fuzz_store_url). Until nothing changes, at most a few passes: a
  // collapsed value may end a value the next pass reads.
  std::string text(url);
  for (int pass = 0; pass < 8; ++pass) {
    std::vector<bool> covered(text.size(), false);
    for (const KeywordSecret& s : KeywordSecrets(text)) {
      std::fill(covered.begin() + s.begin, covered.begin() + s.end, true);
    }
    std::string collapsed = CollapseCovered(text, covered);
    if (collapsed == text) break;
    text = std::move(collapsed);
  }
  return RedactUrlAfterKeywords(text);
}

namespace {

std::string RedactUrlAfterKeywords(std::string_view url) {
  const size_t sep = SchemeEnd(url);
  const std::string scheme =
      sep == std::string_view::npos ? "" : absl::AsciiStrToLower(AV(url.substr(0, sep)));
  const bool path_url = scheme == "sqlite" || scheme == "rocksdb" || scheme == "memory";
  if (sep != std::string_view::npos && !path_url && HasSpace(url)) {
    // A server URL holds no white space (the parsers refuse it): whatever it is
    // ("postgres://h password=x", a query with spaces), none of it is shown.
    return absl::StrCat(AV(url.substr(0, sep + 3)), "…");
  }
  if (sep == std::string_view::npos) {
    // No URL. A keyword connection string ("host=h password=x") loses its secret
    // values, and "user:secret@host" everything up to the last '@'; both are read
    // on the whole text, so that neither hides part of what the other would.
    std::vector<bool> covered(url.size(), false);
    for (const KeywordSecret& s : KeywordSecrets(url)) {
      std::fill(covered.begin() + s.begin, covered.begin() + s.end, true);
    }
    const size_t at = url.rfind('@');
    if (at == std::string_view::npos) return CollapseCovered(url, covered);
    return "…@" + CollapseCovered(url.substr(at + 1),
                                  std::vector<bool>(covered.begin() + at + 1, covered.end()));
  }
  const size_t start = sep + 3;
  std::string_view rest = url.substr(start);
  if (std::optional<std::string_view> span = SplitAuthority(rest).ambiguous) {
    // Everything that may be the password goes, with the ':' before it: what is
    // left has one '@', and its query is redacted as any other.
    const size_t colon = static_cast<size_t>(span->data() - rest.data()) - 1;
    std::string tail(rest.substr(colon + 1 + span->size()));  // from the last '@' on
    if (const size_t amp = tail.find('&');
        span->find('?') != std::string_view::npos && amp != std::string::npos) {
      // The query began inside what went: the items after the last '@' are its
      // parameters, and its secret ones go too.
      std::string kept = tail.substr(0, amp);
      for (std::string_view item : QueryItems(std::string_view(tail).substr(amp + 1))) {
        if (!IsSecretParam(item)) absl::StrAppend(&kept, "&", AV(item));
      }
      tail = std::move(kept);
    }
    return RedactUrl(absl::StrCat(AV(url.substr(0, start + colon)), tail));
  }
  const std::optional<std::string_view> query = SplitQuery(&rest);
  std::string out(url.substr(0, start));
  const std::string_view authority = rest.substr(0, rest.find('/'));
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    out.append(userinfo.substr(0, userinfo.find(':')));
    out.append(rest.substr(at));
  } else if (size_t secret = path_url ? std::string_view::npos : NonPortSuffix(authority);
             secret != std::string_view::npos) {
    // "user:password" with the '@host' left out: what follows ':' is no port. (Not
    // in a path URL: "sqlite://:memory:" names a file.)
    out.append(authority.substr(0, secret)).append("***").append(rest.substr(authority.size()));
  } else {
    out.append(rest);
  }
  if (query.has_value()) {
    std::string kept;
    for (std::string_view item : QueryItems(*query)) {
      if (IsSecretParam(item)) continue;
      kept.append(kept.empty() ? "" : "&");
      kept.append(item);
    }
    if (!kept.empty()) out.append("?").append(kept);
  }
  if (path_url) {
    // A path may hold anything, "… password=x" too: its secret values go as in a
    // keyword string (a server URL with white space was refused above).
    std::vector<bool> covered(out.size(), false);
    for (const KeywordSecret& s : KeywordSecrets(out)) {
      std::fill(covered.begin() + s.begin, covered.begin() + s.end, true);
    }
    return CollapseCovered(out, covered);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> WithPassword(std::string_view url, std::string_view password) {
  const size_t sep = SchemeEnd(url);
  const std::string scheme =
      sep == std::string_view::npos ? "" : absl::AsciiStrToLower(AV(url.substr(0, sep)));
  if (sep == std::string_view::npos || scheme == "sqlite" || scheme == "memory" ||
      scheme == "rocksdb") {
    return absl::InvalidArgumentError("a password was given for store URL '" + RedactUrl(url) +
                                      "', which takes none (only server URLs do)");
  }
  const size_t start = sep + 3;
  const size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::string_view authority = url.substr(start, end - start);
  const size_t at = authority.rfind('@');
  const std::string_view userinfo = at == std::string_view::npos ? "" : authority.substr(0, at);
  if (userinfo.find(':') != std::string_view::npos || SplitAuthority(url.substr(start)).ambiguous) {
    return absl::InvalidArgumentError("store URL '" + RedactUrl(url) +
                                      "' already has a password; give it in one place only");
  }
  if (url.find('@', end) != std::string_view::npos) {
    // With a password in it, the URL would be one the parsers refuse.
    return absl::InvalidArgumentError(absl::StrCat("store URL '", RedactUrl(url),
                                                   "' cannot take a password: ", AV(kAmbiguousAt)));
  }
  return absl::StrCat(AV(url.substr(0, start)), AV(userinfo), ":", EncodeUserinfoPart(password),
                      "@", AV(authority.substr(at == std::string_view::npos ? 0 : at + 1)),
                      AV(url.substr(end)));
}

absl::StatusOr<std::string> WithCanonicalUserinfo(std::string_view url) {
  const size_t sep = SchemeEnd(url);
  if (sep == std::string_view::npos) {
    return absl::InvalidArgumentError("store URL '" + RedactUrl(url) + "' has no scheme://");
  }
  const size_t start = sep + 3;
  const std::string_view rest = url.substr(start);
  const Authority a = SplitAuthority(rest);
  auto bad = [&url](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(AV(url.substr(0, SchemeEnd(url))), " URL '",
                                                   RedactUrl(url), "': ", AV(what)));
  };
  if (a.ambiguous) return bad(kAmbiguousAt);
  if (HasSpace(url)) return bad(kSpace);
  if (!a.has_at) return std::string(url);
  const size_t colon = a.userinfo.find(':');
  std::string user, password;
  if (!Decode(a.userinfo.substr(0, colon), &user)) {
    return bad("bad percent-escape in the user (write % as %25)");
  }
  if (colon != std::string_view::npos && !Decode(a.userinfo.substr(colon + 1), &password)) {
    return bad("bad percent-escape in the password (write % as %25)");
  }
  return absl::StrCat(AV(url.substr(0, start)), EncodeUserinfoPart(user),
                      colon == std::string_view::npos ? "" : ":",
                      colon == std::string_view::npos ? "" : EncodeUserinfoPart(password),
                      AV(rest.substr(a.userinfo.size())));
}

std::string RedactSecretsIn(std::string_view text, std::string_view url) {
  std::vector<std::string> secrets;
  for (std::string& raw : RawSecrets(url)) {
    // Also as a driver may quote it: decoded, and encoded as WithPassword and
    // WithCanonicalUserinfo write it.
    if (std::string decoded; Decode(raw, &decoded) && !decoded.empty()) {
      secrets.push_back(EncodeUserinfoPart(decoded));
      secrets.push_back(std::move(decoded));
    }
    secrets.push_back(std::move(raw));
  }
  // Every character inside some occurrence of some secret is covered, and each run
  // of covered characters becomes one "***". Replacing one secret after another
  // instead redacted the "***" of the last (a secret "*" given n times made 3^n of
  // them; found by tests/fuzz/fuzz_store_url) and left the rest of a secret that
  // overlaps one replaced before it.
  std::vector<bool> covered(text.size(), false);
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    for (size_t at = text.find(secret); at != std::string_view::npos;
         at = text.find(secret, at + 1)) {
      std::fill(covered.begin() + at, covered.begin() + at + secret.size(), true);
    }
  }
  // Whatever the URL: a driver may quote a keyword connection string of its own.
  for (const KeywordSecret& s : KeywordSecrets(text)) {
    std::fill(covered.begin() + s.begin, covered.begin() + s.end, true);
  }
  return CollapseCovered(text, covered);
}

absl::Status RedactSecretsIn(const absl::Status& status, std::string_view url) {
  if (status.ok()) return status;
  absl::Status out(status.code(), RedactSecretsIn(SV(status.message()), url));
  status.ForEachPayload(
      [&out](absl::string_view type, const absl::Cord& payload) { out.SetPayload(type, payload); });
  return out;
}

const std::string* StoreUrl::Param(std::string_view name) const {
  const std::string* found = nullptr;
  for (const auto& [k, v] : params) {
    if (k == name) found = &v;
  }
  return found;
}

absl::StatusOr<int64_t> StoreUrl::IntParam(std::string_view name, int64_t fallback, int64_t lo,
                                           int64_t hi) const {
  const std::string* v = Param(name);
  if (v == nullptr) return fallback;
  return ParseIntParam(scheme, name, *v, lo, hi);
}

absl::StatusOr<int64_t> ParseIntParam(std::string_view scheme, std::string_view name,
                                      std::string_view value, int64_t lo, int64_t hi) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || out < lo ||
      out > hi) {
    return absl::InvalidArgumentError(absl::StrCat(AV(scheme), " URL parameter ", AV(name), "='",
                                                   IsSecretName(name) ? "***" : AV(value),
                                                   "' must be an integer in ", lo, "..", hi));
  }
  return out;
}

absl::Status StoreUrl::OnlyParams(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : params) {
    bool ok = false;
    std::string names;
    for (std::string_view n : known) {
      ok = ok || n == k;
      absl::StrAppend(&names, names.empty() ? "" : ", ", AV(n));
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown ", scheme, " URL parameter '", k, "' in '", redacted,
                       "' (known: ", names.empty() ? "none" : names, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The start of the scheme's form: `url` up to "://" names `scheme` or an alias.
absl::StatusOr<StoreUrl> Begin(std::string_view url, std::string_view scheme,
                               std::initializer_list<std::string_view> aliases,
                               std::string_view* rest, std::string_view* query) {
  StoreUrl u;
  u.redacted = RedactUrl(url);
  const size_t sep = url.find("://");
  std::string given = sep == std::string_view::npos
                          ? std::string()
                          : absl::AsciiStrToLower(AV(url.substr(0, sep)));
  bool scheme_ok = given == scheme;
  for (std::string_view alias : aliases) scheme_ok = scheme_ok || given == alias;
  if (!scheme_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ", AV(scheme), ":// URL: '", u.redacted, "'"));
  }
  u.scheme = std::string(scheme);
  *rest = url.substr(sep + 3);
  *query = SplitQuery(rest).value_or("");
  return u;
}

absl::Status Bad(const StoreUrl& u, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(u.scheme, " URL '", u.redacted, "': ", AV(what)));
}

// Fills u->params from `query`.
absl::Status ParseParams(std::string_view query, StoreUrl* u) {
  for (std::string_view item : QueryItems(query)) {
    const size_t eq = item.find('=');
    std::string k, v;
    if (!Decode(item.substr(0, eq), &k) ||
        (eq != std::string_view::npos && !Decode(item.substr(eq + 1), &v))) {
      return Bad(*u, "bad percent-escape in a parameter (write % as %25)");
    }
    if (k.empty()) return Bad(*u, "a parameter without a name");
    u->params.emplace_back(std::move(k), std::move(v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StoreUrl> ParsePathUrl(std::string_view url, std::string_view scheme) {
  std::string_view rest, query;
  IDEM_ASSIGN_OR_RETURN(StoreUrl u, Begin(url, scheme, {}, &rest, &query));
  u.path = std::string(rest);
  IDEM_RETURN_IF_ERROR(ParseParams(query, &u));
  return u;
}

absl::StatusOr<StoreUrl> ParseStoreUrl(std::string_view url, std::string_view scheme,
                                       std::initializer_list<std::string_view> aliases) {
  std::string_view rest, query;
  IDEM_ASSIGN_OR_RETURN(StoreUrl u, Begin(url, scheme, aliases, &rest, &query));
  auto bad = [&](std::string_view what) { return Bad(u, what); };
  if (SplitAuthority(url.substr(url.find("://") + 3)).ambiguous) return bad(kAmbiguousAt);
  if (HasSpace(url)) return bad(kSpace);
  if (rest.find('#') != std::string_view::npos) return bad("a fragment ('#') is not allowed");
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos && !Decode(rest.substr(slash + 1), &u.path)) {
    return bad("bad percent-escape in the path (write % as %25)");
  }
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (!Decode(userinfo.substr(0, colon), &u.user)) {
      return bad("bad percent-escape in the user (write % as %25)");
    }
    if (colon != std::string_view::npos) {
      std::string pw;
      if (!Decode(userinfo.substr(colon + 1), &pw)) {
        return bad("bad percent-escape in the password (write % as %25)");
      }
      u.password = std::move(pw);
    }
  }
  std::optional<std::string_view> port;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(":")) {
      return bad("unexpected text after ']' (the IPv6 address)");
    }
    if (!after.empty()) port = after.substr(1);
    if (u.host.empty()) return bad("an empty IPv6 host '[]'");
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
    }
    if (authority.find_first_of("[]") != std::string_view::npos) return bad("a stray '[' or ']'");
    if (authority.find(':') != std::string_view::npos) {
      return bad("the host has several ':'; write IPv6 as [::1]:PORT");
    }
    if (!Decode(authority, &u.host)) return bad("bad percent-escape in the host (write % as %25)");
  }
  if (port.has_value() && port->empty()) return bad("empty port after ':'");
  if (port.has_value()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port->data(), port->data() + port->size(), p);
    if (port->find_first_not_of("0123456789") != std::string_view::npos) {
      // Not echoed: text after ':' that is no number may be a password written
      // without its '@host' ("user:secret/db"), which RedactUrl hides too.
      return bad("the text after ':' is not a port 1..65535 (a password needs '@host' after it)");
    }
    if (ec != std::errc() || ptr != port->data() + port->size() || p < 1 || p > 65535) {
      return bad(absl::StrCat("port '", AV(*port), "' must be 1..65535"));
    }
    u.port = p;
  }
  IDEM_RETURN_IF_ERROR(ParseParams(query, &u));
  return u;
}

}  // namespace idem::store
