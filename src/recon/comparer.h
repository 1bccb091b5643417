// The comparison of reconciliation (docs/recon.md): the upstream statement against the
// local ledger by key over a time window, each key put in one class:
//
//   matched           on both sides once, same amount, currency and status
//   missing_local     upstream has it, local does not
//   missing_upstream  local has it, upstream does not
//   status_mismatch   same amount and currency, the local status is not the one the
//                     upstream status maps to (`stuck` when it is an intermediate one)
//   amount_mismatch   amount or currency differ
//   duplicate         the key more than once on one side (counted once per side)
//
// Both sides are sorted by key (RowSorter: bounded memory, spilling to temporary
// files) on two threads, then merged. Comparison only reads: it writes nothing
// anywhere but its temporary files.
//
// The window: a key's time is its earliest upstream time, or, when upstream has no
// row of it, its earliest local time. A key with upstream rows is in the window when
// from <= time < to; a local-only key when from - skew <= time < to - skew, so that a
// local row just before `to` whose upstream row has a slightly later time (in the
// next statement) is judged by the next window, never reported missing here nor
// skipped by both.
//
// Thread safety: Compare may run concurrently with other Compare calls.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "recon/fields.h"
#include "recon/row.h"

namespace idem::recon {

enum class DiffClass : uint8_t {
  kMissingLocal = 0,
  kMissingUpstream,
  kStatusMismatch,
  kAmountMismatch,
  kDuplicate,
};
inline constexpr int kClassCount = 5;
inline constexpr std::array<std::string_view, kClassCount> kClassNames = {
    "missing_local", "missing_upstream", "status_mismatch", "amount_mismatch", "duplicate"};

struct Difference {
  DiffClass cls;
  std::string key;
  std::optional<Row> upstream;            // the (first) upstream row, when there is one
  std::optional<Row> local;               // the (first) local row, when there is one
  bool stuck = false;                     // status_mismatch: the local status is intermediate
  Side duplicate_side = Side::kUpstream;  // duplicate: which side
  int64_t duplicate_rows = 0;             // duplicate: how many rows of the key there
};

struct Window {
  std::optional<int64_t> from_us;  // inclusive
  std::optional<int64_t> to_us;    // exclusive
  int64_t skew_us = 0;
};

struct CompareOptions {
  Window window;
  const StatusRules* status = nullptr;  // not owned; nullptr: statuses compared as they are
  bool compare_status = false;
  std::string temp_dir = "/tmp";
  size_t memory_budget = 256u << 20;  // per side, for the sorters
  // At most this many differences are kept (for dispositions and the report); more
  // are counted only and CompareResult::truncated is set.
  size_t max_differences = 2'000'000;
  // Called each time a side has read another 100,000 rows, on that side's reading
  // thread, with the side and both sides' counts so far.
  std::function<void(Side side, int64_t upstream_read, int64_t local_read)> progress;
};

struct CompareResult {
  int64_t upstream_rows = 0;  // rows of keys in the window
  int64_t local_rows = 0;
  int64_t matched = 0;
  std::array<int64_t, kClassCount> counts{};
  std::vector<Difference> differences;  // in key order
  bool truncated = false;
  int64_t upstream_read = 0;  // every row read, in the window or not
  int64_t local_read = 0;
  int spilled_runs = 0;
};

// Reads `upstream` (any number of readers, e.g. several statement files) and
// `local` to the end and classifies every key. Errors: the first reader error (bad
// input: kInvalidArgument with file and line; kUnavailable for I/O or the store).
absl::StatusOr<CompareResult> Compare(std::vector<StatementReader*> upstream,
                                      StatementReader& local, const CompareOptions& options);

}  // namespace idem::recon
