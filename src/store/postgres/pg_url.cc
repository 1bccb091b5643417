#include "store/postgres/pg_url.h"

#include <libpq-fe.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/store_url.h"

namespace idem::postgres {
namespace {

// A new connection's bound (ConnectSpec::connect_timeout_ms) and one store call's
// (ConnectSpec::io_timeout_ms): a server that stops answering costs the first
// call on a pooled connection 3 s and every later call, which must connect, 1.5 s.
// The call's bound stays above lock_timeout_ms (2 s) and the statement_timeout
// derived from it, so a lock wait ends as the server's answer, not as a lost
// connection.
constexpr int kDefaultConnectTimeoutMs = 1500;
constexpr int kDefaultIoTimeoutMs = 3000;

absl::StatusOr<int64_t> ParseInt(std::string_view name, std::string_view value, int lo, int hi) {
  return store::ParseIntParam("postgres", name, value, lo, hi);
}

}  // namespace

absl::StatusOr<Options> ParseUrl(std::string_view given) {
  if (!given.starts_with("postgres://") && !given.starts_with("postgresql://")) {
    return absl::InvalidArgumentError(absl::StrCat("not a postgres:// or postgresql:// URL: '",
                                                   AV(store::RedactUrl(given)), "'"));
  }
  Options o;
  o.connect.display = store::RedactUrl(given);
  // libpq ends the userinfo at its first '@', the shared parser (and RedactUrl) at
  // the last: "u:pa@ss@db" reached libpq as host "ss@db", and its error quoted that
  // half of the password. libpq gets the userinfo percent-encoded instead.
  IDEM_ASSIGN_OR_RETURN(const std::string canonical, store::WithCanonicalUserinfo(given));
  const std::string_view url = canonical;
  std::string_view base = url;
  std::string_view query;
  if (size_t q = url.find('?'); q != std::string_view::npos) {
    base = url.substr(0, q);
    query = url.substr(q + 1);
  }
  bool has_connect_timeout = false;
  bool has_io_timeout = false;
  std::vector<absl::string_view> libpq_params;
  for (absl::string_view item : absl::StrSplit(AV(query), '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string_view key = SV(kv.first), value = SV(kv.second);
    if (key == "pool") {
      IDEM_ASSIGN_OR_RETURN(o.pool, ParseInt(key, value, 1, 1024));
    } else if (key == "pool_timeout_ms") {
      IDEM_ASSIGN_OR_RETURN(o.pool_timeout_ms, ParseInt(key, value, 0, 600000));
    } else if (key == "lock_timeout_ms") {
      IDEM_ASSIGN_OR_RETURN(o.lock_timeout_ms, ParseInt(key, value, 0, 600000));
    } else if (key == "notify") {
      if (value != "on" && value != "off") {
        return absl::InvalidArgumentError(absl::StrCat(
            "postgres URL parameter notify must be on or off, not '", AV(value), "'"));
      }
      o.notify = value == "on";
    } else if (key == "io_timeout_ms") {
      IDEM_ASSIGN_OR_RETURN(o.connect.io_timeout_ms, ParseInt(key, value, 0, 3600000));
      has_io_timeout = true;
    } else {
      if (key == "connect_timeout") {
        // libpq reads a malformed number as "no timeout"; say so instead. Enforced
        // by Connection::Open (libpq ignores it there), as libpq would: 0 is none.
        IDEM_ASSIGN_OR_RETURN(int64_t seconds, ParseInt(key, value, 0, 3600));
        o.connect.connect_timeout_ms = static_cast<int>(seconds * 1000);
        has_connect_timeout = true;
      }
      libpq_params.push_back(item);
    }
  }
  if (!has_io_timeout) o.connect.io_timeout_ms = kDefaultIoTimeoutMs;
  if (!has_connect_timeout) o.connect.connect_timeout_ms = kDefaultConnectTimeoutMs;
  // The server's statement_timeout, below the client's io timeout: the server
  // cancels a statement (57014, retryable) before the client gives the connection
  // up. Added to the URL's own `options` when it has one (it would replace ours).
  const int io = o.connect.io_timeout_ms;
  const int statement_timeout_ms = io > 1000 ? io - 500 : io;
  const std::string statement_timeout =
      io > 0 ? absl::StrCat("-c statement_timeout=", statement_timeout_ms) : "";
  bool has_options = false;
  std::vector<std::string> params;
  for (absl::string_view item : libpq_params) {
    std::string p(item);
    if (SV(item).starts_with("options=") && !statement_timeout.empty()) {
      absl::StrAppend(&p, "%20-c%20statement_timeout%3D", statement_timeout_ms);
      has_options = true;
    }
    params.push_back(std::move(p));
  }
  std::string uri(base);
  if (!params.empty()) absl::StrAppend(&uri, "?", absl::StrJoin(params, "&"));

  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(uri.c_str(), &error);
  if (parsed == nullptr) {
    std::string message = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("postgres URL '", o.connect.display,
                                                   "': ", message,
                                                   " (idem's own parameters: pool, "
                                                   "pool_timeout_ms, lock_timeout_ms, "
                                                   "io_timeout_ms, notify)"));
  }
  PQconninfoFree(parsed);

  // Defaults first: with expand_dbname, values from the URI (which comes last)
  // override them.
  auto add = [&o](std::string keyword, std::string value) {
    o.connect.keywords.push_back(std::move(keyword));
    o.connect.values.push_back(std::move(value));
  };
  if (io > 0) {
    // Bounds below the client's: the kernel gives up on data the peer never
    // acknowledges (tcp_user_timeout) and probes an idle peer (keepalives). A URL's
    // own values win (they come last).
    add("keepalives", "1");
    add("keepalives_idle", "10");
    add("keepalives_interval", "3");
    add("keepalives_count", "3");
    add("tcp_user_timeout", absl::StrCat(io));
    if (!has_options) add("options", statement_timeout);
  }
  add("fallback_application_name", "idem");
  add("client_encoding", "UTF8");
  add("dbname", std::move(uri));
  return o;
}

}  // namespace idem::postgres
