#include "idem/fingerprint.h"

#include <openssl/evp.h>

#include <memory>

#include "core/absl_compat.h"
#include "absl/strings/escaping.h"

namespace idem {
namespace {

// OpenSSL 3 looks the algorithm up (a global lock and a property query) on every
// EVP_Digest(…, EVP_sha256(), …) call: that lookup cost more than the hash itself
// on the duplicate path (a profile of `idem serve` showed 15 % of all instructions
// in Fingerprint). The algorithm is fetched once; each thread keeps one context.
const EVP_MD* Sha256() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

struct ContextDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

EVP_MD_CTX* ThreadContext() {
  thread_local std::unique_ptr<EVP_MD_CTX, ContextDeleter> ctx(EVP_MD_CTX_new());
  return ctx.get();
}

}  // namespace

std::string Fingerprint(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // SHA-256 over memory cannot fail short of allocation failure, which OpenSSL
  // reports by returning 0; an empty digest then fails every comparison rather
  // than matching.
  const EVP_MD* md = Sha256();
  EVP_MD_CTX* ctx = ThreadContext();
  if (md == nullptr || ctx == nullptr || EVP_DigestInit_ex2(ctx, md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx, digest, &len) != 1) {
    return std::string();
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(len)));
}

}  // namespace idem
