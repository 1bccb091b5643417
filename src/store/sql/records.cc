#include "store/sql/records.h"

#include "core/absl_compat.h"

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
          Int(ToMicros(r.updated_at))};
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

absl::StatusOr<Record> RecordFromRow(absl::Span<const Value> row) {
  if (row.size() != kRecordColumnCount) {
    return absl::InternalError(absl::StrCat("idem_records: a row has ", row.size(),
                                            " columns, not ", kRecordColumnCount));
  }
  return ReadRecord([&](int i) { return BytesOf(row[i]); },
                    [&](int i) { return IntOf(row[i], "of idem_records"); });
}

}  // namespace idem::sql
