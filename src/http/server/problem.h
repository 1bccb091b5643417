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
#include <string>
#include <string_view>

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

// Renders `problem` as an application/problem+json response.
HttpResponse ProblemResponse(const Problem& problem);

// Shorthand for ProblemResponse({status, slug, title, detail, outcome}). A problem
// type idem serve's API and idem proxy both answer (fingerprint_mismatch, expired,
// store_unavailable, internal) gets its one title, whatever `title` says.
HttpResponse MakeProblem(int status, std::string_view slug, std::string_view title,
                         std::string_view detail, std::string_view outcome = {});

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
