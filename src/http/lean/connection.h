// LeanConnection: one accepted HTTP/1.1 connection of the lean engine (internal;
// lean/server.h). Its bytes are read into a fixed window (in_) and parsed with
// http_parser, paused at each request's header (to route it, authenticate it
// before its body, refuse a declared body over the limit, send 100 Continue) and
// at its end (so pipelined requests are answered one at a time, in order). The
// answers are appended to out_, which the loop writes once per turn.
//
// Lifetime: owned by its Loop; it stays, closed, while an answer of the worker
// pool or a StartAsync resume is still to come back (the Call they use lives in
// it), and is retired after.
//
// Thread safety: the loop's thread only.
#pragma once

#include <http_parser.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/lean/loop.h"
#include "http/server/handler.h"

namespace idem::http::lean {

class LeanConnection {
 public:
  // `refused`: past the connection cap; it is answered 503 and closed, never read.
  LeanConnection(int fd, uint64_t id, Loop& loop, Core& core, bool refused);
  ~LeanConnection();
  LeanConnection(const LeanConnection&) = delete;
  LeanConnection& operator=(const LeanConnection&) = delete;

  uint64_t id() const { return id_; }
  int fd() const { return fd_; }

  // Starts: reads what is there, or (refused) queues the 503.
  void Start();
  // epoll said readable (or hung up, or failed).
  void OnReadable();
  // epoll said writable.
  void OnWritable();
  // The turn's end: writes what out_ holds.
  void Flush();
  // The earliest of its deadlines, and what to do when the loop finds it passed.
  Clock::time_point deadline() const;
  void OnDeadline();
  // A Reply from the worker pool or a StartAsync resume.
  void OnReply(Reply reply);
  // A waiting claim's Watch fired: poll it now.
  void OnWake();
  // Graceful shutdown: idle connections close, a waiting claim answers at once, a
  // request being handled is answered with Connection: close.
  void BeginShutdown();

 private:
  enum class Phase {
    kRead,      // reading a request (or idle between requests)
    kHandling,  // the request is with the Handler (pool or StartAsync)
    kWaiting,   // a claim waits for its next poll
    kDrain,     // answered with close: half-closed, the rest read and dropped
    kClosed,
  };
  enum class Paused { kNone, kHeader, kMessage };

  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t n);
  static int OnHeaderField(http_parser* p, const char* at, size_t n);
  static int OnHeaderValue(http_parser* p, const char* at, size_t n);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t n);
  static int OnMessageComplete(http_parser* p);
  static const http_parser_settings kSettings;

  // Parses and reads until the connection must wait (for bytes, the Handler, the
  // write buffer to drain) or closes.
  void Pump();
  // Parses what in_ holds; false when parsing must stop here (a request was
  // dispatched, or answered with close).
  bool Parse();
  // False, having answered 400 "bad line ending", when the header holds a line
  // ended by LF alone (http_parser takes it; a proxy behind idem might not agree
  // on where the header ends). Scans only the header, once.
  bool ScanHeaderLineEnds();
  void EndHeaderField();
  void OnHeader();
  void OnMessage();
  void OnParseError(http_errno error);
  void Dispatch();
  void RunOnPool(std::shared_ptr<const Waiting> waiting);
  void PollAgain();
  // Renders `reply` into out_ and counts it; `force_close` ends the connection.
  void Answer(const Reply& reply, bool force_close);
  void AnswerProblem(HttpResponse response);
  void StartDrain();
  void Close();
  void Dirty();

  const int fd_;
  const uint64_t id_;
  Loop& loop_;
  Core& core_;
  const bool refused_;
  Phase phase_ = Phase::kRead;
  int outstanding_ = 0;  // pool answers or resumes still to come back

  http_parser parser_;
  Paused paused_ = Paused::kNone;
  std::unique_ptr<char[]> in_;  // the read window
  size_t in_begin_ = 0, in_end_ = 0;
  bool drained_ = false;  // the last read found no more bytes (edge-triggered epoll)
  // Line endings of the header still to be checked (ScanHeaderLineEnds): the
  // window is scanned from scanned_ while header_scan_; prev_ is the byte before
  // it, crlf_pairs_ the CRLFs that end there in a row (two: the header's end).
  bool header_scan_ = true;
  size_t scanned_ = 0;
  char prev_ = 0;
  int crlf_pairs_ = 0;
  bool bad_field_ = false;  // a field name with a byte that is no token character
  std::string out_;       // answers not yet written
  size_t out_sent_ = 0;
  bool dirty_ = false;
  bool closing_ = false;  // the last answer closes: nothing more is parsed

  // The current request.
  bool in_request_ = false;  // its first byte is in
  bool header_done_ = false;
  size_t header_bytes_ = 0;
  bool body_too_large_ = false;
  std::string url_, field_, value_;
  bool in_value_ = false;
  int hosts_ = 0;
  std::string transfer_encoding_, authorization_, expect_, request_id_given_, cookie_;
  int seen_ = 0;  // which of those five fields were seen (EndHeaderField)
  std::vector<std::pair<std::string, std::string>> headers_;  // wants_headers only
  std::string body_;
  std::string method_ = "-";
  std::string request_id_;
  std::string spare_request_id_;  // the last request's HttpRequest::request_id buffer
  unsigned version_ = 11;
  bool head_ = false;
  bool keep_alive_ = true;
  Clock::time_point started_;
  std::unique_ptr<Handler::Call> call_;
  std::optional<Reply> waiting_reply_;
  std::shared_ptr<void> watch_;

  Clock::time_point read_deadline_ = Clock::time_point::max();  // idle, header, body
  bool read_deadline_is_header_ = false;
  Clock::time_point write_deadline_ = Clock::time_point::max();  // out_ blocked
  Clock::time_point other_deadline_ = Clock::time_point::max();  // poll, drain

  friend class Loop;
};

}  // namespace idem::http::lean
