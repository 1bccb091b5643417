#include "http/lean/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "boost/asio/post.hpp"
#include "http/server/buffers.h"
#include "http/server/exchange.h"
#include "http/server/problem.h"
#include "http/server/render.h"

namespace idem::http::lean {
namespace {

// The read window: requests are parsed as they arrive, so a header or a body
// larger than this is read in several turns, never held whole here.
constexpr size_t kWindow = 8 << 10;
// Answers of pipelined requests waiting to be written: past this, no more of
// them is parsed until the client reads.
constexpr size_t kOutHigh = 256 << 10;
// A write buffer grown past this by a large answer is given back once written.
constexpr size_t kOutKeep = 64 << 10;
// A request body's buffer is kept for the next request up to this size.
constexpr size_t kKeepBody = 16 << 10;
// How long an answered-with-close connection is drained (the Beast engine's too).
constexpr auto kDrainTime = std::chrono::seconds(2);

Clock::duration LeanChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

bool NamedLean(const std::string& name, std::string_view wanted) {
  return absl::EqualsIgnoreCase(name, absl::string_view(wanted.data(), wanted.size()));
}

LeanConnection* Of(http_parser* p) { return static_cast<LeanConnection*>(p->data); }

// RFC 9110's tchar: what a field name is made of. http_parser (built without
// HTTP_PARSER_STRICT) also takes a space, so `Transfer-Encoding : chunked` would
// reach the Handler (and a proxy's upstream) as another field.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

}  // namespace

const http_parser_settings LeanConnection::kSettings = [] {
  http_parser_settings s;
  http_parser_settings_init(&s);
  s.on_message_begin = &LeanConnection::OnMessageBegin;
  s.on_url = &LeanConnection::OnUrl;
  s.on_header_field = &LeanConnection::OnHeaderField;
  s.on_header_value = &LeanConnection::OnHeaderValue;
  s.on_headers_complete = &LeanConnection::OnHeadersComplete;
  s.on_body = &LeanConnection::OnBody;
  s.on_message_complete = &LeanConnection::OnMessageComplete;
  return s;
}();

LeanConnection::LeanConnection(int fd, uint64_t id, Loop& loop, Core& core, bool refused)
    : fd_(fd), id_(id), loop_(loop), core_(core), refused_(refused) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

LeanConnection::~LeanConnection() {
  if (phase_ != Phase::kClosed) ::close(fd_);
}

void LeanConnection::Start() {
  if (refused_) {
    out_ = BusyAnswer();
    closing_ = true;
    Dirty();
    return;
  }
  // The first byte is awaited idle_timeout; epoll reports the socket readable
  // when it comes (or at once when it is there already).
  read_deadline_ = loop_.now() + LeanChrono(core_.options.idle_timeout);
  loop_.Arm(read_deadline_);
}

void LeanConnection::OnReadable() {
  if (phase_ == Phase::kClosed) return;
  drained_ = false;
  Pump();
}

void LeanConnection::OnWritable() {
  if (phase_ != Phase::kClosed && out_sent_ < out_.size()) Dirty();
}

void LeanConnection::Dirty() {
  if (dirty_) return;
  dirty_ = true;
  loop_.MarkDirty(this);
}

void LeanConnection::Pump() {
  while (true) {
    if (phase_ == Phase::kDrain) {
      if (drained_) return;
      const ssize_t n = ::recv(fd_, in_.get(), kWindow, 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        drained_ = true;
        return;
      }
      Close();  // the client closed (or reset): done
      return;
    }
    if (phase_ != Phase::kRead || closing_) return;
    if (out_.size() - out_sent_ >= kOutHigh) return;  // Flush resumes
    if (in_begin_ < in_end_ && !Parse()) return;
    if (drained_) return;
    in_begin_ = in_end_ = scanned_ = 0;  // Parse consumed the window
    if (in_ == nullptr) in_ = std::make_unique<char[]>(kWindow);
    const ssize_t n = ::recv(fd_, in_.get(), kWindow, 0);
    if (n > 0) {
      in_end_ = static_cast<size_t>(n);
      // A short read of a stream socket empties it (epoll(7)): the next bytes
      // come with the next edge, and no read is spent to learn EAGAIN.
      drained_ = in_end_ < kWindow;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      drained_ = true;
      return;
    }
    if (n == 0 && out_sent_ < out_.size()) {
      // The client is done sending: what it asked for is still written.
      closing_ = true;
      return;
    }
    Close();  // end of stream between requests or in one, or a reset: quietly
    return;
  }
}

bool LeanConnection::Parse() {
  while (in_begin_ < in_end_) {
    if (header_scan_ && !ScanHeaderLineEnds()) return false;
    const bool in_header = !header_done_;
    paused_ = Paused::kNone;
    const size_t n =
        http_parser_execute(&parser_, &kSettings, in_.get() + in_begin_, in_end_ - in_begin_);
    in_begin_ += n;
    if (in_header) header_bytes_ += n;
    const http_errno error = HTTP_PARSER_ERRNO(&parser_);
    if (in_header && in_request_ && header_bytes_ > core_.options.max_header_bytes &&
        error != HPE_CB_body) {
      // Refused even when its end is in this window: the header was not taken in
      // (not routed), so the answer gets an id and method of its own.
      header_done_ = false;
      OnParseError(HPE_HEADER_OVERFLOW);
      return false;
    }
    if (error == HPE_PAUSED) {
      http_parser_pause(&parser_, 0);
      if (paused_ == Paused::kHeader) {
        OnHeader();
      } else if (paused_ == Paused::kMessage) {
        OnMessage();
      }
      if (phase_ != Phase::kRead || closing_) return false;
      continue;
    }
    if (error != HPE_OK) {
      OnParseError(error);
      return false;
    }
  }
  return true;
}

bool LeanConnection::ScanHeaderLineEnds() {
  // Line by line (memchr finds each LF): every LF must follow a CR, and two CRLFs
  // with nothing but CRs between them end the header.
  size_t i = std::max(scanned_, in_begin_);
  while (i < in_end_) {
    const void* found = std::memchr(in_.get() + i, '\n', in_end_ - i);
    const size_t lf = found != nullptr ? static_cast<const char*>(found) - in_.get() : in_end_;
    if (lf > i) {
      // A byte other than CR before this LF ends a run of CRLFs (a header line's
      // first byte, almost always).
      for (size_t k = i; k < lf; ++k) {
        if (in_[k] != '\r') {
          crlf_pairs_ = 0;
          break;
        }
      }
      prev_ = in_[lf - 1];
    }
    if (lf == in_end_) break;
    if (prev_ != '\r') {
      SetRequestIdFrom(request_id_, "");
      method_ = "-";
      started_ = Clock::now();
      header_done_ = false;
      AnswerProblem(BadHttp("bad line ending"));
      return false;
    }
    if (++crlf_pairs_ == 2) {  // the empty line: the header ends here
      header_scan_ = false;
      scanned_ = lf + 1;
      return true;
    }
    prev_ = '\n';
    i = lf + 1;
  }
  scanned_ = in_end_;
  return true;
}

int LeanConnection::OnMessageBegin(http_parser* p) {
  LeanConnection* c = Of(p);
  c->in_request_ = true;
  c->header_done_ = false;
  c->header_bytes_ = 0;
  c->body_too_large_ = false;
  c->bad_field_ = false;
  c->url_.clear();
  c->field_.clear();
  c->value_.clear();
  c->in_value_ = false;
  c->hosts_ = 0;
  c->transfer_encoding_.clear();
  c->authorization_.clear();
  c->cookie_.clear();
  c->expect_.clear();
  c->request_id_given_.clear();
  c->seen_ = 0;
  c->headers_.clear();
  c->body_.clear();
  c->keep_alive_ = true;
  // A header has header_timeout from its first byte (a slowloris is cut off
  // then, not after idle_timeout).
  c->read_deadline_ = c->loop_.now() + LeanChrono(c->core_.options.header_timeout);
  c->read_deadline_is_header_ = true;
  c->loop_.Arm(c->read_deadline_);
  return 0;
}

int LeanConnection::OnUrl(http_parser* p, const char* at, size_t n) {
  Of(p)->url_.append(at, n);
  return 0;
}

int LeanConnection::OnHeaderField(http_parser* p, const char* at, size_t n) {
  LeanConnection* c = Of(p);
  for (size_t i = 0; i < n; ++i) {
    if (!IsTokenChar(at[i])) {
      c->bad_field_ = true;
      return 1;  // HPE_CB_header_field: OnParseError answers 400 "bad field"
    }
  }
  if (c->in_value_) c->EndHeaderField();
  c->field_.append(at, n);
  return 0;
}

int LeanConnection::OnHeaderValue(http_parser* p, const char* at, size_t n) {
  LeanConnection* c = Of(p);
  c->in_value_ = true;
  c->value_.append(at, n);
  return 0;
}

void LeanConnection::EndHeaderField() {
  in_value_ = false;
  // The first of each field the server reads, as Beast's operator[] gives; a
  // chunked body's trailer fields only join the Handler's headers.
  auto first = [&](int bit, std::string& into) {
    if ((seen_ & bit) == 0) into = value_;
    seen_ |= bit;
  };
  if (!header_done_) {
    if (NamedLean(field_, "host")) {
      ++hosts_;
    } else if (NamedLean(field_, "transfer-encoding")) {
      first(1, transfer_encoding_);
    } else if (NamedLean(field_, "authorization")) {
      first(2, authorization_);
    } else if (NamedLean(field_, "expect")) {
      first(4, expect_);
    } else if (NamedLean(field_, "x-request-id")) {
      first(8, request_id_given_);
    } else if (NamedLean(field_, "cookie")) {
      first(16, cookie_);
    }
  }
  if (core_.handler.wants_headers()) headers_.emplace_back(std::move(field_), std::move(value_));
  field_.clear();
  value_.clear();
}

int LeanConnection::OnHeadersComplete(http_parser* p) {
  LeanConnection* c = Of(p);
  if (c->in_value_) c->EndHeaderField();
  c->header_done_ = true;
  c->paused_ = Paused::kHeader;
  http_parser_pause(p, 1);
  return 0;
}

int LeanConnection::OnBody(http_parser* p, const char* at, size_t n) {
  LeanConnection* c = Of(p);
  // A chunked body is judged as its chunks come (a declared length was, in OnHeader).
  if (c->body_.size() + n > c->core_.options.max_body_bytes) {
    c->body_too_large_ = true;
    return 1;
  }
  c->body_.append(at, n);
  return 0;
}

int LeanConnection::OnMessageComplete(http_parser* p) {
  LeanConnection* c = Of(p);
  if (c->in_value_) c->EndHeaderField();  // a trailer field
  c->paused_ = Paused::kMessage;
  http_parser_pause(p, 1);
  return 0;
}

void LeanConnection::OnHeader() {
  read_deadline_ = Clock::time_point::max();
  read_deadline_is_header_ = false;
  version_ = parser_.http_major == 1 && parser_.http_minor == 0 ? 10 : 11;
  method_ = http_method_str(static_cast<http_method>(parser_.method));
  head_ = parser_.method == HTTP_HEAD;
  SetRequestIdFrom(request_id_, request_id_given_);
  started_ = Clock::now();
  if (std::optional<HttpResponse> refused = RefuseHeader(hosts_, transfer_encoding_)) {
    AnswerProblem(*std::move(refused));
    return;
  }
  // Routed once, here: the Call carries what the Handler made of the request to
  // every step after.
  HttpRequest head;
  head.method = method_;
  head.target = OriginForm(url_);
  head.authorization = authorization_;
  head.cookie = cookie_;
  head.request_id.swap(spare_request_id_);  // a buffer the last request gave back (Answer)
  head.request_id.assign(request_id_);
  head.received = started_;
  call_ = core_.handler.Begin(std::move(head));
  const bool chunked = (parser_.flags & F_CHUNKED) != 0;
  const bool length_known = !chunked && parser_.content_length != ULLONG_MAX;
  const bool body_to_come = chunked || (length_known && parser_.content_length > 0);
  if (body_to_come) {  // authenticated before any of the body is read
    if (std::optional<Reply> refused = call_->BeforeBody()) {
      Answer(*refused, /*force_close=*/true);  // the body is drained unread
      return;
    }
  }
  if (length_known && parser_.content_length > core_.options.max_body_bytes) {
    AnswerProblem(BodyTooLarge(core_.options.max_body_bytes));
    return;
  }
  if (!body_to_come) return;
  if (absl::EqualsIgnoreCase(expect_, "100-continue")) {
    out_ += version_ == 10 ? "HTTP/1.0 100 Continue\r\n\r\n" : "HTTP/1.1 100 Continue\r\n\r\n";
    Dirty();
  }
  read_deadline_ = loop_.now() + LeanChrono(core_.options.io_timeout);
  loop_.Arm(read_deadline_);
}

void LeanConnection::OnMessage() {
  // The next request's header is checked from the byte after this one's end.
  header_scan_ = true;
  scanned_ = in_begin_;
  prev_ = 0;
  crlf_pairs_ = 0;
  read_deadline_ = Clock::time_point::max();
  keep_alive_ = http_should_keep_alive(&parser_) != 0;
  HttpRequest& request = call_->request();
  if (core_.handler.wants_headers()) request.headers = std::move(headers_);
  request.body.swap(body_);  // body_ gets the buffer the last request gave back (Answer)
  body_.clear();
  phase_ = Phase::kHandling;
  Dispatch();
}

void LeanConnection::OnParseError(http_errno error) {
  if (!header_done_) {  // nothing of the request was taken in
    if (in_value_) EndHeaderField();
    SetRequestIdFrom(request_id_, "");
    method_ = "-";
    started_ = Clock::now();
  }
  if (error == HPE_CB_body && body_too_large_) {
    AnswerProblem(BodyTooLarge(core_.options.max_body_bytes));
  } else if (error == HPE_HEADER_OVERFLOW) {
    AnswerProblem(HeaderTooLarge());
  } else if (error == HPE_CB_header_field && bad_field_) {
    AnswerProblem(BadHttp("bad field"));
  } else if (std::optional<HttpResponse> refused = RefuseHeader(hosts_, transfer_encoding_);
             refused.has_value() && error == HPE_INVALID_TRANSFER_ENCODING) {
    AnswerProblem(*std::move(refused));
  } else {
    AnswerProblem(BadHttp(http_errno_description(error)));
  }
}

void LeanConnection::Dispatch() {
  // A duplicate the Handler can answer from memory is answered here, on the loop:
  // no hop to another thread and back.
  std::optional<Reply> now;
  try {
    now = call_->AnswerWithoutBlocking();
  } catch (const std::exception&) {
    now.reset();  // the pool's Answer() reports it properly
  }
  if (now.has_value()) {
    Answer(*now, /*force_close=*/false);
    KeepStringBuffer(std::move(now->response.body));  // for the next request's (buffers.h)
    return;
  }
  // A write the store makes without blocking (rocksdb://) starts here; its answer
  // is built back on this loop once the write is durable.
  const bool started = call_->StartAsync([loop = &loop_, id = id_](std::function<Reply()> answer) {
    loop->PostAnswer(id, std::move(answer));
  });
  if (started) {
    ++outstanding_;
    return;
  }
  RunOnPool(nullptr);
}

void LeanConnection::RunOnPool(std::shared_ptr<const Waiting> waiting) {
  core_.handler.metrics().CountPoolRequest();
  ++outstanding_;
  phase_ = Phase::kHandling;
  // call_ stays until the answer is given (Answer), and this connection until
  // outstanding_ is back to 0.
  boost::asio::post(core_.pool,
                    [loop = &loop_, id = id_, waiting = std::move(waiting), call = call_.get()] {
                      Reply reply = waiting ? waiting->Poll() : call->Answer();
                      loop->Post(id, [reply = std::move(reply)](LeanConnection& c) mutable {
                        c.OnReply(std::move(reply));
                      });
                    });
}

void LeanConnection::OnReply(Reply reply) {
  --outstanding_;
  if (phase_ == Phase::kClosed) {
    if (outstanding_ == 0) loop_.Retire(this);
    return;
  }
  if (reply.waiting != nullptr && !core_.stopping.load()) {
    phase_ = Phase::kWaiting;
    // Woken early when the key is finished through this process (Waiting::Watch).
    watch_ = reply.waiting->Watch(
        [loop = &loop_, id = id_] { loop->Post(id, [](LeanConnection& c) { c.OnWake(); }); });
    other_deadline_ = loop_.now() + LeanChrono(reply.poll_after);
    loop_.Arm(other_deadline_);
    waiting_reply_ = std::move(reply);
    return;
  }
  Answer(reply, /*force_close=*/false);
  KeepStringBuffer(std::move(reply.response.body));  // for the next request's (buffers.h)
  Pump();  // a pipelined request may be waiting in the window
}

void LeanConnection::OnWake() {
  if (phase_ == Phase::kWaiting) PollAgain();
}

void LeanConnection::PollAgain() {
  watch_.reset();
  other_deadline_ = Clock::time_point::max();
  Reply reply = *std::move(waiting_reply_);
  waiting_reply_.reset();
  phase_ = Phase::kHandling;
  if (core_.stopping.load()) {
    reply.waiting = nullptr;  // answer with the latest 409 in_progress
    Answer(reply, /*force_close=*/true);
    return;
  }
  RunOnPool(reply.waiting);
}

void LeanConnection::Answer(const Reply& reply, bool force_close) {
  if (call_ != nullptr) {
    // The request's buffers serve the next request (OnHeader, OnMessage), a body's
    // up to kKeepBody.
    HttpRequest& answered = call_->request();
    if (body_.empty() && answered.body.capacity() <= kKeepBody) {
      body_.swap(answered.body);
      body_.clear();
    }
    spare_request_id_.swap(answered.request_id);
  }
  call_.reset();  // answered: nothing runs it any more, and its body is let go
  CountAndLogAnswer(core_.handler.metrics(), reply, method_, request_id_, started_);
  const bool close = force_close || !keep_alive_ || core_.stopping.load();
  AppendResponse(
      reply.response,
      {.version = version_, .keep_alive = !close, .head = head_, .request_id = request_id_}, out_);
  phase_ = Phase::kRead;
  in_request_ = false;
  header_done_ = false;
  read_deadline_is_header_ = false;
  if (close) {
    closing_ = true;
    read_deadline_ = Clock::time_point::max();
  } else {
    read_deadline_ = loop_.now() + LeanChrono(core_.options.idle_timeout);
    loop_.Arm(read_deadline_);
  }
  Dirty();
}

void LeanConnection::AnswerProblem(HttpResponse response) {
  Reply reply;
  reply.route = Route::kOther;
  reply.response = std::move(response);
  Answer(reply, /*force_close=*/true);
}

void LeanConnection::Flush() {
  dirty_ = false;
  if (phase_ == Phase::kClosed) return;
  while (out_sent_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The rest when epoll says writable, within io_timeout.
      write_deadline_ = loop_.now() + LeanChrono(core_.options.io_timeout);
      loop_.Arm(write_deadline_);
      return;
    }
    Close();
    return;
  }
  out_.clear();
  out_sent_ = 0;
  if (out_.capacity() > kOutKeep) std::string().swap(out_);
  write_deadline_ = Clock::time_point::max();
  if (closing_) {
    StartDrain();
    return;
  }
  Pump();  // parsing may have stopped at kOutHigh
}

// Closing a socket with unread request bytes makes the kernel send RST, which can
// destroy the answer before the client reads it (e.g. a 413 for a body never read).
// So: half-close, read and discard until the client closes, with a time limit.
void LeanConnection::StartDrain() {
  phase_ = Phase::kDrain;
  ::shutdown(fd_, SHUT_WR);
  read_deadline_ = Clock::time_point::max();
  other_deadline_ = loop_.now() + kDrainTime;
  loop_.Arm(other_deadline_);
  if (in_ == nullptr) in_ = std::make_unique<char[]>(kWindow);
  in_begin_ = in_end_ = 0;
  drained_ = false;
  Pump();
}

Clock::time_point LeanConnection::deadline() const {
  return std::min({read_deadline_, write_deadline_, other_deadline_});
}

void LeanConnection::OnDeadline() {
  if (phase_ == Phase::kClosed) return;
  const Clock::time_point now = loop_.now();
  constexpr Clock::time_point kNever = Clock::time_point::max();
  // Each deadline is cleared as it fires (what it leads to sets the next), so a
  // passed one never keeps the loop scanning.
  if (write_deadline_ <= now) {
    write_deadline_ = kNever;
    Close();
  } else if (other_deadline_ <= now) {
    other_deadline_ = kNever;
    if (phase_ == Phase::kWaiting) {
      PollAgain();
    } else {
      Close();  // the drain's time is up
    }
  } else if (read_deadline_ <= now) {
    read_deadline_ = kNever;
    if (phase_ != Phase::kRead) return;
    if (read_deadline_is_header_ && in_request_ && !header_done_) {
      // A header begun and not finished in time (RFC 9110 §15.5.9).
      SetRequestIdFrom(request_id_, "");
      method_ = "-";
      started_ = Clock::now();
      AnswerProblem(MakeProblem(408, "request_timeout", "Request Timeout",
                                "the request header did not arrive in time"));
    } else {
      Close();  // idle too long, or a body that stopped coming
    }
  }
}

void LeanConnection::BeginShutdown() {
  if (phase_ == Phase::kRead && !header_done_) {
    if (out_sent_ < out_.size()) {
      closing_ = true;  // written, then closed
    } else {
      Close();
    }
  } else if (phase_ == Phase::kWaiting) {
    PollAgain();  // answers the 409 in_progress now
  }
  // A request being handled is answered with Connection: close (Answer).
}

void LeanConnection::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  watch_.reset();
  read_deadline_ = write_deadline_ = other_deadline_ = Clock::time_point::max();
  ::close(fd_);  // also leaves the loop's epoll set
  if (!refused_) {
    core_.live.fetch_sub(1);
    core_.handler.metrics().ConnectionClosed();
  }
  if (outstanding_ == 0) loop_.Retire(this);
}

}  // namespace idem::http::lean
