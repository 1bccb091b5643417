#include "http/server/problem.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "nlohmann/json.hpp"

namespace idem::http {

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

namespace {

// One title per problem type that idem serve's API and idem proxy both answer: a
// client matching on titles sees the same words from both.
constexpr std::pair<std::string_view, std::string_view> kSharedTitles[] = {
    {"in_progress", "Claim in progress"},
    {"fingerprint_mismatch", "Fingerprint mismatch"},
    {"expired", "Expired"},
    {"store_unavailable", "Store unavailable"},
    {"internal", "Internal error"},
};

}  // namespace

std::string_view SharedProblemTitle(std::string_view slug) {
  for (const auto& [known, canonical] : kSharedTitles) {
    if (slug == known) return canonical;
  }
  return {};
}

std::vector<std::string_view> SharedProblemTypes() {
  std::vector<std::string_view> out;
  for (const auto& entry : kSharedTitles) out.push_back(entry.first);
  return out;
}

HttpResponse ProblemResponse(const Problem& problem) {
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["type"] =
      problem.slug.empty() ? std::string("about:blank") : "urn:idem:problem:" + problem.slug;
  std::string_view title = SharedProblemTitle(problem.slug);
  if (title.empty()) title = problem.title.empty() ? ReasonPhrase(problem.status) : problem.title;
  body["title"] = std::string(title);
  body["status"] = problem.status;
  body["detail"] = problem.detail;
  if (!problem.outcome.empty()) body["outcome"] = problem.outcome;
  for (const auto& [k, v] : problem.extra.items()) body[k] = v;

  HttpResponse response;
  response.status = problem.status;
  response.content_type = "application/problem+json";
  // Details may quote client bytes; replace invalid UTF-8 rather than throw.
  response.body = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return response;
}

HttpResponse MakeProblem(int status, std::string_view slug, std::string_view title,
                         std::string_view detail, std::string_view outcome) {
  Problem p;
  p.status = status;
  p.slug = std::string(slug);
  p.title = std::string(title);
  p.detail = std::string(detail);
  p.outcome = std::string(outcome);
  return ProblemResponse(p);
}

int64_t InProgressRetryAfter(absl::Time now, absl::Time lease_until, absl::Duration most) {
  const double left = std::ceil(absl::ToDoubleSeconds(lease_until - now));
  const double cap = std::max(1.0, std::floor(absl::ToDoubleSeconds(most)));
  return static_cast<int64_t>(std::clamp(left, 1.0, cap));
}

HttpResponse MethodNotAllowed(std::string_view method, std::string_view allow) {
  HttpResponse r = MakeProblem(
      405, "", "", absl::StrCat("method ", AV(method), " is not allowed here; use ", AV(allow)));
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

HttpResponse BodyTooLarge(size_t limit) {
  return MakeProblem(413, "", "",
                     absl::StrCat("the request body is larger than ", limit, " bytes"));
}

HttpResponse BadHttp(std::string_view what) {
  return MakeProblem(400, "bad_http", "Malformed HTTP request", what);
}

HttpResponse HeaderTooLarge() {
  return MakeProblem(431, "", "", "the request header fields are too large");
}

std::string JsonString(std::string_view text) {
  std::string out;
  AppendJsonString(&out, text);
  return out;
}

void AppendJsonString(std::string* out, std::string_view text) {
  // Printable ASCII without '"' and '\\' needs no escape (names, times, tokens):
  // quoted as is, what the dump below writes for it, without building a json.
  bool plain = true;
  for (const char c : text) {
    plain = plain && c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  }
  if (plain) {
    out->reserve(out->size() + text.size() + 2);
    out->push_back('"');
    out->append(text);
    out->push_back('"');
    return;
  }
  out->append(nlohmann::json(std::string(text))
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace idem::http
