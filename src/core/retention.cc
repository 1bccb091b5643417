#include "idem/retention.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/key.h"
#include "idem/status.h"

namespace idem {

absl::Status RetentionPolicy::Add(std::string biz_type, const TtlInputs& inputs,
                                  std::optional<absl::Duration> configured,
                                  std::optional<absl::Duration> tombstone) {
  IDEM_RETURN_IF_ERROR(ValidateBizType(biz_type));
  if (by_biz_type_.contains(biz_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("retention for biz_type '", biz_type, "' is given twice"));
  }
  IDEM_ASSIGN_OR_RETURN(TtlDerivation derivation, DeriveTtl(inputs));
  if (configured.has_value()) {
    IDEM_RETURN_IF_ERROR(CheckConfiguredTtl(*configured, derivation));
  }
  BizRetention r{.derivation = derivation, .configured = configured, .tombstone = tombstone};
  // A TTL of 0 would make every record expire at its claim: never what a caller
  // means, and purge would leave the key unprotected at once.
  if (r.ttl() <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("retention for biz_type '", biz_type,
                     "': the TTL must be more than 0s (give the "
                     "windows in which a duplicate can still arrive)"));
  }
  if (tombstone.has_value() && *tombstone <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("retention for biz_type '", biz_type,
                                                   "': the tombstone period must be more than 0s"));
  }
  by_biz_type_.emplace(std::move(biz_type), std::move(r));
  return absl::OkStatus();
}

const BizRetention* RetentionPolicy::Find(std::string_view biz_type) const {
  auto it = by_biz_type_.find(biz_type);
  return it == by_biz_type_.end() ? nullptr : &it->second;
}

absl::Time RetentionPolicy::ExpiresAt(std::string_view biz_type, absl::Time claimed_at) const {
  const BizRetention* r = Find(biz_type);
  if (r == nullptr) return absl::InfiniteFuture();
  return claimed_at + r->ttl();
}

}  // namespace idem
