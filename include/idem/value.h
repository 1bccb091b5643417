// Value and Rows: the bound parameters and results of the SQL a handler runs
// through a Transaction. Values are bound, never spliced into SQL text.
//
// Thread safety: plain values; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace idem {

// Bytes bound as a BLOB (SQLite), bytea (PostgreSQL) or binary (MySQL).
struct Blob {
  std::string bytes;
  bool operator==(const Blob&) const = default;
};

// A SQL value: NULL, a 64-bit integer, a double, text or a blob. Exact decimals
// (PostgreSQL NUMERIC, MySQL DECIMAL) come back as text, never rounded to a double.
class Value {
 public:
  Value() : v_(nullptr) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(int64_t{b ? 1 : 0}) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(unsigned u) : v_(int64_t{u}) {}
  Value(long i) : v_(int64_t{i}) {}
  Value(long long i) : v_(int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Blob b) : v_(std::move(b)) {}

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_text() const { return std::holds_alternative<std::string>(v_); }
  bool is_blob() const { return std::holds_alternative<Blob>(v_); }

  // REQUIRES: the matching is_*() is true.
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return std::get<double>(v_); }
  const std::string& as_text() const { return std::get<std::string>(v_); }
  const std::string& as_blob() const { return std::get<Blob>(v_).bytes; }

  const std::variant<std::nullptr_t, int64_t, double, std::string, Blob>& variant() const {
    return v_;
  }
  bool operator==(const Value&) const = default;

 private:
  std::variant<std::nullptr_t, int64_t, double, std::string, Blob> v_;
};

// The result of a query: column names and rows of values.
struct Rows {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
};

}  // namespace idem
