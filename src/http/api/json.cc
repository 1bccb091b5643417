#include "http/api/json.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/server/buffers.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace idem::http {
namespace {

// What a thread keeps allocated for the bodies and results it parses: buffers for
// documents up to this size (every claim) stay with the thread and are reused;
// bigger ones get their own, freed once parsed. A parser's buffers are several times
// its document (structural indexes, tape, strings), so 16 workers each keeping one
// sized for a 1 MB result held over 100 MB after a few large completes.
constexpr size_t kKeptPerThread = 64 * 1024;

// The parser for a document of `size` bytes: `kept` (the calling thread's) up to
// kKeptPerThread, else one made in `own`, which the caller's scope frees.
template <typename Parser>
Parser& ParserFor(size_t size, Parser& kept, std::optional<Parser>& own) {
  return size <= kKeptPerThread ? kept : own.emplace();
}

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

// IsValidJson's check for a value simdjson's DOM refused only for a number's size
// (1e400, 18446744073709551616): the same grammar, numbers unconverted.
bool ValidWithBigNumbers(std::string_view bytes) {
  // A number alone: the whole text, trimmed, is its token.
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  const size_t last = bytes.find_last_not_of(" \t\r\n");
  if (first != std::string_view::npos && bytes[first] != '{' && bytes[first] != '[') {
    return IsNumberToken(bytes.substr(first, last - first + 1));
  }
  simdjson::padded_string padded(bytes);
  // One parser per thread, reused for small documents (ParserFor).
  thread_local od::parser kept;
  std::optional<od::parser> own;
  od::parser& parser = ParserFor(bytes.size(), kept, own);
  // First pass: where the top value ends; only whitespace may follow it.
  {
    od::document doc;
    od::value root;
    od::json_type type;
    if (parser.iterate(padded).get(doc) || doc.get_value().get(root) || root.type().get(type)) {
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

// A request body copied once, with the SIMDJSON_PADDING bytes simdjson may read
// past its end, so that the on-demand pass parses it in place (padded_string
// allocated and copied it again). Bodies up to 64 KiB (every claim) use this
// thread's buffer, which stays allocated; bigger ones a buffer of their own, so no
// thread keeps a megabyte.
class PaddedBody {
 public:
  explicit PaddedBody(std::string_view body) : size_(body.size()) {
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

  simdjson::padded_string_view view() const {
    return simdjson::padded_string_view(data_, size_, capacity_);
  }

 private:
  std::string own_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

absl::Status NotJson(simdjson::error_code error) {
  return absl::InvalidArgumentError(
      absl::StrCat("request body is not valid JSON: ", simdjson::error_message(error)));
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
  if (auto e = v.get_string().get(s)) {  // a bad escape or a lone surrogate
    return FieldError(field, absl::StrCat("is not valid JSON: ", simdjson::error_message(e)));
  }
  if (s.find('\0') != std::string_view::npos) {
    return FieldError(field, "must not contain NUL (\\u0000)");
  }
  // A string too long to be held in place (a key) goes into a buffer an earlier
  // request let go (ApiCall's destructor gives its key back).
  std::string out = s.size() > std::string().capacity() ? TakeStringBuffer() : std::string();
  out.assign(s);
  return out;
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
  // That character must end the member: the loop's next step skips what is left of
  // an unread value up to the object's depth without checking it, so it would walk
  // over `"b":[1]` after a scalar `"b"` (the padding reads as NUL at the end).
  const char after = raw.data()[raw.size()];
  if (after != ',' && after != '}') return FieldError(field, "is not valid JSON");
  raw = TrimRight(raw);
  // The on-demand pass skipped over the value without checking it: this is its only
  // full check, and what makes the stored bytes replayable as JSON.
  if (!IsValidJson(raw)) return FieldError(field, "is not valid JSON");
  return std::string(raw);
}

// The members present, as bits by their index in `allowed`.
using FieldSet = uint32_t;

// Walks the members of the top-level object in one on-demand pass, calling
// `on_field(name, value)` for each; rejects duplicates and members outside
// `allowed` (at most 32). Sets `*present` to the members seen.
//
// One pass is a full check because every part of the body is read: the whole
// input's UTF-8 and string characters when the document starts, each member's name
// and separators as it is reached, each scalar by on_field, which must read its
// value completely or fail (GetString, GetInt, GetBool), or hand it to GetRaw, which
// validates the skipped value's bytes alone, and what follows the object.
template <typename OnField>
absl::Status ForEachField(std::string_view body, std::span<const std::string_view> allowed,
                          FieldSet* present, OnField on_field) {
  *present = 0;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError("request body is empty; expected a JSON object");
  }
  const PaddedBody padded(body);
  // One parser per thread, reused for small bodies (ParserFor).
  thread_local od::parser kept;
  std::optional<od::parser> own;
  od::parser& parser = ParserFor(body.size(), kept, own);
  od::document doc;
  od::json_type type;
  if (auto e = parser.iterate(padded.view()).get(doc)) return NotJson(e);
  if (auto e = doc.type().get(type)) return NotJson(e);
  if (type != od::json_type::object) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  od::object object;
  if (auto e = doc.get_object().get(object)) return NotJson(e);
  for (auto field_result : object) {
    od::field field;
    std::string_view name;
    if (auto e = std::move(field_result).get(field)) return NotJson(e);
    if (auto e = field.unescaped_key().get(name)) return NotJson(e);
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
  // Only whitespace may follow the object: at the end, there is no location left.
  const char* trailing = nullptr;
  if (doc.current_location().get(trailing) != simdjson::OUT_OF_BOUNDS) {
    return absl::InvalidArgumentError(
        "request body is not valid JSON: content after the top-level object");
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


// The members of each call's body, the required ones first, then "op", which only
// an item of a batch has (the span without the last name is the single call's).
constexpr std::string_view kClaimFields[] = {"biz_type", "key",     "fingerprint",
                                             "lease_ms", "wait_ms", "op"};
constexpr std::string_view kCompleteFields[] = {"biz_type", "key", "token", "result", "op"};
constexpr std::string_view kFailFields[] = {"biz_type", "key",   "token",
                                            "retryable", "error", "op"};

// The members a body of `fields` may have: "op" only in a batch's item.
std::span<const std::string_view> FieldsOf(std::span<const std::string_view> fields, bool item) {
  return item ? fields : fields.first(fields.size() - 1);
}

// An item's "op", read in full like every other member (which call it names was
// found before, by BatchItemOp).
absl::Status ReadItemOp(od::value& v) { return GetString(v, "op").status(); }

absl::StatusOr<ClaimBody> ParseClaimJson(std::string_view body, bool item) {
  ClaimBody out;
  FieldSet present = 0;
  absl::Status s = ForEachField(
      body, FieldsOf(kClaimFields, item), &present,
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
          // A batch is answered once, when its last item is decided: a claim in it
          // that waited would hold every other item's answer.
          if (item) return FieldError(name, "is not taken in a batch (its claims never wait)");
          IDEM_ASSIGN_FIELD(out.wait_ms, GetInt(v, name, 0, kMaxWaitMs));
        } else if (name == "op") {
          return ReadItemOp(v);
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kClaimFields, 2); !r.ok()) return r;  // biz_type, key
  return out;
}

absl::StatusOr<CompleteBody> ParseCompleteJson(std::string_view body, bool item) {
  CompleteBody out;
  FieldSet present = 0;
  absl::Status s = ForEachField(body, FieldsOf(kCompleteFields, item), &present,
                                [&](std::string_view name, od::value v) -> absl::Status {
                                  if (name == "biz_type") {
                                    IDEM_ASSIGN_FIELD(out.biz_type, GetString(v, name));
                                  } else if (name == "key") {
                                    IDEM_ASSIGN_FIELD(out.key, GetString(v, name));
                                  } else if (name == "token") {
                                    IDEM_ASSIGN_FIELD(out.token, GetInt(v, name, 0, INT64_MAX));
                                  } else if (name == "result") {
                                    IDEM_ASSIGN_FIELD(out.result, GetRaw(v, name));
                                  } else if (name == "op") {
                                    return ReadItemOp(v);
                                  }
                                  return absl::OkStatus();
                                });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kCompleteFields, 4); !r.ok()) return r;
  return out;
}

absl::StatusOr<FailBody> ParseFailJson(std::string_view body, bool item) {
  FailBody out;
  FieldSet present = 0;
  absl::Status s = ForEachField(body, FieldsOf(kFailFields, item), &present,
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
                                  } else if (name == "op") {
                                    return ReadItemOp(v);
                                  }
                                  return absl::OkStatus();
                                });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kFailFields, 5); !r.ok()) return r;
  return out;
}

// The "op" of a batch's item (which ParseBatchItem then parses as that call's
// body), or what is wrong with it. The members other than "op" are skipped here:
// the parse that follows reads each of them in full.
absl::StatusOr<std::string> BatchItemOp(std::string_view item) {
  static constexpr std::string_view kItemFields[] = {
      "op", "biz_type", "key", "fingerprint", "lease_ms", "wait_ms",
      "token", "result", "retryable", "error"};
  const size_t first = item.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || item[first] != '{') {
    return absl::InvalidArgumentError(
        "must be a JSON object with \"op\": \"claim\", \"complete\" or \"fail\"");
  }
  std::string op;
  FieldSet present = 0;
  absl::Status s = ForEachField(item, kItemFields, &present,
                                [&](std::string_view name, od::value v) -> absl::Status {
                                  if (name == "op") IDEM_ASSIGN_FIELD(op, GetString(v, name));
                                  return absl::OkStatus();
                                });
  if (!s.ok()) return s;
  if (absl::Status r = Require(present, kItemFields, 1); !r.ok()) return r;
  return op;
}

// A valid item of a batch in one parse: each member read as the call that takes it
// reads it, then the members checked against its "op". std::nullopt for anything
// wrong, which ParseBatchItem's two parses (BatchItemOp, then the call's) word.
std::optional<BatchItemBody> ParseValidBatchItem(std::string_view item) {
  static constexpr std::string_view kFields[] = {"op",       "biz_type", "key",
                                                 "fingerprint", "lease_ms", "token",
                                                 "result",   "retryable", "error"};
  const auto bits = [](std::initializer_list<int> fields) {
    FieldSet set = 0;
    for (int f : fields) set |= FieldSet{1} << f;
    return set;
  };
  std::string op, biz_type, key, fingerprint, result, error;
  int64_t lease_ms = kDefaultLeaseMs, token = 0;
  bool retryable = false;
  FieldSet present = 0;
  absl::Status s = ForEachField(
      item, kFields, &present, [&](std::string_view name, od::value v) -> absl::Status {
        if (name == "op") {
          IDEM_ASSIGN_FIELD(op, GetString(v, name));
        } else if (name == "biz_type") {
          IDEM_ASSIGN_FIELD(biz_type, GetString(v, name));
        } else if (name == "key") {
          IDEM_ASSIGN_FIELD(key, GetString(v, name));
        } else if (name == "fingerprint") {
          IDEM_ASSIGN_FIELD(fingerprint, GetString(v, name));
        } else if (name == "lease_ms") {
          IDEM_ASSIGN_FIELD(lease_ms, GetInt(v, name, kMinLeaseMs, kMaxLeaseMs));
        } else if (name == "token") {
          IDEM_ASSIGN_FIELD(token, GetInt(v, name, 0, INT64_MAX));
        } else if (name == "result") {
          IDEM_ASSIGN_FIELD(result, GetRaw(v, name));
        } else if (name == "retryable") {
          IDEM_ASSIGN_FIELD(retryable, GetBool(v, name));
        } else {
          IDEM_ASSIGN_FIELD(error, GetRaw(v, name));
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return std::nullopt;
  if (op == "claim" && (present & bits({0, 1, 2})) == bits({0, 1, 2}) &&
      (present & ~bits({0, 1, 2, 3, 4})) == 0) {
    return ClaimBody{.biz_type = std::move(biz_type),
                     .key = std::move(key),
                     .fingerprint = std::move(fingerprint),
                     .lease_ms = lease_ms};
  }
  if (op == "complete" && present == bits({0, 1, 2, 5, 6})) {
    return CompleteBody{.biz_type = std::move(biz_type),
                        .key = std::move(key),
                        .token = token,
                        .result = std::move(result)};
  }
  if (op == "fail" && present == bits({0, 1, 2, 5, 7, 8})) {
    return FailBody{.biz_type = std::move(biz_type),
                    .key = std::move(key),
                    .token = token,
                    .retryable = retryable,
                    .error = std::move(error)};
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<ClaimBody> ParseClaimBody(std::string_view body) {
  return ParseClaimJson(body, false);
}

absl::StatusOr<CompleteBody> ParseCompleteBody(std::string_view body) {
  return ParseCompleteJson(body, false);
}

absl::StatusOr<FailBody> ParseFailBody(std::string_view body) { return ParseFailJson(body, false); }

absl::StatusOr<BatchItemBody> ParseBatchItem(std::string_view item) {
  if (std::optional<BatchItemBody> valid = ParseValidBatchItem(item)) return *std::move(valid);
  absl::StatusOr<std::string> op = BatchItemOp(item);
  if (!op.ok()) return op.status();
  if (*op == "claim") return ParseClaimJson(item, true);
  if (*op == "complete") return ParseCompleteJson(item, true);
  if (*op == "fail") return ParseFailJson(item, true);
  return FieldError("op", absl::StrCat("must be \"claim\", \"complete\" or \"fail\", got ",
                                       JsonString(*op)));
}

absl::StatusOr<std::vector<std::string_view>> ParseBatchEnvelope(std::string_view body,
                                                                 size_t max_items) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError("request body is empty; expected a JSON object");
  }
  // The whole envelope first: a body that is not JSON decides nothing.
  if (!IsValidJson(body)) return absl::InvalidArgumentError("request body is not valid JSON");
  const PaddedBody padded(body);
  thread_local od::parser kept;
  std::optional<od::parser> own;
  od::parser& parser = ParserFor(body.size(), kept, own);
  od::document doc;
  od::object object;
  if (auto e = parser.iterate(padded.view()).get(doc)) return NotJson(e);
  if (doc.get_object().get(object)) {
    return absl::InvalidArgumentError(
        "request body must be a JSON object with a \"requests\" array");
  }
  std::optional<std::vector<std::string_view>> items;
  const char* base = padded.view().data();
  for (auto field_result : object) {
    od::field field;
    std::string_view name;
    if (auto e = std::move(field_result).get(field)) return NotJson(e);
    if (auto e = field.unescaped_key().get(name)) return NotJson(e);
    if (name != "requests") return FieldError(name, "is not a known field");
    if (items.has_value()) return FieldError(name, "appears more than once");
    od::array array;
    if (field.value().get_array().get(array)) return FieldError(name, "must be an array");
    items.emplace();
    for (auto element : array) {
      od::value v;
      if (auto e = std::move(element).get(v)) return NotJson(e);
      if (items->size() == max_items) {
        return FieldError(name, absl::StrCat("has more than ", max_items, " items"));
      }
      od::json_type type;
      if (auto e = v.type().get(type)) return NotJson(e);
      std::string_view raw;
      if (type == od::json_type::object) {
        od::object o;
        if (auto e = v.get_object().get(o)) return NotJson(e);
        if (auto e = o.raw_json().get(raw)) return NotJson(e);
      } else if (type == od::json_type::array) {
        od::array a;
        if (auto e = v.get_array().get(a)) return NotJson(e);
        if (auto e = a.raw_json().get(raw)) return NotJson(e);
      } else {
        raw = v.raw_json_token();
      }
      // The same bytes in `body` (the parse ran on a padded copy).
      items->push_back(body.substr(static_cast<size_t>(raw.data() - base), TrimRight(raw).size()));
    }
  }
  if (!items.has_value()) return FieldError("requests", "is required");
  if (items->empty()) return FieldError("requests", "must have at least one item");
  return *std::move(items);
}

#undef IDEM_ASSIGN_FIELD

bool IsValidJson(std::string_view bytes) {
  if (bytes.empty()) return false;
  thread_local simdjson::dom::parser kept;  // reused per thread, as above
  std::optional<simdjson::dom::parser> own;
  simdjson::dom::parser& parser = ParserFor(bytes.size(), kept, own);
  simdjson::dom::element root;
  const simdjson::error_code error = parser.parse(bytes.data(), bytes.size(), true).get(root);
  if (error == simdjson::NUMBER_ERROR || error == simdjson::NUMBER_OUT_OF_RANGE) {
    return ValidWithBigNumbers(bytes);  // numbers past double/int64
  }
  return !error;
}

std::string RawJsonOrString(std::string_view bytes) {
  std::string out;
  AppendRawJsonOrString(&out, bytes);
  return out;
}

void AppendRawJsonOrString(std::string* out, std::string_view bytes) {
  if (bytes.empty()) {
    out->append("null");
  } else if (IsValidJson(bytes)) {
    out->append(bytes);
  } else {
    AppendJsonString(out, bytes);
  }
}

namespace {

// FormatRfc3339's text of `t` in years 1970-9999 (every lease, claim and expiry),
// into `out`; false for another time. From std::chrono's calendar and written
// digit by digit: absl::FormatTime, which interprets its format and looks up the
// zone, was a third of a new key's answer (~2,900 instructions a call, callgrind).
constexpr size_t kRfc3339Bytes = 24;  // "0000-00-00T00:00:00.000Z"
bool Rfc3339Digits(absl::Time t, char (&out)[kRfc3339Bytes]) {
  constexpr int64_t kMillisPerDay = 86'400'000;
  constexpr int64_t kYear10000 = 253'402'300'800'000;  // 10000-01-01T00:00:00Z in ms
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return false;
  const int64_t ms = absl::ToUnixMillis(t);  // rounds down, as %E3S truncates
  if (ms < 0 || ms >= kYear10000) return false;
  const std::chrono::year_month_day date{
      std::chrono::sys_days{std::chrono::days{ms / kMillisPerDay}}};
  const int64_t of_day = ms % kMillisPerDay;
  std::memcpy(out, "0000-00-00T00:00:00.000Z", kRfc3339Bytes);
  auto put = [&out](size_t at, int64_t value, int width) {
    for (int i = width - 1; i >= 0; --i, value /= 10)
      out[at + i] = static_cast<char>('0' + value % 10);
  };
  put(0, static_cast<int>(date.year()), 4);
  put(5, static_cast<unsigned>(date.month()), 2);
  put(8, static_cast<unsigned>(date.day()), 2);
  put(11, of_day / 3'600'000, 2);
  put(14, of_day / 60'000 % 60, 2);
  put(17, of_day / 1'000 % 60, 2);
  put(20, of_day % 1'000, 3);
  return true;
}

}  // namespace

std::string FormatRfc3339(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return "";
  char digits[kRfc3339Bytes];
  if (Rfc3339Digits(t, digits)) return std::string(digits, kRfc3339Bytes);
  // Other years (and the floor of a time before 1970) are absl's job.
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

void AppendRfc3339(std::string* out, absl::Time t) {
  char digits[kRfc3339Bytes];
  if (Rfc3339Digits(t, digits)) {
    out->append(digits, kRfc3339Bytes);
  } else {
    out->append(FormatRfc3339(t));
  }
}

}  // namespace idem::http
