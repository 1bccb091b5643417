// How a record is named and stored as bytes, wherever a store keeps records as
// key/value pairs (the cache tiers, rocksdb://): a binary-safe name made of the
// tenant (length-prefixed) and the key, and a versioned binary encoding of every
// field of the record. The first byte of an encoding is its format version, so the
// layout can evolve: a reader refuses a version it does not know instead of
// guessing. Version 2 added expires_at and purged_at (retention); version
// 1 encodings (written before) are still read, as records kept for ever.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/record.h"

namespace idem::store {

// The format version EncodeRecord writes (the first byte of every encoding).
inline constexpr uint8_t kRecordFormatVersion = 2;

// "<len(tenant)>:<tenant><key>": no two (tenant, key) pairs share a name, whatever
// bytes they hold ("ab","c" and "a","bc" differ).
std::string RecordKey(std::string_view tenant, std::string_view key);
// Appends RecordKey(tenant, key) to `out` without a temporary (a reused buffer then
// allocates nothing).
void AppendRecordKey(std::string& out, std::string_view tenant, std::string_view key);

// Every field of `record`, binary-safe. Times keep whole microseconds (as the SQL
// stores do); infinite times are kept as such.
std::string EncodeRecord(const Record& record);
// The same, into `out` (replacing what it held; its buffer is reused).
void EncodeRecordInto(std::string& out, const Record& record);

// The record EncodeRecord made, of this format version or version 1 (which has
// no retention: expires_at absl::InfiniteFuture(), not purged). kFailedPrecondition
// naming the version for a newer format version (a newer idem wrote it: do not
// guess its layout), and for bytes
// that are not a record (truncated, an unknown state, trailing bytes).
absl::StatusOr<Record> DecodeRecord(std::string_view bytes);

// The fixed-size head of an encoding: enough to decide retention without copying
// the strings (a compaction filter reads every record it passes).
struct RecordHead {
  RecordState state = RecordState::kProcessing;
  int64_t token = 0;
  absl::Time lease_until;
  absl::Time created_at;
  absl::Time updated_at;
  absl::Time expires_at = absl::InfiniteFuture();
  absl::Time purged_at = absl::InfinitePast();
  uint8_t version = kRecordFormatVersion;  // the format version the bytes are in

  bool purged() const { return purged_at != absl::InfinitePast(); }
};

// The head of `bytes`, with DecodeRecord's errors for what the head holds.
absl::StatusOr<RecordHead> DecodeRecordHead(std::string_view bytes);

}  // namespace idem::store
