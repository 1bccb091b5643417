// How `idem serve` shows records: one record as GET
// /v1/records/{biz_type}/{key} and the pages of GET /v1/records have it, the 410
// `expired` answer for a key whose record was purged, and a stored result or error
// spliced into an answer. Shared by the claim routes (claims.cc) and the record
// routes (records.cc, which defines them).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

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

// Appends `"name":<value>` to the JSON object text `object` (which ends in '}'),
// the value as RawJsonOrString gives it (a stored result or error, byte for byte).
std::string SpliceMember(std::string object, std::string_view name, std::string_view value);

}  // namespace idem::http
