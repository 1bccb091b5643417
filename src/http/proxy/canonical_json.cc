#include "http/proxy/canonical_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "simdjson.h"

namespace idem::http {
namespace {

namespace dom = simdjson::dom;

// The UTF-16 code units of UTF-8 text (already validated by the parser).
std::u16string Utf16(std::string_view s) {
  std::u16string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    int n = 0;
    if (c < 0x80) {
      cp = c, n = 1;
    } else if ((c >> 5) == 0x6) {
      cp = c & 0x1F, n = 2;
    } else if ((c >> 4) == 0xE) {
      cp = c & 0x0F, n = 3;
    } else {
      cp = c & 0x07, n = 4;
    }
    for (int k = 1; k < n && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    i += n;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out += static_cast<char16_t>(0xD800 + (cp >> 10));
      out += static_cast<char16_t>(0xDC00 + (cp & 0x3FF));
    } else {
      out += static_cast<char16_t>(cp);
    }
  }
  return out;
}

void AppendString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 0xF];
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

// ECMAScript's Number::toString (ECMA-262 §6.1.6.1.20) of a finite double, which
// RFC 8785 §3.2.2.3 prescribes: the shortest digits that round-trip, in fixed
// notation for exponents from -6 to 20, else as d.ddde±n.
void AppendNumber(std::string* out, double v) {
  if (v == 0) {  // also -0
    *out += '0';
    return;
  }
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));  // "-d.ddde+XX"
  if (sci.front() == '-') {
    *out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // v = 0.digits × 10^n
  if (k <= n && n <= 21) {
    *out += digits;
    out->append(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out->append(digits, 0, static_cast<size_t>(n));
    *out += '.';
    out->append(digits, static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    *out += "0.";
    out->append(static_cast<size_t>(-n), '0');
    *out += digits;
  } else {
    *out += digits[0];
    if (k > 1) {
      *out += '.';
      out->append(digits, 1);
    }
    *out += 'e';
    *out += n - 1 < 0 ? '-' : '+';
    *out += std::to_string(std::abs(n - 1));
  }
}

bool Append(std::string* out, dom::element e) {
  switch (e.type()) {
    case dom::element_type::OBJECT: {
      std::vector<std::pair<std::u16string, dom::key_value_pair>> members;
      for (dom::key_value_pair field : dom::object(e)) {
        members.emplace_back(Utf16(field.key), field);
      }
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      *out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0 && members[i].first == members[i - 1].first) return false;  // duplicate
        if (i > 0) *out += ',';
        AppendString(out, members[i].second.key);
        *out += ':';
        if (!Append(out, members[i].second.value)) return false;
      }
      *out += '}';
      return true;
    }
    case dom::element_type::ARRAY: {
      *out += '[';
      bool first = true;
      for (dom::element item : dom::array(e)) {
        if (!first) *out += ',';
        first = false;
        if (!Append(out, item)) return false;
      }
      *out += ']';
      return true;
    }
    case dom::element_type::STRING:
      AppendString(out, std::string_view(e.get_string().value_unsafe()));
      return true;
    case dom::element_type::INT64:
      AppendNumber(out, static_cast<double>(e.get_int64().value_unsafe()));
      return true;
    case dom::element_type::UINT64:
      AppendNumber(out, static_cast<double>(e.get_uint64().value_unsafe()));
      return true;
    case dom::element_type::DOUBLE: {
      const double d = e.get_double().value_unsafe();
      if (!std::isfinite(d)) return false;
      AppendNumber(out, d);
      return true;
    }
    case dom::element_type::BOOL:
      *out += e.get_bool().value_unsafe() ? "true" : "false";
      return true;
    case dom::element_type::NULL_VALUE:
      *out += "null";
      return true;
    default:
      return false;  // a number too big for a double (simdjson's big integers)
  }
}

}  // namespace

std::optional<std::string> CanonicalJson(std::string_view json) {
  dom::parser parser;
  simdjson::padded_string padded(json);
  dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return std::nullopt;
  std::string out;
  out.reserve(json.size());
  if (!Append(&out, root)) return std::nullopt;
  return out;
}

}  // namespace idem::http
