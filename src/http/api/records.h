// How `idem serve` shows records: one record as GET
// /v1/records/{biz_type}/{key} and the pages of GET /v1/records have it, and the 410
// `expired` answer for a key whose record was purged. Shared by the
// claim and record handlers (handlers.cc) and the record pages (record_pages.cc).
//
// Thread safety: pure functions.
#pragma once

#include "absl/time/time.h"
#include "http/types.h"
#include "idem/record.h"
#include "nlohmann/json.hpp"

namespace idem::http {

// The record's fields without result and error (the caller adds those it shows).
nlohmann::ordered_json RecordJson(const Record& record);

// 410 problem+json `urn:idem:problem:expired`, "outcome":"expired", with
// `purged_at` and `tombstone_until` (when the key is free again; null: never).
HttpResponse ExpiredProblem(absl::Time purged_at, absl::Time tombstone_until);

}  // namespace idem::http
