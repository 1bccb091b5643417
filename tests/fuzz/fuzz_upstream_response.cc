// Fuzzes the reader of `idem proxy`'s upstream answers (http/client/upstream_response.h,
// UpstreamResponseReader) with the bytes a fake upstream sends, split into reads of
// arbitrary sizes, then the end of the connection.
//
// Input: byte 0-1 the body limit (1..65536), byte 2 bit 0 a HEAD request, bits 1-7
// and byte 3 seed the read sizes; the rest is what the upstream sends.
//
// Properties: errors are kResourceExhausted or kUnavailable with a message, and
// sticky; a whole answer has a final status (200-999), a body within the limit
// (none for HEAD); the outcome does not depend on how the bytes were split into
// reads (the same status, headers and body, or the same error code).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "http/client/upstream_response.h"

namespace idem::fuzz {
namespace {

struct Outcome {
  absl::Status status;
  std::optional<http::UpstreamResponse> answer;
};

// Feeds `bytes` in reads whose sizes come from `seed` (0: one read), then the end.
Outcome Read(std::string_view bytes, size_t limit, bool head, uint32_t seed) {
  http::UpstreamResponseReader reader(limit, head);
  Outcome out;
  uint32_t state = seed | 1;
  while (!bytes.empty() && out.status.ok() && !reader.done()) {
    size_t n = bytes.size();
    if (seed != 0) {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      n = std::min<size_t>(n, 1 + state % (1u << (1 + state % 12)));
    }
    out.status = reader.Consume(bytes.substr(0, n));
    bytes.remove_prefix(n);
    if (!out.status.ok()) {
      // Sticky: any later call says the same.
      Check(reader.Consume("HTTP/1.1 200 OK\r\n\r\n").code() == out.status.code(),
            "an error is sticky (Consume)");
      Check(reader.Finish().code() == out.status.code(), "an error is sticky (Finish)");
    }
  }
  if (out.status.ok() && !reader.done()) out.status = reader.Finish();
  if (!out.status.ok()) {
    Check(out.status.code() == absl::StatusCode::kResourceExhausted ||
              out.status.code() == absl::StatusCode::kUnavailable,
          "an error is kResourceExhausted or kUnavailable", out.status.ToString());
    Check(!out.status.message().empty(), "an error says what is wrong");
    Check(!reader.done(), "no answer after an error");
    return out;
  }
  Check(reader.done(), "no error means a whole answer");
  out.answer = reader.Take();
  return out;
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  if (size < 4) return 0;
  const size_t limit = 1 + ((size_t{data[0]} << 8) | data[1]);
  const bool head = (data[2] & 1) != 0;
  const uint32_t seed = (uint32_t{data[2]} << 7) ^ (uint32_t{data[3]} << 16) ^ 0x9e3779b9u;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 4, size - 4);

  const idem::fuzz::Outcome split = idem::fuzz::Read(bytes, limit, head, seed);
  if (split.answer.has_value()) {
    const auto& a = *split.answer;
    Check(a.status >= 200 && a.status <= 999, "a whole answer has a final status",
          std::to_string(a.status));
    Check(a.body.size() <= limit, "the body is within the limit",
          std::to_string(a.body.size()) + " > " + std::to_string(limit));
    Check(!head || a.body.empty(), "an answer to HEAD has no body");
  }
  // Longer runs than the reader's pending-bytes bound may be refused in small reads
  // and parsed whole in one: compare only below it.
  if (bytes.size() > idem::http::UpstreamResponseReader::kMaxPendingBytes) return 0;
  const idem::fuzz::Outcome whole = idem::fuzz::Read(bytes, limit, head, 0);
  Check(whole.status.code() == split.status.code(),
        "the outcome does not depend on the reads' sizes",
        whole.status.ToString() + " vs " + split.status.ToString());
  if (whole.answer.has_value()) {
    Check(whole.answer->status == split.answer->status, "the same status either way");
    Check(whole.answer->headers == split.answer->headers, "the same headers either way");
    Check(whole.answer->body == split.answer->body, "the same body either way");
  }
  return 0;
}
