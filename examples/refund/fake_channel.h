// The fake payment channel of the refund demo: a small HTTP/1.1 server that stands
// in for a bank's "reverse a payment" API, with faults injected on purpose so the
// demo can show what a naive retry does. Its client is refund/channel_client.h.
//
// It keeps its reversals in memory and NEVER deduplicates: every POST /reversals
// that gets past the busy check makes a new reversal, also for a request_id it has
// seen, so a retried request shows up as a second reversal.
//
// Routes (JSON bodies, Content-Type: application/json):
//   POST /reversals          {"request_id":str,"order_no":str,"amount":int}
//                            -> 201 {"id":"rv-N","request_id":..,"order_no":..,
//                                    "amount":..,"cancelled":false}
//                            -> 400 {"error":"..."} naming the missing or bad field
//   GET  /reversals[?request_id=X][&order_no=Y]
//                            -> 200 {"reversals":[...]} matching all filters given,
//                               cancelled ones included, in creation order
//   POST /reversals/cancel   {"request_id":str} -> 200 {"cancelled":n}, n >= 0
//   GET  /stats              -> 200 {"reversals":total,"cancelled":n,
//                                    "by_order":{order_no:active,...},
//                                    "faults":{"timeout":n,"lost":n,"busy":n}}
//   GET  /healthz            -> 200 {"ok":true}
//
// Faults (POST /reversals only, and only for a valid request; fault_rate r in
// [0,1]), decided in arrival order by a std::mt19937_64 seeded with `seed`, so the
// same seed and the same sequence of requests give the same faults:
//   busy     with probability r/4: 503 {"error":"channel busy"}, nothing recorded
//            (a clean, retryable failure);
//   otherwise, the reversal is recorded, and then
//   timeout  with probability r/2: the 201 is sent only after `response_delay`;
//   lost     with probability r/2: the connection is closed without an answer.
// Unconditionally: busy r/4, timeout and lost (1 - r/4) * r/2 each; with r = 1
// every request fails (25% busy, 37.5% timeout, 37.5% lost). r = 0 draws nothing.
//
// In-process (tests):
//   auto server = FakeChannelServer::Start({.fault_rate = 0.2, .seed = 7});
//   ChannelClient client("127.0.0.1", (*server)->port());
//   ...
//   (*server)->Stop();
// As a process: RunFakeChannel(options), e.g. from `idem-fake-channel` or a
// subcommand of `idem`.
//
// The fake sleeps on a real timer for `response_delay`; it is a demo stand-in for
// a remote service, not library code, so no Clock is injected.
//
// Thread safety: a FakeChannelServer serves any number of concurrent connections
// on its own threads; port(), address() and Stop() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace idem::refund {

struct FakeChannelOptions {
  // HOST:PORT to listen on ("[v6]:PORT" for IPv6); port 0: the kernel picks one.
  std::string listen = "127.0.0.1:0";
  double fault_rate = 0.0;  // r in [0,1], see the fault table above
  uint64_t seed = 1;        // seeds the fault decisions
  // How long a "timeout" fault holds back the 201 (longer than the clients' timeout).
  absl::Duration response_delay = absl::Milliseconds(1500);
  int io_threads = 2;  // threads serving connections, >= 1
  // Called once with the bound "HOST:PORT" (the real port when 0 was asked for),
  // on the thread that calls Start()/RunFakeChannel(), before requests are served.
  // RunFakeChannel() without it prints "listening on HOST:PORT" on stdout instead.
  std::function<void(const std::string& address)> on_listening;
};

class FakeChannelServer {
 public:
  // Validates `options`, binds, listens and starts serving on background threads;
  // returns once the server accepts connections. Errors: kInvalidArgument for a
  // malformed `listen`, a fault_rate outside [0,1], a negative response_delay or
  // io_threads < 1; kUnavailable when the address cannot be bound (in use, not
  // permitted, host does not resolve).
  static absl::StatusOr<std::unique_ptr<FakeChannelServer>> Start(FakeChannelOptions options);

  // Stops (see Stop()).
  ~FakeChannelServer();

  FakeChannelServer(const FakeChannelServer&) = delete;
  FakeChannelServer& operator=(const FakeChannelServer&) = delete;

  // The bound port, and "HOST:PORT" with that port ("[v6]:PORT" for IPv6).
  uint16_t port() const;
  std::string address() const;
  // "http://HOST:PORT", for ChannelClient::FromUrl().
  std::string base_url() const;

  // Closes the listener and every connection at once (answers held back by a
  // timeout fault are never sent) and joins the threads; blocks until they ended.
  // Idempotent. REQUIRES: not called from a server thread (e.g. on_listening).
  void Stop();

 private:
  class Impl;
  explicit FakeChannelServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs the fake channel until the process gets SIGINT or SIGTERM, then stops it and
// returns OK. Announces the bound address through options.on_listening, or, when it
// is empty, prints exactly "listening on HOST:PORT\n" as a line on stdout and flushes
// it (the signal handlers are installed before that, so a signal sent right after
// the line is handled). Logs go through spdlog's default logger (give it a stderr
// sink to keep stdout to that one line). Errors: as FakeChannelServer::Start().
// Blocks. Takes over SIGINT and SIGTERM while it runs.
absl::Status RunFakeChannel(const FakeChannelOptions& options);

}  // namespace idem::refund
