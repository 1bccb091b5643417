#include "recon/row_sorter.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace idem::recon {
namespace {

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutI64(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutStr(std::string* out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
int64_t GetI64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A record: [u32 size of the rest][key][amount][currency][status] (each u32 length +
// bytes), [i64 time][u32 has_time][u32 source][i64 line].
void Encode(const Row& row, std::string* out) {
  const size_t start = out->size();
  PutU32(out, 0);
  PutStr(out, row.key);
  PutStr(out, row.amount);
  PutStr(out, row.currency);
  PutStr(out, row.status);
  PutI64(out, row.time_us);
  PutU32(out, row.has_time ? 1 : 0);
  PutU32(out, row.source);
  PutI64(out, row.line);
  const uint32_t size = static_cast<uint32_t>(out->size() - start - 4);
  std::memcpy(out->data() + start, &size, 4);
}

std::string_view KeyOf(const char* record) {
  return std::string_view(record + 8, GetU32(record + 4));
}

void Decode(const char* record, Row* row) {
  const char* p = record + 4;
  std::string* strings[] = {&row->key, &row->amount, &row->currency, &row->status};
  for (std::string* s : strings) {
    const uint32_t n = GetU32(p);
    s->assign(p + 4, n);
    p += 4 + n;
  }
  row->time_us = GetI64(p);
  row->has_time = GetU32(p + 8) != 0;
  row->source = GetU32(p + 12);
  row->line = GetI64(p + 16);
}

// How many records ahead a pass in key order prefetches.
constexpr size_t kPrefetchAhead = 16;

uint64_t Prefix(std::string_view key, size_t from) {
  uint64_t v = 0;
  for (size_t i = from; i < from + 8; ++i) {
    v = (v << 8) | (i < key.size() ? static_cast<unsigned char>(key[i]) : 0);
  }
  return v;
}

}  // namespace

// A sorted run in a temporary file, read back through a buffer.
class RowSorter::Run {
 public:
  explicit Run(int fd) : fd_(fd) {}
  ~Run() { ::close(fd_); }

  absl::Status Write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return absl::UnavailableError(std::string("writing a sort run: ") + std::strerror(errno));
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }
  absl::Status Rewind() {
    if (::lseek(fd_, 0, SEEK_SET) != 0) return absl::UnavailableError("rewinding a sort run");
    return Advance();
  }
  // Moves to the next record; current() is nullptr at the end.
  absl::Status Advance() {
    pos_ += current_size_;
    current_size_ = 0;
    if (buf_.size() - pos_ < 4 || buf_.size() - pos_ < 4 + GetU32(buf_.data() + pos_)) {
      buf_.erase(0, pos_);
      pos_ = 0;
      while (true) {
        const size_t have = buf_.size();
        if (have >= 4 && have >= 4 + GetU32(buf_.data())) break;
        buf_.resize(have + (1 << 20));
        ssize_t n;
        do {
          n = ::read(fd_, buf_.data() + have, 1 << 20);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
          return absl::UnavailableError(std::string("reading a sort run: ") + std::strerror(errno));
        buf_.resize(have + static_cast<size_t>(n));
        if (n == 0) {
          if (have != 0) return absl::DataLossError("a sort run ends inside a record");
          return absl::OkStatus();
        }
      }
    }
    current_size_ = 4 + GetU32(buf_.data() + pos_);
    return absl::OkStatus();
  }
  const char* current() const { return current_size_ == 0 ? nullptr : buf_.data() + pos_; }

 private:
  const int fd_;
  std::string buf_;
  size_t pos_ = 0;
  size_t current_size_ = 0;
};

RowSorter::RowSorter(std::string temp_dir, size_t memory_budget)
    : temp_dir_(std::move(temp_dir)), budget_(memory_budget) {}

RowSorter::~RowSorter() = default;

absl::Status RowSorter::Add(const Row& row) {
  if (buffer_.capacity() < budget_) buffer_.reserve(budget_);
  entries_.push_back(Entry{{Prefix(row.key, 0), Prefix(row.key, 8)}, buffer_.size()});
  Encode(row, &buffer_);
  ++rows_;
  if (buffer_.size() + entries_.size() * sizeof(Entry) >= budget_) return Spill();
  return absl::OkStatus();
}

void RowSorter::SortBuffer() {
  const char* base = buffer_.data();
  // Stable: equal keys keep their input order (offsets grow with the input).
  std::sort(entries_.begin(), entries_.end(), [base](const Entry& a, const Entry& b) {
    if (a.prefix[0] != b.prefix[0]) return a.prefix[0] < b.prefix[0];
    if (a.prefix[1] != b.prefix[1]) return a.prefix[1] < b.prefix[1];
    const int c = KeyOf(base + a.offset).compare(KeyOf(base + b.offset));
    if (c != 0) return c < 0;
    return a.offset < b.offset;
  });
}

absl::Status RowSorter::Spill() {
  SortBuffer();
  std::string path = temp_dir_ + "/idem-recon-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return absl::UnavailableError("creating a sort run in " + temp_dir_ + ": " +
                                  std::strerror(errno));
  }
  ::unlink(path.c_str());
  runs_.push_back(std::make_unique<Run>(fd));
  std::string out;
  out.reserve(1 << 20);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i + kPrefetchAhead < entries_.size()) {
      __builtin_prefetch(buffer_.data() + entries_[i + kPrefetchAhead].offset);
    }
    const char* r = buffer_.data() + entries_[i].offset;
    out.append(r, 4 + GetU32(r));
    if (out.size() >= (1 << 20)) {
      absl::Status s = runs_.back()->Write(out);
      if (!s.ok()) return s;
      out.clear();
    }
  }
  absl::Status s = runs_.back()->Write(out);
  if (!s.ok()) return s;
  buffer_.clear();
  buffer_.shrink_to_fit();
  entries_.clear();
  entries_.shrink_to_fit();
  return absl::OkStatus();
}

absl::Status RowSorter::Finish() {
  finished_ = true;
  if (runs_.empty()) {
    SortBuffer();  // everything fits: no file at all
    return absl::OkStatus();
  }
  if (!entries_.empty()) {
    absl::Status s = Spill();
    if (!s.ok()) return s;
  }
  merging_ = true;
  for (size_t i = 0; i < runs_.size(); ++i) {
    absl::Status s = runs_[i]->Rewind();
    if (!s.ok()) return s;
    if (runs_[i]->current() != nullptr) heap_.push_back(static_cast<int>(i));
  }
  auto greater = [this](int a, int b) {
    const int c = KeyOf(runs_[a]->current()).compare(KeyOf(runs_[b]->current()));
    return c != 0 ? c > 0 : a > b;
  };
  std::make_heap(heap_.begin(), heap_.end(), greater);
  return absl::OkStatus();
}

absl::StatusOr<bool> RowSorter::Next(Row* row) {
  if (!merging_) {
    if (next_entry_ >= entries_.size()) return false;
    // In key order the records are scattered over the buffer: each one is a cache
    // (and TLB) miss, which the prefetch of one a few places ahead hides.
    if (next_entry_ + kPrefetchAhead < entries_.size()) {
      __builtin_prefetch(buffer_.data() + entries_[next_entry_ + kPrefetchAhead].offset);
    }
    Decode(buffer_.data() + entries_[next_entry_++].offset, row);
    return true;
  }
  if (heap_.empty()) return false;
  auto greater = [this](int a, int b) {
    const int c = KeyOf(runs_[a]->current()).compare(KeyOf(runs_[b]->current()));
    return c != 0 ? c > 0 : a > b;
  };
  std::pop_heap(heap_.begin(), heap_.end(), greater);
  const int run = heap_.back();
  Decode(runs_[run]->current(), row);
  absl::Status s = runs_[run]->Advance();
  if (!s.ok()) return s;
  if (runs_[run]->current() == nullptr) {
    heap_.pop_back();
  } else {
    std::push_heap(heap_.begin(), heap_.end(), greater);
  }
  return true;
}

}  // namespace idem::recon
