#include "store/mysql/mysql_url.h"

#include <charconv>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/absl_compat.h"
#include "idem/status.h"

namespace idem::mysql {
namespace {

constexpr std::string_view kScheme = "mysql://";

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `what` names the URL part in the error; the text itself is echoed only when
// `echo` is set, so a malformed password never reaches a log.
absl::StatusOr<std::string> PercentDecode(std::string_view in, std::string_view what, bool echo) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    const int hi = i + 1 < in.size() ? HexDigit(in[i + 1]) : -1;
    const int lo = i + 2 < in.size() ? HexDigit(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mysql URL: bad percent-escape in the ", AV(what),
          echo ? absl::StrCat(" '", AV(in), "'") : std::string(), " (write % as %25)"));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

absl::StatusOr<int> ParseInt(std::string_view name, std::string_view value, int lo, int hi) {
  int out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || out < lo ||
      out > hi) {
    return absl::InvalidArgumentError(absl::StrCat("mysql URL parameter ", AV(name), "='",
                                                   AV(value), "' must be an integer in ", lo, "..",
                                                   hi));
  }
  return out;
}

absl::Status ParseHostPort(std::string_view hostport, MysqlOptions& o) {
  std::string_view host = hostport;
  std::string_view port;
  if (hostport.starts_with('[')) {
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL: unclosed '[' in host '", AV(hostport), "'"));
    }
    host = hostport.substr(1, close - 1);
    std::string_view rest = hostport.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat("mysql URL: unexpected '", AV(rest), "' after the IPv6 address"));
      }
      port = rest.substr(1);
      if (port.empty()) return absl::InvalidArgumentError("mysql URL: empty port after ':'");
    }
  } else if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mysql URL: host '", AV(hostport), "' has several ':'; write IPv6 as [::1]:3306"));
    }
    if (port.empty()) return absl::InvalidArgumentError("mysql URL: empty port after ':'");
  }
  if (!port.empty()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p < 1 || p > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL: port '", AV(port), "' must be a number in 1..65535"));
    }
    o.port = p;
  }
  IDEM_ASSIGN_OR_RETURN(o.host, PercentDecode(host, "host", /*echo=*/true));
  return absl::OkStatus();
}

absl::Status ParseParams(std::string_view query, MysqlOptions& o) {
  std::set<std::string, std::less<>> seen;
  for (absl::string_view item : absl::StrSplit(AV(query), '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string_view name = SV(kv.first);
    IDEM_ASSIGN_OR_RETURN(std::string value, PercentDecode(SV(kv.second), "parameter", true));
    if (!seen.insert(std::string(name)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL parameter '", AV(name), "' is given twice"));
    }
    if (name == "pool") {
      IDEM_ASSIGN_OR_RETURN(o.pool, ParseInt(name, value, 1, 256));
    } else if (name == "pool_wait_ms") {
      IDEM_ASSIGN_OR_RETURN(o.pool_wait_ms, ParseInt(name, value, 0, 600000));
    } else if (name == "lock_wait_timeout_s") {
      IDEM_ASSIGN_OR_RETURN(o.lock_wait_timeout_s, ParseInt(name, value, 1, 3600));
    } else if (name == "connect_timeout_s") {
      IDEM_ASSIGN_OR_RETURN(o.connect_timeout_s, ParseInt(name, value, 1, 600));
    } else if (name == "io_timeout_s") {
      IDEM_ASSIGN_OR_RETURN(o.io_timeout_s, ParseInt(name, value, 1, 86400));
    } else if (name == "socket") {
      if (value.empty()) return absl::InvalidArgumentError("mysql URL parameter socket is empty");
      o.socket = value;
    } else if (name == "ssl") {
      if (value == "disabled") {
        o.ssl = SslMode::kDisabled;
      } else if (value == "required") {
        o.ssl = SslMode::kRequired;
      } else if (value == "verify") {
        o.ssl = SslMode::kVerify;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("mysql URL parameter ssl='", value,
                                                       "' must be disabled, required or verify"));
      }
    } else if (name == "ssl_ca") {
      o.ssl_ca = value;
    } else if (name == "procedures") {
      if (value != "on" && value != "off") {
        return absl::InvalidArgumentError(
            absl::StrCat("mysql URL parameter procedures='", value, "' must be on or off"));
      }
      o.procedures = value == "on";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown mysql URL parameter '", AV(name),
          "' (known: pool, pool_wait_ms, lock_wait_timeout_s, connect_timeout_s, io_timeout_s, "
          "socket, ssl, ssl_ca, procedures)"));
    }
  }
  // A socket read must outlast the longest server-side wait we ask for, or a claim
  // that is legitimately waiting on a lock would be cut off as a lost connection.
  if (o.io_timeout_s <= o.lock_wait_timeout_s) {
    return absl::InvalidArgumentError(absl::StrCat("mysql URL: io_timeout_s (", o.io_timeout_s,
                                                   ") must be greater than lock_wait_timeout_s (",
                                                   o.lock_wait_timeout_s, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MysqlOptions> ParseMysqlUrl(std::string_view url) {
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError("not a mysql:// URL");
  }
  std::string_view rest = url.substr(kScheme.size());
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "mysql URL has a '#'; percent-encode it (%23) if it is part of the password");
  }
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // The authority ends at the first '/', so a '/' in a password must be encoded;
  // within it the last '@' separates user info, tolerating an unencoded '@' in the
  // password.
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path =
      slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);

  MysqlOptions o;
  std::string redacted(url);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) {
    return absl::InvalidArgumentError(
        "mysql URL names no user; use mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
  }
  std::string_view userinfo = authority.substr(0, at);
  std::string_view hostport = authority.substr(at + 1);
  const size_t colon = userinfo.find(':');
  IDEM_ASSIGN_OR_RETURN(o.user, PercentDecode(userinfo.substr(0, colon), "user", true));
  if (colon != std::string_view::npos) {
    o.has_password = true;
    IDEM_ASSIGN_OR_RETURN(o.password,
                          PercentDecode(userinfo.substr(colon + 1), "password", /*echo=*/false));
    const size_t pw_begin = kScheme.size() + colon + 1;
    redacted.replace(pw_begin, at - colon - 1, "***");
  }
  o.redacted_url = std::move(redacted);
  if (o.user.empty()) return absl::InvalidArgumentError("mysql URL has an empty user name");

  IDEM_RETURN_IF_ERROR(ParseHostPort(hostport, o));
  IDEM_ASSIGN_OR_RETURN(o.database, PercentDecode(path, "database", true));
  if (o.database.empty()) {
    return absl::InvalidArgumentError(
        "mysql URL names no database; use mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
  }
  if (o.database.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("mysql URL database '", o.database, "' contains '/'"));
  }
  IDEM_RETURN_IF_ERROR(ParseParams(query, o));
  if (o.host.empty() && o.socket.empty()) {
    return absl::InvalidArgumentError("mysql URL names no host (and no socket= parameter)");
  }
  if (!o.ssl_ca.empty() && o.ssl == SslMode::kDisabled) {
    return absl::InvalidArgumentError("mysql URL parameter ssl_ca needs ssl=required or verify");
  }
  return o;
}

}  // namespace idem::mysql
