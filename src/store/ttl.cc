#include "idem/ttl.h"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "store/absl_compat.h"

namespace idem {
namespace {

constexpr int64_t kNanosPerMs = 1'000'000;
constexpr int64_t kNanosPerSecond = 1'000 * kNanosPerMs;
constexpr int64_t kNanosPerMinute = 60 * kNanosPerSecond;
constexpr int64_t kNanosPerHour = 60 * kNanosPerMinute;
constexpr int64_t kNanosPerDay = 24 * kNanosPerHour;

struct DurationUnit {
  std::string_view name;
  int64_t nanos;
};

// Largest first; a duration names each unit at most once and in this order, so
// "1d12h" is read one way only and a slip such as "12h1d" or "5m5m" is caught.
constexpr DurationUnit kUnits[] = {
    {"d", kNanosPerDay},    {"h", kNanosPerHour}, {"m", kNanosPerMinute},
    {"s", kNanosPerSecond}, {"ms", kNanosPerMs},
};

absl::Status BadDuration(std::string_view flag, std::string_view text, std::string_view why) {
  std::string prefix = flag.empty() ? "" : absl::StrCat(AV(flag), ": ");
  return absl::InvalidArgumentError(
      absl::StrCat(prefix, "invalid duration \"", absl::CEscape(AV(text)), "\": ", AV(why)));
}

absl::Status CheckTerm(std::string_view name, absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(name), " must be finite"));
  }
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(name), " must not be negative, got ", FormatTtlDuration(d)));
  }
  if (d > kMaxTtlDuration) {
    return absl::InvalidArgumentError(absl::StrCat(AV(name), " ", FormatTtlDuration(d),
                                                   " exceeds the maximum ",
                                                   FormatTtlDuration(kMaxTtlDuration)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view TtlWindowName(TtlWindow window) {
  switch (window) {
    case TtlWindow::kRedelivery:
      return "upstream redelivery window";
    case TtlWindow::kReconCycle:
      return "reconciliation cycle";
    case TtlWindow::kConfirmWindow:
      return "downstream confirmation window";
  }
  return "unknown window";
}

std::string_view TtlWindowId(TtlWindow window) {
  switch (window) {
    case TtlWindow::kRedelivery:
      return "redelivery";
    case TtlWindow::kReconCycle:
      return "recon_cycle";
    case TtlWindow::kConfirmWindow:
      return "confirm_window";
  }
  return "unknown";
}

absl::StatusOr<TtlDerivation> DeriveTtl(const TtlInputs& inputs) {
  const std::pair<TtlWindow, absl::Duration> windows[] = {
      {TtlWindow::kRedelivery, inputs.redelivery_window},
      {TtlWindow::kReconCycle, inputs.recon_cycle},
      {TtlWindow::kConfirmWindow, inputs.confirm_window},
  };
  for (const auto& [window, d] : windows) {
    if (absl::Status s = CheckTerm(TtlWindowName(window), d); !s.ok()) return s;
  }
  if (absl::Status s = CheckTerm("safety margin", inputs.safety_margin); !s.ok()) return s;

  TtlDerivation out;
  out.inputs = inputs;
  out.dominant = windows[0].first;
  out.dominant_window = windows[0].second;
  for (const auto& [window, d] : windows) {
    // Strictly greater: a tie keeps the earlier window, as documented.
    if (d > out.dominant_window) {
      out.dominant = window;
      out.dominant_window = d;
    }
  }
  out.safety_margin = inputs.safety_margin;
  // Both terms are at most kMaxTtlDuration, so the sum cannot saturate absl::Duration.
  out.total = out.dominant_window + out.safety_margin;
  if (out.total > kMaxTtlDuration) {
    return absl::InvalidArgumentError(
        absl::StrCat("TTL overflow: ", AV(TtlWindowName(out.dominant)), " ",
                     FormatTtlDuration(out.dominant_window), " + safety margin ",
                     FormatTtlDuration(out.safety_margin), " exceeds the maximum ",
                     FormatTtlDuration(kMaxTtlDuration)));
  }
  return out;
}

absl::Status CheckConfiguredTtl(absl::Duration configured, const TtlDerivation& derived) {
  if (configured >= derived.total) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("configured TTL ", FormatTtlDuration(configured), " is below the derived TTL ",
                   FormatTtlDuration(derived.total), " (", AV(TtlWindowName(derived.dominant)), " ",
                   FormatTtlDuration(derived.dominant_window), " + safety margin ",
                   FormatTtlDuration(derived.safety_margin),
                   "); a record purged that early lets a late duplicate through"));
}

absl::StatusOr<absl::Duration> ParseTtlDuration(std::string_view text, std::string_view flag) {
  constexpr std::string_view kExpect = "expected <number><unit>... with units d, h, m, s, ms";
  if (text.empty()) return BadDuration(flag, text, absl::StrCat("empty; ", AV(kExpect)));
  if (text[0] == '-') return BadDuration(flag, text, "negative durations are not allowed");
  if (text[0] == '+') return BadDuration(flag, text, "a sign is not allowed");

  int64_t total = 0;
  size_t next_unit = 0;  // index into kUnits of the smallest unit still allowed
  size_t i = 0;
  while (i < text.size()) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) {
      if (absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
        return BadDuration(flag, text, "spaces are not allowed (write 1d12h)");
      }
      return BadDuration(flag, text,
                         absl::StrCat("expected a number at \"", absl::CEscape(AV(text.substr(i))),
                                      "\"; ", AV(kExpect)));
    }
    int64_t n = 0;
    bool too_big = false;
    size_t digits_begin = i;
    for (; i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i])); ++i) {
      int digit = text[i] - '0';
      if (n > (std::numeric_limits<int64_t>::max() - digit) / 10) too_big = true;
      if (!too_big) n = n * 10 + digit;
    }
    std::string_view number = text.substr(digits_begin, i - digits_begin);
    if (i < text.size() && (text[i] == '.' || text[i] == ',')) {
      return BadDuration(flag, text, "fractions are not allowed (write 1d12h, not 1.5d)");
    }
    size_t unit_begin = i;
    while (i < text.size() && absl::ascii_isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit_text = text.substr(unit_begin, i - unit_begin);
    if (unit_text.empty()) {
      if (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
        return BadDuration(flag, text, "spaces are not allowed (write 1d12h)");
      }
      return BadDuration(
          flag, text, absl::StrCat("missing unit after ", AV(number), " (use d, h, m, s or ms)"));
    }
    size_t u = 0;
    while (u < std::size(kUnits) && kUnits[u].name != unit_text) ++u;
    if (u == std::size(kUnits)) {
      return BadDuration(flag, text,
                         absl::StrCat("unknown unit \"", absl::CEscape(AV(unit_text)),
                                      "\" (use d, h, m, s or ms)"));
    }
    if (u < next_unit) {
      return BadDuration(flag, text,
                         absl::StrCat("unit \"", AV(unit_text),
                                      "\" repeated or out of order (largest first: 1d12h30m)"));
    }
    next_unit = u + 1;
    const int64_t max = std::numeric_limits<int64_t>::max();
    if (too_big || n > max / kUnits[u].nanos || total > max - n * kUnits[u].nanos) {
      return BadDuration(
          flag, text,
          absl::StrCat("too large (the maximum is ", FormatTtlDuration(kMaxTtlDuration), ")"));
    }
    total += n * kUnits[u].nanos;
  }
  return absl::Nanoseconds(total);
}

std::string FormatTtlDuration(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  if (d == -absl::InfiniteDuration()) return "-inf";
  if (d < absl::ZeroDuration()) return absl::StrCat("-", FormatTtlDuration(-d));
  if (d == absl::ZeroDuration()) return "0s";
  struct Part {
    const char* name;
    absl::Duration unit;
  };
  const Part parts[] = {
      {"d", absl::Hours(24)},       {"h", absl::Hours(1)},         {"m", absl::Minutes(1)},
      {"s", absl::Seconds(1)},      {"ms", absl::Milliseconds(1)}, {"us", absl::Microseconds(1)},
      {"ns", absl::Nanoseconds(1)},
  };
  std::string out;
  absl::Duration rest = d;
  for (const Part& part : parts) {
    int64_t n = absl::IDivDuration(rest, part.unit, &rest);
    if (n != 0) absl::StrAppend(&out, n, part.name);
  }
  // Below a nanosecond absl keeps quarter-nanosecond ticks; nothing idem reads.
  return out.empty() ? "0s" : out;
}

std::string FormatTtlDays(absl::Duration d) {
  double days = absl::FDivDuration(d, absl::Hours(24));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", days);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "0" && d > absl::ZeroDuration()) return "<0.001 days";
  if (s == "-0") s = "0";
  return absl::StrCat(s, s == "1" ? " day" : " days");
}

}  // namespace idem
