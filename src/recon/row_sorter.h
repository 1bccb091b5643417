// RowSorter: the rows of one side in key order with bounded memory (to
// ten million rows a side in under 1 GiB). Rows are kept serialised in one buffer;
// when it passes the budget it is sorted and written to a temporary file (a run),
// and Finish() merges the runs. Rows with equal keys keep their input order, so
// the output is the same on every run over the same input.
//
// Temporary files are unlinked as soon as they are created: nothing is left behind,
// even after a kill.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "recon/row.h"

namespace idem::recon {

class RowSorter {
 public:
  // `temp_dir` for the runs; `memory_budget` bytes of rows held before a run is
  // written.
  RowSorter(std::string temp_dir, size_t memory_budget);
  ~RowSorter();
  RowSorter(const RowSorter&) = delete;
  RowSorter& operator=(const RowSorter&) = delete;

  // Adds a row. kUnavailable when a run cannot be written (disk full).
  absl::Status Add(const Row& row);

  // Ends the input; then Next() yields the rows in key order. kUnavailable on I/O.
  absl::Status Finish();

  // The next row in key order: true, or false at the end. kUnavailable on I/O.
  absl::StatusOr<bool> Next(Row* row);

  int64_t rows() const { return rows_; }
  int runs() const { return static_cast<int>(runs_.size()); }

 private:
  struct Entry {
    // The key's first 16 bytes, big-endian: most comparisons end here without
    // touching the buffer (keys like R-0000123456 share their first 8 bytes).
    uint64_t prefix[2];
    uint64_t offset;  // into buffer_
  };
  class Run;

  void SortBuffer();
  absl::Status Spill();

  const std::string temp_dir_;
  const size_t budget_;
  std::string buffer_;
  std::vector<Entry> entries_;
  size_t next_entry_ = 0;
  std::vector<std::unique_ptr<Run>> runs_;
  std::vector<int> heap_;  // run indexes, a min-heap by (current key, run index)
  bool finished_ = false;
  bool merging_ = false;
  int64_t rows_ = 0;
};

}  // namespace idem::recon
