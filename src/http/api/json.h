// Parsing of the JSON request bodies of the HTTP API, and the JSON helpers the
// handlers use to build answers.
//
// Bodies are read in one strict pass (well-formed JSON, valid UTF-8, one top-level
// object, no duplicate or unknown members); `result` and `error` values are kept as
// the exact bytes they had in the body, checked once as JSON of their own, so they
// can be stored and replayed byte-for-byte.
//
// Errors are kInvalidArgument with a message that names the offending field; the
// API layer turns them into 400 problem+json.
//
// Thread safety: safe from any thread (each thread reuses parsers of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/server/problem.h"

namespace idem::http {

inline constexpr int64_t kDefaultLeaseMs = 30'000;
inline constexpr int64_t kMinLeaseMs = 100;
inline constexpr int64_t kMaxLeaseMs = 3'600'000;
inline constexpr int64_t kMaxWaitMs = 30'000;

// POST /v1/claims
struct ClaimBody {
  std::string biz_type;
  std::string key;
  std::string fingerprint;  // empty when absent
  int64_t lease_ms = kDefaultLeaseMs;
  int64_t wait_ms = 0;
};

// POST /v1/claims/complete
struct CompleteBody {
  std::string biz_type;
  std::string key;
  int64_t token = 0;
  std::string result;  // raw JSON bytes of the "result" value
};

// POST /v1/claims/fail
struct FailBody {
  std::string biz_type;
  std::string key;
  int64_t token = 0;
  bool retryable = false;
  std::string error;  // raw JSON bytes of the "error" value
};

// Parse the bodies above. Required members: biz_type, key (strings without NUL);
// complete: token (integer >= 0; 0 is only valid for a degraded fail-open claim, which
// the API layer checks), result (any JSON value); fail: token, retryable
// (bool), error (any JSON value). Claim: fingerprint (string), lease_ms (integer in
// [kMinLeaseMs, kMaxLeaseMs]) and wait_ms (integer in [0, kMaxWaitMs]) are optional.
// Key and biz_type lengths are checked by the caller (idem::ValidateKey).
absl::StatusOr<ClaimBody> ParseClaimBody(std::string_view body);
absl::StatusOr<CompleteBody> ParseCompleteBody(std::string_view body);
absl::StatusOr<FailBody> ParseFailBody(std::string_view body);

// POST /v1/claims/batch holds at most this many items.
inline constexpr size_t kMaxBatchItems = 1000;

// One item of POST /v1/claims/batch: the body of the call its "op" names.
using BatchItemBody = std::variant<ClaimBody, CompleteBody, FailBody>;

// The items of a batch's body, {"requests":[item, ...]} with 1 to `max_items`
// items, each as its bytes in `body` (views into it). kInvalidArgument, naming what
// is wrong, for a body that is not JSON, has another member, or whose "requests" is
// missing, not an array, empty or longer than `max_items`; an item that is not an
// object is not an error here (ParseBatchItem words it).
absl::StatusOr<std::vector<std::string_view>> ParseBatchEnvelope(std::string_view body,
                                                                 size_t max_items);

// Parses one item of a batch: an object whose "op" ("claim", "complete" or "fail")
// names the call, and whose other members are that call's body, parsed and checked
// as Parse*Body does. A claim in a batch takes no wait_ms. kInvalidArgument naming
// the field otherwise.
absl::StatusOr<BatchItemBody> ParseBatchItem(std::string_view item);

// Returns true when `bytes` is one complete, valid JSON value (UTF-8 checked).
bool IsValidJson(std::string_view bytes);

// Returns `bytes` as JSON text for splicing into an answer: itself when it is valid
// JSON (byte-for-byte), else a JSON string holding it (invalid UTF-8 replaced), for
// values stored through the C++ API that are not JSON. Empty bytes give "null".
std::string RawJsonOrString(std::string_view bytes);
// The same, appended to `*out`.
void AppendRawJsonOrString(std::string* out, std::string_view bytes);

// JsonString and AppendJsonString: http/server/problem.h.

// Formats `t` as RFC 3339 UTC with milliseconds: "2024-06-18T07:13:00.123Z".
std::string FormatRfc3339(absl::Time t);
// Appends FormatRfc3339(t) to `*out` (without a string of its own in 1970-9999).
void AppendRfc3339(std::string* out, absl::Time t);

}  // namespace idem::http
