// sql::OpenSchema over a scripted SchemaSession: what it does when the database
// rolls a creation back (Galera: two servers on two nodes create the schema at
// once; the schema lock is node-local, and the loser's version row fails
// certification with 1213) and when it must not try again.
#include "store/sql/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/status_matchers.h"

namespace idem::sql {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

// A database with or without idem's tables. `aborts` creations fail at the
// version row with kAborted; with `rival_wins` the rival's creation has
// committed by then, so the tables and version row are there afterwards.
class ScriptedSession : public SchemaSession {
 public:
  int aborts = 0;
  bool rival_wins = true;
  bool break_on_abort = false;
  int creations = 0;
  int commits = 0;
  int rollbacks = 0;

  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value>) override {
    if (sql.find("FROM idem_schema_version") != std::string_view::npos &&
        sql.find("idem_records") == std::string_view::npos) {
      // A creation sees its own tables and version row before it commits.
      if (!tables_ && !pending_tables_) {
        return absl::NotFoundError("no such table: idem_schema_version");
      }
      const int64_t version = pending_version_ != 0 ? pending_version_ : version_;
      Rows rows;
      rows.rows.push_back({version == 0 ? Value() : Value(static_cast<long long>(version))});
      return rows;
    }
    if (sql.find("idem_records WHERE 1 = 0") != std::string_view::npos) {
      if (!tables_ && !pending_tables_) return absl::NotFoundError("no such table: idem_records");
      return Rows{};
    }
    if (sql.rfind("INSERT INTO idem_schema_version", 0) == 0) {
      if (aborts > 0) {
        --aborts;
        if (rival_wins) pending_rival_ = true;
        if (break_on_abort) broken_ = true;
        return absl::AbortedError("mysql error 1213 (40001): Deadlock found when trying to get lock");
      }
      pending_version_ = kSchemaVersion;
      return Rows{};
    }
    pending_tables_ = true;  // DDL of the creation
    return Rows{};
  }
  bool broken() const override { return broken_; }
  bool IsNoTable(const absl::Status& s) const override {
    return s.code() == absl::StatusCode::kNotFound;
  }
  absl::Status BeginCreate() override {
    ++creations;
    return absl::OkStatus();
  }
  absl::Status EndCreate(bool commit) override {
    if (commit) {
      ++commits;
      tables_ = tables_ || pending_tables_;
      if (pending_version_ != 0) version_ = pending_version_;
    } else {
      ++rollbacks;
    }
    if (pending_rival_) {  // what the rival committed meanwhile
      tables_ = true;
      version_ = kSchemaVersion;
    }
    pending_tables_ = pending_rival_ = false;
    pending_version_ = 0;
    return absl::OkStatus();
  }
  absl::Status CheckCanCreate() override { return absl::OkStatus(); }

 private:
  bool tables_ = false;
  bool pending_tables_ = false;
  bool pending_rival_ = false;
  bool broken_ = false;
  int64_t version_ = 0;
  int64_t pending_version_ = 0;
};

constexpr std::string_view kWhere = "mysql database 'mysql://idem@node2/app'";

TEST(OpenSchema, CreatesTheSchemaOnAFreshDatabase) {
  ScriptedSession db;
  ASSERT_OK(OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{}));
  EXPECT_EQ(db.creations, 1);
  EXPECT_EQ(db.commits, 1);
  // Opened again: the fast path, no creation.
  ASSERT_OK(OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{}));
  EXPECT_EQ(db.creations, 1);
}

// The Galera race: this node's creation loses certification to the rival's. The
// open tries again and finds the rival's schema instead of failing the server's
// start.
TEST(OpenSchema, ACreationRolledBackByARivalsCreationFindsTheRivalsSchema) {
  ScriptedSession db;
  db.aborts = 1;
  ASSERT_OK(OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{}));
  EXPECT_EQ(db.creations, 1);  // the second try took the fast path
  EXPECT_EQ(db.rollbacks, 1);
}

// A rollback with nobody else's schema behind it (a plain deadlock): tried again,
// and the next creation commits.
TEST(OpenSchema, ACreationRolledBackAloneIsCreatedAgain) {
  ScriptedSession db;
  db.aborts = 2;
  db.rival_wins = false;
  ASSERT_OK(OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{}));
  EXPECT_EQ(db.creations, 3);
  EXPECT_EQ(db.commits, 1);
}

// Rolled back on every try: the open gives up with the database's error, naming
// the database and what it was doing.
TEST(OpenSchema, GivesUpAfterBoundedTriesWithTheDatabasesError) {
  ScriptedSession db;
  db.aborts = 1000;
  db.rival_wins = false;
  absl::Status s = OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(s.message(), HasSubstr("creating the idem schema"));
  EXPECT_THAT(s.message(), HasSubstr("1213"));
  EXPECT_THAT(s.message(), HasSubstr(kWhere));
  EXPECT_EQ(db.creations, 5);
}

// A connection lost with the rollback: its errors say nothing more; no retry on it.
TEST(OpenSchema, ALostConnectionIsNotTriedAgain) {
  ScriptedSession db;
  db.aborts = 1;
  db.break_on_abort = true;
  EXPECT_THAT(OpenSchema(db, MysqlDialect(), kWhere, SchemaMode{}),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(db.creations, 1);
}

// Errors that are not a rollback are answered at once (here: a read-only open
// of a database without idem's schema).
TEST(OpenSchema, AReadOnlyOpenWithoutASchemaIsRefusedAtOnce) {
  ScriptedSession db;
  ASSERT_OK(OpenSchema(db, PostgresDialect(), kWhere, SchemaMode{}));
  SchemaMode read_only{.read_only = true, .require_schema = true};
  ASSERT_OK(OpenSchema(db, PostgresDialect(), kWhere, read_only));
  ScriptedSession empty;
  EXPECT_THAT(OpenSchema(empty, PostgresDialect(), kWhere, read_only),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(empty.creations, 0);
}

}  // namespace
}  // namespace idem::sql
