#include "store/sqlite/sqlite_store.h"

#include <sys/stat.h>

#include <charconv>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/absl_compat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/sqlite/sqlite_conn.h"
#include "store/sql/statements.h"

namespace idem {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS idem_schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS idem_records (
  tenant      TEXT    NOT NULL,
  idem_key    BLOB    NOT NULL,
  biz_type    TEXT    NOT NULL,
  fingerprint TEXT    NOT NULL DEFAULT '',
  state       INTEGER NOT NULL CHECK (state IN (0, 1, 2, 3)),
  token       INTEGER NOT NULL,
  lease_until INTEGER NOT NULL,
  result      BLOB,
  error       BLOB,
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (tenant, idem_key)
) WITHOUT ROWID;
)sql";

constexpr std::string_view kColumns =
    "tenant, idem_key, biz_type, fingerprint, state, token, lease_until, result, error, "
    "created_at, updated_at";

// Times are unix microseconds; 0 stands for "none" (absl::InfinitePast()).
int64_t ToMicros(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) {
  return us == 0 ? absl::InfinitePast() : absl::FromUnixMicros(us);
}

std::string ColumnBytes(sqlite3_stmt* stmt, int i) {
  const void* p = sqlite3_column_blob(stmt, i);
  if (p == nullptr) return std::string();
  return std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt, i));
}

Record ReadRecord(sqlite3_stmt* stmt) {
  Record r;
  r.tenant = ColumnBytes(stmt, 0);
  r.key = ColumnBytes(stmt, 1);
  r.biz_type = ColumnBytes(stmt, 2);
  r.fingerprint = ColumnBytes(stmt, 3);
  r.state = static_cast<RecordState>(sqlite3_column_int(stmt, 4));
  r.token = sqlite3_column_int64(stmt, 5);
  r.lease_until = FromMicros(sqlite3_column_int64(stmt, 6));
  r.result = ColumnBytes(stmt, 7);
  r.error = ColumnBytes(stmt, 8);
  r.created_at = FromMicros(sqlite3_column_int64(stmt, 9));
  r.updated_at = FromMicros(sqlite3_column_int64(stmt, 10));
  return r;
}

absl::StatusOr<std::optional<Record>> LoadRecord(sqlite::Connection& conn,
                                                 std::string_view tenant, std::string_view key) {
  static const std::string sql =
      absl::StrCat("SELECT ", AV(kColumns), " FROM idem_records WHERE tenant = ? AND idem_key = ?");
  const Value params[] = {Value(tenant), Value(Blob{std::string(key)})};
  IDEM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, conn.Prepare(sql, params));
  int rc = sqlite3_step(stmt);
  std::optional<Record> out;
  if (rc == SQLITE_ROW) {
    out = ReadRecord(stmt);
    rc = SQLITE_DONE;
  }
  absl::Status status = sqlite::ToStatus(rc, conn.db(), "load record");
  sqlite3_reset(stmt);
  IDEM_RETURN_IF_ERROR(status);
  return out;
}

struct Options {
  std::string path;
  bool read_only = false;
  std::string synchronous = "FULL";
  int busy_timeout_ms = 5000;
  int readers = 4;
};

absl::StatusOr<int> ParseInt(std::string_view name, std::string_view value, int lo, int hi) {
  int out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || ptr != value.data() + value.size() || out < lo || out > hi) {
    return absl::InvalidArgumentError(absl::StrCat("sqlite URL parameter ", AV(name), "='", AV(value),
                                                   "' must be an integer in ", lo, "..", hi));
  }
  return out;
}

absl::StatusOr<Options> ParseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "sqlite://";
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("not a sqlite:// URL: '", AV(url), "'"));
  }
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.empty()) {
    return absl::InvalidArgumentError(
        "sqlite URL has no path; use sqlite://./idem.db, sqlite:///abs/path.db or "
        "sqlite://:memory:");
  }
  Options o;
  o.path = std::string(rest);
  for (absl::string_view item : absl::StrSplit(AV(query), '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first == "synchronous") {
      std::string v = absl::AsciiStrToUpper(kv.second);
      if (v != "FULL" && v != "NORMAL" && v != "OFF" && v != "EXTRA") {
        return absl::InvalidArgumentError(absl::StrCat(
            "sqlite URL parameter synchronous='", kv.second, "' must be full, normal, off or extra"));
      }
      o.synchronous = v;
    } else if (kv.first == "busy_timeout_ms") {
      IDEM_ASSIGN_OR_RETURN(o.busy_timeout_ms, ParseInt(SV(kv.first), SV(kv.second), 0, 600000));
    } else if (kv.first == "readers") {
      IDEM_ASSIGN_OR_RETURN(o.readers, ParseInt(SV(kv.first), SV(kv.second), 1, 64));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown sqlite URL parameter '", kv.first,
          "' (known: synchronous, busy_timeout_ms, readers)"));
    }
  }
  return o;
}

// The database file a store opened, by identity (device and inode), not by name:
// a file deleted or replaced under a running store (rm, a restore copied over it,
// another volume mounted there) would otherwise take writes into an unlinked inode
// that vanishes at exit, or mix two databases, and the next start would acquire
// completed keys again. Checked before every transaction starts and commits.
class FileIdentity {
 public:
  // For ":memory:" (no file) Check() always answers OK.
  static absl::StatusOr<FileIdentity> Of(const std::string& path) {
    FileIdentity id;
    id.path_ = path;
    if (path == ":memory:") return id;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return StoreFaultError(absl::StrCat("sqlite database '", path, "' vanished while opening"));
    }
    id.dev_ = st.st_dev;
    id.ino_ = st.st_ino;
    id.file_ = true;
    return id;
  }

  // OK while `path` still names the file that was opened; else a store fault: the
  // store stops acknowledging anything.
  absl::Status Check() const {
    if (!file_) return absl::OkStatus();
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) {
      return StoreFaultError(absl::StrCat(
          "sqlite database '", path_, "' was deleted while idem had it open: nothing is "
          "acknowledged until it is back (restore the file, then restart idem)"));
    }
    if (st.st_dev != dev_ || st.st_ino != ino_) {
      return StoreFaultError(absl::StrCat(
          "sqlite database '", path_, "' was replaced by another file while idem had it open: "
          "nothing is acknowledged (restart idem to open the new file)"));
    }
    return absl::OkStatus();
  }

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool file_ = false;
};

class SqliteTransaction final : public StoreTransaction {
 public:
  SqliteTransaction(sqlite::Connection& conn, std::unique_lock<std::timed_mutex> lock,
                    const FileIdentity& file)
      : conn_(conn), lock_(std::move(lock)), file_(file) {}
  ~SqliteTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return conn_.Exec(sql, params);
  }
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return conn_.Query(sql, params);
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    static const std::string sql = absl::StrCat(
        "INSERT INTO idem_records (", AV(kColumns),
        ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, idem_key) DO NOTHING");
    const Value params[] = {Value(r.tenant),
                            Value(Blob{r.key}),
                            Value(r.biz_type),
                            Value(r.fingerprint),
                            Value(static_cast<int>(r.state)),
                            Value(static_cast<long long>(r.token)),
                            Value(static_cast<long long>(ToMicros(r.lease_until))),
                            Value(Blob{r.result}),
                            Value(Blob{r.error}),
                            Value(static_cast<long long>(ToMicros(r.created_at))),
                            Value(static_cast<long long>(ToMicros(r.updated_at)))};
    IDEM_ASSIGN_OR_RETURN(int64_t inserted, conn_.Exec(sql, params));
    if (inserted == 1) return std::nullopt;
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, LoadRecord(conn_, r.tenant, r.key));
    if (!existing.has_value()) {
      return absl::InternalError("insert conflicted but the record is not there");
    }
    return existing;
  }

  absl::StatusOr<bool> Replace(const Record& r, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    static constexpr std::string_view sql =
        "UPDATE idem_records SET biz_type = ?, fingerprint = ?, state = ?, token = ?, "
        "lease_until = ?, result = ?, error = ?, updated_at = ? "
        "WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ?";
    const Value params[] = {Value(r.biz_type),
                            Value(r.fingerprint),
                            Value(static_cast<int>(r.state)),
                            Value(static_cast<long long>(r.token)),
                            Value(static_cast<long long>(ToMicros(r.lease_until))),
                            Value(Blob{r.result}),
                            Value(Blob{r.error}),
                            Value(static_cast<long long>(ToMicros(r.updated_at))),
                            Value(r.tenant),
                            Value(Blob{r.key}),
                            Value(static_cast<long long>(expected_token)),
                            Value(static_cast<int>(expected_state))};
    IDEM_ASSIGN_OR_RETURN(int64_t changed, conn_.Exec(sql, params));
    return changed == 1;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    return LoadRecord(conn_, tenant, key);
  }

  absl::Status Commit() override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    // The file may have gone since Begin: then nothing of this commits.
    absl::Status s = file_.Check();
    if (s.ok()) s = conn_.Exec("COMMIT").status();
    if (!s.ok()) {
      Rollback();
      return s;
    }
    done_ = true;
    lock_.unlock();
    return absl::OkStatus();
  }

  void Rollback() override {
    if (done_) return;
    done_ = true;
    if (sqlite3_get_autocommit(conn_.db()) == 0) {
      // ROLLBACK fails only when no transaction is open, which the check excludes;
      // nothing else can be done about it here.
      conn_.Exec("ROLLBACK").IgnoreError();
    }
    lock_.unlock();
  }

 private:
  absl::Status CheckOpen() const {
    if (done_) return absl::FailedPreconditionError("the transaction has already ended");
    return absl::OkStatus();
  }

  sqlite::Connection& conn_;
  std::unique_lock<std::timed_mutex> lock_;
  const FileIdentity& file_;
  bool done_ = false;
};

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string url, Options options, std::unique_ptr<sqlite::Connection> writer,
              FileIdentity file)
      : url_(std::move(url)),
        options_(std::move(options)),
        writer_(std::move(writer)),
        file_(std::move(file)) {}

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    std::unique_lock<std::timed_mutex> lock(writer_mu_, std::defer_lock);
    if (!lock.try_lock_for(std::chrono::milliseconds(options_.busy_timeout_ms))) {
      return absl::UnavailableError(absl::StrCat("sqlite store ", url_,
                                                 ": write lock not free within ",
                                                 options_.busy_timeout_ms, " ms"));
    }
    // A read-only store takes no write lock (it could not): its transactions read.
    IDEM_RETURN_IF_ERROR(writer_->Exec(options_.read_only ? "BEGIN" : "BEGIN IMMEDIATE"));
    return std::make_unique<SqliteTransaction>(*writer_, std::move(lock), file_);
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    IDEM_RETURN_IF_ERROR(file_.Check());
    if (IsMemory()) {
      std::unique_lock<std::timed_mutex> lock(writer_mu_);
      return LoadRecord(*writer_, tenant, key);
    }
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> reader, TakeReader());
    absl::StatusOr<std::optional<Record>> out = LoadRecord(*reader, tenant, key);
    ReturnReader(std::move(reader));
    return out;
  }

  absl::Status Ping() override {
    if (IsMemory()) return absl::OkStatus();
    IDEM_RETURN_IF_ERROR(file_.Check());
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> reader, TakeReader());
    absl::StatusOr<Rows> rows = reader->Query(sql::kPing);
    ReturnReader(std::move(reader));
    return AsStoreFault(rows.status());
  }

  bool SupportsSql() const override { return true; }
  std::string_view url() const override { return url_; }
  bool read_only() const override { return options_.read_only; }

 private:
  bool IsMemory() const { return options_.path == ":memory:"; }

  absl::StatusOr<std::unique_ptr<sqlite::Connection>> TakeReader() {
    {
      absl::MutexLock lock(&readers_mu_);
      if (!readers_.empty()) {
        std::unique_ptr<sqlite::Connection> conn = std::move(readers_.back());
        readers_.pop_back();
        return conn;
      }
    }
    return sqlite::Connection::Open(options_.path, options_.synchronous, options_.busy_timeout_ms,
                                    options_.read_only);
  }

  void ReturnReader(std::unique_ptr<sqlite::Connection> conn) {
    absl::MutexLock lock(&readers_mu_);
    if (static_cast<int>(readers_.size()) < options_.readers) readers_.push_back(std::move(conn));
  }

  const std::string url_;
  const Options options_;
  std::timed_mutex writer_mu_;  // held by the one open write transaction
  std::unique_ptr<sqlite::Connection> writer_;
  absl::Mutex readers_mu_;
  std::vector<std::unique_ptr<sqlite::Connection>> readers_ ABSL_GUARDED_BY(readers_mu_);
  const FileIdentity file_;
};

absl::Status CheckVersion(const Rows& rows, const std::string& path) {
  if (!rows.rows[0][0].is_int() || rows.rows[0][0].as_int() > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sqlite database '", path, "' has an idem schema newer than this build (",
        kSchemaVersion, "); upgrade idem"));
  }
  return absl::OkStatus();
}

// A schema found in place (`rows`: its version): not newer than this build and
// not damaged.
absl::Status CheckExisting(sqlite::Connection& conn, const Rows& rows, const std::string& path) {
  IDEM_RETURN_IF_ERROR(CheckVersion(rows, path));
  return sql::IntactSchema(absl::StrCat("sqlite database '", path, "'"),
                           conn.Query(sql::kPing).status(), /*lost=*/false);
}

absl::Status CreateSchema(sqlite::Connection& conn, const std::string& path) {
  // An existing schema needs no write lock: a store opens while another process
  // holds a long write transaction.
  const bool exists = sqlite3_table_column_metadata(conn.db(), nullptr, "idem_schema_version",
                                                    "version", nullptr, nullptr, nullptr,
                                                    nullptr, nullptr) == SQLITE_OK;
  if (exists) {
    absl::StatusOr<Rows> rows = conn.Query("SELECT version FROM idem_schema_version");
    if (rows.ok() && !rows->rows.empty()) return CheckExisting(conn, *rows, path);
  }
  IDEM_RETURN_IF_ERROR(conn.ExecScript("BEGIN IMMEDIATE"));
  absl::Status s = conn.ExecScript(kSchema);
  if (s.ok()) {
    absl::StatusOr<Rows> rows = conn.Query("SELECT version FROM idem_schema_version");
    if (!rows.ok()) {
      s = rows.status();
    } else if (rows->rows.empty()) {
      const Value v[] = {Value(kSchemaVersion)};
      s = conn.Exec("INSERT INTO idem_schema_version (version) VALUES (?)", v).status();
    } else {
      s = CheckVersion(*rows, path);
    }
  }
  if (s.ok()) s = conn.ExecScript("COMMIT");
  if (!s.ok()) {
    conn.ExecScript("ROLLBACK").IgnoreError();  // best effort; the open fails anyway
    return absl::Status(s.code(), absl::StrCat("sqlite database '", path, "': ", s.message()));
  }
  return absl::OkStatus();
}

// A read-only open: the schema must be there; nothing is created or changed.
absl::Status CheckSchema(sqlite::Connection& conn, const std::string& path) {
  const bool exists = sqlite3_table_column_metadata(conn.db(), nullptr, "idem_schema_version",
                                                    "version", nullptr, nullptr, nullptr,
                                                    nullptr, nullptr) == SQLITE_OK;
  const std::string where = absl::StrCat("sqlite database '", path, "'");
  if (!exists) return sql::NoSchemaError(where, /*no_tables=*/true);
  IDEM_ASSIGN_OR_RETURN(Rows rows, conn.Query("SELECT version FROM idem_schema_version"));
  if (rows.rows.empty()) return sql::NoSchemaError(where, /*no_tables=*/false);
  return CheckExisting(conn, rows, path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(std::string_view url, bool read_only) {
  IDEM_ASSIGN_OR_RETURN(Options options, ParseUrl(url));
  options.read_only = read_only;
  if (read_only && options.path != ":memory:") {
    struct stat st;
    if (stat(options.path.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no idem schema here: sqlite database '", options.path, "' does not exist"));
    }
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Connection> writer,
                        sqlite::Connection::Open(options.path, options.synchronous,
                                                 options.busy_timeout_ms, read_only));
  IDEM_RETURN_IF_ERROR(read_only && options.path != ":memory:"
                           ? CheckSchema(*writer, options.path)
                           : CreateSchema(*writer, options.path));
  IDEM_ASSIGN_OR_RETURN(FileIdentity file, FileIdentity::Of(options.path));
  return std::make_unique<SqliteStore>(std::string(url), std::move(options), std::move(writer),
                                       std::move(file));
}

}  // namespace idem
