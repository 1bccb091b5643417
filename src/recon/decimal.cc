#include "recon/decimal.h"

#include <cstddef>
#include <string>

#include "idem/key.h"

namespace idem::recon {

absl::StatusOr<std::string> ParseDecimal(std::string_view text, int scale) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  const std::string shown = EscapeControl(text, 40);
  if (text.empty()) return absl::InvalidArgumentError("empty amount");
  bool negative = false;
  if (text.front() == '+' || text.front() == '-') {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  std::string digits;
  digits.reserve(text.size() + scale);
  size_t fraction = 0;
  bool point = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      digits.push_back(c);
      if (point) ++fraction;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      return absl::InvalidArgumentError("malformed amount '" + shown +
                                        "' (a decimal number like 12.50 is expected)");
    }
  }
  if (digits.empty()) {
    return absl::InvalidArgumentError("malformed amount '" + shown + "' (no digits)");
  }
  // digits × 10^-(fraction + scale): split at that many digits from the right.
  const size_t places = fraction + static_cast<size_t>(scale);
  if (digits.size() <= places) digits.insert(0, places - digits.size() + 1, '0');
  std::string whole = digits.substr(0, digits.size() - places);
  std::string frac = digits.substr(digits.size() - places);
  size_t lead = whole.find_first_not_of('0');
  whole = lead == std::string::npos ? "0" : whole.substr(lead);
  size_t trail = frac.find_last_not_of('0');
  frac = trail == std::string::npos ? "" : frac.substr(0, trail + 1);
  std::string out;
  if (negative && !(whole == "0" && frac.empty())) out.push_back('-');
  out += whole;
  if (!frac.empty()) {
    out.push_back('.');
    out += frac;
  }
  return out;
}

}  // namespace idem::recon
