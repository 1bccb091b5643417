// How a cached record is named and stored in a cache tier: a binary-safe key made
// of the tenant (length-prefixed) and the key, and a versioned binary encoding of
// the record. An encoding this build cannot read is a miss, never an error.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "idem/record.h"

namespace idem::cache {

// "<len(tenant)>:<tenant><key>": no two (tenant, key) pairs share a name, whatever
// bytes they hold.
std::string CacheKey(std::string_view tenant, std::string_view key);

// Every field of `record`, binary-safe.
std::string EncodeRecord(const Record& record);

// The record EncodeRecord made, or std::nullopt for anything else (truncated,
// another version, an unknown state).
std::optional<Record> DecodeRecord(std::string_view bytes);

}  // namespace idem::cache
