// The headers recon adds to every replay and re-push (e.g. the Authorization an
// authenticated receiver or `idem proxy --client-header Authorization` needs). They
// are secrets, so they come from a file (--replay-header-file) or the environment
// (IDEM_RECON_REPLAY_HEADERS), never the command line, in one format: one
// `Name: value` per line; blank lines and lines starting with '#' are skipped, a
// line starting with a space or TAB (obsolete folding) is refused.
//
// Every header is checked where it enters, before anything is sent: the name an
// RFC 9110 token (at most kMaxHeaderNameBytes), the value (spaces around it
// dropped) 1 to kMaxHeaderValueBytes bytes without a control character (CR, LF,
// NUL, TAB, ...), at most kMaxReplayHeaders headers in kMaxReplayHeaderBytes, no
// name twice, and none of the headers recon sets itself or that frame the message
// (Idempotency-Key, Content-Type, Content-Length, Transfer-Encoding, Host,
// Connection, ...). An error names the origin and the line, and never repeats the
// value.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "recon/dispositions.h"

namespace idem::recon {

inline constexpr size_t kMaxReplayHeaders = 32;
inline constexpr size_t kMaxHeaderNameBytes = 128;
inline constexpr size_t kMaxHeaderValueBytes = 4096;
inline constexpr size_t kMaxReplayHeaderBytes = 16 << 10;  // the whole file or variable

// The headers of `text`; `origin` names it in errors ("FILE" gives "FILE:LINE: …").
// kInvalidArgument for anything the rules above refuse.
absl::StatusOr<std::vector<Header>> ParseReplayHeaders(std::string_view text,
                                                       std::string_view origin);

}  // namespace idem::recon
