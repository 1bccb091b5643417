#include "http/client/upstream.h"

#include <chrono>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "core/absl_compat.h"
#include "idem/key.h"
#include "idem/status.h"

namespace idem::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

bool IsHopByHopName(std::string_view name) {
  for (std::string_view h : {"connection", "keep-alive", "proxy-connection", "te", "trailer",
                             "transfer-encoding", "upgrade", "proxy-authenticate",
                             "proxy-authorization"}) {
    if (absl::EqualsIgnoreCase(AV(name), AV(h))) return true;
  }
  return false;
}

// RFC 9110 tchar: what a method and a header name are made of.
bool IsRequestToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// A CR or LF would end the line early and make what follows another header, or
// another request (request splitting); a NUL cuts it for some readers.
bool BreaksRequestLine(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

// The request Send writes, or kInvalidArgument naming the header (or the method or
// target) that would not arrive as one, whoever built it.
absl::StatusOr<bhttp::request<bhttp::string_body>> BuildUpstreamRequest(
    const UpstreamUrl& url, const HttpRequest& request, std::string_view target) {
  auto refused = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("not sent to the upstream: ", AV(what)));
  };
  if (!IsRequestToken(request.method)) {
    return refused(absl::StrCat("the method '", EscapeControl(request.method, 40),
                                "' is not a token"));
  }
  const std::string path = absl::StrCat(url.base_path, AV(target));
  if (BreaksRequestLine(path) || path.find(' ') != std::string::npos) {
    return refused(absl::StrCat("the target '", EscapeControl(path, 80),
                                "' holds a space, CR, LF or NUL"));
  }
  for (const auto& [name, value] : request.headers) {
    if (!IsRequestToken(name)) {
      return refused(absl::StrCat("the header name '", EscapeControl(name, 40),
                                  "' is not a token"));
    }
    if (BreaksRequestLine(value)) {
      return refused(absl::StrCat("the value of header '", name, "' holds CR, LF or NUL"));
    }
  }
  if (BreaksRequestLine(request.request_id)) {
    return refused("the value of header 'X-Request-Id' holds CR, LF or NUL");
  }
  if (BreaksRequestLine(url.authority)) {
    return refused("the value of header 'Host' holds CR, LF or NUL");
  }
  bhttp::request<bhttp::string_body> req;
  req.version(11);
  req.method_string(request.method);
  req.target(path);
  std::string_view connection;
  for (const auto& [name, value] : request.headers) {
    if (absl::EqualsIgnoreCase(AV(name), "connection")) connection = value;
  }
  for (const auto& [name, value] : request.headers) {
    if (IsHopByHop(name, connection) || absl::EqualsIgnoreCase(AV(name), "host") ||
        absl::EqualsIgnoreCase(AV(name), "content-length") ||
        absl::EqualsIgnoreCase(AV(name), "expect") ||
        absl::EqualsIgnoreCase(AV(name), "x-request-id")) {
      continue;
    }
    req.insert(name, value);
  }
  req.set(bhttp::field::host, url.authority);
  req.set("X-Request-Id", request.request_id);
  req.keep_alive(false);
  req.body() = request.body;
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    req.prepare_payload();
  }
  return req;
}

}  // namespace

bool IsHopByHop(std::string_view name, std::string_view connection) {
  if (IsHopByHopName(name)) return true;
  for (absl::string_view token : absl::StrSplit(AV(connection), ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(token), AV(name))) return true;
  }
  return false;
}

absl::StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url) {
  const std::string shown(url);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--upstream '", shown, "': ", AV(why), " (expected http://HOST[:PORT][/PATH])"));
  };
  if (absl::StartsWithIgnoreCase(AV(url), "https://")) {
    return bad("https is not supported; terminate TLS in front of the upstream or proxy to it "
               "over a trusted network");
  }
  if (!absl::StartsWithIgnoreCase(AV(url), "http://")) return bad("the scheme must be http://");
  std::string_view rest = url.substr(7);
  if (rest.find_first_of("?#") != std::string_view::npos) return bad("no query or fragment");
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  UpstreamUrl out;
  if (slash != std::string_view::npos) {
    out.base_path = std::string(rest.substr(slash));
    while (out.base_path.ends_with("/")) out.base_path.pop_back();
  }
  if (authority.find('@') != std::string_view::npos) return bad("no user or password");
  std::string_view port_text;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(":")) return bad("junk after the IPv6 address");
    if (!after.empty()) port_text = after.substr(1);
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return bad("no host");
  if (!port_text.empty() || authority.ends_with(":")) {
    uint32_t port = 0;
    if (port_text.find_first_not_of("0123456789") != std::string_view::npos ||
        !absl::SimpleAtoi(AV(port_text), &port) || port < 1 || port > 65535) {
      return bad("the port must be 1-65535");
    }
    out.port = static_cast<uint16_t>(port);
  }
  const bool v6 = out.host.find(':') != std::string::npos;
  out.authority = absl::StrCat(v6 ? "[" : "", out.host, v6 ? "]" : "", ":", out.port);
  return out;
}

Upstream::Upstream(UpstreamUrl url, UpstreamOptions options)
    : url_(std::move(url)), options_(options) {}

absl::StatusOr<std::string> Upstream::RequestBytes(const HttpRequest& request,
                                                   std::string_view target) const {
  absl::StatusOr<bhttp::request<bhttp::string_body>> req =
      BuildUpstreamRequest(url_, request, target);
  if (!req.ok()) return req.status();
  std::ostringstream out;
  out << *req;
  return out.str();
}

namespace {

// One exchange with the upstream: its connection and the one deadline every step
// (resolve, connect, write, each read) shares.
class UpstreamExchange {
 public:
  UpstreamExchange(const UpstreamUrl& url, const UpstreamOptions& options,
                   std::chrono::steady_clock::time_point deadline)
      : url_(url), options_(options), resolver_(ioc_), stream_(ioc_), deadline_(deadline) {}

  absl::Status TimedOut() const {
    return absl::DeadlineExceededError(absl::StrCat("the upstream did not answer within ",
                                                    absl::FormatDuration(options_.timeout),
                                                    " of the request's arrival"));
  }

  // Resolves the host and connects to it.
  absl::Status Connect() {
    asio::ip::tcp::resolver::results_type endpoints;
    resolver_.async_resolve(url_.host, std::to_string(url_.port),
                            [&](beast::error_code e, asio::ip::tcp::resolver::results_type r) {
                              endpoints = std::move(r);
                              Finish(e);
                            });
    if (!Run()) {
      if (expired_) return TimedOut();
      return absl::UnavailableError(
          absl::StrCat("cannot resolve the upstream host ", url_.host, ": ", ec_.message()));
    }
    stream_.expires_at(deadline_);
    stream_.async_connect(endpoints, Finisher{this});
    if (!Run()) {
      if (expired_ || ec_ == beast::error::timeout) return TimedOut();
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the upstream ", url_.authority, ": ", ec_.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Write(bhttp::request<bhttp::string_body>& req) {
    stream_.expires_at(deadline_);
    bhttp::async_write(stream_, req, Finisher{this});
    if (!Run()) {
      if (expired_ || ec_ == beast::error::timeout) return TimedOut();
      return absl::UnavailableError(
          absl::StrCat("the connection to the upstream broke while sending: ", ec_.message()));
    }
    return absl::OkStatus();
  }

  // Reads the answer (`head`: to a HEAD request, so without a body), then closes.
  absl::StatusOr<UpstreamResponse> Read(bool head) {
    // Read by hand, not with async_read: the reader counts the body against the
    // limit itself (Beast 1.74's body_limit misses a body that comes with the header).
    UpstreamResponseReader reader(options_.max_response_bytes, head);
    std::string chunk(64 << 10, '\0');
    size_t got = 0;
    while (!reader.done()) {
      stream_.expires_at(deadline_);
      stream_.async_read_some(asio::buffer(chunk), [&](beast::error_code e, size_t n) {
        got = n;
        Finish(e);
      });
      const bool read = Run();
      absl::Status s;
      if (read) {
        s = reader.Consume(std::string_view(chunk.data(), got));
      } else if (expired_ || ec_ == beast::error::timeout) {
        return TimedOut();
      } else if (ec_ == asio::error::eof) {
        s = reader.Finish();  // the end of a close-delimited body, or an answer cut short
      } else {
        return absl::UnavailableError(
            absl::StrCat("the connection to the upstream broke while reading: ", ec_.message()));
      }
      if (s.code() == absl::StatusCode::kResourceExhausted) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the upstream's answer is larger than --max-response (",
                         options_.max_response_bytes, " bytes): ", s.message()));
      }
      if (!s.ok()) return s;
      if (!read) break;  // EOF ended a close-delimited body
    }
    beast::error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    return reader.Take();
  }

 private:
  void Finish(beast::error_code e) {
    ec_ = e;
    done_ = true;
  }
  // The handler of a step that reports only its error (connect, write).
  struct Finisher {
    UpstreamExchange* exchange;
    template <typename... Rest>
    void operator()(beast::error_code e, Rest&&...) const {
      exchange->Finish(e);
    }
  };
  // Runs one asynchronous step to its end or to the deadline; the step's handler
  // calls Finish. False when it failed (ec_) or the deadline passed (expired_).
  bool Run() {
    ioc_.restart();
    while (!done_ && ioc_.run_one_until(deadline_) != 0) {
    }
    if (!done_) {  // the deadline passed: cancel, and let the step end
      expired_ = true;
      resolver_.cancel();
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      ioc_.restart();
      ioc_.run();
    }
    done_ = false;
    return !expired_ && !ec_;
  }

  const UpstreamUrl& url_;
  const UpstreamOptions& options_;
  asio::io_context ioc_;
  asio::ip::tcp::resolver resolver_;
  beast::tcp_stream stream_;
  const std::chrono::steady_clock::time_point deadline_;
  bool done_ = false;
  bool expired_ = false;
  beast::error_code ec_;
};

}  // namespace

absl::StatusOr<UpstreamResponse> Upstream::Send(const HttpRequest& request,
                                                std::string_view target) const {
  // Checked before any connection is made: a refused request sends nothing.
  absl::StatusOr<bhttp::request<bhttp::string_body>> built =
      BuildUpstreamRequest(url_, request, target);
  if (!built.ok()) return built.status();
  // From the request's arrival: time spent queued for a thread counts, so an answer
  // (504 at worst) comes within the timeout of the client's request, not twice it.
  const auto arrived = request.received == std::chrono::steady_clock::time_point{}
                           ? std::chrono::steady_clock::now()
                           : request.received;
  const auto deadline = arrived + absl::ToChronoNanoseconds(options_.timeout);
  UpstreamExchange exchange(url_, options_, deadline);
  if (std::chrono::steady_clock::now() >= deadline) return exchange.TimedOut();  // nothing sent
  IDEM_RETURN_IF_ERROR(exchange.Connect());
  IDEM_RETURN_IF_ERROR(exchange.Write(*built));
  return exchange.Read(request.method == "HEAD");
}

}  // namespace idem::http
