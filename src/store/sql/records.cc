#include "store/sql/records.h"

#include "store/absl_compat.h"
#include "store/record_query.h"

namespace idem::sql {
namespace {

Value Int(int64_t v) { return Value(static_cast<long long>(v)); }

}  // namespace

std::array<Value, kRecordColumnCount> RecordParams(const Record& r) {
  return {Value(r.tenant),         Value(Blob{r.key}),
          Value(r.biz_type),       Value(r.fingerprint),
          Int(static_cast<int>(r.state)), Int(r.token),
          Int(ToMicros(r.lease_until)),   Value(Blob{r.result}),
          Value(Blob{r.error}),    Int(ToMicros(r.created_at)),
          Int(ToMicros(r.updated_at)),    Int(ToMicros(r.expires_at)),
          Int(ToMicros(r.purged_at))};
}

std::array<Value, 12> ReplaceParams(const Record& r, int64_t expected_token,
                                    RecordState expected_state) {
  return {Value(r.biz_type),    Value(r.fingerprint),         Int(static_cast<int>(r.state)),
          Int(r.token),         Int(ToMicros(r.lease_until)), Value(Blob{r.result}),
          Value(Blob{r.error}), Int(ToMicros(r.updated_at)),  Value(r.tenant),
          Value(Blob{r.key}),   Int(expected_token),          Int(static_cast<int>(expected_state))};
}

std::array<Value, 2> KeyParams(std::string_view tenant, std::string_view key) {
  return {Value(tenant), Value(Blob{std::string(key)})};
}

std::array<Value, 8> TombstoneParams(const Record& e, absl::Time now, absl::Time until) {
  return {Int(ToMicros(now)),   Int(ToMicros(now)), Int(ToMicros(until)),
          Value(e.tenant),      Value(Blob{e.key}), Int(e.token),
          Int(static_cast<int>(e.state)), Int(ToMicros(e.purged_at))};
}

std::array<Value, 5> DeleteParams(const Record& e) {
  return {Value(e.tenant), Value(Blob{e.key}), Int(e.token), Int(static_cast<int>(e.state)),
          Int(ToMicros(e.purged_at))};
}

absl::StatusOr<ListStatement> ListRecordsStatement(const RecordQuery& q) {
  IDEM_RETURN_IF_ERROR(store::CheckRecordQuery(q));
  ListStatement st;
  // result and error stay on the server: a page is for finding records.
  st.sql =
      "SELECT tenant, idem_key, biz_type, fingerprint, state, token, lease_until, NULL, NULL, "
      "created_at, updated_at, expires_at, purged_at FROM idem_records WHERE 1 = 1";
  if (q.tenant.has_value()) {
    st.sql += " AND tenant = ?";
    st.params.push_back(Value(*q.tenant));
  }
  if (q.biz_type.has_value()) {
    st.sql += " AND biz_type = ?";
    st.params.push_back(Value(*q.biz_type));
  }
  if (!q.states.empty()) {
    st.sql += " AND state IN (";
    for (size_t i = 0; i < q.states.size(); ++i) {
      st.sql += i == 0 ? "?" : ", ?";
      st.params.push_back(Int(static_cast<int>(q.states[i])));
    }
    st.sql += ")";
  }
  if (q.purged.has_value()) st.sql += *q.purged ? " AND purged_at <> 0" : " AND purged_at = 0";
  if (q.created_before != absl::InfiniteFuture()) {
    st.sql += " AND created_at < ?";
    st.params.push_back(Int(ToMicros(q.created_before)));
  }
  if (q.created_since != absl::InfinitePast()) {
    st.sql += " AND created_at >= ?";
    st.params.push_back(Int(ToMicros(q.created_since)));
  }
  if (q.expires_by != absl::InfiniteFuture()) {
    st.sql += " AND expires_at <= ?";
    st.params.push_back(Int(ToMicros(q.expires_by)));
  }
  if (q.after.has_value()) {
    // The primary key's order, so the page is a range of its index.
    if (q.tenant.has_value()) {
      st.sql += " AND idem_key > ?";
      st.params.push_back(Value(Blob{q.after->second}));
    } else {
      st.sql += " AND (tenant > ? OR (tenant = ? AND idem_key > ?))";
      st.params.push_back(Value(q.after->first));
      st.params.push_back(Value(q.after->first));
      st.params.push_back(Value(Blob{q.after->second}));
    }
  }
  absl::StrAppend(&st.sql, " ORDER BY tenant, idem_key LIMIT ", q.limit);
  return st;
}

absl::StatusOr<Record> RecordFromRow(absl::Span<const Value> row) {
  if (row.size() != kRecordColumnCount) {
    return absl::InternalError(absl::StrCat("idem_records: a row has ", row.size(),
                                            " columns, not ", kRecordColumnCount));
  }
  return ReadRecord([&](int i) { return BytesOf(row[i]); },
                    [&](int i) { return IntOf(row[i], "of idem_records"); });
}

}  // namespace idem::sql
