// What `idem keys analyze` prints (cli/keys.cc, docs/keys.md): the findings of a
// KeyAnalysis of a store's records and, with --server, the over-coarse keys a server
// answered 422, as text or as one JSON object.
//
// Keys are shown by KeyShown: up to 16 bytes whole, longer ones cut to their first
// 12 bytes and "…" (never inside a UTF-8 character), and C-escaped where they are not
// plain text (Printable); beside them the first 12 hex digits of their SHA-256 (the
// whole digest in JSON, key_sha256).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "core/key_analysis.h"

namespace idem::cli {

struct OverCoarseKey {
  std::string biz_type;
  std::string key;
  int64_t fingerprints = 0;
  int64_t mismatches = 0;
  absl::Time first_at, last_at;
};

// GET /v1/keys/mismatches of one server, for the token's tenant.
struct OverCoarse {
  std::string source;  // the --server URL
  std::string tenant;
  std::vector<OverCoarseKey> keys;  // by biz_type, then key
};

struct KeyHealthInput {
  std::string store;        // redacted
  absl::Time since, until;  // records created in [since, until)
  std::string since_text;   // --since as given
  absl::Duration window;
  int examples = 3;
  KeyAnalysisReport records;
  std::optional<OverCoarse> over_coarse;  // unset: --server not given
};

// `key` as findings show it (see above).
std::string KeyShown(std::string_view key);

std::string KeyHealthText(const KeyHealthInput& in);
std::string KeyHealthJson(const KeyHealthInput& in);  // one line

}  // namespace idem::cli
