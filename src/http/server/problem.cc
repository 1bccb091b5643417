#include "http/server/problem.h"

#include <string>

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

HttpResponse ProblemResponse(const Problem& problem) {
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["type"] =
      problem.slug.empty() ? std::string("about:blank") : "urn:idem:problem:" + problem.slug;
  body["title"] = problem.title.empty() ? std::string(ReasonPhrase(problem.status)) : problem.title;
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

namespace {

std::string_view ProblemTitle(std::string_view slug, std::string_view title) {
  // One title per problem type, whichever handler (idem serve's API, idem proxy)
  // answers it: a client matching on titles sees the same words from both.
  static constexpr std::pair<std::string_view, std::string_view> kTitles[] = {
      {"fingerprint_mismatch", "Fingerprint mismatch"},
      {"expired", "Expired"},
      {"store_unavailable", "Store unavailable"},
      {"internal", "Internal error"},
  };
  for (const auto& [known, canonical] : kTitles) {
    if (slug == known) return canonical;
  }
  return title;
}

}  // namespace

HttpResponse MakeProblem(int status, std::string_view slug, std::string_view title,
                         std::string_view detail, std::string_view outcome) {
  Problem p;
  p.status = status;
  p.slug = std::string(slug);
  p.title = std::string(ProblemTitle(slug, title));
  p.detail = std::string(detail);
  p.outcome = std::string(outcome);
  return ProblemResponse(p);
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
