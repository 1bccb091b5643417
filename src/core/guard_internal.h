// What guard.cc shares with the other files of the Guard (guard_in_transaction.cc).
// Internal to src/core.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace idem::internal {

// The bytes cached for a handler's final error: {"code":"…","message":"…"}, a JSON
// object, so the HTTP API can hand it out as any other stored error.
std::string FailureBytes(const absl::Status& status);

}  // namespace idem::internal
