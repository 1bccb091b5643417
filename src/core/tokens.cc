#include "core/random_token.h"

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

}  // namespace idem
