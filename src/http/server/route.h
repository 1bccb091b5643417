// Route: the fixed set of route templates `idem serve` answers on, as
// small integers. Every answer is counted under one of them (Metrics), so a label
// value can only ever be one of these names: a target that matches no route,
// whatever its path, is Route::kOther. The names are the route templates the docs and
// the access log use.
//
// Thread safety: plain values and constant data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace idem::http {

enum class Route : uint8_t {
  kClaims,    // POST /v1/claims
  kComplete,  // POST /v1/claims/complete
  kFail,      // POST /v1/claims/fail
  kClaimsBatch,  // POST /v1/claims/batch (claims, completes and fails, up to 1,000 at once)
  kRecord,    // GET /v1/records/{biz_type}/{key}
  kRecords,   // GET /v1/records (a page of the caller's records)
  kKeyMismatches,  // GET /v1/keys/mismatches (the caller's keys met with several fingerprints)
  kHealthz,
  kReadyz,
  kMetrics,
  kConsole,     // /console/… (idem serve --console: the operator console's pages)
  kProxied,     // idem proxy: a request with a key (or one that needed one)
  kPassThrough,  // idem proxy: a request forwarded untouched
  kOther,  // no route matched (404), or an answer given before routing (400, 408, ...)
};

inline constexpr size_t kRouteCount = static_cast<size_t>(Route::kOther) + 1;

inline constexpr std::array<std::string_view, kRouteCount> kRouteNames = {
    "/v1/claims",      "/v1/claims/complete",
    "/v1/claims/fail", "/v1/claims/batch", "/v1/records/{biz_type}/{key}",
    "/v1/records",     "/v1/keys/mismatches", "/healthz",        "/readyz",
    "/metrics",        "/console",        "proxy",
    "passthrough",     "other",
};

// The route template of `route` ("/v1/records/{biz_type}/{key}", "other", ...).
constexpr std::string_view RouteName(Route route) {
  return kRouteNames[static_cast<size_t>(route)];
}

// The Route whose template is `name`; Route::kOther for any other string.
constexpr Route RouteNamed(std::string_view name) {
  for (size_t i = 0; i < kRouteCount; ++i) {
    if (kRouteNames[i] == name) return static_cast<Route>(i);
  }
  return Route::kOther;
}

}  // namespace idem::http
