// Reading Prometheus exposition text (what GET /metrics answers) in tests.
//
// Thread safety: pure functions.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace idem::http::testing {

// The value of `series` in `text`: `series` is a name with its labels exactly as
// rendered (idem_http_requests_total{route="/v1/claims",status="201"}); nullopt when
// no line holds it.
inline std::optional<double> SeriesValue(std::string_view text, std::string_view series) {
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      const std::string value(line.substr(series.size() + 1));
      char* parsed = nullptr;
      const double v = std::strtod(value.c_str(), &parsed);
      if (parsed != value.c_str()) return v;
    }
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace idem::http::testing
