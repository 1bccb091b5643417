#include "core/key_analysis.h"

#include <algorithm>
#include <utility>

namespace idem {

KeyAnalysis::KeyAnalysis(KeyAnalysisOptions options) : options_(options) {}

void KeyAnalysis::Add(const Record& r) {
  ++records_;
  if (!r.fingerprint.empty()) {
    by_fingerprint_[Group(r.tenant, r.biz_type, r.fingerprint)].emplace_back(r.created_at, r.key);
  }
  const size_t i = KeyShapeIndex(ClassifyKeyShape(r.key));
  if (i >= shape_counts_.size()) return;
  ++shape_counts_[i];
  std::set<KeyExample>& ex = shape_examples_[i];
  ex.insert(KeyExample{r.tenant, r.biz_type, r.key, r.created_at});
  // Keep the smallest ones: the same examples whatever order the store lists in.
  if (static_cast<int>(ex.size()) > options_.examples) ex.erase(std::prev(ex.end()));
}

KeyAnalysisReport KeyAnalysis::Finish() const {
  KeyAnalysisReport report;
  report.records = records_;
  std::vector<RegeneratedGroup> groups;
  for (const auto& [group, entries] : by_fingerprint_) {
    if (entries.size() < 2) continue;
    std::vector<std::pair<absl::Time, std::string>> sorted = entries;
    std::sort(sorted.begin(), sorted.end());
    // Split into chains: a key more than `window` after the one before starts anew
    // (the same request a day later under another key is a new request, not a retry).
    size_t begin = 0;
    for (size_t i = 1; i <= sorted.size(); ++i) {
      if (i < sorted.size() && sorted[i].first - sorted[i - 1].first <= options_.window) continue;
      if (i - begin >= 2) {
        RegeneratedGroup g;
        std::tie(g.tenant, g.biz_type, g.fingerprint) = group;
        g.keys = static_cast<int64_t>(i - begin);
        g.first_at = sorted[begin].first;
        g.last_at = sorted[i - 1].first;
        for (size_t k = begin; k < i && static_cast<int>(g.examples.size()) < options_.examples;
             ++k) {
          g.examples.push_back(KeyExample{g.tenant, g.biz_type, sorted[k].second, sorted[k].first});
        }
        ++report.regenerated_groups;
        report.regenerated_keys += g.keys;
        groups.push_back(std::move(g));
      }
      begin = i;
    }
  }
  std::sort(groups.begin(), groups.end(), [](const RegeneratedGroup& a, const RegeneratedGroup& b) {
    return std::tie(a.tenant, a.biz_type, a.first_at, a.fingerprint) <
           std::tie(b.tenant, b.biz_type, b.first_at, b.fingerprint);
  });
  if (static_cast<int>(groups.size()) > options_.examples) groups.resize(options_.examples);
  report.regenerated = std::move(groups);
  for (size_t i = 0; i < kSuspiciousShapes.size(); ++i) {
    report.shapes[i].shape = kSuspiciousShapes[i];
    report.shapes[i].keys = shape_counts_[i];
    report.shapes[i].examples.assign(shape_examples_[i].begin(), shape_examples_[i].end());
  }
  return report;
}

}  // namespace idem
