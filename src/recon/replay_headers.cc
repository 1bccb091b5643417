#include "recon/replay_headers.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "idem/key.h"

namespace idem::recon {
namespace {

// RFC 9110 tchar: "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" /
// "_" / "`" / "|" / "~" / DIGIT / ALPHA.
bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Header names compare without regard to case (RFC 9110).
bool SameHeaderName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Headers recon sets, or that decide where a message ends or goes: a value from the
// file would contradict what recon sends, or smuggle a second request.
constexpr std::string_view kReservedHeaders[] = {"Idempotency-Key",
                                                 "Content-Type",
                                                 "Content-Length",
                                                 "Transfer-Encoding",
                                                 "Host",
                                                 "Connection",
                                                 "Keep-Alive",
                                                 "Proxy-Connection",
                                                 "TE",
                                                 "Trailer",
                                                 "Upgrade",
                                                 "Expect",
                                                 "X-Request-Id"};

}  // namespace

absl::StatusOr<std::vector<Header>> ParseReplayHeaders(std::string_view text,
                                                       std::string_view origin) {
  const std::string where(origin);
  if (text.size() > kMaxReplayHeaderBytes) {
    return absl::InvalidArgumentError(where + ": longer than " +
                                      std::to_string(kMaxReplayHeaderBytes) + " bytes");
  }
  std::vector<Header> out;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string here = where + ":" + std::to_string(line_no) + ": ";
    if (line.find_first_not_of(" \t") == std::string_view::npos || line.front() == '#') continue;
    if (line.front() == ' ' || line.front() == '\t') {
      return absl::InvalidArgumentError(
          here + "a continuation line (obsolete line folding) is not accepted: one header a line");
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(here + "not a header line (Name: value)");
    }
    const std::string_view name = line.substr(0, colon);
    if (name.empty() || name.size() > kMaxHeaderNameBytes ||
        !std::all_of(name.begin(), name.end(), IsTokenChar)) {
      return absl::InvalidArgumentError(here + "the header name " + EscapeControl(name, 60) +
                                        " is not a token (1 to " +
                                        std::to_string(kMaxHeaderNameBytes) +
                                        " letters, digits or !#$%&'*+-.^_`|~, nothing before it)");
    }
    for (std::string_view reserved : kReservedHeaders) {
      if (SameHeaderName(name, reserved)) {
        return absl::InvalidArgumentError(here + std::string(name) +
                                          " is set by recon itself or frames the request; it "
                                          "cannot be added");
      }
    }
    for (const Header& h : out) {
      if (SameHeaderName(h.first, name)) {
        return absl::InvalidArgumentError(here + std::string(name) + " is given twice");
      }
    }
    // The spaces around the value (RFC 9110 OWS) are not part of it.
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    if (absl::Status s =
            ValidateFieldValue("the value of " + std::string(name), value, kMaxHeaderValueBytes);
        !s.ok()) {
      return absl::InvalidArgumentError(here + std::string(s.message()));
    }
    if (out.size() == kMaxReplayHeaders) {
      return absl::InvalidArgumentError(here + "more than " + std::to_string(kMaxReplayHeaders) +
                                        " headers");
    }
    out.emplace_back(std::string(name), std::string(value));
  }
  return out;
}

}  // namespace idem::recon
