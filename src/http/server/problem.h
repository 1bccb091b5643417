// RFC 9457 problem details: the body of every 4xx/5xx answer of `idem serve`.
//
// `type` is "about:blank" for plain HTTP conditions (unknown route, wrong method,
// missing token, oversized body), whose `title` is then the status's reason phrase,
// and "urn:idem:problem:<slug>" for idem's own conditions (in_progress, key_reused,
// fingerprint_mismatch, lease_lost, invalid_request, store_unavailable, ...).
// Where a guard outcome applies, the body also carries "outcome".
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "http/types.h"
#include "nlohmann/json.hpp"

namespace idem::http {

struct Problem {
  int status = 500;
  std::string slug;   // empty: about:blank
  std::string title;  // empty: the reason phrase of `status`
  std::string detail;
  std::string outcome;  // empty: no "outcome" member
  // Extension members merged into the body (e.g. "lease_until").
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// Returns the standard reason phrase of `status` ("Not Found"), or "Unknown".
std::string_view ReasonPhrase(int status);

// The title of a problem type idem serve's API and idem proxy both answer
// (in_progress, fingerprint_mismatch, expired, store_unavailable, internal), or ""
// for any other slug. Such a type always gets this title, whatever Problem::title
// or MakeProblem's `title` says.
std::string_view SharedProblemTitle(std::string_view slug);
// Those slugs, for tests.
std::vector<std::string_view> SharedProblemTypes();

// Renders `problem` as an application/problem+json response.
HttpResponse ProblemResponse(const Problem& problem);

// Shorthand for ProblemResponse({status, slug, title, detail, outcome}).
HttpResponse MakeProblem(int status, std::string_view slug, std::string_view title,
                         std::string_view detail, std::string_view outcome = {});

// How long a client told 409 in_progress should wait before it asks again (a
// Retry-After hint polite clients follow; --retry-after-max): most effects finish
// in well under a second, so it asks soon. The holder's lease is for crash
// recovery (how long until another claim may take the key over), not a polling
// interval, and a lease of 30 s or 60 s as the hint would keep a client waiting
// that long for an answer ready after 100 ms.
inline constexpr absl::Duration kDefaultRetryAfterMax = absl::Seconds(1);
inline constexpr absl::Duration kLongestRetryAfterMax = absl::Hours(1);

// The Retry-After of a 409 in_progress, in whole seconds: the time left until
// `lease_until`, rounded up, at least 1 and at most `most` (whole seconds, >= 1).
int64_t InProgressRetryAfter(absl::Time now, absl::Time lease_until, absl::Duration most);

// A 405 problem for `method`, with the Allow header naming `allow`.
HttpResponse MethodNotAllowed(std::string_view method, std::string_view allow);

// Answers for conditions found before a request reaches its Handler (the server's
// parser), and the API's own body limit: 413 body too large, 400 malformed HTTP,
// 431 header too large.
HttpResponse BodyTooLarge(size_t limit);
HttpResponse BadHttp(std::string_view what);
HttpResponse HeaderTooLarge();

// Returns `text` as a JSON string literal, quotes included; invalid UTF-8 is replaced
// by U+FFFD. (The JSON text every role writes: the API's answers, the proxy's stored
// responses.)
std::string JsonString(std::string_view text);
// The same, appended to `*out`.
void AppendJsonString(std::string* out, std::string_view text);

}  // namespace idem::http
