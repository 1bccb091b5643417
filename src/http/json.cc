#include "http/json.h"

#include <initializer_list>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace idem::http {
namespace {

namespace od = simdjson::ondemand;

// Rejects anything that is not one well-formed JSON object in valid UTF-8. The
// on-demand pass that follows skips over nested values without checking them, so
// this full pass is what makes the raw `result`/`error` bytes trustworthy.
absl::Status ValidateObject(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError("request body is empty; expected a JSON object");
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  auto error = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/true).get(root);
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

// Walks the members of the top-level object, calling `on_field(name, value)` for
// each; rejects duplicates and members outside `allowed`.
template <typename OnField>
absl::Status ForEachField(std::string_view body, std::initializer_list<std::string_view> allowed,
                          OnField on_field) {
  if (absl::Status s = ValidateObject(body); !s.ok()) return s;
  simdjson::padded_string padded(body);
  od::parser parser;
  od::document doc;
  od::object object;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(object)) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  std::set<std::string, std::less<>> seen;
  for (auto field_result : object) {
    od::field field;
    std::string_view name;
    if (std::move(field_result).get(field) || field.unescaped_key().get(name)) {
      return absl::InvalidArgumentError("request body has a malformed member name");
    }
    std::string name_copy(name);
    bool known = false;
    for (std::string_view a : allowed) known = known || a == name_copy;
    if (!known) return FieldError(name_copy, "is not a known field");
    if (!seen.insert(name_copy).second) return FieldError(name_copy, "appears more than once");
    if (absl::Status s = on_field(name_copy, field.value()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Require(const std::set<std::string, std::less<>>& present,
                     std::initializer_list<std::string_view> required) {
  for (std::string_view r : required) {
    if (present.find(r) == present.end()) return FieldError(r, "is required");
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
  ClaimBody out;
  std::set<std::string, std::less<>> present;
  absl::Status s =
      ForEachField(body, {"biz_type", "key", "fingerprint", "lease_ms", "wait_ms"},
                   [&](const std::string& name, od::value v) -> absl::Status {
                     present.insert(name);
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
  if (absl::Status r = Require(present, {"biz_type", "key"}); !r.ok()) return r;
  return out;
}

absl::StatusOr<CompleteBody> ParseCompleteBody(std::string_view body) {
  CompleteBody out;
  std::set<std::string, std::less<>> present;
  absl::Status s = ForEachField(body, {"biz_type", "key", "token", "result"},
                                [&](const std::string& name, od::value v) -> absl::Status {
                                  present.insert(name);
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
  if (absl::Status r = Require(present, {"biz_type", "key", "token", "result"}); !r.ok()) {
    return r;
  }
  return out;
}

absl::StatusOr<FailBody> ParseFailBody(std::string_view body) {
  FailBody out;
  std::set<std::string, std::less<>> present;
  absl::Status s = ForEachField(body, {"biz_type", "key", "token", "retryable", "error"},
                                [&](const std::string& name, od::value v) -> absl::Status {
                                  present.insert(name);
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
  if (absl::Status r = Require(present, {"biz_type", "key", "token", "retryable", "error"});
      !r.ok()) {
    return r;
  }
  return out;
}

#undef IDEM_ASSIGN_FIELD

bool IsValidJson(std::string_view bytes) {
  if (bytes.empty()) return false;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  return !parser.parse(bytes.data(), bytes.size(), true).get(root);
}

std::string RawJsonOrString(std::string_view bytes) {
  if (bytes.empty()) return "null";
  if (IsValidJson(bytes)) return std::string(bytes);
  return JsonString(bytes);
}

std::string JsonString(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FormatRfc3339(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

}  // namespace idem::http
