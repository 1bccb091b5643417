#include "http/client/upstream_response.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace idem::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

}  // namespace

// A string body that refuses to grow past value_type::limit: the check Beast's own
// body_limit is meant to make, made by the body itself, for every framing (a
// Content-Length announced, chunks, bytes until the connection closes). Capacity
// never exceeds the limit either, so a body at the limit holds limit bytes, not the
// next power of two. (Not in an anonymous namespace: Parser, a member of the
// reader, holds one.)
struct UpstreamCappedBody {
  struct value_type {
    std::string bytes;
    size_t limit = 0;
  };

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(bhttp::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, beast::error_code& ec) {
      if (length.has_value() && *length > body_.limit) {
        ec = bhttp::error::body_limit;
        return;
      }
      if (length.has_value()) body_.bytes.reserve(static_cast<size_t>(*length));
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      const size_t n = asio::buffer_size(buffers);
      std::string& bytes = body_.bytes;
      if (n > body_.limit - bytes.size()) {
        ec = bhttp::error::body_limit;
        return 0;
      }
      if (bytes.size() + n > bytes.capacity()) {
        bytes.reserve(std::min(body_.limit, std::max(bytes.size() + n, 2 * bytes.capacity())));
      }
      for (const auto& b : beast::buffers_range_ref(buffers)) {
        bytes.append(static_cast<const char*>(b.data()), b.size());
      }
      ec = {};
      return n;
    }

    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

struct UpstreamResponseReader::Parser {
  bhttp::response_parser<UpstreamCappedBody> p;
};

UpstreamResponseReader::UpstreamResponseReader(size_t max_body_bytes, bool head)
    : max_body_bytes_(max_body_bytes), head_(head) {
  Reset();
}

UpstreamResponseReader::~UpstreamResponseReader() = default;

void UpstreamResponseReader::Reset() {
  parser_ = std::make_unique<Parser>();
  auto& p = parser_->p;
  // Counted by the body itself (UpstreamCappedBody). Not boost::none: Boost 1.74's
  // parser compares a Content-Length with the optional itself.
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  p.header_limit(static_cast<std::uint32_t>(kMaxPendingBytes));
  p.get().body().limit = max_body_bytes_;
  if (head_) p.skip(true);
  // Not eager until the header is judged: the first put stops at the end of the
  // header, so a Content-Length over the limit is refused before any body byte.
  p.eager(false);
  header_checked_ = false;
}

absl::Status UpstreamResponseReader::Fail(absl::Status status) {
  status_ = std::move(status);
  pending_.clear();
  pending_.shrink_to_fit();
  return status_;
}

absl::Status UpstreamResponseReader::Consume(std::string_view bytes) {
  if (!status_.ok()) return status_;
  if (done_) return absl::OkStatus();
  pending_.append(bytes);
  size_t offset = 0;
  while (!done_ && offset < pending_.size()) {
    auto& p = parser_->p;
    beast::error_code ec;
    const size_t used = p.put(asio::buffer(pending_.data() + offset, pending_.size() - offset), ec);
    offset += used;
    if (ec == bhttp::error::need_more) {
      if (used == 0) break;
      continue;
    }
    if (ec == bhttp::error::body_limit) {
      return Fail(absl::ResourceExhaustedError(absl::StrCat(
          "the upstream's answer has a body larger than the limit (", max_body_bytes_, " bytes)")));
    }
    if (ec == bhttp::error::header_limit) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "the upstream's answer has a header larger than ", kMaxPendingBytes, " bytes")));
    }
    if (ec) {
      return Fail(absl::UnavailableError(
          absl::StrCat("the upstream's answer is not valid HTTP/1.1: ", ec.message())));
    }
    if (p.is_header_done() && !header_checked_) {
      header_checked_ = true;
      const unsigned status = p.get().result_int();
      if (status < 100) {
        return Fail(absl::UnavailableError(
            absl::StrCat("the upstream answered with status ", status, ", not one of HTTP's")));
      }
      if (status == 101) {
        return Fail(absl::UnavailableError("the upstream switched protocols (101)"));
      }
      const boost::optional<std::uint64_t> length = p.content_length();
      if (!p.is_done() && length.has_value() && *length > max_body_bytes_) {
        return Fail(absl::ResourceExhaustedError(
            absl::StrCat("the upstream's answer declares a body of ", *length,
                         " bytes, more than the limit (", max_body_bytes_, " bytes)")));
      }
      p.eager(true);
    }
    if (p.is_done()) {
      if (p.get().result_int() < 200) {
        Reset();  // an interim answer (100 Continue, 103 Early Hints): the real one follows
      } else {
        done_ = true;
      }
    } else if (used == 0) {
      break;
    }
  }
  pending_.erase(0, offset);
  if (!done_ && pending_.size() > kMaxPendingBytes) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "the upstream's answer has a line or header larger than ", kMaxPendingBytes, " bytes")));
  }
  return absl::OkStatus();
}

absl::Status UpstreamResponseReader::Finish() {
  if (!status_.ok()) return status_;
  if (done_) return absl::OkStatus();
  auto& p = parser_->p;
  if (!p.got_some()) {
    return Fail(absl::UnavailableError("the upstream closed the connection without an answer"));
  }
  beast::error_code ec;
  p.put_eof(ec);
  if (ec || !p.is_done()) {
    return Fail(absl::UnavailableError(
        "the upstream closed the connection before its answer was whole"));
  }
  done_ = true;
  return absl::OkStatus();
}

UpstreamResponse UpstreamResponseReader::Take() {
  bhttp::response<UpstreamCappedBody> message = parser_->p.release();
  UpstreamResponse out;
  out.status = static_cast<int>(message.result_int());
  for (const auto& field : message) {
    out.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  out.body = std::move(message.body().bytes);
  return out;
}

}  // namespace idem::http
