// A small synchronous HTTP/1.1 client for the `idem serve` tests (Boost.Beast), and
// a raw-socket helper for malformed requests.
//
// Recording: when the environment variable IDEM_HTTP_RECORD_DIR is set, every final
// (non-1xx) response a Client reads is appended, with the request it answers, as one
// JSON line to $IDEM_HTTP_RECORD_DIR/<pid>.jsonl. tests/http/openapi_check.py then
// validates each recorded exchange against docs/openapi.yaml, so the document cannot
// drift from what the server answers. One file per process, so test processes that
// CTest runs in parallel never share a file; threads of one process append whole
// lines under a mutex. Tokens are never written, only whether an Authorization header
// was sent.
//
// Compiled once, in tests/http/client.cc (library idem_http_test_client, which every
// test links through idem_testing): this header names no Beast type, so the ~15 test
// units that include it do not parse and instantiate Beast's client each (the
// http_serve_test unit: 22.2 s of GCC's time with it in the header, 13.1 s without).
//
// Thread safety: a Client is used by one thread at a time; Fetch() and recording may
// run on many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  explicit Client(uint16_t port);
  // Connects within `connect_timeout`; each Send() or Read() then gives up (error
  // "... timed out" / "... operation canceled") after `io_timeout`. The chaos driver
  // uses short ones so that a stopped server costs a client seconds, not minutes.
  Client(uint16_t port, std::chrono::milliseconds connect_timeout,
         std::chrono::milliseconds io_timeout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const;

  ClientResponse Send(const std::string& method, const std::string& target,
                      const std::string& body = "", const std::string& token = "",
                      std::vector<std::pair<std::string, std::string>> extra = {});

  ClientResponse Read();

  // Writes raw bytes (for malformed requests). Bytes that start with a request line
  // begin a new request for recording; others continue the last one (a body sent
  // after 100 Continue).
  bool WriteRaw(const std::string& bytes);

  // Writes whole raw requests back to back in one write, as a client that pipelines
  // them does; each Read() then answers the next (and is recorded with it).
  bool WritePipelined(const std::vector<std::string>& requests);

  // True when the server closed the connection (a read gets EOF within `timeout`).
  bool ClosedByPeer(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One request on a fresh connection.
ClientResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body = "", const std::string& token = "");

}  // namespace idem::http::testing
