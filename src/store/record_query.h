// Store::ListRecords' query (include/idem/store.h), checked and matched one way for
// every store: the SQL stores turn the same conditions into SQL (sql/records.cc),
// the stores that filter in C++ (memory://, rocksdb://) match records here.
//
// Thread safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "idem/record.h"
#include "idem/store.h"
#include "store/record_codec.h"

namespace idem::store {

// OK, or kInvalidArgument for a limit outside 1 … 10000.
absl::Status CheckRecordQuery(const RecordQuery& query);

// The conditions of `query` a record's fixed head decides: states, purged,
// created_before, created_since, expires_by (so a store can skip a record without decoding it).
bool HeadMatches(const RecordQuery& query, const RecordHead& head);

// Every condition of `query` but `after` and `limit`.
bool Matches(const RecordQuery& query, const Record& record);

}  // namespace idem::store
