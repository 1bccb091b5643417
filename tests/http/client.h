// A small synchronous HTTP/1.1 client for the `idem serve` tests (Boost.Beast), and
// a raw-socket helper for malformed requests.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace idem::http::testing {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
  bool keep_alive = false;
  std::string error;  // non-empty when no response could be read

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

class Client {
 public:
  explicit Client(uint16_t port) : stream_(ioc_) {
    stream_.expires_after(std::chrono::seconds(10));
    boost::beast::error_code ec;
    stream_.connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
    connected_ = !ec;
  }

  bool connected() const { return connected_; }

  ClientResponse Send(const std::string& method, const std::string& target,
                      const std::string& body = "", const std::string& token = "",
                      std::vector<std::pair<std::string, std::string>> extra = {}) {
    namespace http = boost::beast::http;
    ClientResponse out;
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.method_string(method);
    req.set(http::field::host, "127.0.0.1");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    if (!body.empty() || method == "POST") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    for (auto& [k, v] : extra) req.set(k, v);
    req.prepare_payload();
    stream_.expires_after(std::chrono::seconds(40));
    boost::beast::error_code ec;
    http::write(stream_, req, ec);
    if (ec) {
      out.error = "write: " + ec.message();
      return out;
    }
    return Read();
  }

  ClientResponse Read() {
    namespace http = boost::beast::http;
    ClientResponse out;
    http::response_parser<http::string_body> parser;
    parser.body_limit(16 << 20);
    boost::beast::error_code ec;
    http::read(stream_, buffer_, parser, ec);
    if (ec) {
      out.error = "read: " + ec.message();
      return out;
    }
    auto& res = parser.get();
    out.status = res.result_int();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    out.body = res.body();
    out.keep_alive = res.keep_alive();
    return out;
  }

  // Writes raw bytes (for malformed requests).
  bool WriteRaw(const std::string& bytes) {
    boost::beast::error_code ec;
    boost::asio::write(stream_, boost::asio::buffer(bytes), ec);
    return !ec;
  }

  // True when the server closed the connection (a read gets EOF within `timeout`).
  bool ClosedByPeer(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
    stream_.expires_after(timeout);
    char c;
    boost::beast::error_code ec;
    stream_.read_some(boost::asio::buffer(&c, 1), ec);
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
};

// One request on a fresh connection.
inline ClientResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                            const std::string& body = "", const std::string& token = "") {
  Client c(port);
  return c.Send(method, target, body, token);
}

}  // namespace idem::http::testing
