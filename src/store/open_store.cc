// OpenStore: the one place where URL schemes meet backends. Backends are listed
// here explicitly (STYLE.md: no registration by static initializers).
#include "core/absl_compat.h"
#include "absl/strings/str_cat.h"
#include "idem/idem.h"
#include "store/memory/memory_store.h"
#include "store/mysql/mysql_store.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"

namespace idem {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url,
                                                 const StoreOptions& /*options*/) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store URL '", AV(url), "' has no scheme; use memory://, sqlite://PATH, postgres://… or mysql://…"));
  }
  const std::string_view scheme = url.substr(0, sep);
  if (scheme == "memory") {
    if (url.size() != sep + 3) {
      return absl::InvalidArgumentError(absl::StrCat("memory:// takes nothing after '//': '", AV(url), "'"));
    }
    return NewMemoryStore();
  }
  if (scheme == "sqlite") return OpenSqliteStore(url);
  if (scheme == "postgres" || scheme == "postgresql") return OpenPostgresStore(url);
  if (scheme == "mysql" || scheme == "mariadb") return OpenMysqlStore(url);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown store scheme '", AV(scheme), "' in '", AV(url), "'; use memory://, sqlite://PATH, postgres://… or mysql://…"));
}

}  // namespace idem
