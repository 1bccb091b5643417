#include "http/api/retention_watch.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "spdlog/spdlog.h"

namespace idem::http {

void RetentionWatch::OnNewRecord(std::string_view biz_type, absl::Time expires_at) {
  if (expires_at != absl::InfiniteFuture()) return;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (full_ || without_.find(biz_type) != without_.end()) return;
  }
  absl::MutexLock lock(&mu_);
  if (full_ || without_.find(biz_type) != without_.end()) return;
  if (without_.size() == kMaxBizTypes) {
    full_ = true;
    spdlog::warn("retention: more than {} biz_types keep their records until purged; no more "
                 "are logged, and idem_biz_types_without_retention stays at {}",
                 kMaxBizTypes, kMaxBizTypes);
    return;
  }
  without_.emplace(biz_type);
  // Escaped: the name is the client's choice.
  const std::string name = absl::CHexEscape(AV(biz_type));
  spdlog::info("retention: biz_type \"{}\" has no retention, so its records are kept until "
               "purged; to set one, add a [retention.{}] section to the config file "
               "(docs/retention.md)",
               name, name);
}

size_t RetentionWatch::count() const {
  absl::ReaderMutexLock lock(&mu_);
  return without_.size();
}

std::string RetentionWatch::Render() const {
  return absl::StrCat(
      "# HELP idem_biz_types_without_retention biz_types whose records were created since the "
      "start with no retention (no [retention.<biz_type>] section): kept until purged.\n"
      "# TYPE idem_biz_types_without_retention gauge\n"
      "idem_biz_types_without_retention ",
      count(), "\n");
}

}  // namespace idem::http
