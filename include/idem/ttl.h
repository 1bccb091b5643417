// Retention: how long a dedupe record must be kept.
//
//   TTL = max(upstream redelivery window, reconciliation cycle,
//             downstream confirmation window) + safety margin
//
// A record removed before the last possible duplicate arrives lets that duplicate
// through, so the TTL is derived from the windows in which a duplicate can still
// arrive, never picked by hand. DeriveTtl() computes it and keeps every term so the
// derivation can be shown; CheckConfiguredTtl() refuses a configured TTL below it.
//
//   auto d = idem::DeriveTtl({.redelivery_window = absl::Minutes(10),
//                             .recon_cycle = absl::Hours(24 * 30),
//                             .confirm_window = absl::Hours(24 * 3),
//                             .safety_margin = absl::Hours(24 * 60)});
//   // d->total == 90 days, d->dominant == TtlWindow::kReconCycle
//   IDEM_RETURN_IF_ERROR(idem::CheckConfiguredTtl(configured, *d));
//
// Thread safety: pure functions on values; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace idem {

// The largest duration any TTL term or total may have: what fits in int64
// nanoseconds (about 106 751 days), so every store can hold it.
inline constexpr absl::Duration kMaxTtlDuration = absl::Nanoseconds(INT64_MAX);

struct TtlInputs {
  // Upstream redelivery window: how long after the first delivery the same
  // message can arrive again (broker retention, consumer max.poll.interval,
  // rebalances, producer retries, cross-month reversals).
  absl::Duration redelivery_window = absl::ZeroDuration();
  // Reconciliation cycle: how late reconciliation may replay a missing effect
  // through the guard (T+1 for daily finance runs, T+30 for cross-month ones).
  absl::Duration recon_cycle = absl::ZeroDuration();
  // Downstream confirmation window: how long until the downstream side's answer
  // is final (a payment channel's clearing cycle, e.g. T+3).
  absl::Duration confirm_window = absl::ZeroDuration();
  // Safety margin added on top of the largest window.
  absl::Duration safety_margin = absl::ZeroDuration();
};

// The three windows of the formula, in the formula's order.
enum class TtlWindow {
  kRedelivery,
  kReconCycle,
  kConfirmWindow,
};

// Returns "upstream redelivery window", "reconciliation cycle" or
// "downstream confirmation window".
std::string_view TtlWindowName(TtlWindow window);

// Returns the machine name: "redelivery", "recon_cycle" or "confirm_window".
std::string_view TtlWindowId(TtlWindow window);

struct TtlDerivation {
  TtlInputs inputs;
  // The window that decided the max. On a tie the earliest in the formula's order
  // (redelivery, then reconciliation, then confirmation) is named.
  TtlWindow dominant = TtlWindow::kRedelivery;
  absl::Duration dominant_window = absl::ZeroDuration();  // max of the three windows
  absl::Duration safety_margin = absl::ZeroDuration();
  absl::Duration total = absl::ZeroDuration();  // dominant_window + safety_margin
};

// Computes TTL = max(redelivery, recon cycle, confirm window) + safety margin.
// Returns kInvalidArgument naming the term when a term is negative or infinite, or
// when the total exceeds kMaxTtlDuration. A total of zero is allowed (it means a
// duplicate can never arrive, which only a caller can know).
absl::StatusOr<TtlDerivation> DeriveTtl(const TtlInputs& inputs);

// Returns OK when `configured` is at least `derived.total`; else
// kFailedPrecondition naming both values and the dominant window, e.g.
// "configured TTL 30d is below the derived TTL 90d (reconciliation cycle 30d +
// safety margin 60d)". The record store must not use a shorter TTL.
absl::Status CheckConfiguredTtl(absl::Duration configured, const TtlDerivation& derived);

// Parses a duration as written on the command line or in the config file: one or
// more <digits><unit> terms with units d, h, m, s, ms, each unit at most once and
// from the largest to the smallest: "10m", "30d", "500ms", "1d12h", "0s".
// Returns kInvalidArgument naming `flag` and `text` for an empty string, a sign,
// a missing or unknown unit, a fraction, a repeated or out-of-order unit, or a
// value above kMaxTtlDuration.
absl::StatusOr<absl::Duration> ParseTtlDuration(std::string_view text, std::string_view flag);

// Formats `d` in the units ParseTtlDuration reads, largest first, skipping zero
// terms: "90d", "1d12h", "10m", "1s500ms", "0s". Sub-millisecond parts are shown
// as "<n>us"/"<n>ns" (ParseTtlDuration does not read them). Negative values get a
// leading "-"; infinite ones are "inf" / "-inf".
// ParseTtlDuration(FormatTtlDuration(d)) == d for every whole-millisecond d in range.
std::string FormatTtlDuration(absl::Duration d);

// Formats `d` as a number of days for people: "90 days", "1 day", "1.5 days",
// "0.007 days" (at most three decimals, trailing zeros dropped).
std::string FormatTtlDays(absl::Duration d);

}  // namespace idem
