// idem-test-upstream: a small real HTTP/1.1 server for the proxy tests (a process
// of its own, so the proxy talks to it over TCP as to any API). Prints "listening on
// 127.0.0.1:PORT" first, then serves until killed, one thread per connection.
//
//   POST|PATCH|PUT|DELETE /anything?status=N&delay_ms=M&fail_first=K&big=B&drop=1
//     performs an "effect" (counted per path), sleeps M ms, then answers N (default
//     201; 503 for the first K requests to that path) with X-Effect: <count>,
//     Set-Cookie, two Link headers and {"effect":<count>,"path":…,"body":…} (or B
//     bytes of 'x'); drop=1 closes the connection without an answer.
//     With big=B&framing=length|chunked|close the B bytes are streamed instead, in
//     64 KiB pieces, until the reader closes: with a Content-Length (its first piece
//     in the same write as the header), chunked, or delimited by closing.
//     Under /auth/TOKEN/ a request without "Authorization: Bearer TOKEN" performs
//     nothing and is answered 401 with kUnauthorizedBody (control characters and
//     more than 200 bytes, for the callers that show the first bytes of a refusal).
//   GET|HEAD /count  → {"effects":<total>}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// The body of a 401 under /auth/TOKEN/: a CR LF and an escape sequence (which a
// caller showing it must escape), then 300 bytes of 'x'.
const std::string kUnauthorizedBody =
    "{\"error\":\"unauthorized\"}\r\nX-Forged: 1\x1b[2J" + std::string(300, 'x');

// The token a path under /auth/TOKEN/ needs, or "" for any other path.
std::string RequiredToken(const std::string& path) {
  if (path.rfind("/auth/", 0) != 0) return "";
  const size_t end = path.find('/', 6);
  return path.substr(6, end == std::string::npos ? std::string::npos : end - 6);
}

std::mutex mu;
std::map<std::string, int> per_path;
int total = 0;

std::string Param(const std::string& query, const std::string& name) {
  size_t at = 0;
  while (at < query.size()) {
    size_t amp = query.find('&', at);
    if (amp == std::string::npos) amp = query.size();
    const std::string item = query.substr(at, amp - at);
    if (item.rfind(name + "=", 0) == 0) return item.substr(name.size() + 1);
    at = amp + 1;
  }
  return "";
}

int IntParam(const std::string& query, const std::string& name, int fallback) {
  const std::string v = Param(query, name);
  return v.empty() ? fallback : std::stoi(v);
}

std::string JsonEscaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// Streams an answer of `size` bytes of 'x' framed as `framing`, without holding it
// in memory; returns when it is sent or the reader has gone.
void Stream(asio::ip::tcp::socket& socket, int status, int count, const std::string& framing,
            long long size) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " OK\r\nServer: test-upstream\r\n" +
                     "X-Effect: " + std::to_string(count) + "\r\nConnection: close\r\n";
  if (framing == "length") head += "Content-Length: " + std::to_string(size) + "\r\n";
  if (framing == "chunked") head += "Transfer-Encoding: chunked\r\n";
  head += "\r\n";
  const std::string piece(64 << 10, 'x');
  beast::error_code ec;
  std::string out = head;
  for (long long left = size; left > 0 && !ec;) {
    const size_t n = static_cast<size_t>(std::min<long long>(left, static_cast<long long>(piece.size())));
    if (framing == "chunked") {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%zx\r\n", n);
      out += hex;
    }
    out.append(piece, 0, n);
    if (framing == "chunked") out += "\r\n";
    asio::write(socket, asio::buffer(out), ec);
    out.clear();
    left -= static_cast<long long>(n);
  }
  if (framing == "chunked" && !ec) asio::write(socket, asio::buffer(std::string("0\r\n\r\n")), ec);
  if (!ec) asio::write(socket, asio::buffer(out), ec);  // a header with no body
  socket.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
}

void Serve(asio::ip::tcp::socket socket) {
  beast::flat_buffer buffer;
  beast::error_code ec;
  for (;;) {
    bhttp::request<bhttp::string_body> req;
    bhttp::read(socket, buffer, req, ec);
    if (ec) return;
    const std::string target(req.target());
    const size_t q = target.find('?');
    const std::string path = target.substr(0, q);
    const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
    bhttp::response<bhttp::string_body> res(bhttp::status::ok, req.version());
    res.set(bhttp::field::server, "test-upstream");
    if (req.method() == bhttp::verb::get || req.method() == bhttp::verb::head) {
      std::lock_guard<std::mutex> lock(mu);
      res.set(bhttp::field::content_type, "application/json");
      res.body() = "{\"effects\":" + std::to_string(total) + "}";
    } else if (const std::string token = RequiredToken(path);
               !token.empty() && std::string(req[bhttp::field::authorization]) != "Bearer " + token) {
      res.result(bhttp::status::unauthorized);
      res.set(bhttp::field::content_type, "text/plain");
      res.body() = kUnauthorizedBody;
    } else {
      int count = 0, seen = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        count = ++total;
        seen = ++per_path[path];
      }
      // A slow upstream, as ?delay_ms= asks.
      std::this_thread::sleep_for(std::chrono::milliseconds(IntParam(query, "delay_ms", 0)));
      if (Param(query, "drop") == "1") return;  // the socket closes unanswered
      int status = IntParam(query, "status", 201);
      if (seen <= IntParam(query, "fail_first", 0)) status = 503;
      if (const std::string framing = Param(query, "framing"); !framing.empty()) {
        Stream(socket, status, count, framing, std::stoll(Param(query, "big")));
        return;
      }
      res.result(static_cast<unsigned>(status));
      res.set(bhttp::field::content_type, "application/json");
      res.set("X-Effect", std::to_string(count));
      res.set("X-Seen-Idempotency-Key", std::string(req["Idempotency-Key"]));
      res.set(bhttp::field::set_cookie, "sid=" + std::to_string(count));
      res.insert(bhttp::field::link, "</a>; rel=\"a\"");
      res.insert(bhttp::field::link, "</b>; rel=\"b\"");
      const int big = IntParam(query, "big", -1);
      res.body() = big >= 0 ? std::string(static_cast<size_t>(big), 'x')
                            : "{\"effect\":" + std::to_string(count) + ",\"method\":\"" +
                                  std::string(req.method_string()) + "\",\"path\":\"" +
                                  JsonEscaped(path) + "\",\"body\":\"" +
                                  JsonEscaped(req.body()) + "\"}";
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    bhttp::write(socket, res, ec);
    if (ec || !req.keep_alive()) return;
  }
}

}  // namespace

int main() {
  asio::io_context ioc;
  asio::ip::tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  std::printf("listening on 127.0.0.1:%u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  for (;;) {
    asio::ip::tcp::socket socket(ioc);
    acceptor.accept(socket);
    std::thread(Serve, std::move(socket)).detach();
  }
}
