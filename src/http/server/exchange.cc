#include "http/server/exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "http/server/problem.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

// The first transfer-coding of a Transfer-Encoding value other than chunked
// (lower case), or "" when there is none.
std::string UnsupportedCoding(std::string_view value) {
  for (absl::string_view coding :
       absl::StrSplit(absl::string_view(value.data(), value.size()), ',')) {
    std::string c = absl::AsciiStrToLower(absl::StripAsciiWhitespace(coding));
    if (const size_t semi = c.find(';'); semi != std::string::npos) c = c.substr(0, semi);
    if (!c.empty() && c != "chunked") return c;
  }
  return "";
}

}  // namespace

std::string RequestIdFrom(std::string_view given) {
  std::string id;
  SetRequestIdFrom(id, given);
  return id;
}

void SetRequestIdFrom(std::string& out, std::string_view given) {
  bool ok = !given.empty() && given.size() <= 128;
  for (char c : given) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                c == ':' || c == '-');
  }
  if (ok) {
    out.assign(given);
    return;
  }
  thread_local std::mt19937_64 random(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  out.assign(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = random();
    for (int i = 0; i < 16; ++i, bits >>= 4) out[half * 16 + i] = kHex[bits & 0xf];
  }
}

std::string OriginForm(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() ||
        !absl::EqualsIgnoreCase(absl::string_view(target.data(), scheme.size()),
                                absl::string_view(scheme.data(), scheme.size()))) {
      continue;
    }
    const size_t path = target.find_first_of("/?", scheme.size());
    if (path == std::string_view::npos) return "/";
    std::string out(target.substr(path));
    if (out.front() == '?') out.insert(0, "/");
    return out;
  }
  return std::string(target);
}

std::optional<HttpResponse> RefuseHeader(int hosts, std::string_view transfer_encoding) {
  // Two Host fields leave the request's authority ambiguous, and a server MUST
  // answer 400 (RFC 9112 §3.2); a proxy that read one and forwarded both could be
  // steered by whichever one the next hop reads.
  if (hosts > 1) return BadHttp("the request has more than one Host header");
  // Only chunked is a transfer-coding this server decodes; a body in another one
  // (gzip, deflate, …) would reach the API still encoded (RFC 9112 §6.1: 501).
  if (std::string coding = UnsupportedCoding(transfer_encoding); !coding.empty()) {
    return MakeProblem(501, "unsupported_transfer_coding", "Not Implemented",
                       absl::StrCat("transfer-coding \"", coding,
                                    "\" is not supported; send the body plainly "
                                    "(Content-Length) or chunked"));
  }
  return std::nullopt;
}

std::string BusyAnswer() {
  const std::string id = RequestIdFrom("");
  const std::string body = absl::StrCat(
      "{\"type\":\"about:blank\",\"title\":\"Too many connections\",\"status\":503,"
      "\"detail\":\"the server has as many connections open as it serves; retry shortly\","
      "\"request_id\":\"",
      id, "\"}");
  return absl::StrCat(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
      "Retry-After: 1\r\nConnection: close\r\nX-Request-Id: ",
      id, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

int ShedBacklog(int listener, int* spare_fd, Metrics& metrics) {
  if (*spare_fd < 0) return 0;
  ::close(*spare_fd);
  *spare_fd = -1;
  int shed = 0;
  for (; shed < 256; ++shed) {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    const std::string answer = BusyAnswer();
    // Best effort: a full send buffer or a gone client only loses this answer.
    (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    metrics.CountRefused(Refusal::kFdExhausted);
  }
  *spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return shed;
}

void CountAndLogAnswer(Metrics& metrics, const Reply& reply, std::string_view method,
                       std::string_view request_id, std::chrono::steady_clock::time_point started) {
  // Counted when the answer is handed to the socket, not when the write completes:
  // a client that has read it and asks /metrics next finds it counted.
  const auto latency = std::chrono::steady_clock::now() - started;
  metrics.CountRequest(reply.route, reply.response.status, reply.outcome,
                       std::chrono::duration_cast<std::chrono::nanoseconds>(latency));
  if (spdlog::should_log(spdlog::level::info)) {
    const double ms = std::chrono::duration<double, std::milli>(latency).count();
    spdlog::info(
        "access method={} route={} status={} outcome={} latency_ms={:.3f} tenant={} "
        "request_id={}",
        method, RouteName(reply.route), reply.response.status,
        reply.outcome.empty() ? "-" : reply.outcome, ms, reply.tenant.empty() ? "-" : reply.tenant,
        request_id);
  }
}

}  // namespace idem::http
