#include "core/tokens.h"

#include <sys/random.h>
#include <sys/types.h>

#include <cstddef>

namespace idem {

bool NewToken(std::string* out) {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->clear();
  for (unsigned char b : bytes) {
    *out += kHex[b >> 4];
    *out += kHex[b & 0xF];
  }
  return true;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace idem
