// The chaos checker: judges a run's History (history.h) and effect log
// (effect_log.h) against what the guard and the HTTP API promise, and says which promise broke
// and where. It knows nothing of faults or backends; a run that injected none and a
// run that injected thousands are judged the same way.
//
// The properties (Report::properties, in this order; the names are stable):
//   kSingleHolder   no key's effect was performed by two holders unless the later
//                   one was granted by a reported takeover (or after the earlier
//                   holder released the key with a retryable fail), and never while
//                   the earlier holder's lease was certainly still live; every
//                   effect was performed under a token its client was granted, once;
//                   and no complete was answered 200 for a token older than one
//                   already granted (a stale token accepted: fencing broken).
//   kDurable        every complete answered 200 is durable: the key's final read
//                   replays it, result byte for byte.
//   kOneResult      no key has two results: all its 200 completes sent the same
//                   result, and its final read replays one that a client sent.
//   kAllowedErrors  every answer is one the API allows for that call under faults:
//                   claim 201/200 replayed|cached_failure/409 in_progress/503,
//                   complete and fail 200/409 lease_lost/503, no answer at all
//                   (status 0: a cut connection, a killed server); anything else
//                   (400, 404, 409 key_reused or conflict, 422, 500) is a violation.
//   kConverged      every key a client touched ended with a result: its last final
//                   read answered 200 (replayed or cached_failure).
//
// Clients are assumed to behave as a takeover answer asks: a holder told of a
// takeover never releases the key with a retryable fail (it probes the effect; the
// driver performs it again), so the next holder is always told when an effect may have happened.
//
// The final reads are the History's OpKind::kReplay operations: the driver claims
// every key once more after the run, with the faults healed; the checker uses the
// last one recorded for each key.
//
// Thread safety: Check is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chaos/effect_log.h"
#include "chaos/history.h"

namespace idem::chaos {

inline constexpr std::string_view kSingleHolder = "single holder per effect";
inline constexpr std::string_view kDurable = "acked completes durable, byte-identical";
inline constexpr std::string_view kOneResult = "one result per key";
inline constexpr std::string_view kAllowedErrors = "errors the API allows";
inline constexpr std::string_view kConverged = "every key converged";

struct PropertyResult {
  std::string property;  // one of the k* names above
  int64_t checked = 0;   // how many cases the property was checked on
  int64_t violations = 0;
  std::string first_example;  // "" when there is no violation
};

struct Report {
  std::vector<PropertyResult> properties;  // all five, in the order above

  // True when no property has a violation.
  bool ok() const;
  int64_t violations() const;
  // The result for `property`; REQUIRES: it is one of the k* names.
  const PropertyResult& Get(std::string_view property) const;
  // A Markdown table: | property | checked | violations | first example |.
  std::string Table() const;
};

// Checks `history` and `effects` (see above). Times in examples are milliseconds
// since the first operation's invoke.
Report Check(const std::vector<Operation>& history, const std::vector<Effect>& effects);

}  // namespace idem::chaos
