#include "idem/key.h"

#include "core/absl_compat.h"
#include "absl/strings/str_cat.h"

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

}  // namespace idem
