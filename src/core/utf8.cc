#include "core/utf8.h"

#include <cstdint>
#include <cstring>

namespace idem {
namespace {
constexpr uint64_t kHighBits = 0x8080808080808080ULL;
}  // namespace

size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto c = static_cast<unsigned char>(s[0]);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  const auto second = static_cast<unsigned char>(s[1]);
  if (second < lo || second > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII eight bytes at a time: keys, amounts and times usually are ASCII.
    uint64_t word;
    while (i + 8 <= s.size() && (std::memcpy(&word, s.data() + i, 8), word & kHighBits) == 0) {
      i += 8;
    }
    if (i == s.size()) break;
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace idem
