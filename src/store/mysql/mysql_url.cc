#include "store/mysql/mysql_url.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "store/store_url.h"

namespace idem::mysql {
namespace {

// `name`'s value in [lo, hi], through the shared parser's typed getter.
absl::Status IntInto(const store::StoreUrl& u, std::string_view name, int lo, int hi, int* out) {
  IDEM_ASSIGN_OR_RETURN(int64_t v, u.IntParam(name, *out, lo, hi));
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ParseParams(const store::StoreUrl& u, MysqlOptions& o) {
  IDEM_RETURN_IF_ERROR(
      u.OnlyParams({"pool", "pool_wait_ms", "lock_wait_timeout_s", "connect_timeout_s",
                    "io_timeout_s", "socket", "ssl", "ssl_ca", "procedures"}));
  std::set<std::string_view> seen;
  for (const auto& param : u.params) {
    if (!seen.insert(param.first).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL parameter '", param.first, "' is given twice"));
    }
  }
  IDEM_RETURN_IF_ERROR(IntInto(u, "pool", 1, 256, &o.pool));
  IDEM_RETURN_IF_ERROR(IntInto(u, "pool_wait_ms", 0, 600000, &o.pool_wait_ms));
  IDEM_RETURN_IF_ERROR(IntInto(u, "lock_wait_timeout_s", 1, 3600, &o.lock_wait_timeout_s));
  IDEM_RETURN_IF_ERROR(IntInto(u, "connect_timeout_s", 1, 600, &o.connect_timeout_s));
  IDEM_RETURN_IF_ERROR(IntInto(u, "io_timeout_s", 1, 86400, &o.io_timeout_s));
  if (const std::string* v = u.Param("socket"); v != nullptr) {
    if (v->empty()) return absl::InvalidArgumentError("mysql URL parameter socket is empty");
    o.socket = *v;
  }
  if (const std::string* v = u.Param("ssl"); v != nullptr) {
    if (*v == "disabled") {
      o.ssl = SslMode::kDisabled;
    } else if (*v == "required") {
      o.ssl = SslMode::kRequired;
    } else if (*v == "verify") {
      o.ssl = SslMode::kVerify;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL parameter ssl='", *v, "' must be disabled, required or verify"));
    }
  }
  if (const std::string* v = u.Param("ssl_ca"); v != nullptr) o.ssl_ca = *v;
  if (const std::string* v = u.Param("procedures"); v != nullptr) {
    if (*v != "on" && *v != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("mysql URL parameter procedures='", *v, "' must be on or off"));
    }
    o.procedures = *v == "on";
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
  // mariadb:// is the same store.
  IDEM_ASSIGN_OR_RETURN(store::StoreUrl u, store::ParseStoreUrl(url, "mysql", {"mariadb"}));
  MysqlOptions o;
  o.redacted_url = u.redacted;
  const std::string_view rest = url.substr(url.find("://") + 3);
  if (rest.substr(0, rest.find_first_of("/?")).find('@') == std::string_view::npos) {
    return absl::InvalidArgumentError(
        "mysql URL names no user; use mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
  }
  o.user = u.user;
  o.has_password = u.password.has_value();
  o.password = u.password.value_or("");
  if (o.user.empty()) return absl::InvalidArgumentError("mysql URL has an empty user name");
  o.host = u.host;
  if (u.port.has_value()) o.port = *u.port;
  o.database = u.path;
  if (o.database.empty()) {
    return absl::InvalidArgumentError(
        "mysql URL names no database; use mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
  }
  if (o.database.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("mysql URL database '", o.database, "' contains '/'"));
  }
  IDEM_RETURN_IF_ERROR(ParseParams(u, o));
  if (o.host.empty() && o.socket.empty()) {
    return absl::InvalidArgumentError("mysql URL names no host (and no socket= parameter)");
  }
  if (!o.ssl_ca.empty() && o.ssl == SslMode::kDisabled) {
    return absl::InvalidArgumentError("mysql URL parameter ssl_ca needs ssl=required or verify");
  }
  return o;
}

}  // namespace idem::mysql
