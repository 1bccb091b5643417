#include "store/sqlite/sqlite_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/file_identity.h"
#include "store/sql/dialect.h"
#include "store/sql/pool.h"
#include "store/sql/records.h"
#include "store/sql/schema.h"
#include "store/sql/txn.h"
#include "store/sqlite/sqlite_conn.h"
#include "store/store_url.h"

namespace idem {
namespace {

using ConnPool = sql::Pool<sqlite::Connection>;

absl::StatusOr<std::optional<Record>> LoadRecord(sqlite::Connection& conn,
                                                 std::string_view tenant, std::string_view key) {
  return sql::LoadRecord(conn, sql::kSelectRecord, tenant, key);
}

struct Options {
  std::string path;
  bool read_only = false;
  std::string synchronous = "FULL";
  int busy_timeout_ms = 5000;
  int readers = 4;
};

absl::StatusOr<Options> ParseUrl(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(store::StoreUrl u, store::ParsePathUrl(url, "sqlite"));
  if (u.path.empty()) {
    return absl::InvalidArgumentError(
        "sqlite URL has no path; use sqlite://./idem.db, sqlite:///abs/path.db or "
        "sqlite://:memory:");
  }
  IDEM_RETURN_IF_ERROR(u.OnlyParams({"synchronous", "busy_timeout_ms", "readers"}));
  Options o;
  o.path = u.path;
  if (const std::string* v = u.Param("synchronous"); v != nullptr) {
    o.synchronous = absl::AsciiStrToUpper(*v);
    if (o.synchronous != "FULL" && o.synchronous != "NORMAL" && o.synchronous != "OFF" &&
        o.synchronous != "EXTRA") {
      return absl::InvalidArgumentError(absl::StrCat(
          "sqlite URL parameter synchronous='", *v, "' must be full, normal, off or extra"));
    }
  }
  IDEM_ASSIGN_OR_RETURN(o.busy_timeout_ms, u.IntParam("busy_timeout_ms", 5000, 0, 600000));
  IDEM_ASSIGN_OR_RETURN(o.readers, u.IntParam("readers", 4, 1, 64));
  return o;
}

using store::FileIdentity;  // the file, checked before every transaction starts and commits

// Begin() sent the BEGIN; `file` is the store's, which outlives this.
class SqliteTransaction final : public sql::PooledTransaction<sqlite::Connection> {
 public:
  SqliteTransaction(ConnPool& pool, ConnPool::Lease writer, const FileIdentity& file)
      : PooledTransaction(pool, std::move(writer)), file_(file) {}
  ~SqliteTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return lease_->Exec(sql, params);
  }
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return lease_->Query(sql, params);
  }
  absl::Status QueryPages(std::string_view sql, absl::Span<const Value> params, size_t page_rows,
                          const std::function<absl::Status(Rows&)>& page) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return lease_->QueryPages(sql, params, page_rows, page);
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    static const std::string sql =
        sql::SqliteDialect().KeepExisting(sql::kInsertRecord, "idem_key");
    IDEM_ASSIGN_OR_RETURN(int64_t inserted, lease_->Exec(sql, sql::RecordParams(r)));
    if (inserted == 1) return std::nullopt;
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, LoadRecord(*lease_, r.tenant, r.key));
    if (!existing.has_value()) {
      return absl::InternalError("insert conflicted but the record is not there");
    }
    return existing;
  }

  absl::StatusOr<bool> Replace(const Record& r, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_ASSIGN_OR_RETURN(
        int64_t changed,
        lease_->Exec(sql::kReplaceRecord, sql::ReplaceParams(r, expected_token, expected_state)));
    return changed == 1;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return LoadRecord(*lease_, tenant, key);
  }

 private:
  bool Begun() const override { return true; }

  // The file may have gone since Begin: then nothing of this commits.
  absl::Status CommitNow() override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    return lease_->Exec("COMMIT").status();
  }

  void RollbackNow() override {
    // ROLLBACK fails only when no transaction is open, which the check excludes;
    // nothing else can be done about it here.
    if (sqlite3_get_autocommit(lease_->db()) == 0) lease_->Exec("ROLLBACK").IgnoreError();
  }

  const FileIdentity& file_;
};

class SqliteStore final : public StoreBackend {
 public:
  // The one write connection is a pool of one, lent to one transaction at a time:
  // Begin waits up to busy_timeout_ms for it. At most options.readers reader
  // connections exist, and a read waits as long for one.
  SqliteStore(std::string url, Options options, std::unique_ptr<sqlite::Connection> writer,
              FileIdentity file)
      : url_(std::move(url)),
        options_(std::move(options)),
        // Never reconnects: a SQLite connection is always Reusable().
        writer_([] { return absl::InternalError("sqlite: the writer is opened once, at open"); }, 1,
                absl::Milliseconds(options_.busy_timeout_ms),
                absl::StrCat("sqlite store ", url_, ": write lock not free within ",
                             options_.busy_timeout_ms, " ms")),
        readers_(
            [this] {
              return sqlite::Connection::Open(options_.path, options_.synchronous,
                                              options_.busy_timeout_ms, options_.read_only);
            },
            options_.readers, absl::Milliseconds(options_.busy_timeout_ms),
            absl::StrCat("sqlite store ", url_, ": all ", options_.readers,
                         " readers stayed busy for ", options_.busy_timeout_ms, " ms")),
        file_(std::move(file)) {
    writer_.Seed(std::move(writer));
  }

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    IDEM_ASSIGN_OR_RETURN(ConnPool::Lease writer, writer_.Acquire());
    // A read-only store takes no write lock (it could not): its transactions read.
    IDEM_RETURN_IF_ERROR(writer->Exec(options_.read_only ? "BEGIN" : "BEGIN IMMEDIATE"));
    return std::make_unique<SqliteTransaction>(writer_, std::move(writer), file_);
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    // ":memory:" is one database per connection: the writer's.
    IDEM_ASSIGN_OR_RETURN(ConnPool::Lease conn, (IsMemory() ? writer_ : readers_).Acquire());
    return LoadRecord(*conn, tenant, key);
  }

  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    IDEM_ASSIGN_OR_RETURN(ConnPool::Lease conn, (IsMemory() ? writer_ : readers_).Acquire());
    return sql::ListRecords(*conn, query);
  }

  absl::Status Ping() override {
    if (IsMemory()) return absl::OkStatus();
    IDEM_RETURN_IF_ERROR(file_.Check());
    IDEM_ASSIGN_OR_RETURN(ConnPool::Lease reader, readers_.Acquire());
    return AsStoreFault(reader->Query(sql::kPing).status());
  }

  const SqlDialect* sql_dialect() const override { return &sql::SqliteDialect(); }
  absl::StatusOr<SchemaInfo> DescribeSchema() override;
  std::string_view url() const override { return url_; }
  bool read_only() const override { return options_.read_only; }

 private:
  bool IsMemory() const { return options_.path == ":memory:"; }

  const std::string url_;
  const Options options_;
  ConnPool writer_;
  ConnPool readers_;
  const FileIdentity file_;
};

// The schema on one connection (sql::OpenSchema, sql::DescribeSchema).
class SqliteSchema final : public sql::SchemaOn<sqlite::Connection> {
 public:
  SqliteSchema(sqlite::Connection& conn, const std::string& path) : SchemaOn(conn), path_(path) {}

  bool IsNoTable(const absl::Status& s) const override {
    return absl::StrContains(s.message(), "no such table");
  }
  absl::Status BeginCreate() override { return conn_.ExecScript("BEGIN IMMEDIATE"); }
  absl::Status EndCreate(bool commit) override {
    return conn_.ExecScript(commit ? "COMMIT" : "ROLLBACK");
  }

  // The file (if it exists) and its directory (for the file, its -wal and -shm)
  // must be writable.
  absl::Status CheckCanCreate() override {
    if (path_ == ":memory:") return absl::OkStatus();
    const size_t slash = path_.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    for (const std::string& p : {path_, dir}) {
      struct stat st;
      if (p == path_ && stat(p.c_str(), &st) != 0) continue;  // not there yet: its dir decides
      if (access(p.c_str(), W_OK) != 0) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot write '", p, "': ", std::strerror(errno)));
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::string& path_;
};

absl::StatusOr<SchemaInfo> SqliteStore::DescribeSchema() {
  IDEM_ASSIGN_OR_RETURN(ConnPool::Lease writer, writer_.Acquire());
  SqliteSchema session(*writer, options_.path);
  return sql::DescribeSchema(session, sql::SqliteDialect());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(std::string_view url, sql::SchemaMode mode) {
  IDEM_ASSIGN_OR_RETURN(Options options, ParseUrl(url));
  options.read_only = mode.read_only;
  std::string open_path = options.path;
  if (mode.read_only && options.path != ":memory:") {
    struct stat st;
    if (stat(options.path.c_str(), &st) != 0) {
      if (mode.require_schema) {
        return absl::FailedPreconditionError(absl::StrCat(
            "no idem schema here: sqlite database '", options.path, "' does not exist"));
      }
      // Nothing to read, and a read-only open must not create the file: an empty
      // database in memory answers DescribeSchema (no tables), the real path its
      // writability.
      open_path = ":memory:";
    }
  } else if (!mode.create && options.path != ":memory:") {
    // Checked on a read-only connection first: the writable open would create a
    // missing file and switch the journal to WAL, which writes to the file.
    const std::string where = absl::StrCat("sqlite database '", options.path, "'");
    if (struct stat st; stat(options.path.c_str(), &st) != 0) {
      return sql::NoSchemaError(where, "does not exist");
    }
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> probe,
                          sqlite::Connection::Open(options.path, options.synchronous,
                                                   options.busy_timeout_ms, /*read_only=*/true));
    SqliteSchema look(*probe, options.path);
    IDEM_RETURN_IF_ERROR(sql::OpenSchema(look, sql::SqliteDialect(), where,
                                         {.read_only = true, .require_schema = true}));
  } else {
    mode.read_only = false;  // :memory: has nothing to keep unchanged
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> writer,
                        sqlite::Connection::Open(open_path, options.synchronous,
                                                 options.busy_timeout_ms, options.read_only));
  SqliteSchema session(*writer, options.path);
  IDEM_RETURN_IF_ERROR(sql::OpenSchema(session, sql::SqliteDialect(),
                                       absl::StrCat("sqlite database '", options.path, "'"), mode));
  IDEM_ASSIGN_OR_RETURN(FileIdentity file, FileIdentity::Of(open_path == ":memory:" ? "" : open_path, "sqlite database"));
  return std::make_unique<SqliteStore>(std::string(url), std::move(options), std::move(writer),
                                       std::move(file));
}

}  // namespace idem
