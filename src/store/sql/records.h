// The record table as every SQL backend reads and writes it: the
// statements, their parameter lists and the mapping of a row to a Record. Written
// with `?` placeholders (PostgreSQL's connection numbers them). Not part of the
// public API.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/value.h"
#include "store/backend.h"
#include "store/sql/columns.h"

namespace idem::sql {

#define IDEM_SQL_RECORD_COLUMNS                                                         \
  "tenant, idem_key, biz_type, fingerprint, state, token, lease_until, result, error, " \
  "created_at, updated_at, expires_at, purged_at"

inline constexpr std::string_view kRecordColumns = IDEM_SQL_RECORD_COLUMNS;
inline constexpr int kRecordColumnCount = 13;

inline constexpr std::string_view kSelectRecord =
    "SELECT " IDEM_SQL_RECORD_COLUMNS " FROM idem_records WHERE tenant = ? AND idem_key = ?";

// The INSERT of a new record (RecordParams), before SqlDialect::KeepExisting.
inline constexpr std::string_view kInsertRecord =
    "INSERT INTO idem_records (" IDEM_SQL_RECORD_COLUMNS
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

#undef IDEM_SQL_RECORD_COLUMNS

// RecordTransaction::Retire with a tombstone (TombstoneParams): result and error go,
// only from the expected token, state and purged_at.
inline constexpr std::string_view kTombstoneRecord =
    "UPDATE idem_records SET result = NULL, error = NULL, purged_at = ?, updated_at = ?, "
    "expires_at = ? WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ? AND "
    "purged_at = ?";

// RecordTransaction::Retire without one (DeleteParams).
inline constexpr std::string_view kDeleteRecord =
    "DELETE FROM idem_records WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ? "
    "AND purged_at = ?";

// Moves a record on, only from the expected token and state (ReplaceParams).
inline constexpr std::string_view kReplaceRecord =
    "UPDATE idem_records SET biz_type = ?, fingerprint = ?, state = ?, token = ?, "
    "lease_until = ?, result = ?, error = ?, updated_at = ? "
    "WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ?";

// kInsertRecord's parameters: `r` in kRecordColumns order.
std::array<Value, kRecordColumnCount> RecordParams(const Record& r);

// kReplaceRecord's parameters: `r`'s new fields, then its (tenant, key) and the
// token and state the row must still have.
std::array<Value, 12> ReplaceParams(const Record& r, int64_t expected_token,
                                    RecordState expected_state);

// The (tenant, key) parameters of kSelectRecord.
std::array<Value, 2> KeyParams(std::string_view tenant, std::string_view key);

// kTombstoneRecord's parameters.
std::array<Value, 8> TombstoneParams(const Record& expected, absl::Time now,
                                     absl::Time tombstone_until);

// kDeleteRecord's parameters.
std::array<Value, 5> DeleteParams(const Record& expected);

// Store::ListRecords as one SELECT (result and error left out) and its parameters.
struct ListStatement {
  std::string sql;
  std::vector<Value> params;
};
// kInvalidArgument for a limit outside 1 … 10000.
absl::StatusOr<ListStatement> ListRecordsStatement(const RecordQuery& query);


// A record from the columns of one row in kRecordColumns order, whatever the
// driver: `bytes(i)` answers column i as bytes, `integer(i)` as an
// absl::StatusOr<int64_t>. kDataLoss for a state that is not a known record state.
template <typename BytesAt, typename IntAt>
absl::StatusOr<Record> ReadRecord(BytesAt bytes, IntAt integer) {
  Record r;
  r.tenant = bytes(0);
  r.key = bytes(1);
  r.biz_type = bytes(2);
  r.fingerprint = bytes(3);
  IDEM_ASSIGN_OR_RETURN(int64_t state, integer(4));
  if (state < 0 || state > 3) {
    return absl::DataLossError(absl::StrCat("idem_records: a record has unknown state ", state));
  }
  r.state = static_cast<RecordState>(state);
  IDEM_ASSIGN_OR_RETURN(r.token, integer(5));
  IDEM_ASSIGN_OR_RETURN(int64_t lease, integer(6));
  r.result = bytes(7);
  r.error = bytes(8);
  IDEM_ASSIGN_OR_RETURN(int64_t created, integer(9));
  IDEM_ASSIGN_OR_RETURN(int64_t updated, integer(10));
  IDEM_ASSIGN_OR_RETURN(int64_t expires, integer(11));
  IDEM_ASSIGN_OR_RETURN(int64_t purged, integer(12));
  r.lease_until = FromMicros(lease);
  r.created_at = FromMicros(created);
  r.updated_at = FromMicros(updated);
  r.expires_at = FromMicros(expires);
  r.purged_at = FromMicros(purged);
  return r;
}

// ReadRecord over a row of Values (Transaction::Query's shape).
absl::StatusOr<Record> RecordFromRow(absl::Span<const Value> row);

// Store::ListRecords through `conn.Query` (any driver's connection).
template <typename Conn>
absl::StatusOr<std::vector<Record>> ListRecords(Conn& conn, const RecordQuery& query) {
  IDEM_ASSIGN_OR_RETURN(ListStatement st, ListRecordsStatement(query));
  IDEM_ASSIGN_OR_RETURN(Rows rows, conn.Query(st.sql, st.params));
  std::vector<Record> out;
  out.reserve(rows.rows.size());
  for (const std::vector<Value>& row : rows.rows) {
    IDEM_ASSIGN_OR_RETURN(Record r, RecordFromRow(row));
    out.push_back(std::move(r));
  }
  return out;
}

// Store::ListRecords on a sql::Pool of a server database: Pool::Run lends a
// connection (and replaces one that died while idle).
template <typename Pool>
absl::StatusOr<std::vector<Record>> ListRecordsOnPool(Pool& pool, const RecordQuery& query) {
  std::vector<Record> out;
  IDEM_RETURN_IF_ERROR(pool.Run([&](auto& conn) -> absl::Status {
    IDEM_ASSIGN_OR_RETURN(out, ListRecords(conn, query));
    return absl::OkStatus();
  }));
  return out;
}

// The record of (tenant, key) read by `select` (kSelectRecord, or a locking form of
// it) through `conn.Query`, or nullopt when there is none.
template <typename Conn>
absl::StatusOr<std::optional<Record>> LoadRecord(Conn& conn, std::string_view select,
                                                 std::string_view tenant, std::string_view key) {
  // A local: SQLite binds the values without a copy, so they must outlive the steps.
  const auto params = KeyParams(tenant, key);
  IDEM_ASSIGN_OR_RETURN(Rows rows, conn.Query(select, params));
  if (rows.rows.empty()) return std::nullopt;
  IDEM_ASSIGN_OR_RETURN(Record r, RecordFromRow(rows.rows[0]));
  return r;
}

}  // namespace idem::sql
