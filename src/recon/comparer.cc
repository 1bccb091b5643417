#include "recon/comparer.h"

#include <algorithm>
#include <thread>

#include "idem/status.h"
#include "recon/row_sorter.h"

namespace idem::recon {
namespace {

// Reads every row of `readers` into `sorter`, counting into `read`.
absl::Status Fill(const std::vector<StatementReader*>& readers, RowSorter& sorter,
                  std::atomic<int64_t>& read, const CompareOptions& options,
                  std::atomic<int64_t>& other, bool is_upstream) {
  for (StatementReader* reader : readers) {
    absl::Status s = reader->ReadAll([&](Row& row) {
      absl::Status added = sorter.Add(row);
      if (!added.ok()) return added;
      const int64_t n = read.fetch_add(1, std::memory_order_relaxed) + 1;
      if (options.progress && n % 100000 == 0) {
        const int64_t m = other.load(std::memory_order_relaxed);
        is_upstream ? options.progress(Side::kUpstream, n, m)
                    : options.progress(Side::kLocal, m, n);
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  }
  return sorter.Finish();
}

// Takes the rows of one key off a sorted side.
class Grouper {
 public:
  explicit Grouper(RowSorter& sorter) : sorter_(sorter) {}
  absl::Status Prime() { return Pull(); }
  const std::string* key() const { return has_ ? &ahead_.key : nullptr; }
  // Moves every row with key `key` into `out`.
  absl::Status Take(const std::string& key, std::vector<Row>* out) {
    out->clear();
    while (has_ && ahead_.key == key) {
      out->push_back(ahead_);
      absl::Status s = Pull();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Pull() {
    absl::StatusOr<bool> got = sorter_.Next(&ahead_);
    if (!got.ok()) return got.status();
    has_ = *got;
    return absl::OkStatus();
  }
  RowSorter& sorter_;
  Row ahead_;
  bool has_ = false;
};

int64_t EarliestTime(const std::vector<Row>& rows) {
  int64_t t = rows.front().time_us;
  for (const Row& r : rows) t = std::min(t, r.time_us);
  return t;
}

// Reads both sides into their sorters, the upstream on a thread of its own.
absl::Status FillBothSorters(const std::vector<StatementReader*>& upstream, StatementReader& local,
                             const CompareOptions& options, RowSorter& up_sorter,
                             RowSorter& local_sorter, std::atomic<int64_t>& up_read,
                             std::atomic<int64_t>& local_read) {
  absl::Status up_status;
  std::thread up_thread(
      [&] { up_status = Fill(upstream, up_sorter, up_read, options, local_read, true); });
  absl::Status local_status = Fill({&local}, local_sorter, local_read, options, up_read, false);
  up_thread.join();
  // The upstream error first: it names a file and line, and is what a person fixes.
  if (!up_status.ok()) return up_status;
  return local_status;
}

// Whether the key with rows `u` (upstream) and `l` (local) is inside the window, by
// the key's time (see comparer.h).
bool KeyInCompareWindow(const std::vector<Row>& u, const std::vector<Row>& l, const Window& w) {
  const std::vector<Row>& timed = u.empty() ? l : u;
  if (!timed.front().has_time) return true;
  const int64_t t = EarliestTime(timed);
  const int64_t shift = u.empty() ? w.skew_us : 0;
  if (w.from_us.has_value() && t < *w.from_us - shift) return false;
  if (w.to_us.has_value() && t >= *w.to_us - shift) return false;
  return true;
}

void KeepDifference(Difference d, const CompareOptions& options, CompareResult* result) {
  ++result->counts[static_cast<int>(d.cls)];
  if (result->differences.size() < options.max_differences) {
    result->differences.push_back(std::move(d));
  } else {
    result->truncated = true;
  }
}

// Classifies one key in the window: a match, or the differences it holds.
void CompareKeyRows(const std::string& key, const std::vector<Row>& u, const std::vector<Row>& l,
                    const CompareOptions& options, CompareResult* result) {
  auto keep = [&](Difference d) { KeepDifference(std::move(d), options, result); };
  auto first = [](const std::vector<Row>& rows) {
    return rows.empty() ? std::optional<Row>() : std::optional<Row>(rows.front());
  };
  if (u.size() > 1 || l.size() > 1) {
    for (Side side : {Side::kUpstream, Side::kLocal}) {
      const std::vector<Row>& rows = side == Side::kUpstream ? u : l;
      if (rows.size() < 2) continue;
      keep(Difference{.cls = DiffClass::kDuplicate,
                      .key = key,
                      .upstream = first(u),
                      .local = first(l),
                      .duplicate_side = side,
                      .duplicate_rows = static_cast<int64_t>(rows.size())});
    }
    return;
  }
  if (l.empty()) {
    keep(Difference{.cls = DiffClass::kMissingLocal, .key = key, .upstream = first(u)});
    return;
  }
  if (u.empty()) {
    keep(Difference{.cls = DiffClass::kMissingUpstream, .key = key, .local = first(l)});
    return;
  }
  const Row& a = u.front();
  const Row& b = l.front();
  if (a.amount != b.amount || a.currency != b.currency) {
    keep(Difference{.cls = DiffClass::kAmountMismatch, .key = key, .upstream = a, .local = b});
    return;
  }
  if (options.compare_status) {
    std::string_view expected = a.status;
    if (options.status != nullptr && !options.status->map.empty()) {
      auto it = options.status->map.find(a.status);
      if (it != options.status->map.end()) expected = it->second;
    }
    if (b.status != expected) {
      const bool stuck =
          options.status != nullptr && options.status->intermediate.contains(b.status);
      keep(Difference{.cls = DiffClass::kStatusMismatch,
                      .key = key,
                      .upstream = a,
                      .local = b,
                      .stuck = stuck});
      return;
    }
  }
  ++result->matched;
}

}  // namespace

absl::StatusOr<CompareResult> Compare(std::vector<StatementReader*> upstream,
                                      StatementReader& local, const CompareOptions& options) {
  RowSorter up_sorter(options.temp_dir, options.memory_budget);
  RowSorter local_sorter(options.temp_dir, options.memory_budget);
  std::atomic<int64_t> up_read{0}, local_read{0};
  IDEM_RETURN_IF_ERROR(
      FillBothSorters(upstream, local, options, up_sorter, local_sorter, up_read, local_read));

  CompareResult result;
  result.upstream_read = up_read.load();
  result.local_read = local_read.load();
  result.spilled_runs = up_sorter.runs() + local_sorter.runs();
  Grouper ups(up_sorter), locals(local_sorter);
  absl::Status s = ups.Prime();
  if (s.ok()) s = locals.Prime();
  if (!s.ok()) return s;
  std::vector<Row> u, l;
  while (ups.key() != nullptr || locals.key() != nullptr) {
    std::string key;
    if (ups.key() == nullptr) {
      key = *locals.key();
    } else if (locals.key() == nullptr) {
      key = *ups.key();
    } else {
      key = std::min(*ups.key(), *locals.key());
    }
    s = ups.Take(key, &u);
    if (s.ok()) s = locals.Take(key, &l);
    if (!s.ok()) return s;
    if (!KeyInCompareWindow(u, l, options.window)) continue;
    result.upstream_rows += static_cast<int64_t>(u.size());
    result.local_rows += static_cast<int64_t>(l.size());
    CompareKeyRows(key, u, l, options, &result);
  }
  return result;
}

}  // namespace idem::recon
