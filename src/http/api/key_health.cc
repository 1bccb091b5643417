#include "http/api/key_health.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/server/metrics.h"

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

template <typename Counters>
void AddCounters(Counters& total, const Counters& c) {
  total.regenerated += c.regenerated;
  total.mismatches += c.mismatches;
  total.over_coarse += c.over_coarse;
  for (size_t i = 0; i < c.shapes.size(); ++i) total.shapes[i] += c.shapes[i];
}

}  // namespace

KeyHealthTracker::KeyHealthTracker(KeyHealthOptions options)
    : options_(options),
      fingerprints_(std::max<size_t>(1, options.fingerprint_slots)),
      mismatched_(std::max<size_t>(1, options.mismatch_slots)) {}

KeyHealthTracker::Counters& KeyHealthTracker::For(std::string_view tenant,
                                                  std::string_view biz_type) {
  auto t = by_tenant_.find(tenant);
  if (t == by_tenant_.end()) t = by_tenant_.try_emplace(std::string(tenant)).first;
  ByBizType& names = t->second;
  if (auto it = names.find(biz_type); it != names.end()) return it->second;
  // "other" is the last slot, so a tenant holds at most kMaxBizTypes + 1 entries.
  const std::string_view name = names.size() < kMaxBizTypes ? biz_type : kOtherBizType;
  return names.try_emplace(std::string(name)).first->second;
}

void KeyHealthTracker::OnNewKey(std::string_view tenant, std::string_view biz_type,
                                std::string_view key, std::string_view fingerprint,
                                absl::Time now) {
  const size_t shape = KeyShapeIndex(ClassifyKeyShape(key));
  const uint64_t group = fingerprint.empty() ? 0 : Hash3(tenant, biz_type, fingerprint);
  // Compared only within one (tenant, biz_type, fingerprint) slot: the key alone.
  const uint64_t key_hash = std::hash<std::string_view>()(key);
  absl::MutexLock lock(&mu_);
  Counters& c = For(tenant, biz_type);
  if (shape < c.shapes.size()) {
    ++c.shapes[shape];
    AddExample(tenant, biz_type, key, KeyShapeName(kSuspiciousShapes[shape]), now);
  }
  if (group == 0) return;
  FingerprintSlot& slot = fingerprints_[group % fingerprints_.size()];
  // The same request under another key it had a moment ago: the caller made a new
  // key for a retry. A chain of them counts every key after the first.
  if (slot.group == group && slot.key != key_hash && now - slot.at <= options_.window) {
    ++c.regenerated;
    AddExample(tenant, biz_type, key, "regenerated", now);
  }
  slot = FingerprintSlot{.group = group, .key = key_hash, .at = now};
}

void KeyHealthTracker::OnMismatch(std::string_view tenant, std::string_view biz_type,
                                  std::string_view key, std::string_view fingerprint,
                                  absl::Time now) {
  const uint64_t id = Hash3(tenant, biz_type, key);
  const uint64_t fp = Hash3(fingerprint, "", "");
  absl::MutexLock lock(&mu_);
  Counters& c = For(tenant, biz_type);
  ++c.mismatches;
  MismatchSlot& slot = mismatched_[id % mismatched_.size()];
  if (slot.id != id || slot.tenant != tenant || slot.biz_type != biz_type || slot.key != key) {
    ++c.over_coarse;
    AddExample(tenant, biz_type, key, "over-coarse", now);
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

void KeyHealthTracker::AddExample(std::string_view tenant, std::string_view biz_type,
                                  std::string_view key, std::string_view finding, absl::Time now) {
  KeyExample& e = examples_[next_example_];
  next_example_ = (next_example_ + 1) % examples_.size();
  e.tenant.assign(tenant);
  e.biz_type.assign(biz_type);
  e.key.assign(key.substr(0, kExampleKeyBytes));
  e.finding.assign(finding);
  e.at = now;
}

std::vector<KeyExample> KeyHealthTracker::Examples(std::string_view tenant) const {
  std::vector<KeyExample> out;
  absl::MutexLock lock(&mu_);
  for (size_t i = 1; i <= examples_.size(); ++i) {  // newest first
    const KeyExample& e = examples_[(next_example_ + examples_.size() - i) % examples_.size()];
    if (e.finding.empty() || (!tenant.empty() && e.tenant != tenant)) continue;
    out.push_back(e);
  }
  return out;
}

std::vector<KeyHealthCounts> KeyHealthTracker::Counts(std::string_view tenant) const {
  std::vector<KeyHealthCounts> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [t, names] : by_tenant_) {
    if (!tenant.empty() && t != tenant) continue;
    for (const auto& [biz_type, c] : names) {
      uint64_t shapes = 0;
      for (uint64_t n : c.shapes) shapes += n;
      out.push_back({.tenant = t, .biz_type = biz_type, .regenerated = c.regenerated,
                     .mismatches = c.mismatches, .over_coarse = c.over_coarse,
                     .suspicious_shapes = shapes});
    }
  }
  return out;
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

std::string KeyHealthTracker::Render(Labels labels) const {
  absl::MutexLock lock(&mu_);
  // The series to show: one per (tenant, biz_type), or one per tenant with its
  // biz_types' counters added up; each with its label text.
  std::vector<std::pair<std::string, Counters>> rows;
  for (const auto& [tenant, names] : by_tenant_) {
    const std::string tenant_label = absl::StrCat("tenant=\"", EscapeLabel(tenant), "\"");
    if (labels == kWithBizTypes) {
      for (const auto& [biz_type, c] : names) {
        rows.emplace_back(absl::StrCat(tenant_label, ",biz_type=\"", EscapeLabel(biz_type), "\""),
                          c);
      }
      continue;
    }
    Counters total;
    for (const auto& entry : names) AddCounters(total, entry.second);
    rows.emplace_back(tenant_label, total);
  }
  std::string out;
  auto series = [&](std::string_view name, std::string_view help, auto value) {
    absl::StrAppend(&out, "# HELP ", AV(name), " ", AV(help), "\n# TYPE ", AV(name), " counter\n");
    for (const auto& [label, c] : rows) {
      absl::StrAppend(&out, AV(name), "{", label, "} ", value(c), "\n");
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
  for (const auto& [label, c] : rows) {
    for (size_t i = 0; i < kSuspiciousShapes.size(); ++i) {
      absl::StrAppend(&out, "idem_key_suspicious_shape_total{", label, ",shape=\"",
                      AV(KeyShapeName(kSuspiciousShapes[i])), "\"} ", c.shapes[i], "\n");
    }
  }
  return out;
}

KeyHealthTracker::Counters KeyHealthTracker::Sum(std::string_view biz_type) const {
  Counters total;
  for (const auto& entry : by_tenant_) {
    if (auto it = entry.second.find(biz_type); it != entry.second.end()) AddCounters(total, it->second);
  }
  return total;
}

uint64_t KeyHealthTracker::regenerated(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  return Sum(biz_type).regenerated;
}

uint64_t KeyHealthTracker::mismatches(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  return Sum(biz_type).mismatches;
}

uint64_t KeyHealthTracker::over_coarse(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  return Sum(biz_type).over_coarse;
}

uint64_t KeyHealthTracker::shapes(std::string_view biz_type, KeyShape shape) const {
  absl::MutexLock lock(&mu_);
  const size_t i = KeyShapeIndex(shape);
  const Counters c = Sum(biz_type);
  return i >= c.shapes.size() ? 0 : c.shapes[i];
}

}  // namespace idem::http
