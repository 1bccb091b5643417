#include "http/server/connection.h"

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "http/server/exchange.h"
#include "http/server/problem.h"
#include "http/server/render.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

// The request fields OnHeader reads, found in one pass (the first of each, as
// operator[] gives) instead of a case-insensitive tree search per field: ~4 % of a
// duplicate.
struct ConnectionHeaderFields {
  beast::string_view request_id, transfer_encoding, authorization, expect, cookie;
  int hosts = 0;
};

ConnectionHeaderFields ScanConnectionHeader(const bhttp::fields& req) {
  ConnectionHeaderFields out;
  bool seen_id = false, seen_coding = false, seen_auth = false, seen_expect = false;
  bool seen_cookie = false;
  auto first = [](bool& seen, beast::string_view& into, beast::string_view value) {
    if (!seen) into = value;
    seen = true;
  };
  for (const auto& f : req) {
    switch (f.name()) {
      case bhttp::field::transfer_encoding:
        first(seen_coding, out.transfer_encoding, f.value());
        break;
      case bhttp::field::authorization:
        first(seen_auth, out.authorization, f.value());
        break;
      case bhttp::field::expect:
        first(seen_expect, out.expect, f.value());
        break;
      case bhttp::field::cookie:
        first(seen_cookie, out.cookie, f.value());
        break;
      case bhttp::field::host:
        ++out.hosts;
        break;
      case bhttp::field::unknown:
        if (beast::iequals(f.name_string(), "x-request-id")) {
          first(seen_id, out.request_id, f.value());
        }
        break;
      default:
        break;
    }
  }
  return out;
}

}  // namespace

Connection::Connection(ConnectionSocket&& socket, ServerShared shared)
    : shared_(shared), stream_(std::move(socket)), timer_(stream_.get_executor()) {}

void Connection::Start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
}

void Connection::BeginShutdown() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->state_ == State::kIdle) {
      self->Close();
    } else if (self->state_ == State::kWaiting) {
      self->timer_.cancel();  // OnTimer sees `stopping` and answers now
    }
    // kBusy: the answer goes out with Connection: close (see Send).
  });
}

void Connection::ReadHeader() {
  if (shared_.stopping.load() || state_ == State::kClosed) {
    Close();
    return;
  }
  state_ = State::kIdle;
  parser_.emplace();
  // No limit while the header is read: the declared length is judged in OnHeader,
  // after the token, so a client without one is told 401, not 413. (Not
  // boost::none: Boost 1.74's parser compares a Content-Length with the optional
  // itself, and every length is greater than none.)
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  parser_->header_limit(static_cast<std::uint32_t>(shared_.options.max_header_bytes));
  if (buffer_.size() > 0) {  // a pipelined request is already here
    ReadRestOfHeader();
    return;
  }
  // Idle between requests: wait up to idle_timeout for a first byte, then give the
  // header its own deadline.
  stream_.expires_after(Chrono(shared_.options.idle_timeout));
  stream_.async_read_some(buffer_.prepare(8192), [self = shared_from_this()](
                                                     beast::error_code ec, std::size_t n) {
    self->buffer_.commit(n);
    if (ec) {
      self->OnReadError(ec);  // EOF, reset, idle timeout: closes quietly
    } else {
      self->ReadRestOfHeader();
    }
  });
}

std::optional<beast::error_code> Connection::ParseBuffered(bool header_only) {
  const auto done = [&] { return header_only ? parser_->is_header_done() : parser_->is_done(); };
  beast::error_code ec;
  while (!done() && buffer_.size() > 0) {
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) return std::nullopt;
    if (ec) return ec;
    if (used == 0) return std::nullopt;
  }
  if (done()) return beast::error_code();
  return std::nullopt;
}

void Connection::ReadRestOfHeader() {
  // A request usually arrives whole in the first read: parsed here, it costs no
  // timer and no round trip through the scheduler (a fifth of the duplicate path's
  // instructions in a callgrind profile went to those).
  if (std::optional<beast::error_code> parsed = ParseBuffered(/*header_only=*/true)) {
    OnHeader(*parsed);
    return;
  }
  in_header_ = true;
  header_expired_ = false;
  // A timer of our own, not the stream's expiry: that one closes the socket, and
  // the 408 still has to go out on it.
  stream_.expires_never();
  timer_.expires_after(Chrono(shared_.options.header_timeout));
  timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->in_header_) return;
    self->header_expired_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);  // OnHeader sees operation_aborted
  });
  bhttp::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnHeader(ec); });
}

void Connection::OnHeader(beast::error_code ec) {
  in_header_ = false;
  timer_.cancel();
  if (ec) {
    OnReadError(ec);
    return;
  }
  state_ = State::kBusy;
  const auto& req = parser_->get();
  version_ = req.version();
  const ConnectionHeaderFields fields = ScanConnectionHeader(req);
  request_id_ = RequestIdFrom(std::string_view(fields.request_id.data(), fields.request_id.size()));
  head_ = req.method() == bhttp::verb::head;
  method_ = std::string(req.method_string());
  started_ = std::chrono::steady_clock::now();
  if (std::optional<HttpResponse> refused = RefuseHeader(fields.hosts, std::string_view(fields.transfer_encoding.data(), fields.transfer_encoding.size()))) {
    Reply reply;
    reply.route = Route::kOther;
    reply.response = *std::move(refused);
    Send(reply, /*force_close=*/true);
    return;
  }
  // Routed once, here: the Call carries what the Handler made of the request to
  // every step after.
  HttpRequest head;
  head.method = method_;
  head.target = OriginForm(std::string_view(req.target().data(), req.target().size()));
  head.authorization = std::string(fields.authorization.data(), fields.authorization.size());
  head.cookie = std::string(fields.cookie.data(), fields.cookie.size());
  head.request_id = request_id_;
  head.received = started_;
  call_ = shared_.api.Begin(std::move(head));
  if (!parser_->is_done()) {  // a body is to come: authenticate before reading it
    std::optional<Reply> refused = call_->BeforeBody();
    if (refused.has_value()) {
      Send(*refused, /*force_close=*/true);  // the body is drained unread (DrainAndClose)
      return;
    }
  }
  // A declared body over the limit is refused before any of it is read; a chunked
  // one when its chunks pass the limit (the parser's body_limit).
  if (const boost::optional<std::uint64_t> length = parser_->content_length();
      length.has_value() && *length > shared_.options.max_body_bytes) {
    OnReadError(bhttp::error::body_limit);
    return;
  }
  parser_->body_limit(shared_.options.max_body_bytes);
  if (absl::EqualsIgnoreCase(absl::string_view(fields.expect.data(), fields.expect.size()),
                             "100-continue") &&
      !parser_->is_done()) {
    continue_ =
        std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
    stream_.expires_after(Chrono(shared_.options.io_timeout));
    bhttp::async_write(stream_, *continue_,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (ec) {
                           self->Close();
                         } else {
                           self->ReadBody();
                         }
                       });
    return;
  }
  ReadBody();
}

void Connection::ReadBody() {
  if (std::optional<beast::error_code> parsed = ParseBuffered(/*header_only=*/false)) {
    OnBody(*parsed);
    return;
  }
  stream_.expires_after(Chrono(shared_.options.io_timeout));
  bhttp::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnBody(ec); });
}

void Connection::OnReadError(beast::error_code ec) {
  if (state_ == State::kIdle) {  // no header was read
    request_id_ = RequestIdFrom("");
    method_ = "-";
    started_ = std::chrono::steady_clock::now();
  }
  Reply reply;
  reply.route = Route::kOther;
  if (header_expired_ && ec == asio::error::operation_aborted) {
    // A header begun and not finished in time (RFC 9110 §15.5.9).
    header_expired_ = false;
    reply.response = MakeProblem(408, "request_timeout", "Request Timeout",
                                 "the request header did not arrive in time");
  } else if (ec == bhttp::error::body_limit) {
    reply.response = BodyTooLarge(shared_.options.max_body_bytes);
  } else if (ec == bhttp::error::header_limit) {
    reply.response = HeaderTooLarge();
  } else if (ec.category() == beast::error_code(bhttp::error::bad_target).category() &&
             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
             ec != bhttp::error::need_more && ec != bhttp::error::need_buffer) {
    reply.response = BadHttp(ec.message());
  } else {
    // EOF, reset, timeout, cancelled by shutdown: nothing to answer.
    Close();
    return;
  }
  state_ = State::kBusy;
  Send(reply, /*force_close=*/true);
}

void Connection::OnBody(beast::error_code ec) {
  if (ec) {
    OnReadError(ec);
    return;
  }
  Request req = parser_->release();
  keep_alive_ = req.keep_alive();
  HttpRequest& request = call_->request();
  // (Read here, not with the header: a chunked body's trailer fields join them.)
  if (shared_.api.wants_headers()) {
    for (const auto& field : req) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
  }
  request.body = std::move(req.body());
  Dispatch();
}

void Connection::Dispatch() {
  // A duplicate the Handler can answer from memory is answered here, on the I/O
  // thread: no hop to the worker pool and back.
  std::optional<Reply> now;
  try {
    now = call_->AnswerWithoutBlocking();
  } catch (const std::exception&) {
    now.reset();  // the pool's Answer() reports it properly
  }
  if (now.has_value()) {
    Send(*now, /*force_close=*/false);
    return;
  }
  // A write the store makes without blocking (rocksdb://) starts here too; its
  // answer is built back on this connection's thread once the write is durable. The work guard
  // keeps the I/O threads running until then, as RunOnPool's does.
  const bool started =
      call_->StartAsync([self = shared_from_this(),
                         work = asio::make_work_guard(shared_.ioc)](std::function<Reply()> answer) {
        asio::post(self->stream_.get_executor(),
                   [self, answer = std::move(answer)] { self->OnReply(answer()); });
      });
  if (started) return;
  RunOnPool(nullptr);
}

void Connection::RunOnPool(std::shared_ptr<const Waiting> waiting) {
  shared_.api.metrics().CountPoolRequest();
  // The work guard keeps the I/O threads running while the reply is computed, even
  // when nothing else is pending on the io_context (e.g. during shutdown).
  // call_ stays until the answer is sent (Send), and `self` keeps it.
  asio::post(shared_.pool, [self = shared_from_this(), waiting = std::move(waiting),
                            call = call_.get(),
                            work = asio::make_work_guard(shared_.ioc)]() mutable {
    Reply reply = waiting ? waiting->Poll() : call->Answer();
    asio::post(self->stream_.get_executor(),
               [self, reply = std::move(reply)]() mutable { self->OnReply(std::move(reply)); });
  });
}

void Connection::OnReply(Reply reply) {
  if (state_ == State::kClosed) return;
  if (reply.waiting != nullptr && !shared_.stopping.load()) {
    state_ = State::kWaiting;
    // Woken early when the key is finished through this process (Waiting::Watch):
    // the timer is cancelled on the connection's thread and OnTimer polls at once.
    watch_ = reply.waiting->Watch([weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        asio::post(self->stream_.get_executor(), [self] {
          if (self->state_ == State::kWaiting) self->timer_.cancel();
        });
      }
    });
    timer_.expires_after(Chrono(reply.poll_after));
    waiting_reply_ = std::move(reply);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) { self->OnTimer(ec); });
    return;
  }
  Send(reply, /*force_close=*/false);
}

void Connection::OnTimer(beast::error_code) {
  if (state_ != State::kWaiting || !waiting_reply_) return;
  watch_.reset();
  Reply reply = std::move(*waiting_reply_);
  waiting_reply_.reset();
  state_ = State::kBusy;
  if (shared_.stopping.load()) {
    reply.waiting = nullptr;  // answer with the latest 409 in_progress
    Send(reply, /*force_close=*/true);
    return;
  }
  RunOnPool(reply.waiting);
}

void Connection::Send(const Reply& reply, bool force_close) {
  call_.reset();  // answered: nothing runs it any more, and its body is let go
  CountAndLogAnswer(shared_.api.metrics(), reply, method_, request_id_, started_);
  const bool close = force_close || !keep_alive_ || shared_.stopping.load();
  RenderResponse(reply.response,
                 {.version = version_, .keep_alive = !close, .head = head_,
                  .request_id = request_id_},
                 out_);
  stream_.expires_after(Chrono(shared_.options.io_timeout));
  asio::async_write(stream_, asio::buffer(out_),
                    [self = shared_from_this(), close](beast::error_code ec, std::size_t) {
                      self->OnWrite(close, ec);
                    });
}

void Connection::OnWrite(bool close, beast::error_code ec) {
  if (ec) {
    Close();
  } else if (close) {
    DrainAndClose();
  } else {
    ReadHeader();
  }
}

// Closing a socket with unread request bytes makes the kernel send RST, which can
// destroy the answer before the client reads it (e.g. a 413 for a body never read).
// So: half-close, read and discard until the client closes, with a time limit.
void Connection::DrainAndClose() {
  if (state_ != State::kClosed) {
    state_ = State::kClosed;
    beast::error_code ec;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
  }
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(64 << 10),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) {
                              self->Close();
                            } else {
                              self->DrainAndClose();
                            }
                          });
}

void Connection::Close() {
  state_ = State::kClosed;
  watch_.reset();
  timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace idem::http
