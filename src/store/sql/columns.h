// Column values as every SQL table of idem stores them, for the SQL backends and
// the step journal: times are unix microseconds in a 64-bit integer, 0 standing
// for "none" (absl::InfinitePast()) and INT64_MAX for "never" (absl::
// InfiniteFuture(), e.g. a record kept for ever); names and keys come back as text or as blobs
// depending on the column type (BLOB, BYTEA, VARBINARY). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "store/absl_compat.h"
#include "idem/value.h"

namespace idem {

inline constexpr int64_t kNeverMicros = INT64_MAX;

inline int64_t ToMicros(absl::Time t) {
  if (t == absl::InfinitePast()) return 0;
  if (t == absl::InfiniteFuture()) return kNeverMicros;
  return absl::ToUnixMicros(t);
}
inline absl::Time FromMicros(int64_t us) {
  if (us == 0) return absl::InfinitePast();
  if (us == kNeverMicros) return absl::InfiniteFuture();
  return absl::FromUnixMicros(us);
}

// A column value as bytes (text and blobs alike; "" for NULL and numbers).
inline std::string BytesOf(const Value& v) {
  if (v.is_text()) return v.as_text();
  if (v.is_blob()) return v.as_blob();
  return std::string();
}

// A column value as an integer: an int, or decimal text; 0 for NULL. kDataLoss
// naming `column` otherwise.
inline absl::StatusOr<int64_t> IntOf(const Value& v, std::string_view column) {
  if (v.is_int()) return v.as_int();
  if (v.is_null()) return 0;
  int64_t out = 0;
  if (v.is_text() && absl::SimpleAtoi(AV(v.as_text()), &out)) return out;
  return absl::DataLossError(absl::StrCat("column ", AV(column), " is not an integer"));
}

}  // namespace idem
