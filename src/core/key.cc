#include "idem/key.h"

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/utf8.h"

namespace idem {
namespace {

absl::Status ValidateName(std::string_view what, std::string_view value, size_t max_bytes) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("InvalidKey: ", AV(what), " is empty"));
  }
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("InvalidKey: ", AV(what), " is ", value.size(),
                                                   " bytes, over the limit of ", max_bytes));
  }
  return absl::OkStatus();
}

bool IsControlByte(unsigned char c) { return c < 0x20 || c == 0x7F; }

// The length of the valid UTF-8 sequence that starts at s[i] (a byte >= 0x80), or 0.
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                           : c >= 0xF0 && c <= 0xF4 ? 4
                                                                    : 0;
  if (n == 0 || i + n > s.size() || !IsUtf8(s.substr(i, n))) return 0;
  return n;
}

// U+0080-U+009F: C1 controls, which a terminal may read as CSI and friends.
bool IsC1(std::string_view s, size_t i) {
  return static_cast<unsigned char>(s[i]) == 0xC2 && i + 1 < s.size() &&
         static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

}  // namespace

absl::Status ValidateKey(std::string_view key, const KeyLimits& limits) {
  return ValidateName("key", key, limits.max_key_bytes);
}

absl::Status ValidateBizType(std::string_view biz_type, const KeyLimits& limits) {
  return ValidateName("biz_type", biz_type, limits.max_biz_type_bytes);
}

absl::Status ValidateTenant(std::string_view tenant, const KeyLimits& limits) {
  return ValidateName("tenant", tenant, limits.max_tenant_bytes);
}

absl::Status ValidateFieldValue(std::string_view what, std::string_view value,
                                size_t max_bytes) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(AV(what), " is empty"));
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(AV(what), " is ", value.size(),
                                                   " bytes, over the limit of ", max_bytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (IsControlByte(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          AV(what), " holds the control character ", EscapeControl(value.substr(i, 1)),
          " at byte ", i,
          ": CR, LF, NUL and the other control characters cannot go into a header or a log "
          "line"));
    }
  }
  if (value.front() == ' ' || value.back() == ' ') {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what),
                     " starts or ends with a space, which an HTTP header loses (it would arrive "
                     "as another value)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateHeaderKey(std::string_view key, const KeyLimits& limits) {
  return ValidateFieldValue("key", key, limits.max_key_bytes);
}

bool NeedsEscape(std::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c == '\\' || IsControlByte(c)) return true;
    if (c < 0x80) continue;
    const size_t n = Utf8SequenceAt(value, i);
    if (n == 0 || IsC1(value, i)) return true;
    i += n - 1;
  }
  return false;
}

std::string EscapeControl(std::string_view value, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const std::string_view shown = value.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size());
  auto hex = [&](unsigned char c) {
    out += "\\x";
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  };
  for (size_t i = 0; i < shown.size(); ++i) {
    const auto c = static_cast<unsigned char>(shown[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsControlByte(c)) {
      hex(c);
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (const size_t n = Utf8SequenceAt(shown, i); n == 0) {
      hex(c);  // not UTF-8 (or cut by max_bytes): one byte at a time
    } else if (IsC1(shown, i)) {
      hex(c);
      hex(static_cast<unsigned char>(shown[i + 1]));
      ++i;
    } else {
      out.append(shown.substr(i, n));
      i += n - 1;
    }
  }
  if (shown.size() < value.size()) out += "…";
  return out;
}

}  // namespace idem
