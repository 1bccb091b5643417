// Exact decimal amounts: money is never floating point. An amount is kept
// as its canonical decimal text — no leading zeros, no trailing fractional zeros,
// no "-0" — so two amounts are equal exactly when their canonical texts are.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idem::recon {

// The largest --upstream-scale/--local-scale accepted.
inline constexpr int kMaxScale = 18;

// `text` ("1250", "12.50", "-0.5", "+3", ".5"; surrounding spaces allowed) divided
// by 10^scale, in canonical form: ParseDecimal("1250", 2) == "12.5",
// ParseDecimal("012.500", 0) == "12.5". Errors: kInvalidArgument naming what is
// wrong for anything else (exponents, thousands separators, currency signs, empty).
// REQUIRES: 0 <= scale <= kMaxScale.
absl::StatusOr<std::string> ParseDecimal(std::string_view text, int scale);

}  // namespace idem::recon
