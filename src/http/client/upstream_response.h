// UpstreamResponseReader: one HTTP/1.1 answer of `idem proxy`'s upstream, read from
// the bytes as they arrive, in reads of any size, with its body held to a limit in
// bytes that this reader counts itself. Beast's parser does the framing (status line,
// fields, Content-Length, chunked, a body that ends when the connection does); its
// own body_limit is not relied on (Boost 1.74 loses the error when body bytes come in
// the same read as the header). Upstream::Send feeds it from the socket; the fuzzer
// (tests/fuzz/fuzz_upstream_response.cc) from a buffer.
//
//   UpstreamResponseReader reader(8 << 20, /*head=*/false);
//   while (!reader.done()) {
//     ... read some bytes; on EOF: status = reader.Finish(); break;
//     if (absl::Status s = reader.Consume(bytes); !s.ok()) return s;
//   }
//   UpstreamResponse answer = reader.Take();
//
// Memory: the body, at most `max_body_bytes` (never reserved beyond it), and at most
// 64 KiB of bytes not yet parsed (a header, a chunk-size line).
//
// Thread safety: one reader per answer, used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace idem::http {

struct UpstreamResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // as received, in order
  std::string body;
};

class UpstreamResponseReader {
 public:
  // The header may be at most this long, and so may any other run of bytes that
  // must arrive whole before it can be parsed (a chunk-size line, the trailers).
  static constexpr size_t kMaxPendingBytes = 64 << 10;

  // `head`: the answer is to a HEAD request (no body, whatever it declares).
  UpstreamResponseReader(size_t max_body_bytes, bool head);
  ~UpstreamResponseReader();
  UpstreamResponseReader(const UpstreamResponseReader&) = delete;
  UpstreamResponseReader& operator=(const UpstreamResponseReader&) = delete;

  // Takes `bytes`, the next ones the upstream sent. Interim answers (1xx but 101)
  // are skipped; bytes after the end of the answer are ignored. Errors (sticky: every
  // later call returns the same one):
  //   kResourceExhausted  the body is over the limit: a Content-Length over it (said
  //                       as soon as the header is in, before any body byte is
  //                       taken), or a chunked or close-delimited body that passes it;
  //   kUnavailable        the bytes are not an HTTP/1.1 answer (malformed, a header
  //                       or a chunk-size line over kMaxPendingBytes, a 101).
  absl::Status Consume(std::string_view bytes);

  // The upstream closed the connection: ends a body that is delimited by the close.
  // kUnavailable when the answer is not whole (nothing, a cut header, fewer body bytes
  // than declared, an unfinished chunked body); the error of Consume if it gave one.
  absl::Status Finish();

  // Whether the whole answer is in (Take may be called).
  bool done() const { return done_; }

  // The answer. REQUIRES: done(); called once.
  UpstreamResponse Take();

 private:
  struct Parser;
  // A fresh parser for the next answer (the first, or the one after a 1xx).
  void Reset();
  // Parses what `pending_` holds from `offset` on; returns where it stopped.
  size_t Parse(size_t offset);
  absl::Status Fail(absl::Status status);

  const size_t max_body_bytes_;
  const bool head_;
  std::unique_ptr<Parser> parser_;
  bool header_checked_ = false;  // the current answer's header was judged
  std::string pending_;           // bytes received and not yet taken by the parser
  absl::Status status_;           // the first error, kept
  bool done_ = false;
};

}  // namespace idem::http
