// OpenStore: the one place where URL schemes meet backends. Backends are listed
// here explicitly (STYLE.md: no registration by static initializers).
#include "core/absl_compat.h"
#include "absl/strings/str_cat.h"
#include "idem/idem.h"
#include "store/memory/memory_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store_url.h"
#if IDEM_HAVE_MYSQL
#include "store/mysql/mysql_store.h"
#endif
#if IDEM_HAVE_POSTGRES
#include "store/postgres/postgres_store.h"
#endif

namespace idem {
namespace {

// The answer for a scheme whose backend this build left out (the URL itself is
// not repeated: it may carry a password).
[[maybe_unused]] absl::Status NotCompiledIn(std::string_view backend, std::string_view option) {
  return absl::NotFoundError(absl::StrCat("the ", AV(backend),
                                          ":// store is not compiled into this build of idem "
                                          "(rebuild with -D",
                                          AV(option), "=ON)"));
}

absl::StatusOr<std::unique_ptr<Store>> OpenByScheme(std::string_view url, sql::SchemaMode mode) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store URL '", AV(store::RedactUrl(url)), "' has no scheme; use memory://, sqlite://PATH, postgres://… or mysql://…"));
  }
  const std::string_view scheme = url.substr(0, sep);
  if (scheme == "memory") {
    if (url.size() != sep + 3) {
      return absl::InvalidArgumentError(absl::StrCat("memory:// takes nothing after '//': '", AV(store::RedactUrl(url)), "'"));
    }
    return NewMemoryStore();
  }
  if (scheme == "sqlite") return OpenSqliteStore(url, mode);
  if (scheme == "postgres" || scheme == "postgresql") {
#if IDEM_HAVE_POSTGRES
    return OpenPostgresStore(url, mode);
#else
    return NotCompiledIn("postgres", "IDEM_WITH_POSTGRES");
#endif
  }
  if (scheme == "mysql" || scheme == "mariadb") {
#if IDEM_HAVE_MYSQL
    return OpenMysqlStore(url, mode);
#else
    return NotCompiledIn("mysql", "IDEM_WITH_MYSQL");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown store scheme '", AV(scheme), "' in '", AV(store::RedactUrl(url)), "'; use memory://, sqlite://PATH, postgres://… or mysql://…"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url,
                                                 const StoreOptions& options) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenByScheme(url, {.read_only = options.read_only, .require_schema = options.require_schema});
  // Drivers may quote the URL they were given (libpq does, on a malformed URI):
  // no message leaves here with a secret of the URL in it.
  if (!store.ok()) return store::RedactSecretsIn(store.status(), url);
  return store;
}

std::string RedactStoreUrl(std::string_view url) { return store::RedactUrl(url); }

absl::Status RedactStoreSecrets(const absl::Status& status, std::string_view url) {
  return store::RedactSecretsIn(status, url);
}

}  // namespace idem
