// RetentionWatch: the biz_types whose records `idem serve` keeps until someone
// purges them by hand, because the configuration gives them no retention (no
// [retention.<biz_type>] section: a new record's expires_at is never). biz_types are
// the clients' choice and not known before they claim, so each is found by the
// first claim that creates a record of it: logged once, as an info (saying how to
// give it a retention; the gauge is what alerts use), and counted in
//
//   idem_biz_types_without_retention   gauge   such biz_types seen since the start
//
// exported at 0 from the start. At most kMaxBizTypes names are kept (a client
// choosing biz_types cannot grow memory or the log): past them one line says so and
// the gauge stays at kMaxBizTypes.
//
// Cost: OnNewRecord (a claim that created a record: a store write) takes a shared
// lock and one set lookup, and the exclusive lock only for a biz_type not seen yet.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace idem::http {

class RetentionWatch {
 public:
  static constexpr size_t kMaxBizTypes = 256;

  // A claim created a record of `biz_type` that expires at `expires_at`
  // (absl::InfiniteFuture(): kept until purged by hand).
  void OnNewRecord(std::string_view biz_type, absl::Time expires_at);

  // biz_types seen without a retention (at most kMaxBizTypes).
  size_t count() const;

  // The exposition text of idem_biz_types_without_retention.
  std::string Render() const;

 private:
  mutable absl::Mutex mu_;
  std::set<std::string, std::less<>> without_ ABSL_GUARDED_BY(mu_);
  bool full_ ABSL_GUARDED_BY(mu_) = false;  // a biz_type past kMaxBizTypes was seen
};

}  // namespace idem::http
