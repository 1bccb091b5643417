// The test HTTP client of tests/http/client.h: Beast is instantiated here only.
#include "http/client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string_view>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace idem::http::testing {
namespace recording {

// Request bodies longer than this are recorded by size only (the 413 tests send 1 MiB).
constexpr size_t kMaxRecordedRequestBody = 64 << 10;

// What a response answers: the request as the test wrote it.
struct Exchange {
  std::string method;
  std::string target;
  std::string body;
  bool authorization = false;
  bool raw = false;  // written with WriteRaw()
};

// The helpers are this file's own; Exchange is named in Client::Impl's members.
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (n == 2 && c < 0xC2) return 0;
  if (n == 3 && ((c == 0xE0 && b(i + 1) < 0xA0) || (c == 0xED && b(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || c > 0xF4 || (c == 0xF4 && b(i + 1) >= 0x90))) {
    return 0;
  }
  return n;
}

// Appends `s` as a JSON string literal; bytes that are not UTF-8 become U+FFFD.
void AppendJsonString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      *out += '\\';
      *out += static_cast<char>(c);
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      *out += "\\u00";
      *out += kHex[c >> 4];
      *out += kHex[c & 0xF];
    } else if (c < 0x80) {
      *out += static_cast<char>(c);
    } else if (size_t n = Utf8SequenceLength(s, i); n > 0) {
      out->append(s.substr(i, n));
      i += n;
      continue;
    } else {
      *out += "\\ufffd";
    }
    ++i;
  }
  *out += '"';
}

// The directory to record into, or "" when recording is off.
std::string RecordDir() {
  const char* dir = std::getenv("IDEM_HTTP_RECORD_DIR");
  return dir != nullptr ? dir : "";
}

// Appends one JSON line for `exchange` answered by `response` (a final response).
// Failures to write are ignored on purpose: the checker fails on missing records.
void Record(const Exchange& exchange, const ClientResponse& response) {
  const std::string dir = RecordDir();
  if (dir.empty()) return;
  std::string line = "{\"method\":";
  AppendJsonString(&line, exchange.method);
  line += ",\"target\":";
  AppendJsonString(&line, exchange.target);
  if (exchange.body.size() <= kMaxRecordedRequestBody) {
    line += ",\"request_body\":";
    AppendJsonString(&line, exchange.body);
  }
  line += ",\"request_body_bytes\":" + std::to_string(exchange.body.size());
  line += exchange.authorization ? ",\"authorization\":true" : ",\"authorization\":false";
  line += exchange.raw ? ",\"raw\":true" : ",\"raw\":false";
  line += ",\"status\":" + std::to_string(response.status);
  line += ",\"content_type\":";
  AppendJsonString(&line, response.header("content-type"));
  line += ",\"headers\":{";
  bool first = true;
  for (const auto& [name, value] : response.headers) {
    if (!first) line += ',';
    first = false;
    AppendJsonString(&line, name);
    line += ':';
    AppendJsonString(&line, value);
  }
  line += "},\"body\":";
  AppendJsonString(&line, response.body);
  if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
      info != nullptr) {
    line += ",\"test\":";
    AppendJsonString(&line, std::string(info->test_suite_name()) + "." + info->name());
  }
  line += "}\n";

  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  mkdir(dir.c_str(), 0755);  // usually there already (the CTest fixture makes it)
  const std::string path = dir + "/" + std::to_string(getpid()) + ".jsonl";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  for (size_t done = 0; done < line.size();) {
    ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// The request in raw bytes that start with a request line ("POST /x HTTP/1.1\r\n...");
// its method is empty when they do not start with one.
Exchange ParseRawRequest(std::string_view bytes) {
  Exchange e;
  e.raw = true;
  size_t line_end = bytes.find("\r\n");
  std::string_view line = bytes.substr(0, line_end);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.substr(sp2 + 1).substr(0, 5) != "HTTP/") {
    return e;
  }
  e.method = std::string(line.substr(0, sp1));
  e.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  size_t head_end = bytes.find("\r\n\r\n");
  std::string head(bytes.substr(0, head_end));
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  e.authorization = head.find("\r\nauthorization:") != std::string::npos;
  if (head_end != std::string_view::npos) e.body = std::string(bytes.substr(head_end + 4));
  // A chunked body is recorded decoded, as the server reads it (kept as written when
  // it is not whole or not well formed: the server answers that one 400).
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    std::string decoded;
    std::string_view rest = e.body;
    for (;;) {
      const size_t eol = rest.find("\r\n");
      if (eol == std::string_view::npos) return e;
      size_t size = 0;
      const std::string_view hex = rest.substr(0, eol);
      const auto [end, err] = std::from_chars(hex.data(), hex.data() + hex.size(), size, 16);
      if (err != std::errc() || end == hex.data() || rest.size() < eol + 2 + size + 2) return e;
      if (size == 0) break;
      decoded.append(rest.substr(eol + 2, size));
      rest.remove_prefix(eol + 2 + size + 2);
    }
    e.body = std::move(decoded);
  }
  return e;
}

}  // namespace
}  // namespace recording

struct Client::Impl {
  Impl(uint16_t port, std::chrono::milliseconds connect_timeout,
       std::chrono::milliseconds io_timeout)
      : stream_(ioc_), io_timeout_(io_timeout) {
    stream_.expires_after(connect_timeout);
    boost::beast::error_code ec;
    stream_.connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
    connected_ = !ec;
  }

  bool connected() const { return connected_; }

  ClientResponse Send(const std::string& method, const std::string& target, const std::string& body,
                      const std::string& token,
                      std::vector<std::pair<std::string, std::string>> extra) {
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
    stream_.expires_after(io_timeout_);
    boost::beast::error_code ec;
    http::write(stream_, req, ec);
    if (ec) {
      out.error = "write: " + ec.message();
      return out;
    }
    recording::Exchange sent{.method = method, .target = target, .body = body};
    sent.authorization = req.find(http::field::authorization) != req.end();
    pending_.push_back(std::move(sent));
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
      if (!pending_.empty()) pending_.pop_front();
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
    // A 1xx (100 Continue) is interim, not the answer: the request still waits for one.
    if (out.status >= 200) {
      recording::Exchange answered;
      if (!pending_.empty()) {
        answered = std::move(pending_.front());
        pending_.pop_front();
      }
      recording::Record(answered, out);
    }
    return out;
  }

  bool WriteRaw(const std::string& bytes) {
    recording::Exchange e = recording::ParseRawRequest(bytes);
    if (!e.method.empty() || pending_.empty()) {
      if (e.method.empty()) e.body = bytes;
      pending_.push_back(std::move(e));
    } else {
      pending_.back().body += bytes;
    }
    return Write(bytes);
  }

  bool WritePipelined(const std::vector<std::string>& requests) {
    std::string bytes;
    for (const std::string& r : requests) {
      pending_.push_back(recording::ParseRawRequest(r));
      bytes += r;
    }
    return Write(bytes);
  }

  // `bytes` on the socket as they are, in one write.
  bool Write(const std::string& bytes) {
    boost::beast::error_code ec;
    boost::asio::write(stream_, boost::asio::buffer(bytes), ec);
    return !ec;
  }

  bool ClosedByPeer(std::chrono::milliseconds timeout) {
    stream_.expires_after(timeout);
    char c;
    boost::beast::error_code ec;
    stream_.read_some(boost::asio::buffer(&c, 1), ec);
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::chrono::milliseconds io_timeout_;
  bool connected_ = false;
  // Requests written and not yet answered, oldest first (for recording).
  std::deque<recording::Exchange> pending_;
};

Client::Client(uint16_t port) : Client(port, std::chrono::seconds(10), std::chrono::seconds(40)) {}

Client::Client(uint16_t port, std::chrono::milliseconds connect_timeout,
               std::chrono::milliseconds io_timeout)
    : impl_(std::make_unique<Impl>(port, connect_timeout, io_timeout)) {}

Client::~Client() = default;

bool Client::connected() const { return impl_->connected(); }

ClientResponse Client::Send(const std::string& method, const std::string& target,
                            const std::string& body, const std::string& token,
                            std::vector<std::pair<std::string, std::string>> extra) {
  return impl_->Send(method, target, body, token, std::move(extra));
}

ClientResponse Client::Read() { return impl_->Read(); }

bool Client::WriteRaw(const std::string& bytes) { return impl_->WriteRaw(bytes); }

bool Client::WritePipelined(const std::vector<std::string>& requests) {
  return impl_->WritePipelined(requests);
}

bool Client::ClosedByPeer(std::chrono::milliseconds timeout) {
  return impl_->ClosedByPeer(timeout);
}

ClientResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body, const std::string& token) {
  Client c(port);
  return c.Send(method, target, body, token);
}

}  // namespace idem::http::testing
