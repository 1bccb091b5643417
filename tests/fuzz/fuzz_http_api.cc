// Fuzzes the request path of the `idem serve` API (http/api/api.h) in process, as
// the server drives it (http/server/connection.cc) but without sockets: Begin, then
// the Call's BeforeBody when a body comes, AnswerWithoutBlocking, then Answer, and
// the waiting claim's Poll while it waits,
// over a fresh memory:// store and a fake clock for each input.
//
// Input: requests separated by a line "%%". Each is HTTP-like: "METHOD TARGET",
// then header lines "Name: value" ("Authorization" becomes the bearer token,
// "X-Advance-Ms" moves the fake clock before the request), an empty line, and
// the body. The tenants are acme (token tok-a) and beta (tok-b); biz_type "low"
// fails open. Every route of docs/openapi.yaml is in the seeds.
//
// Properties: no answer is a 500 (Api::Answer turns an escaped exception into
// one; memory:// never fails, so neither is a 503); every status is 2xx..4xx; a
// JSON or problem+json body is valid JSON by RFC 8259 (a number too big for a
// double is valid: idem replays results byte for byte), and a problem's "status"
// is the HTTP status; every outcome answered is one Metrics names (none counted as "other");
// a waiting claim ends within its wait; PercentDecode of the percent-encoded
// bytes of any path gives the bytes back.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"
#include "http/api/api.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "testing/fake_clock.h"

namespace idem::fuzz {
namespace {

struct Parsed {
  http::HttpRequest request;
  int64_t advance_ms = 0;
};

Parsed ParseRequest(std::string_view text) {
  Parsed p;
  const size_t end_of_head = text.find("\n\n");
  std::string_view head = text.substr(0, end_of_head);
  if (end_of_head != std::string_view::npos) p.request.body = std::string(text.substr(end_of_head + 2));
  const size_t nl = head.find('\n');
  std::string_view line = head.substr(0, nl);
  head = nl == std::string_view::npos ? std::string_view() : head.substr(nl + 1);
  const size_t sp = line.find(' ');
  p.request.method = std::string(line.substr(0, sp));
  p.request.target = sp == std::string_view::npos ? "" : std::string(line.substr(sp + 1));
  while (!head.empty()) {
    const size_t e = head.find('\n');
    std::string_view h = head.substr(0, e);
    head = e == std::string_view::npos ? std::string_view() : head.substr(e + 1);
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name(h.substr(0, colon));
    const std::string value(SV(absl::StripAsciiWhitespace(AV(h.substr(colon + 1)))));
    if (absl::EqualsIgnoreCase(AV(name), "authorization")) {
      p.request.authorization = value;
    } else if (absl::EqualsIgnoreCase(AV(name), "x-advance-ms")) {
      int64_t ms = 0;
      if (absl::SimpleAtoi(AV(value), &ms) && ms >= 0 && ms <= int64_t{86400000} * 365) {
        p.advance_ms = ms;
      }
    }
    p.request.headers.emplace_back(name, value);
  }
  p.request.request_id = "fuzz";
  return p;
}

// True when `t` is a number by RFC 8259's grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
// A copy of what src/http/api/json.cc's IsNumberToken does, on purpose: the oracle does
// not trust the code whose output it checks.
bool IsJsonNumber(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i > from;
  };
  if (i < t.size() && t[i] == '-') ++i;
  if (i < t.size() && t[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size();
}

// `json` with every number outside a string that overflows a double replaced by 0,
// or nullopt when a number breaks RFC 8259's grammar. nlohmann refuses such a
// number ("number overflow", out_of_range.406), which the RFC's grammar allows and
// idem stores and replays byte for byte (ServeTest.BigNumbersInAResultAreStored...):
// so the numbers' grammar is checked here and nlohmann checks the rest.
std::optional<std::string> WithBigNumbersAsZero(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false;
  for (size_t i = 0; i < json.size();) {
    const char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size()) {
        out += json[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
    } else if (c == '"') {
      in_string = true;
      out += c;
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i;
      while (end < json.size() &&
             std::string_view("0123456789+-.eE").find(json[end]) != std::string_view::npos) {
        ++end;
      }
      const std::string token(json.substr(i, end - i));
      if (!IsJsonNumber(token)) return std::nullopt;
      out += std::isfinite(std::strtod(token.c_str(), nullptr)) ? token : std::string("0");
      i = end;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

void CheckResponse(const http::HttpResponse& r, std::string_view target) {
  Check(r.status != 500, "no request makes idem fail (500)", r.body);
  Check(r.status != 503, "memory:// never fails: no 503", r.body);
  Check(r.status >= 200 && r.status < 500, "a status is 2xx..4xx", target);
  const bool problem = r.content_type == "application/problem+json";
  if (problem || r.content_type == "application/json") {
    const std::optional<std::string> shape = WithBigNumbersAsZero(r.body);
    Check(shape.has_value(), "a JSON body's numbers follow RFC 8259's grammar", r.body);
    nlohmann::json body = nlohmann::json::parse(*shape, nullptr, /*allow_exceptions=*/false);
    Check(!body.is_discarded(), "a JSON body is valid JSON", r.body);
    if (problem) {
      Check(body.is_object() && body.contains("status") && body["status"] == r.status,
            "a problem's status is the HTTP status", r.body);
    }
  }
  if (r.status >= 400) Check(problem, "every 4xx body is problem+json", r.body);
}

// Every byte as %XX, then back.
void CheckPercentRoundTrip(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  for (unsigned char c : bytes) {
    encoded += '%';
    encoded += kHex[c >> 4];
    encoded += kHex[c & 0xF];
  }
  absl::StatusOr<std::string> decoded = http::PercentDecode(encoded);
  Check(decoded.ok() && *decoded == bytes, "PercentDecode undoes percent-encoding");
  absl::StatusOr<std::string> raw = http::PercentDecode(bytes);
  if (!raw.ok()) CheckBadInput(raw.status(), "PercentDecode");
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  namespace http = idem::http;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore("memory://");
  Check(store.ok(), "memory:// opens");
  idem::testing::FakeClock clock;
  idem::Guard guard(**store, idem::GuardOptions{.clock = &clock});
  http::Metrics metrics;
  http::ApiOptions options;
  options.tenants = {http::Tenant::WithToken("acme", "tok-a"),
                     http::Tenant::WithToken("beta", "tok-b")};
  options.clock = &clock;
  options.max_body_bytes = 4096;
  options.fail_open = {"low"};
  // At most 16 requests an input: small key-health tables (the defaults are sized
  // for a server, and clearing them would be most of each run).
  options.key_health.fingerprint_slots = 64;
  options.key_health.mismatch_slots = 16;
  http::Api api(guard, **store, metrics, options);

  size_t at = 0;
  for (int n = 0; n < 16 && at <= input.size(); ++n) {
    size_t sep = input.find("\n%%\n", at);
    const std::string_view text = input.substr(at, sep == std::string_view::npos ? sep : sep - at);
    at = sep == std::string_view::npos ? input.size() + 1 : sep + 4;
    idem::fuzz::Parsed p = idem::fuzz::ParseRequest(text);
    clock.Advance(absl::Milliseconds(p.advance_ms));
    idem::fuzz::CheckPercentRoundTrip(p.request.target);

    std::optional<http::Reply> reply;
    http::HttpRequest head = p.request;  // what the server has when the header is in
    head.body.clear();
    std::unique_ptr<http::Handler::Call> call = api.Begin(std::move(head));
    if (!p.request.body.empty()) reply = call->BeforeBody();
    call->request().body = p.request.body;
    if (!reply.has_value()) reply = call->AnswerWithoutBlocking();
    if (!reply.has_value()) reply = call->Answer();
    // A waiting claim polls (the fake clock moving as the server's timer would)
    // until it is answered; its wait is at most 30 s (wait_ms's bound).
    const absl::Time wait_start = clock.Now();
    while (reply->waiting != nullptr) {
      Check(clock.Now() - wait_start <= absl::Seconds(31), "a waiting claim ends within 30 s");
      clock.Advance(reply->poll_after);
      std::shared_ptr<const http::Waiting> waiting = reply->waiting;
      reply = waiting->Poll();
    }
    idem::fuzz::CheckResponse(reply->response, p.request.target);
    metrics.CountRequest(reply->route, reply->response.status, reply->outcome,
                         std::chrono::nanoseconds(0));
    Check(metrics.outcomes("other") == 0, "every outcome answered is one Metrics names",
          reply->outcome);
  }
  return 0;
}
