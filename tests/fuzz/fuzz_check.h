// What the fuzzers (tests/fuzz/) share: a property check that aborts with a
// message, so libFuzzer saves the input as a crash.
//
// Thread safety: plain functions.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/status/status.h"

namespace idem::fuzz {

// Aborts with `what` (and `detail`) on stderr unless `ok`.
inline void Check(bool ok, std::string_view what, std::string_view detail = {}) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property violated: %.*s%s%.*s\n", static_cast<int>(what.size()),
               what.data(), detail.empty() ? "" : ": ", static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

// An error a parser reports on bad input: kInvalidArgument with a message.
inline void CheckBadInput(const absl::Status& s, std::string_view what) {
  Check(s.code() == absl::StatusCode::kInvalidArgument,
        "an error on bad input is kInvalidArgument", what);
  Check(!s.message().empty(), "an error on bad input says what is wrong", what);
}

}  // namespace idem::fuzz
