#include "idem/fingerprint.h"

#include <openssl/evp.h>

#include "core/absl_compat.h"
#include "absl/strings/escaping.h"

namespace idem {

std::string Fingerprint(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest with SHA-256 cannot fail for in-memory input short of allocation
  // failure, which OpenSSL reports by returning 0; an empty digest then fails every
  // comparison rather than matching.
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    return std::string();
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(len)));
}

}  // namespace idem
