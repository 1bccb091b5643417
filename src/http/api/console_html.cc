#include "http/api/console_html.h"

#include <cstdint>

#include "core/utf8.h"
#include "nlohmann/json.hpp"

namespace idem::http {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string FormDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 &&
               HexDigit(s[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

void AppendHtml(std::string& out, std::string_view text) {
  out.reserve(out.size() + text.size());
  while (!text.empty()) {
    const char c = text[0];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: {
        const auto u = static_cast<uint8_t>(c);
        if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7F) {
          out += kReplacement;
          break;
        }
        const size_t n = Utf8SequenceLength(text);
        if (n == 0) {
          out += kReplacement;
          break;
        }
        out.append(text.substr(0, n));
        text.remove_prefix(n);
        continue;
      }
    }
    text.remove_prefix(1);
  }
}

std::string Html(std::string_view text) {
  std::string out;
  AppendHtml(out, text);
  return out;
}

std::string UrlEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size());
  for (char c : bytes) {
    const auto u = static_cast<uint8_t>(c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out;
}

std::map<std::string, std::string, std::less<>> ParseForm(std::string_view body) {
  std::map<std::string, std::string, std::less<>> out;
  while (!body.empty()) {
    const size_t amp = body.find('&');
    const std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string name = FormDecode(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? std::string() : FormDecode(pair.substr(eq + 1));
    out.try_emplace(std::move(name), std::move(value));
  }
  return out;
}

std::string_view CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view pair = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
  }
  return {};
}

std::string PrettyJson(std::string_view json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::string(json);
  // Invalid UTF-8 inside a string is shown as U+FFFD, as AppendHtml would.
  return parsed.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace idem::http
