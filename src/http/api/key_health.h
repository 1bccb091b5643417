// KeyHealthTracker: what `idem serve` sees of badly made keys (docs/keys.md),
// in bounded memory, for /metrics and GET /v1/keys/mismatches:
//
//   idem_key_regenerated_total{tenant[,biz_type]}          new keys whose (tenant,
//                                                          biz_type, fingerprint) had
//                                                          another new key less than the
//                                                          window (10 min) before: the
//                                                          key is remade on retry
//   idem_key_fingerprint_mismatch_total{tenant[,biz_type]} 422 fingerprint_mismatch
//                                                          answers: one key carrying
//                                                          several requests
//   idem_key_over_coarse_total{tenant[,biz_type]}          keys met with a second
//                                                          fingerprint (their first 422)
//   idem_key_suspicious_shape_total{tenant[,biz_type],shape}  new keys of a suspicious
//                                                          shape (core/key_shape.h)
//
// All counters. The stores keep only a key's first fingerprint, so the 422s exist
// only here: the tracker remembers, per key, the fingerprints of its mismatches
// (Mismatches(), the source of `idem keys analyze --server`'s over-coarse keys). Both
// tables are direct-mapped with a fixed number of slots (options): a key or
// fingerprint whose slot another takes is forgotten, so memory never grows with
// traffic, and counts of regenerated keys are a lower bound.
//
// Labels: `tenant` is the operator's name for an authenticated client (the tenants
// configuration bounds it). A biz_type is the client's choice, so each tenant has
// its own budget of kMaxBizTypes names ("other" takes the rest): one tenant cannot
// use up another's. And a biz_type name is shown only by Render(kWithBizTypes), which
// the server uses when /metrics needs a tenant's token; an unauthenticated /metrics
// shows each tenant's totals, without the names its clients chose.
//
// Cost: OnNewKey (a claim that made a record: a store write) and OnMismatch (a 422)
// take one short lock and hash their strings; ClassifyKeyShape is one pass over the
// key. Duplicates answered from memory (replays) never come here.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/key_shape.h"

namespace idem::http {

struct KeyHealthOptions {
  absl::Duration window = absl::Minutes(10);  // regenerated: two new keys this close
  size_t fingerprint_slots = 1 << 14;         // remembered (tenant, biz_type, fingerprint)s
  size_t mismatch_slots = 1 << 12;            // remembered keys with mismatches
};

// One key met with more than one fingerprint, as Mismatches() reports it.
struct KeyMismatches {
  std::string biz_type;
  std::string key;
  int fingerprints = 0;    // distinct ones seen: the stored one and those refused,
                           // counted up to kMaxFingerprints
  int64_t mismatches = 0;  // 422 answers for the key
  absl::Time first_at;     // the first and the last 422
  absl::Time last_at;
};

// A key the tracker found unhealthy, as Examples() reports it (the operator
// console's examples).
struct KeyExample {
  std::string tenant, biz_type;
  std::string key;      // at most KeyHealthTracker::kExampleKeyBytes of it
  std::string finding;  // "regenerated", "over-coarse" or the shape's name
  absl::Time at;
};

// One (tenant, biz_type)'s counters, as Counts() reports them.
struct KeyHealthCounts {
  std::string tenant, biz_type;
  uint64_t regenerated = 0, mismatches = 0, over_coarse = 0, suspicious_shapes = 0;
};

class KeyHealthTracker {
 public:
  static constexpr size_t kMaxBizTypes = 16;  // per tenant
  static constexpr int kMaxFingerprints = 8;
  // The newest findings kept as examples, and how much of each key: a fixed budget
  // of memory whatever the traffic.
  static constexpr size_t kExamples = 32;
  static constexpr size_t kExampleKeyBytes = 200;

  explicit KeyHealthTracker(KeyHealthOptions options = {});

  // A claim created the record of (tenant, biz_type, key) at `now` (token 1, no
  // takeover), with `fingerprint` ("" for none: then only its shape is checked).
  void OnNewKey(std::string_view tenant, std::string_view biz_type, std::string_view key,
                std::string_view fingerprint, absl::Time now);

  // A claim of (tenant, biz_type, key) with `fingerprint` was answered 422
  // fingerprint_mismatch at `now`.
  void OnMismatch(std::string_view tenant, std::string_view biz_type, std::string_view key,
                  std::string_view fingerprint, absl::Time now);

  // `tenant`'s remembered keys with mismatches, ordered by biz_type, then key.
  std::vector<KeyMismatches> Mismatches(std::string_view tenant) const;

  // The newest findings, newest first: `tenant`'s, or every tenant's when it is
  // empty.
  std::vector<KeyExample> Examples(std::string_view tenant) const;

  // Every (tenant, biz_type)'s counters (only `tenant`'s when it is not empty), by
  // tenant, then biz_type.
  std::vector<KeyHealthCounts> Counts(std::string_view tenant) const;

  enum Labels { kTenantOnly, kWithBizTypes };

  // The exposition text of the four series above: per tenant, or per tenant and
  // biz_type.
  std::string Render(Labels labels) const;

  // For tests: a series' value over every tenant ("other" for the biz_types past a
  // tenant's kMaxBizTypes).
  uint64_t regenerated(std::string_view biz_type) const;
  uint64_t mismatches(std::string_view biz_type) const;
  uint64_t over_coarse(std::string_view biz_type) const;
  uint64_t shapes(std::string_view biz_type, KeyShape shape) const;

 private:
  struct Counters {
    uint64_t regenerated = 0;
    uint64_t mismatches = 0;
    uint64_t over_coarse = 0;
    std::array<uint64_t, kSuspiciousShapes.size()> shapes{};
  };
  // The last new key of a (tenant, biz_type, fingerprint).
  struct FingerprintSlot {
    uint64_t group = 0;  // hash of (tenant, biz_type, fingerprint); 0: empty
    uint64_t key = 0;    // hash of the key
    absl::Time at;
  };
  struct MismatchSlot {
    uint64_t id = 0;  // hash of (tenant, biz_type, key); 0: empty
    std::string tenant, biz_type, key;
    std::array<uint64_t, kMaxFingerprints> fingerprints{};  // hashes, 0: unused
    int fingerprint_count = 0;
    int64_t mismatches = 0;
    absl::Time first_at, last_at;
  };

  using ByBizType = std::map<std::string, Counters, std::less<>>;

  Counters& For(std::string_view tenant, std::string_view biz_type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sum of `biz_type`'s counters over every tenant.
  Counters Sum(std::string_view biz_type) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void AddExample(std::string_view tenant, std::string_view biz_type, std::string_view key,
                  std::string_view finding, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KeyHealthOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, ByBizType, std::less<>> by_tenant_ ABSL_GUARDED_BY(mu_);
  std::vector<FingerprintSlot> fingerprints_ ABSL_GUARDED_BY(mu_);
  std::vector<MismatchSlot> mismatched_ ABSL_GUARDED_BY(mu_);
  std::array<KeyExample, kExamples> examples_ ABSL_GUARDED_BY(mu_);  // a ring
  size_t next_example_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::http
