// Test support for the mysql:// store: a database of its own for each test on the
// server named by IDEM_TEST_MYSQL_URL, so tests (and the conformance suite) start
// from an empty store and may CREATE TABLE freely. Header-only; used by
// src/store/mysql/mysql_store_test.cc and tests/conformance/store_factory.h. Not part of the
// library. It opens the server through OpenStore, so a test that includes it links and
// runs in a build without mysql:// (IDEM_WITH_MYSQL=OFF), where it gets kNotFound.
//
// The database is named after the process id and the test's scratch directory
// (idem_t_<pid>_<dir suffix>), so every call with the same `dir` (threads opening
// their own stores in one test) gets the same database. Databases left by
// processes that have exited are dropped on the next call; the server's user needs
// CREATE and DROP on idem_t_% databases.
//
// Thread safety: the functions may be called concurrently.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/mysql/mysql_store.h"

namespace idem::mysql::testing {

// The server tests run against: $IDEM_TEST_MYSQL_URL, or "" when unset.
inline std::string BaseUrl() {
  const char* url = std::getenv("IDEM_TEST_MYSQL_URL");
  return url != nullptr ? std::string(url) : std::string();
}

// Returns `url` with its database replaced by `database` (query kept).
inline std::string WithDatabase(std::string_view url, std::string_view database) {
  const size_t authority = url.find("://");
  const size_t start = authority == std::string_view::npos ? 0 : authority + 3;
  const size_t q = url.find('?', start);
  const size_t slash = url.find('/', start);
  std::string out(url.substr(0, slash == std::string_view::npos || slash > q ? q : slash));
  absl::StrAppend(&out, "/", AV(database));
  if (q != std::string_view::npos) absl::StrAppend(&out, AV(url.substr(q)));
  return out;
}

// Returns `url` with `params` ("a=1&b=2") appended to its query.
inline std::string WithParams(std::string_view url, std::string_view params) {
  return absl::StrCat(AV(url), url.find('?') == std::string_view::npos ? "?" : "&", AV(params));
}

// Creates (if missing) the database of the test whose scratch directory is `dir`
// on the server of `base_url`, and returns its URL (with base_url's parameters).
// Errors: those of OpenStore for base_url (kNotFound in a build without mysql://),
// and of CREATE DATABASE.
inline absl::StatusOr<std::string> FreshDatabaseUrl(std::string_view base_url,
                                                    std::string_view dir) {
  std::string suffix;
  for (char c : dir.substr(dir.find_last_of('/') + 1)) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) suffix += c;
  }
  if (suffix.size() > 32) suffix = suffix.substr(suffix.size() - 32);
  const std::string database = absl::StrCat("idem_t_", getpid(), "_", suffix);
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> admin, OpenStore(base_url));
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, admin->Begin());
  IDEM_ASSIGN_OR_RETURN(Rows old, tx->Query("SHOW DATABASES LIKE 'idem\\_t\\_%'"));
  for (const std::vector<Value>& row : old.rows) {
    const std::string name = row[0].is_text() ? row[0].as_text() : row[0].as_blob();
    const long pid = std::strtol(name.c_str() + 7, nullptr, 10);
    // Only databases of processes that are gone: a running test's stays.
    if (pid > 0 && pid != getpid() && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      tx->Exec(absl::StrCat("DROP DATABASE IF EXISTS `", name, "`")).IgnoreError();  // best effort
    }
  }
  IDEM_RETURN_IF_ERROR(tx->Exec(absl::StrCat("CREATE DATABASE IF NOT EXISTS `", database,
                                             "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")));
  IDEM_RETURN_IF_ERROR(tx->Commit());
  return WithDatabase(base_url, database);
}

}  // namespace idem::mysql::testing
