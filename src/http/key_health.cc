#include "http/key_health.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/metrics.h"

namespace idem::http {
namespace {

constexpr std::string_view kOtherBizType = "other";

// A 64-bit hash of three strings, never 0 (0 marks an empty slot). Collisions only
// cost a forgotten or a merged entry, which the header allows.
uint64_t Hash3(std::string_view a, std::string_view b, std::string_view c) {
  const std::hash<std::string_view> h;
  uint64_t v = h(a);
  v = (v ^ (h(b) + 0x9e3779b97f4a7c15ULL + (v << 6) + (v >> 2)));
  v = (v ^ (h(c) + 0x9e3779b97f4a7c15ULL + (v << 6) + (v >> 2)));
  return v == 0 ? 1 : v;
}

}  // namespace

KeyHealthTracker::KeyHealthTracker(KeyHealthOptions options)
    : options_(options),
      fingerprints_(std::max<size_t>(1, options.fingerprint_slots)),
      mismatched_(std::max<size_t>(1, options.mismatch_slots)) {}

KeyHealthTracker::Counters& KeyHealthTracker::For(std::string_view biz_type) {
  if (auto it = by_biz_type_.find(biz_type); it != by_biz_type_.end()) return it->second;
  // "other" is the last slot, so the map holds at most kMaxBizTypes + 1 entries.
  const std::string_view name = by_biz_type_.size() < kMaxBizTypes ? biz_type : kOtherBizType;
  return by_biz_type_.try_emplace(std::string(name)).first->second;
}

void KeyHealthTracker::OnNewKey(std::string_view tenant, std::string_view biz_type,
                                std::string_view key, std::string_view fingerprint,
                                absl::Time now) {
  const size_t shape = KeyShapeIndex(ClassifyKeyShape(key));
  const uint64_t group = fingerprint.empty() ? 0 : Hash3(tenant, biz_type, fingerprint);
  // Compared only within one (tenant, biz_type, fingerprint) slot: the key alone.
  const uint64_t key_hash = std::hash<std::string_view>()(key);
  absl::MutexLock lock(&mu_);
  Counters& c = For(biz_type);
  if (shape < c.shapes.size()) ++c.shapes[shape];
  if (group == 0) return;
  FingerprintSlot& slot = fingerprints_[group % fingerprints_.size()];
  // The same request under another key it had a moment ago: the caller made a new
  // key for a retry. A chain of them counts every key after the first.
  if (slot.group == group && slot.key != key_hash && now - slot.at <= options_.window) {
    ++c.regenerated;
  }
  slot = FingerprintSlot{.group = group, .key = key_hash, .at = now};
}

void KeyHealthTracker::OnMismatch(std::string_view tenant, std::string_view biz_type,
                                  std::string_view key, std::string_view fingerprint,
                                  absl::Time now) {
  const uint64_t id = Hash3(tenant, biz_type, key);
  const uint64_t fp = Hash3(fingerprint, "", "");
  absl::MutexLock lock(&mu_);
  Counters& c = For(biz_type);
  ++c.mismatches;
  MismatchSlot& slot = mismatched_[id % mismatched_.size()];
  if (slot.id != id || slot.tenant != tenant || slot.biz_type != biz_type || slot.key != key) {
    ++c.over_coarse;
    slot = MismatchSlot{};
    slot.id = id;
    slot.tenant = std::string(tenant);
    slot.biz_type = std::string(biz_type);
    slot.key = std::string(key);
    slot.fingerprint_count = 1;  // the stored one, which the 422 says differs
    slot.first_at = now;
  }
  ++slot.mismatches;
  slot.last_at = now;
  const auto used = slot.fingerprints.begin() + (slot.fingerprint_count - 1);
  if (std::find(slot.fingerprints.begin(), used, fp) == used &&
      slot.fingerprint_count < kMaxFingerprints) {
    *used = fp;
    ++slot.fingerprint_count;
  }
}

std::vector<KeyMismatches> KeyHealthTracker::Mismatches(std::string_view tenant) const {
  std::vector<KeyMismatches> out;
  {
    absl::MutexLock lock(&mu_);
    for (const MismatchSlot& s : mismatched_) {
      if (s.id == 0 || s.tenant != tenant) continue;
      out.push_back(KeyMismatches{.biz_type = s.biz_type,
                                  .key = s.key,
                                  .fingerprints = s.fingerprint_count,
                                  .mismatches = s.mismatches,
                                  .first_at = s.first_at,
                                  .last_at = s.last_at});
    }
  }
  std::sort(out.begin(), out.end(), [](const KeyMismatches& a, const KeyMismatches& b) {
    return std::tie(a.biz_type, a.key) < std::tie(b.biz_type, b.key);
  });
  return out;
}

std::string KeyHealthTracker::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  auto series = [&](std::string_view name, std::string_view help, auto value) {
    absl::StrAppend(&out, "# HELP ", AV(name), " ", AV(help), "\n# TYPE ", AV(name), " counter\n");
    for (const auto& [biz_type, c] : by_biz_type_) {
      absl::StrAppend(&out, AV(name), "{biz_type=\"", EscapeLabel(biz_type), "\"} ", value(c),
                      "\n");
    }
  };
  series("idem_key_regenerated_total",
         "New keys whose request (tenant, biz_type, fingerprint) had another new key within the "
         "window: keys remade on retry.",
         [](const Counters& c) { return c.regenerated; });
  series("idem_key_fingerprint_mismatch_total",
         "Claims answered 422 fingerprint_mismatch: one key carrying different requests.",
         [](const Counters& c) { return c.mismatches; });
  series("idem_key_over_coarse_total",
         "Keys met with a second request fingerprint (their first 422): keys too coarse.",
         [](const Counters& c) { return c.over_coarse; });
  absl::StrAppend(&out,
                  "# HELP idem_key_suspicious_shape_total New keys that look made up: random "
                  "UUIDs, epoch timestamps, topic-partition-offset.\n"
                  "# TYPE idem_key_suspicious_shape_total counter\n");
  for (const auto& [biz_type, c] : by_biz_type_) {
    for (size_t i = 0; i < kSuspiciousShapes.size(); ++i) {
      absl::StrAppend(&out, "idem_key_suspicious_shape_total{biz_type=\"", EscapeLabel(biz_type),
                      "\",shape=\"", AV(KeyShapeName(kSuspiciousShapes[i])), "\"} ", c.shapes[i],
                      "\n");
    }
  }
  return out;
}

const KeyHealthTracker::Counters* KeyHealthTracker::Find(std::string_view biz_type) const {
  auto it = by_biz_type_.find(biz_type);
  return it == by_biz_type_.end() ? nullptr : &it->second;
}

uint64_t KeyHealthTracker::regenerated(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  const Counters* c = Find(biz_type);
  return c == nullptr ? 0 : c->regenerated;
}

uint64_t KeyHealthTracker::mismatches(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  const Counters* c = Find(biz_type);
  return c == nullptr ? 0 : c->mismatches;
}

uint64_t KeyHealthTracker::over_coarse(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  const Counters* c = Find(biz_type);
  return c == nullptr ? 0 : c->over_coarse;
}

uint64_t KeyHealthTracker::shapes(std::string_view biz_type, KeyShape shape) const {
  absl::MutexLock lock(&mu_);
  const Counters* c = Find(biz_type);
  const size_t i = KeyShapeIndex(shape);
  return c == nullptr || i >= c->shapes.size() ? 0 : c->shapes[i];
}

}  // namespace idem::http
