#include "http/json.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace idem::http {
namespace {

namespace od = simdjson::ondemand;

// True for a JSON number token (RFC 8259 §6), whatever its magnitude.
bool IsNumberToken(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i > start;
  };
  if (i < t.size() && t[i] == '-') ++i;
  if (i < t.size() && t[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < t.size() && t[i] == '.' && (++i, !digits())) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size();
}

// Walks one value with simdjson's on-demand API, checking every part of it (the
// whole input's UTF-8 is checked when the document starts) but reading numbers as
// tokens, never converting them. Nesting is bounded by the parser's depth limit.
simdjson::error_code WalkValue(od::value v) {
  od::json_type type;
  if (auto e = v.type().get(type)) return e;
  switch (type) {
    case od::json_type::object: {
      od::object o;
      if (auto e = v.get_object().get(o)) return e;
      for (auto field : o) {
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return e;
        if (auto e = WalkValue(field.value())) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array a;
      if (auto e = v.get_array().get(a)) return e;
      for (auto element : a) {
        od::value inner;
        if (auto e = std::move(element).get(inner)) return e;
        if (auto e = WalkValue(inner)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::string: {
      std::string_view text;
      return v.get_string().get(text);
    }
    case od::json_type::number: {
      std::string_view token = v.raw_json_token();
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t' ||
                                token.back() == '\n' || token.back() == '\r')) {
        token.remove_suffix(1);
      }
      return IsNumberToken(token) ? simdjson::SUCCESS : simdjson::NUMBER_ERROR;
    }
    case od::json_type::boolean: {
      bool b = false;
      return v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool null = false;
      if (auto e = v.is_null().get(null)) return e;
      return null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::TAPE_ERROR;
}

// IsValidJson's and ValidateObject's check for a body simdjson's DOM refused only
// for a number's size (1e400, 18446744073709551616): the same grammar, numbers
// unconverted. `object`: the top value must be an object.
bool ValidWithBigNumbers(std::string_view bytes, bool object) {
  if (!object) {  // a number alone: the whole text, trimmed, is its token
    const size_t first = bytes.find_first_not_of(" \t\r\n");
    const size_t last = bytes.find_last_not_of(" \t\r\n");
    if (first != std::string_view::npos && bytes[first] != '{' && bytes[first] != '[') {
      return IsNumberToken(bytes.substr(first, last - first + 1));
    }
  }
  simdjson::padded_string padded(bytes);
  // One parser per thread, reused: its buffers are allocated once, not per request.
  thread_local od::parser parser;
  // First pass: where the top value ends; only whitespace may follow it.
  {
    od::document doc;
    od::value root;
    od::json_type type;
    if (parser.iterate(padded).get(doc) || doc.get_value().get(root) ||
        root.type().get(type) || (object && type != od::json_type::object)) {
      return false;
    }
    std::string_view raw;
    if (type == od::json_type::object) {
      od::object o;
      if (root.get_object().get(o) || o.raw_json().get(raw)) return false;
    } else if (type == od::json_type::array) {
      od::array a;
      if (root.get_array().get(a) || a.raw_json().get(raw)) return false;
    } else {
      raw = root.raw_json_token();
    }
    const size_t end = static_cast<size_t>(raw.data() - padded.data()) + raw.size();
    if (end > bytes.size() ||
        bytes.substr(end).find_first_not_of(" \t\r\n") != std::string_view::npos) {
      return false;
    }
  }
  // Second pass: every part of the value.
  od::document doc;
  od::value root;
  if (parser.iterate(padded).get(doc) || doc.get_value().get(root)) return false;
  return !WalkValue(root);
}

absl::Status ValidateWithoutNumbers(std::string_view body) {
  if (!ValidWithBigNumbers(body, /*object=*/true)) {
    return absl::InvalidArgumentError("request body is not valid JSON (or not a JSON object)");
  }
  return absl::OkStatus();
}

// A request body copied once, with the SIMDJSON_PADDING bytes simdjson may read
// past its end, so that the DOM pass and the on-demand pass both parse it in place
// (realloc_if_needed and padded_string each allocated and copied it again). Bodies
// up to 64 KiB (every claim) use this thread's buffer, which stays allocated;
// bigger ones a buffer of their own, so no thread keeps a megabyte.
class PaddedBody {
 public:
  explicit PaddedBody(std::string_view body) : size_(body.size()) {
    constexpr size_t kKeptPerThread = 64 * 1024;
    thread_local std::string reused;
    std::string& buffer = body.size() <= kKeptPerThread ? reused : own_;
    if (buffer.size() < body.size() + simdjson::SIMDJSON_PADDING) {
      buffer.resize(body.size() + simdjson::SIMDJSON_PADDING);
    }
    std::memcpy(buffer.data(), body.data(), body.size());
    std::memset(buffer.data() + body.size(), 0, simdjson::SIMDJSON_PADDING);
    data_ = buffer.data();
    capacity_ = buffer.size();
  }
  PaddedBody(const PaddedBody&) = delete;
  PaddedBody& operator=(const PaddedBody&) = delete;

  std::string_view bytes() const { return {data_, size_}; }
  simdjson::padded_string_view view() const {
    return simdjson::padded_string_view(data_, size_, capacity_);
  }

 private:
  std::string own_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Rejects anything that is not one well-formed JSON object in valid UTF-8. The
// on-demand pass that follows skips over nested values without checking them, so
// this full pass is what makes the raw `result`/`error` bytes trustworthy.
absl::Status ValidateObject(const PaddedBody& padded) {
  const std::string_view body = padded.bytes();
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError("request body is empty; expected a JSON object");
  }
  thread_local simdjson::dom::parser parser;  // reused per thread, as above
  simdjson::dom::element root;
  auto error = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/false).get(root);
  if (error == simdjson::NUMBER_ERROR || error == simdjson::NUMBER_OUT_OF_RANGE) {
    // Valid JSON whose numbers do not fit int64/uint64/double (1e400,
    // 18446744073709551616): SPEC §11 stores any JSON value byte-for-byte, and
    // complete comes after the effect, so it must not be refused. The grammar is
    // checked without converting numbers.
    return ValidateWithoutNumbers(body);
  }
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body is not valid JSON: ", simdjson::error_message(error)));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  return absl::OkStatus();
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field \"", AV(field), "\" ", AV(what)));
}

absl::StatusOr<std::string> GetString(od::value& v, std::string_view field) {
  od::json_type type;
  if (v.type().get(type) || type != od::json_type::string) {
    return FieldError(field, "must be a string");
  }
  std::string_view s;
  if (v.get_string().get(s)) return FieldError(field, "is not a valid string");
  if (s.find('\0') != std::string_view::npos) {
    return FieldError(field, "must not contain NUL (\\u0000)");
  }
  return std::string(s);
}

absl::StatusOr<int64_t> GetInt(od::value& v, std::string_view field, int64_t min, int64_t max) {
  od::json_type type;
  int64_t n = 0;
  if (v.type().get(type) || type != od::json_type::number || v.get_int64().get(n)) {
    return FieldError(field, "must be an integer");
  }
  if (n < min || n > max) {
    return FieldError(field, absl::StrCat("must be between ", min, " and ", max, ", got ", n));
  }
  return n;
}

absl::StatusOr<bool> GetBool(od::value& v, std::string_view field) {
  bool b = false;
  od::json_type type;
  if (v.type().get(type) || type != od::json_type::boolean || v.get_bool().get(b)) {
    return FieldError(field, "must be true or false");
  }
  return b;
}

// The exact bytes of `v` as they appear in the body.
absl::StatusOr<std::string> GetRaw(od::value& v, std::string_view field) {
  od::json_type type;
  if (v.type().get(type)) return FieldError(field, "is not a JSON value");
  std::string_view raw;
  simdjson::error_code error = simdjson::SUCCESS;
  if (type == od::json_type::object) {
    od::object o;
    error = v.get_object().get(o);
    if (!error) error = o.raw_json().get(raw);
  } else if (type == od::json_type::array) {
    od::array a;
    error = v.get_array().get(a);
    if (!error) error = a.raw_json().get(raw);
  } else {
    raw = v.raw_json_token();
  }
  if (error) return FieldError(field, "is not a JSON value");
  // raw_json() of an object/array and raw_json_token() of a scalar run up to the
  // next structural character, so they carry the whitespace that follows the value.
  return std::string(TrimRight(raw));
}

// The members present, as bits by their index in `allowed`.
using FieldSet = uint32_t;

// Walks the members of the top-level object, calling `on_field(name, value)` for
// each; rejects duplicates and members outside `allowed` (at most 32). Sets
// `*present` to the members seen.
template <typename OnField>
absl::Status ForEachField(std::string_view body, std::span<const std::string_view> allowed,
                          FieldSet* present, OnField on_field) {
  *present = 0;
  const PaddedBody padded(body);
  if (absl::Status s = ValidateObject(padded); !s.ok()) return s;
  // One parser per thread, reused: its buffers are allocated once, not per request.
  thread_local od::parser parser;
  od::document doc;
  od::object object;
  if (parser.iterate(padded.view()).get(doc) || doc.get_object().get(object)) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  for (auto field_result : object) {
    od::field field;
    std::string_view name;
    if (std::move(field_result).get(field) || field.unescaped_key().get(name)) {
      return absl::InvalidArgumentError("request body has a malformed member name");
    }
    FieldSet bit = 0;
    FieldSet next = 1;
    for (std::string_view a : allowed) {
      if (a == name) bit = next;
      next <<= 1;
    }
    if (bit == 0) return FieldError(name, "is not a known field");
    if ((*present & bit) != 0) return FieldError(name, "appears more than once");
    *present |= bit;
    if (absl::Status s = on_field(name, field.value()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The first `required` members of `allowed` must all be present.
absl::Status Require(FieldSet present, std::span<const std::string_view> allowed,
                     size_t required) {
  for (size_t i = 0; i < required; ++i) {
    if ((present & (FieldSet{1} << i)) == 0) return FieldError(allowed[i], "is required");
  }
  return absl::OkStatus();
}

#define IDEM_ASSIGN_FIELD(lhs, expr)  \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = std::move(*_v);             \
  } while (0)

}  // namespace

absl::StatusOr<ClaimBody> ParseClaimBody(std::string_view body) {
  static constexpr std::string_view kClaimFields[] = {
      "biz_type", "key", "fingerprint", "lease_ms", "wait_ms"};
  ClaimBody out;
  FieldSet present = 0;
  absl::Status s =
      ForEachField(body, kClaimFields, &present,
                   [&](std::string_view name, od::value v) -> absl::Status {
                     if (name == "biz_type") {
                       IDEM_ASSIGN_FIELD(out.biz_type, GetString(v, name));
                     } else if (name == "key") {
                       IDEM_ASSIGN_FIELD(out.key, GetString(v, name));
                     } else if (name == "fingerprint") {
                       IDEM_ASSIGN_FIELD(out.fingerprint, GetString(v, name));
                     } else if (name == "lease_ms") {
                       IDEM_ASSIGN_FIELD(out.lease_ms, GetInt(v, name, kMinLeaseMs, kMaxLeaseMs));
                     } else if (name == "wait_ms") {
                       IDEM_ASSIGN_FIELD(out.wait_ms, GetInt(v, name, 0, kMaxWaitMs));
                     }
                     return absl::OkStatus();
                   });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kClaimFields, 2); !r.ok()) return r;  // biz_type, key
  return out;
}

absl::StatusOr<CompleteBody> ParseCompleteBody(std::string_view body) {
  static constexpr std::string_view kCompleteFields[] = {
      "biz_type", "key", "token", "result"};
  CompleteBody out;
  FieldSet present = 0;
  absl::Status s = ForEachField(body, kCompleteFields, &present,
                                [&](std::string_view name, od::value v) -> absl::Status {
                                  if (name == "biz_type") {
                                    IDEM_ASSIGN_FIELD(out.biz_type, GetString(v, name));
                                  } else if (name == "key") {
                                    IDEM_ASSIGN_FIELD(out.key, GetString(v, name));
                                  } else if (name == "token") {
                                    IDEM_ASSIGN_FIELD(out.token, GetInt(v, name, 0, INT64_MAX));
                                  } else if (name == "result") {
                                    IDEM_ASSIGN_FIELD(out.result, GetRaw(v, name));
                                  }
                                  return absl::OkStatus();
                                });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kCompleteFields, std::size(kCompleteFields)); !r.ok()) {
    return r;
  }
  return out;
}

absl::StatusOr<FailBody> ParseFailBody(std::string_view body) {
  static constexpr std::string_view kFailFields[] = {
      "biz_type", "key", "token", "retryable", "error"};
  FailBody out;
  FieldSet present = 0;
  absl::Status s = ForEachField(body, kFailFields, &present,
                                [&](std::string_view name, od::value v) -> absl::Status {
                                  if (name == "biz_type") {
                                    IDEM_ASSIGN_FIELD(out.biz_type, GetString(v, name));
                                  } else if (name == "key") {
                                    IDEM_ASSIGN_FIELD(out.key, GetString(v, name));
                                  } else if (name == "token") {
                                    IDEM_ASSIGN_FIELD(out.token, GetInt(v, name, 0, INT64_MAX));
                                  } else if (name == "retryable") {
                                    IDEM_ASSIGN_FIELD(out.retryable, GetBool(v, name));
                                  } else if (name == "error") {
                                    IDEM_ASSIGN_FIELD(out.error, GetRaw(v, name));
                                  }
                                  return absl::OkStatus();
                                });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kFailFields, std::size(kFailFields));
      !r.ok()) {
    return r;
  }
  return out;
}

#undef IDEM_ASSIGN_FIELD

bool IsValidJson(std::string_view bytes) {
  if (bytes.empty()) return false;
  thread_local simdjson::dom::parser parser;  // reused per thread, as above
  simdjson::dom::element root;
  const simdjson::error_code error = parser.parse(bytes.data(), bytes.size(), true).get(root);
  if (error == simdjson::NUMBER_ERROR || error == simdjson::NUMBER_OUT_OF_RANGE) {
    return ValidWithBigNumbers(bytes, /*object=*/false);  // numbers past double/int64
  }
  return !error;
}

std::string RawJsonOrString(std::string_view bytes) {
  if (bytes.empty()) return "null";
  if (IsValidJson(bytes)) return std::string(bytes);
  return JsonString(bytes);
}

std::string JsonString(std::string_view text) {
  // Printable ASCII without '"' and '\\' needs no escape (names, times, tokens):
  // quoted as is, what the dump below writes for it, without building a json.
  bool plain = true;
  for (const char c : text) {
    plain = plain && c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  }
  if (plain) {
    std::string out;
    out.reserve(text.size() + 2);
    out += '"';
    out.append(text);
    out += '"';
    return out;
  }
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FormatRfc3339(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

}  // namespace idem::http
