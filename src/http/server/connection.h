// Connection: one accepted HTTP/1.1 connection of the Server (internal).
//
// All of a Connection's handlers run on the one thread of its io_context (the
// Server gives each I/O thread an io_context of its own and spreads connections
// over them); blocking Handler calls run on the worker pool and post their Reply back to it.
//
// Thread safety: Start() and BeginShutdown() may be called from any thread; they
// post to the connection's io_context.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/thread_pool.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "http/server/exchange.h"
#include "http/server/handler.h"
#include "http/server/server.h"

namespace idem::http {

// What connections share with the Server that owns them.
struct ServerShared {
  Handler& api;
  const ServerOptions& options;
  boost::asio::io_context& ioc;  // the connection's own: one thread runs it
  boost::asio::thread_pool& pool;
  std::atomic<bool>& stopping;
};

// A connection's executor, its socket and its stream, as concrete types: with
// asio's type-erased any_io_executor (beast::tcp_stream, tcp::socket) every copy
// of the executor, several per request in Beast's reads and writes, was a heap
// allocation (14 per answered duplicate claim in a callgrind profile). A plain
// io_context executor, not a strand: each io_context is run by one thread, which
// serializes a connection's handlers as a strand would, without a strand's lock,
// queue and reference counts on every completion (4,000 of the 30,300 instructions
// of a duplicate claim, callgrind, bench/profile_claims.sh).
using ConnectionExecutor = boost::asio::io_context::executor_type;
using ConnectionSocket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, ConnectionExecutor>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ConnectionSocket&& socket, ServerShared shared);

  void Start();
  // Graceful shutdown: closes the connection if it is idle between requests, ends a
  // waiting claim at once; a request being handled is answered with Connection: close.
  void BeginShutdown();

 private:
  enum class State { kIdle, kBusy, kWaiting, kClosed };
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  void ReadHeader();
  // After the first byte of a request: the rest of its header, within
  // header_timeout.
  void ReadRestOfHeader();
  void OnHeader(boost::beast::error_code ec);
  // Feeds the parser what buffer_ already holds, up to the end of the header
  // (`header_only`) or of the request. Returns the outcome (no error, or the
  // parser's) when that end or an error was reached, nullopt when more bytes must
  // be read.
  std::optional<boost::beast::error_code> ParseBuffered(bool header_only);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  // Answers a read error; returns after closing or sending an error response.
  void OnReadError(boost::beast::error_code ec);
  // The current request, its body read: answered at once, started, or run on the
  // worker pool.
  void Dispatch();
  // Runs `waiting`'s Poll, or the current request's Answer when null, on the pool.
  void RunOnPool(std::shared_ptr<const Waiting> waiting);
  void OnReply(Reply reply);
  void OnTimer(boost::beast::error_code ec);
  void Send(const Reply& reply, bool force_close);
  void OnWrite(bool close, boost::beast::error_code ec);
  void DrainAndClose();
  void Close();

  ServerShared shared_;
  boost::beast::basic_stream<boost::asio::ip::tcp, ConnectionExecutor> stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<boost::beast::http::response<boost::beast::http::empty_body>> continue_;
  // The answer being written, as bytes (RenderResponse); reused across the
  // connection's requests.
  std::string out_;
  boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                    boost::asio::wait_traits<std::chrono::steady_clock>,
                                    ConnectionExecutor>
      timer_;
  State state_ = State::kIdle;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  std::optional<Reply> waiting_reply_;
  std::shared_ptr<void> watch_;  // while waiting: its wake-up (Waiting::Watch)
  // The current request as its Handler routed it (Handler::Begin), from its header
  // until its answer is sent.
  std::unique_ptr<Handler::Call> call_;
  // The current request's id (HttpRequest::request_id); set when its header is in.
  std::string request_id_;
  bool head_ = false;  // the current request is HEAD: the answer goes without its body
  bool in_header_ = false;  // between a request's first byte and the end of its header
  bool header_expired_ = false;  // header_timeout passed: the read was cancelled (408)
  std::string method_;  // the current request's, for the access log
  std::chrono::steady_clock::time_point started_;  // when its header was in
};

}  // namespace idem::http
