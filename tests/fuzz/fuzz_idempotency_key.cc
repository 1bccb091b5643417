// Fuzzes the Idempotency-Key header parser of `idem proxy` (http/proxy/proxy.h,
// ParseIdempotencyKey) with the header's value.
//
// Properties: an error is kInvalidArgument with a message; a key is non-empty,
// printable ASCII; written back as an RFC 8941 sf-string ("..." with \" and \\)
// it parses to the same key, with or without parameters after it, and so does a
// key that is a bare token.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "http/proxy/proxy.h"

namespace idem::fuzz {
namespace {

std::string SfString(std::string_view key) {
  std::string out = "\"";
  for (char c : key) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool IsBareToken(std::string_view key) {
  static constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~:/";
  for (char c : key) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && kExtra.find(c) == std::string_view::npos) return false;
  }
  return !key.empty();
}

void CheckParsesTo(const std::string& value, const std::string& key) {
  absl::StatusOr<std::string> again = http::ParseIdempotencyKey(value);
  Check(again.ok(), "a written-back key parses", value);
  Check(*again == key, "a written-back key parses to itself", value);
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  const std::string value(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::string> key = idem::http::ParseIdempotencyKey(value);
  if (!key.ok()) {
    idem::fuzz::CheckBadInput(key.status(), "ParseIdempotencyKey");
    return 0;
  }
  Check(!key->empty(), "a key is not empty");
  for (char c : *key) Check(c >= 0x20 && c <= 0x7E, "a key is printable ASCII", value);
  const std::string quoted = idem::fuzz::SfString(*key);
  idem::fuzz::CheckParsesTo(quoted, *key);
  idem::fuzz::CheckParsesTo(" " + quoted + ";a=1 ", *key);
  if (idem::fuzz::IsBareToken(*key)) idem::fuzz::CheckParsesTo(*key + ";x", *key);
  return 0;
}
