// KeyAnalysis: what stored records tell of badly made keys (docs/keys.md),
// behind `idem keys analyze`. Feed it records (Add), then Finish():
//
//  - regenerated keys: records of one (tenant, biz_type, fingerprint) under two or
//    more keys, each created within `window` of the one before (a chain): the same
//    request arrived again under a new key, so the caller remakes its key on retry.
//    Records without a fingerprint tell nothing and are left out of this check.
//  - suspicious shapes: keys ClassifyKeyShape (core/key_shape.h) flags.
//
// Over-coarse keys (one key, several fingerprints) cannot be seen here: a record
// keeps only its first fingerprint, and the 422s that refused the others are known
// to `idem serve` only (http/key_health.h).
//
// Memory: one entry per fingerprinted record added (its tenant, biz_type,
// fingerprint, key and time) until Finish(); examples are bounded by `examples`.
// Results do not depend on the order records are added in.
//
// Thread safety: one KeyAnalysis per thread (not synchronized).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "core/key_shape.h"
#include "idem/record.h"

namespace idem {

struct KeyAnalysisOptions {
  absl::Duration window = absl::Minutes(10);  // REQUIRES: > 0
  int examples = 3;                           // per finding; REQUIRES: >= 0
};

// A key as a finding's example names it.
struct KeyExample {
  std::string tenant;
  std::string biz_type;
  std::string key;
  absl::Time created_at;

  bool operator<(const KeyExample& o) const {
    return std::tie(tenant, biz_type, key, created_at) <
           std::tie(o.tenant, o.biz_type, o.key, o.created_at);
  }
};

// One chain of keys with one fingerprint.
struct RegeneratedGroup {
  std::string tenant;
  std::string biz_type;
  std::string fingerprint;
  int64_t keys = 0;                  // keys in the chain (>= 2)
  absl::Time first_at, last_at;      // the first and the last key's created_at
  std::vector<KeyExample> examples;  // its first keys by created_at, at most `examples`
};

struct ShapeFinding {
  KeyShape shape = KeyShape::kNone;
  int64_t keys = 0;
  std::vector<KeyExample> examples;  // the first by (tenant, biz_type, key)
};

struct KeyAnalysisReport {
  int64_t records = 0;             // records added
  int64_t regenerated_groups = 0;  // chains found
  int64_t regenerated_keys = 0;    // keys in them (a chain of 3 counts 3)
  // The first chains by (tenant, biz_type, first_at, fingerprint), at most `examples`.
  std::vector<RegeneratedGroup> regenerated;
  std::array<ShapeFinding, kSuspiciousShapes.size()> shapes;  // kSuspiciousShapes' order
};

class KeyAnalysis {
 public:
  explicit KeyAnalysis(KeyAnalysisOptions options);

  void Add(const Record& record);

  // The findings of every record added so far.
  KeyAnalysisReport Finish() const;

 private:
  using Group = std::tuple<std::string, std::string, std::string>;  // tenant, biz_type, fp
  const KeyAnalysisOptions options_;
  int64_t records_ = 0;
  std::map<Group, std::vector<std::pair<absl::Time, std::string>>> by_fingerprint_;
  std::array<int64_t, kSuspiciousShapes.size()> shape_counts_{};
  std::array<std::set<KeyExample>, kSuspiciousShapes.size()> shape_examples_;
};

}  // namespace idem
