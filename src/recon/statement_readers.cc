#include "recon/statement_readers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"
#include "simdjson.h"

namespace idem::recon {
namespace {

constexpr size_t kBlock = 1 << 20;
constexpr size_t kMinBlock = 4096;
// The longest record (CSV, quoted newlines included) or line (JSONL) read: checked
// before each further block is buffered, so a line without an end (a 64 MiB key)
// costs at most this and a block, not its size.
constexpr size_t kMaxRecordBytes = 1 << 20;

// A file read in blocks, with the unconsumed tail kept in one buffer so that a
// record (or line) is always contiguous while it is parsed. Reads go into a block
// that is never zero-filled (growing buf_ by a whole block zeroed 1 MiB per read,
// twice for a small file), sized to the file when it is a regular one.
class BlockFile {
 public:
  BlockFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {
    struct stat st;
    size_t size = kBlock;
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0) {
      // One byte more than the file, so the read that sees EOF needs no second block.
      size = std::clamp<size_t>(static_cast<size_t>(st.st_size) + 1, kMinBlock, kBlock);
    }
    block_size_ = size;
    block_ = std::make_unique_for_overwrite<char[]>(size);
  }
  ~BlockFile() { ::close(fd_); }

  // Makes more bytes available after data(); false at EOF. kUnavailable on error.
  absl::StatusOr<bool> More() {
    if (eof_) return false;
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    ssize_t n;
    do {
      n = ::read(fd_, block_.get(), block_size_);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::UnavailableError(name_ + ": " + std::strerror(errno));
    buf_.append(block_.get(), static_cast<size_t>(n));
    if (n == 0) eof_ = true;
    return n > 0;
  }
  std::string_view rest() const { return std::string_view(buf_).substr(pos_); }
  void Consume(size_t n) { pos_ += n; }
  bool eof() const { return eof_; }
  const std::string& name() const { return name_; }

 private:
  const int fd_;
  const std::string name_;
  size_t block_size_ = kBlock;
  std::unique_ptr<char[]> block_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
};

absl::Status At(const std::string& name, int64_t line, std::string_view what) {
  return absl::InvalidArgumentError(name + ":" + std::to_string(line) + ": " + std::string(what));
}

absl::Status TooLong(const std::string& name, int64_t line, std::string_view what) {
  return At(name, line,
            std::string(what) + " longer than " + std::to_string(kMaxRecordBytes >> 20) +
                " MiB: refused (a statement's row is far shorter; is the file corrupt?)");
}

class CsvReader final : public StatementReader {
 public:
  CsvReader(int fd, std::string name, uint32_t source, const ColumnMap& map, char delimiter,
            const Normalizer& normalizer)
      : file_(fd, std::move(name)),
        source_(source),
        map_(map),
        delimiter_(delimiter),
        normalizer_(normalizer) {}

  std::string_view name() const override { return file_.name(); }

  absl::StatusOr<bool> Next(Row* row) override {
    if (!header_done_) {
      absl::StatusOr<bool> h = ReadHeader();
      if (!h.ok() || !*h) return h;
    }
    while (true) {
      const int64_t line = line_;
      absl::StatusOr<bool> got = ReadRecord();
      if (!got.ok() || !*got) return got;
      if (fields_.size() == 1 && fields_[0].empty()) continue;  // a blank line
      if (fields_.size() != header_size_) {
        std::string what = std::to_string(fields_.size()) + " field(s), the header has " +
                           std::to_string(header_size_);
        if (last_without_newline_) what = "the last line is truncated: " + what;
        return At(file_.name(), line, what);
      }
      std::array<std::string_view, kFieldCount> raw{};
      for (int f = 0; f < kFieldCount; ++f) {
        if (index_[f] >= 0) raw[f] = fields_[index_[f]];
      }
      absl::Status s = normalizer_.Normalize(raw, row);
      if (!s.ok()) return At(file_.name(), line, std::string(s.message()));
      row->source = source_;
      row->line = line;
      return true;
    }
  }

 private:
  absl::StatusOr<bool> ReadHeader() {
    header_done_ = true;
    absl::StatusOr<bool> got = ReadRecord();
    if (!got.ok()) return got.status();
    if (!*got) return At(file_.name(), 1, "empty file: no header row");
    header_size_ = fields_.size();
    index_.fill(-1);
    for (int f = 0; f < kFieldCount; ++f) {
      if (!map_.columns[f].has_value()) continue;
      for (size_t i = 0; i < fields_.size(); ++i) {
        if (fields_[i] == *map_.columns[f]) index_[f] = static_cast<int>(i);
      }
      if (index_[f] < 0) {
        std::string names;
        for (size_t i = 0; i < fields_.size() && i < 20; ++i) {
          names += (i ? ", " : "") + std::string(fields_[i]);
        }
        return At(file_.name(), 1,
                  "no column '" + *map_.columns[f] + "' (--map " + std::string(kFieldNames[f]) +
                      "=" + *map_.columns[f] + "); the header has: " + names);
      }
    }
    return true;
  }

  // Splits the next record into fields_ (views into the buffer or into unquoted_).
  absl::StatusOr<bool> ReadRecord() {
    fields_.clear();
    while (true) {
      std::string_view data = file_.rest();
      if (first_block_) {
        if (data.size() < 3 && !file_.eof()) {
          absl::StatusOr<bool> more = file_.More();
          if (!more.ok()) return more.status();
          continue;
        }
        first_block_ = false;
        if (data.starts_with("\xEF\xBB\xBF")) {
          file_.Consume(3);
          data = file_.rest();
        }
      }
      if (data.empty() && file_.eof()) return false;
      absl::StatusOr<size_t> used = Split(data);
      if (!used.ok()) return used.status();
      if (*used > 0) {
        file_.Consume(*used);
        return true;
      }
      if (data.size() > kMaxRecordBytes) return TooLong(file_.name(), line_, "a record");
      absl::StatusOr<bool> more = file_.More();  // the record goes on past the buffer
      if (!more.ok()) return more.status();
      if (!*more && file_.rest().empty()) return false;
    }
  }

  // Parses one record at the start of `data`; returns the bytes it took, or 0 when
  // `data` ends inside it and more of the file is needed.
  absl::StatusOr<size_t> Split(std::string_view data) {
    fields_.clear();
    unquoted_.clear();
    unquoted_.reserve(data.size());  // views into it stay valid: it never reallocates
    size_t p = 0;
    int64_t newlines = 0;
    last_without_newline_ = false;
    while (true) {
      if (p < data.size() && data[p] == '"') {
        const size_t start = unquoted_.size();
        ++p;
        while (true) {
          const size_t q = data.find('"', p);
          if (q == std::string_view::npos) {
            if (!file_.eof()) return 0;
            return At(file_.name(), line_, "unterminated quoted field (the file is truncated?)");
          }
          for (size_t i = p; i < q; ++i) newlines += data[i] == '\n';
          unquoted_.append(data.substr(p, q - p));
          if (q + 1 < data.size() && data[q + 1] == '"') {
            unquoted_.push_back('"');
            p = q + 2;
            continue;
          }
          if (q + 1 >= data.size() && !file_.eof()) return 0;
          p = q + 1;
          break;
        }
        fields_.emplace_back(unquoted_.data() + start, unquoted_.size() - start);
        if (p < data.size() && data[p] == '\r' && p + 1 < data.size() && data[p + 1] == '\n') ++p;
        if (p >= data.size()) {
          last_without_newline_ = true;
          break;
        }
        if (data[p] == delimiter_) {
          ++p;
          continue;
        }
        if (data[p] == '\n') {
          ++p;
          ++newlines;
          break;
        }
        if (data[p] == '\r' && p + 1 >= data.size() && !file_.eof()) return 0;
        return At(file_.name(), line_, "a character after a closing quote");
      }
      size_t end = p;
      while (end < data.size() && data[end] != delimiter_ && data[end] != '\n') {
        if (data[end] == '"') return At(file_.name(), line_, "a quote inside an unquoted field");
        ++end;
      }
      if (end >= data.size() && !file_.eof()) return 0;
      std::string_view field = data.substr(p, end - p);
      const bool at_newline = end < data.size() && data[end] == '\n';
      if ((at_newline || end >= data.size()) && field.ends_with('\r')) field.remove_suffix(1);
      fields_.push_back(field);
      if (end >= data.size()) {
        last_without_newline_ = true;
        p = end;
        break;
      }
      p = end + 1;
      if (at_newline) {
        ++newlines;
        break;
      }
    }
    line_ += newlines + (last_without_newline_ ? 1 : 0);
    return p == 0 ? 1 : p;  // an empty last line took no bytes but is a record
  }

  BlockFile file_;
  const uint32_t source_;
  const ColumnMap map_;
  const char delimiter_;
  const Normalizer& normalizer_;
  bool first_block_ = true;
  bool header_done_ = false;
  size_t header_size_ = 0;
  std::array<int, kFieldCount> index_{};
  std::vector<std::string_view> fields_;
  std::string unquoted_;
  int64_t line_ = 1;
  bool last_without_newline_ = false;
};

class JsonlReader final : public StatementReader {
 public:
  JsonlReader(int fd, std::string name, uint32_t source, const ColumnMap& map,
              const Normalizer& normalizer)
      : file_(fd, std::move(name)), source_(source), map_(map), normalizer_(normalizer) {}

  std::string_view name() const override { return file_.name(); }

  absl::StatusOr<bool> Next(Row* row) override {
    while (true) {
      std::string_view data = file_.rest();
      size_t nl = data.find('\n');
      if (nl == std::string_view::npos && !file_.eof()) {
        if (data.size() > kMaxRecordBytes) return TooLong(file_.name(), line_ + 1, "a line");
        absl::StatusOr<bool> more = file_.More();
        if (!more.ok()) return more.status();
        continue;
      }
      if (data.empty() && file_.eof()) return false;
      const bool truncated = nl == std::string_view::npos;
      std::string_view line = truncated ? data : data.substr(0, nl);
      file_.Consume(truncated ? data.size() : nl + 1);
      const int64_t number = ++line_;
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (number == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      absl::Status s = Parse(line, number, truncated, row);
      if (!s.ok()) return s;
      return true;
    }
  }

 private:
  absl::Status Parse(std::string_view line, int64_t number, bool truncated, Row* row) {
    if (!IsUtf8(line)) return At(file_.name(), number, "invalid UTF-8");
    padded_.assign(line);
    padded_.append(simdjson::SIMDJSON_PADDING, ' ');
    std::array<std::string, kFieldCount> values;
    std::array<bool, kFieldCount> seen{};
    auto bad = [&](std::string_view what) {
      return At(file_.name(), number,
                truncated ? "the last line is truncated: " + std::string(what) : std::string(what));
    };
    simdjson::ondemand::document doc;
    if (parser_.iterate(padded_.data(), line.size(), padded_.size()).get(doc) !=
        simdjson::SUCCESS) {
      return bad("not a JSON object");
    }
    simdjson::ondemand::object object;
    if (doc.get_object().get(object) != simdjson::SUCCESS) return bad("not a JSON object");
    for (auto member : object) {
      std::string_view name;
      if (member.unescaped_key().get(name) != simdjson::SUCCESS) return bad("malformed JSON");
      simdjson::ondemand::value value;
      if (member.value().get(value) != simdjson::SUCCESS) return bad("malformed JSON");
      int field = -1;
      for (int f = 0; f < kFieldCount; ++f) {
        if (map_.columns[f].has_value() && *map_.columns[f] == name) field = f;
      }
      if (field < 0) continue;  // on-demand skips the value it was not asked for
      simdjson::ondemand::json_type type;
      if (value.type().get(type) != simdjson::SUCCESS) return bad("malformed JSON");
      seen[field] = true;
      if (type == simdjson::ondemand::json_type::string) {
        std::string_view text;
        if (value.get_string().get(text) != simdjson::SUCCESS) return bad("malformed JSON string");
        values[field].assign(text);
      } else if (type == simdjson::ondemand::json_type::number) {
        std::string_view text = value.raw_json_token();  // the exact digits, no double
        while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
        values[field].assign(text);
        double check;
        if (value.get_double().get(check) != simdjson::SUCCESS) return bad("malformed number");
      } else if (type == simdjson::ondemand::json_type::null) {
        seen[field] = false;
      } else {
        return bad("member '" + std::string(name) + "' is not a string or a number");
      }
    }
    // simdjson 3.0's on-demand document cannot tell whether anything follows the
    // object: the line must end where an object ends.
    std::string_view trimmed = line;
    while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\t'))
      trimmed.remove_suffix(1);
    if (!trimmed.ends_with('}')) return bad("not one JSON object");
    std::array<std::string_view, kFieldCount> raw{};
    for (int f = 0; f < kFieldCount; ++f) {
      if (!map_.columns[f].has_value()) continue;
      if (!seen[f] && (f == 0 || f == 1)) {
        return bad("no member '" + *map_.columns[f] + "' (--map " + std::string(kFieldNames[f]) +
                   "=" + *map_.columns[f] + ")");
      }
      raw[f] = values[f];
    }
    absl::Status s = normalizer_.Normalize(raw, row);
    if (!s.ok()) return bad(std::string(s.message()));
    row->source = source_;
    row->line = number;
    return absl::OkStatus();
  }

  BlockFile file_;
  const uint32_t source_;
  const ColumnMap map_;
  const Normalizer& normalizer_;
  simdjson::ondemand::parser parser_;
  std::string padded_;
  int64_t line_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StatementReader>> OpenStatement(const std::string& path,
                                                               uint32_t source,
                                                               const ColumnMap& map,
                                                               const StatementOptions& options,
                                                               const Normalizer& normalizer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError("statement " + path + ": " + std::strerror(errno));
  }
  if (options.format == StatementFormat::kJsonl) {
    return std::make_unique<JsonlReader>(fd, path, source, map, normalizer);
  }
  return std::make_unique<CsvReader>(fd, path, source, map, options.delimiter, normalizer);
}

}  // namespace idem::recon
