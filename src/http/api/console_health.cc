// The console's key health and rates page (console.h).
//
// GET /console/health: charts of the last hour's claims, replays, 409s, 422s and
// 503s per minute, from samples of the server's own counters (Sample, every
// ConsoleOptions::sample_every); the key-health counters per tenant and biz_type,
// the newest unhealthy keys as examples, and the keys met with several
// fingerprints (KeyHealthTracker: memory, since the server started).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/api/console.h"
#include "http/api/console_html.h"
#include "http/server/route.h"

namespace idem::http {
namespace {

constexpr std::array<std::string_view, Console::kRateSeries> kSeriesNames = {
    "claims", "replays", "409 conflicts", "422 fingerprint mismatches", "503 store unavailable"};

// A chart of per-minute rates, as inline SVG drawn with attributes only (the
// Content-Security-Policy allows no inline style).
std::string Chart(std::string_view id, std::string_view title,
                  const std::vector<std::pair<double, double>>& points, uint64_t last_minute) {
  constexpr int kWidth = 360, kHeight = 70;
  double top = 1;
  for (const auto& p : points) top = std::max(top, p.second);
  std::string svg = absl::StrCat(
      "<figure class=\"chart\" id=\"chart-", AV(id), "\"><figcaption>", Html(title),
      ": <strong class=\"last\">", last_minute, "</strong> in the last minute (at most ",
      static_cast<int64_t>(top), "/min)</figcaption><svg width=\"", kWidth, "\" height=\"", kHeight,
      "\" viewBox=\"0 0 ", kWidth, " ", kHeight, "\" role=\"img\"><rect width=\"", kWidth,
      "\" height=\"", kHeight, "\" fill=\"#ffffff\" stroke=\"#d9dde5\"/>");
  if (points.size() >= 2) {
    absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"#3b5bdb\" stroke-width=\"1.5\" points=\"");
    for (const auto& [x, y] : points) {
      absl::StrAppend(&svg, static_cast<int>(x * kWidth), ",",
                      static_cast<int>(kHeight - 2 - y / top * (kHeight - 4)), " ");
    }
    absl::StrAppend(&svg, "\"/>");
  } else if (points.size() == 1) {  // one minute sampled so far
    absl::StrAppend(&svg, "<circle r=\"2\" fill=\"#3b5bdb\" cx=\"",
                    static_cast<int>(points[0].first * kWidth), "\" cy=\"",
                    static_cast<int>(kHeight - 2 - points[0].second / top * (kHeight - 4)), "\"/>");
  }
  absl::StrAppend(&svg, "</svg></figure>");
  return svg;
}

}  // namespace

void Console::Attach(const KeyHealthTracker& key_health, const Metrics& metrics) {
  {
    absl::MutexLock lock(&sample_mu_);
    key_health_ = &key_health;
    metrics_ = &metrics;
  }
  if (options_.sample_every > absl::ZeroDuration() && !sampler_.joinable()) {
    Sample(options_.clock->Now());
    sampler_ = std::thread([this] {
      for (;;) {
        {
          absl::MutexLock lock(&sample_mu_);
          if (stopping_) return;
          sample_cv_.WaitWithTimeout(&sample_mu_, options_.sample_every);
          if (stopping_) return;
        }
        Sample(options_.clock->Now());
      }
    });
  }
}

Console::~Console() {
  {
    absl::MutexLock lock(&sample_mu_);
    stopping_ = true;
    sample_cv_.Signal();
  }
  if (sampler_.joinable()) sampler_.join();
}

void Console::Sample(absl::Time now) {
  absl::MutexLock lock(&sample_mu_);
  if (metrics_ == nullptr) return;
  samples_.push_back(Read(now));
  while (!samples_.empty() && now - samples_.front().at > kRateWindow + options_.sample_every) {
    samples_.pop_front();
  }
}

Console::RateSample Console::Read(absl::Time now) const {
  RateSample s{.at = now};
  s.values[0] = metrics_->batch_items(Route::kClaims);
  for (int c = 2; c <= 5; ++c) s.values[0] += metrics_->requests_by_class(RouteName(Route::kClaims), c);
  s.values[1] = metrics_->outcomes("replayed");
  for (std::string_view route : kRouteNames) {
    s.values[2] += metrics_->requests(route, 409);
    s.values[3] += metrics_->requests(route, 422);
    s.values[4] += metrics_->requests(route, 503);
  }
  return s;
}

ConsoleAnswer Console::Health(const Caller& caller) {
  const ConsoleAdmin& admin = *caller.admin;
  const absl::Time now = options_.clock->Now();
  std::string body = "<h1>Key health and rates</h1><h2>The last hour</h2><div class=\"charts\">";
  std::vector<KeyHealthCounts> counts;
  std::vector<KeyExample> examples;
  std::vector<std::pair<std::string, KeyMismatches>> mismatched;
  {
    absl::MutexLock lock(&sample_mu_);
    // The samples, and what the counters say now: the newest stretch too.
    std::vector<RateSample> readings(samples_.begin(), samples_.end());
    if (metrics_ != nullptr) readings.push_back(Read(now));
    // The counts since the newest reading at least a minute old (or the oldest).
    const RateSample* minute_ago = readings.empty() ? nullptr : &readings.front();
    for (const RateSample& r : readings) {
      if (now - r.at >= absl::Minutes(1)) minute_ago = &r;
    }
    for (size_t series = 0; series < kRateSeries; ++series) {
      std::vector<std::pair<double, double>> points;
      for (size_t i = 1; i < readings.size(); ++i) {
        const RateSample& a = readings[i - 1];
        const RateSample& b = readings[i];
        // A stretch under a second (the newest, just after a sample) would make a
        // per-minute rate of noise.
        if (b.at - a.at < absl::Seconds(1)) continue;
        const double minutes = absl::ToDoubleMinutes(b.at - a.at);
        const double rate = static_cast<double>(b.values[series] - a.values[series]) / minutes;
        const double x = 1.0 - absl::ToDoubleSeconds(now - b.at) / absl::ToDoubleSeconds(kRateWindow);
        if (x >= 0) points.emplace_back(x, rate);
      }
      const uint64_t last_minute =
          minute_ago == nullptr ? 0 : readings.back().values[series] - minute_ago->values[series];
      absl::StrAppend(&body, Chart(absl::StrCat(series), kSeriesNames[series], points, last_minute));
    }
    if (key_health_ != nullptr) {
      counts = key_health_->Counts(admin.tenant);
      examples = key_health_->Examples(admin.tenant);
      for (const std::string& tenant : options_.tenants) {
        if (!admin.tenant.empty() && tenant != admin.tenant) continue;
        for (KeyMismatches& m : key_health_->Mismatches(tenant)) mismatched.emplace_back(tenant, std::move(m));
      }
    }
  }
  absl::StrAppend(&body, "</div><p class=\"note\">Per minute, from the server's own counters "
                         "(every tenant's: they are the server's); since the server started, at "
                         "most the last hour.</p><h2>Key health</h2>");
  if (counts.empty()) {
    absl::StrAppend(&body, "<p id=\"health-none\">No unhealthy key seen since the server started.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"health\"><thead><tr><th>Tenant</th><th>biz_type</th>"
                           "<th>Regenerated</th><th>422 mismatches</th><th>Over-coarse keys</th>"
                           "<th>Suspicious shapes</th></tr></thead><tbody>");
    for (const KeyHealthCounts& c : counts) {
      absl::StrAppend(&body, "<tr><td>", Html(c.tenant), "</td><td>", Html(c.biz_type), "</td><td>",
                      c.regenerated, "</td><td>", c.mismatches, "</td><td>", c.over_coarse,
                      "</td><td>", c.suspicious_shapes, "</td></tr>");
    }
    absl::StrAppend(&body, "</tbody></table>");
  }
  absl::StrAppend(&body, "<h3>Newest examples</h3>");
  if (examples.empty()) {
    absl::StrAppend(&body, "<p id=\"examples-none\">None.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"examples\"><thead><tr><th>When</th><th>Tenant</th>"
                           "<th>biz_type</th><th>Key</th><th>Finding</th></tr></thead><tbody>");
    for (const KeyExample& e : examples) {
      absl::StrAppend(&body, "<tr><td>", console::When(e.at), "</td><td>", Html(e.tenant),
                      "</td><td>", Html(e.biz_type), "</td><td class=\"key\"><a href=\"",
                      console::RecordLink(Record{.tenant = e.tenant, .key = e.key}), "\">",
                      Html(e.key), "</a></td><td class=\"finding\">", Html(e.finding),
                      "</td></tr>");
    }
    absl::StrAppend(&body, "</tbody></table>");
  }
  absl::StrAppend(&body, "<h3>Keys met with several fingerprints</h3>");
  if (mismatched.empty()) {
    absl::StrAppend(&body, "<p id=\"mismatches-none\">None.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"mismatches\"><thead><tr><th>Tenant</th><th>biz_type</th>"
                           "<th>Key</th><th>Fingerprints</th><th>422s</th><th>First</th>"
                           "<th>Last</th></tr></thead><tbody>");
    for (const auto& [tenant, m] : mismatched) {
      absl::StrAppend(&body, "<tr><td>", Html(tenant), "</td><td>", Html(m.biz_type),
                      "</td><td class=\"key\"><a href=\"",
                      console::RecordLink(Record{.tenant = tenant, .key = m.key}), "\">",
                      Html(m.key), "</a></td><td>", m.fingerprints, "</td><td>", m.mismatches,
                      "</td><td>", console::When(m.first_at), "</td><td>",
                      console::When(m.last_at), "</td></tr>");
    }
    absl::StrAppend(&body, "</tbody></table>");
  }
  absl::StrAppend(&body, "<p class=\"note\">What each finding means and how to fix the keys: "
                         "docs/keys.md; <code>idem keys analyze</code> reads the whole store.</p>");
  return {.response = console::HtmlResponse(200, console::Page("Health", admin.name, caller.csrf, body))};
}

}  // namespace idem::http
