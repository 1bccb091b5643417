#include "store/record_query.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace idem::store {
namespace {

bool Decided(const RecordQuery& q, RecordState state, bool purged, absl::Time created_at,
             absl::Time expires_at) {
  if (!q.states.empty() && std::find(q.states.begin(), q.states.end(), state) == q.states.end()) {
    return false;
  }
  if (q.purged.has_value() && purged != *q.purged) return false;
  if (created_at >= q.created_before || created_at < q.created_since) return false;
  // expires_by = InfiniteFuture() is no condition (a record kept for ever has
  // expires_at InfiniteFuture() too).
  return q.expires_by == absl::InfiniteFuture() || expires_at <= q.expires_by;
}

}  // namespace

absl::Status CheckRecordQuery(const RecordQuery& query) {
  if (query.limit < 1 || query.limit > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("a page of records holds 1 … 10000 records, not ", query.limit));
  }
  return absl::OkStatus();
}

bool HeadMatches(const RecordQuery& query, const RecordHead& head) {
  return Decided(query, head.state, head.purged(), head.created_at, head.expires_at);
}

bool Matches(const RecordQuery& query, const Record& r) {
  if (query.tenant.has_value() && r.tenant != *query.tenant) return false;
  if (query.biz_type.has_value() && r.biz_type != *query.biz_type) return false;
  return Decided(query, r.state, r.purged(), r.created_at, r.expires_at);
}

}  // namespace idem::store
