// Server: the HTTP/1.1 front of `idem serve`, on one of two engines
// (ServerOptions::engine): lean (lean/server.h: an epoll loop per core that reads,
// decides and writes each request it can on that thread) or the Beast engine
// described here. A few I/O threads, each running an
// io_context of its own; connections are accepted on the first and given to them in
// turn, so all of a connection's handlers run on one thread (no strand needed).
// Reads requests with Boost.Beast (keep-alive, 100-continue, a body limit), has the
// Handler route each one once its header is in (Handler::Begin, handler.h), runs the
// blocking calls (Call::Answer: the API, or the proxy) on a separate worker pool and
// writes the answers back on each connection's thread. What the Call answers
// without blocking (AnswerWithoutBlocking: a decided duplicate) is answered on the
// I/O thread; what it starts without blocking (StartAsync: a claim, complete or fail
// on rocksdb://) is answered on the connection's thread once the store's writer
// thread resumes it, with no worker thread in between. A reply that waits (a claim's
// wait_ms) is polled again (Waiting::Poll) on a steady_timer (Reply::poll_after), or
// sooner when its Watch wakes it, so no thread blocks while it waits.
//
//   idem::http::Server server(api, {.host = "127.0.0.1", .port = 0});
//   if (absl::Status s = server.Start(); !s.ok()) ...;
//   std::cout << "listening on " << server.address() << ":" << server.port() << "\n";
//   ...  // on SIGTERM:
//   server.Shutdown();
//   server.Wait();
//
// Shutdown is graceful: the listener closes, idle keep-alive connections are closed,
// requests in flight finish and are answered with "Connection: close", claims that
// are waiting answer at once (409 in_progress), and Wait() returns when every
// connection is gone.
//
// Thread safety: Start() once; Shutdown() and port()/address() from any thread;
// Wait() from one thread. `handler` must outlive the Server.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "http/server/handler.h"

namespace idem::http {

// The HTTP/1.1 engine a Server runs on (`idem serve --http`); both keep the
// contract below, and the HTTP suites run on both.
enum class HttpEngine {
  kLean,   // one epoll loop per io_thread, http_parser, answers written once per turn
  kBeast,  // Boost.Beast: io_threads io_contexts, accepted connections dealt in turn
};

struct ServerOptions {
  HttpEngine engine = HttpEngine::kLean;
  std::string host = "127.0.0.1";  // an IP address or a resolvable name
  uint16_t port = 7070;            // 0: the kernel picks one; see port()
  int io_threads = 2;              // each runs an io_context of its own
  int worker_threads = 16;  // threads that run Handler calls (they block on the store)
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 16 << 10;
  absl::Duration idle_timeout = absl::Seconds(60);    // keep-alive connection idle
  // From a request's first byte to the end of its header (else 408 and close): a
  // client that trickles a header (slowloris) holds a connection this long, not
  // for idle_timeout.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration io_timeout = absl::Seconds(30);      // reading a body, writing an answer
  // Connections served at once (0: no cap). Past it a new connection is answered
  // 503 "Connection: close" at once, never left to time out. When the process runs
  // out of file descriptors anyway (EMFILE/ENFILE), pending connections are
  // answered the same way through a descriptor kept in reserve, accepting backs off
  // instead of spinning, and the failure is logged at most once a second.
  int max_connections = 0;
};

class ServerEngine;

class Server {
 public:
  Server(Handler& handler, ServerOptions options);
  // Shuts down and waits.
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the threads. kInvalidArgument for a host that does not
  // resolve; kUnavailable when the address cannot be bound (in use, not permitted).
  absl::Status Start();

  // The bound address and port (the real port when options.port was 0).
  // REQUIRES: Start() returned OK.
  std::string address() const;
  uint16_t port() const;

  // Begins a graceful shutdown; returns at once. Idempotent.
  void Shutdown();

  // Blocks until the server has shut down (after Shutdown()) and its threads ended.
  void Wait();

 private:
  std::unique_ptr<ServerEngine> impl_;
};

}  // namespace idem::http
