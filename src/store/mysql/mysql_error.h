// How MySQL/MariaDB errors become absl codes for the mysql:// store
// (retryable or not). Not part of the public API.
//
// Thread safety: pure functions and constants.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace idem::mysql {

// The payload type URL set on the kUnavailable status of a statement that waited
// longer than innodb_lock_wait_timeout for another transaction's row lock (error
// 1205). A claim that meets it is waiting on a live holder of the same key, which
// the Guard can report as Outcome::kInProgress instead of a store outage.
inline constexpr std::string_view kLockWaitTimeoutPayload = "type.idem.dev/idem.LockWaitTimeout";

// True for the client/server errors after which the connection is unusable (lost,
// killed, timed out, server shutting down): it must be dropped, not reused.
bool IsConnectionError(unsigned int err);

// Maps a MySQL error number (with its SQLSTATE as a fallback) to the absl code a
// caller should act on (retryable or not). The message carries `context`, the
// error number, the SQLSTATE and the server's text.
absl::Status ToStatus(unsigned int err, std::string_view sqlstate, std::string_view message,
                      std::string_view context);

}  // namespace idem::mysql
