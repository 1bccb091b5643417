// The console's record pages (console.h): finding records and showing one.
//
// GET /console/records?tenant=&biz_type=&key=&match=exact|prefix&state=&older_than=
//     &newer_than=&after=
// A page of at most 50 records, in the store's order (tenant, then key), read
// through Store::ListRecords in chunks for at most Console::kScanBudget (so a rare
// filter over millions of records answers in time, with a link that searches on);
// `after_tenant` and `after` are where the page before stopped. An
// exact key is one Store::Get per tenant searched; a prefix is read from where the
// prefix sorts in its tenant and stops at the first key past it (keys compare byte
// by byte in every store), so it needs a tenant.
//
// GET /console/record?tenant=&key=: one record with its result or error, or what
// its tombstone remembers.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <algorithm>
#include <array>
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/status.h"
#include "http/api/console.h"
#include "http/api/console_html.h"

namespace idem::http {
namespace {

constexpr int kPageSize = 50;

struct Search {
  std::string tenant, biz_type, key, match = "exact", state, older_than, newer_than;
  std::string after_tenant, after;  // where the page before stopped
};

std::string Option(std::string_view value, std::string_view label, std::string_view selected) {
  return absl::StrCat("<option value=\"", Html(value), "\"", value == selected ? " selected" : "",
                      ">", Html(label), "</option>");
}

std::string SearchForm(const Search& s, const ConsoleAdmin& admin,
                       const std::vector<std::string>& tenants) {
  std::string out = "<form method=\"get\" action=\"/console/records\" class=\"search\" id=\"search\">";
  if (admin.tenant.empty()) {
    absl::StrAppend(&out, "<label>Tenant<select name=\"tenant\" id=\"tenant\">",
                    Option("", "every tenant", s.tenant));
    for (const std::string& t : tenants) absl::StrAppend(&out, Option(t, t, s.tenant));
    absl::StrAppend(&out, "</select></label>");
  } else {
    absl::StrAppend(&out, "<label>Tenant<input value=\"", Html(admin.tenant), "\" disabled></label>");
  }
  absl::StrAppend(&out, "<label>biz_type<input name=\"biz_type\" id=\"biz_type\" value=\"",
                  Html(s.biz_type), "\"></label>",
                  "<label>Key<input name=\"key\" id=\"key\" size=\"40\" value=\"", Html(s.key),
                  "\"></label><label>Match<select name=\"match\" id=\"match\">",
                  Option("exact", "exact", s.match), Option("prefix", "prefix", s.match),
                  "</select></label><label>State<select name=\"state\" id=\"state\">",
                  Option("", "any", s.state));
  for (std::string_view st : {"PROCESSING", "SUCCEEDED", "FAILED", "RELEASED", "TOMBSTONE"}) {
    absl::StrAppend(&out, Option(st, st, s.state));
  }
  absl::StrAppend(&out, "</select></label>",
                  "<label>Older than<input name=\"older_than\" placeholder=\"e.g. 10m, 2h\" "
                  "size=\"8\" value=\"", Html(s.older_than), "\"></label>",
                  "<label>Newer than<input name=\"newer_than\" placeholder=\"e.g. 24h\" "
                  "size=\"8\" value=\"", Html(s.newer_than), "\"></label>",
                  "<button type=\"submit\" id=\"find\">Find</button></form>");
  return out;
}

std::string StateName(const Record& r) {
  return r.purged() ? "TOMBSTONE" : std::string(RecordStateName(r.state));
}

void AppendRow(std::string& out, const Record& r, absl::Time now) {
  const std::string state = StateName(r);
  absl::StrAppend(&out, "<tr><td>", Html(r.tenant), "</td><td>", Html(r.biz_type),
                  "</td><td class=\"key\"><a href=\"", console::RecordLink(r), "\">", Html(r.key),
                  "</a></td><td class=\"state-", state, "\">", state, "</td><td>", r.token,
                  "</td><td>", console::When(r.created_at), "</td><td>");
  if (r.state == RecordState::kProcessing && !r.purged()) {
    absl::StrAppend(&out, r.lease_until > now ? "live until " : "expired ",
                    console::When(r.lease_until));
  }
  absl::StrAppend(&out, "</td></tr>");
}

absl::StatusOr<absl::Duration> Age(std::string_view text, std::string_view what) {
  absl::Duration d;
  if (!absl::ParseDuration(AV(text), &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        AV(what), " '", AV(text), "' is not a duration such as 90s, 10m or 2h"));
  }
  return d;
}

bool Matches(const Search& s, const Record& r) {
  if (!s.biz_type.empty() && r.biz_type != s.biz_type) return false;
  if (s.state == "TOMBSTONE") return r.purged();
  if (!s.state.empty()) return !r.purged() && RecordStateName(r.state) == s.state;
  return true;
}

}  // namespace

ConsoleAnswer Console::Records(const Caller& caller, std::string_view query) {
  const auto form = ParseForm(query);
  Search s{.tenant = console::Field(form, "tenant"),
           .biz_type = console::Field(form, "biz_type"),
           .key = console::Field(form, "key"),
           .match = console::Field(form, "match"),
           .state = console::Field(form, "state"),
           .older_than = console::Field(form, "older_than"),
           .newer_than = console::Field(form, "newer_than"),
           .after_tenant = console::Field(form, "after_tenant"),
           .after = console::Field(form, "after")};
  if (s.match != "prefix") s.match = "exact";
  const ConsoleAdmin& admin = *caller.admin;
  if (!admin.tenant.empty()) s.tenant = admin.tenant;
  const bool searched = !form.empty();
  std::string body = "<h1>Find records</h1>";
  absl::StrAppend(&body, SearchForm(s, admin, options_.tenants));
  const auto page = [&](int status, std::string b) {
    return ConsoleAnswer{.response = console::HtmlResponse(
                             status, console::Page("Records", admin.name, caller.csrf, b))};
  };
  const auto refuse = [&](std::string_view why) {
    return page(400, absl::StrCat(body, "<p class=\"error\" id=\"error\">", Html(why), "</p>"));
  };
  if (!searched) {
    return page(200, absl::StrCat(body, "<p class=\"note\">Give a key, or any of the other "
                                        "fields, and Find.</p>"));
  }
  if (!s.tenant.empty() && admin.tenant.empty() &&
      std::find(options_.tenants.begin(), options_.tenants.end(), s.tenant) == options_.tenants.end()) {
    return refuse(absl::StrCat("no tenant '", s.tenant, "' on this server"));
  }
  static constexpr std::array<std::string_view, 5> kStates = {"PROCESSING", "SUCCEEDED", "FAILED",
                                                               "RELEASED", "TOMBSTONE"};
  if (!s.state.empty() && std::find(kStates.begin(), kStates.end(), s.state) == kStates.end()) {
    return refuse(absl::StrCat("unknown state '", s.state, "'"));
  }
  const absl::Time now = options_.clock->Now();
  absl::Time created_before = absl::InfiniteFuture(), created_since = absl::InfinitePast();
  if (!s.older_than.empty()) {
    absl::StatusOr<absl::Duration> d = Age(s.older_than, "older than");
    if (!d.ok()) return refuse(SV(d.status().message()));
    created_before = now - *d;
  }
  if (!s.newer_than.empty()) {
    absl::StatusOr<absl::Duration> d = Age(s.newer_than, "newer than");
    if (!d.ok()) return refuse(SV(d.status().message()));
    created_since = now - *d;
  }
  const auto matches = [&](const Record& r) {
    return Matches(s, r) && r.created_at < created_before && r.created_at >= created_since;
  };

  std::vector<Record> found;
  std::optional<std::pair<std::string, std::string>> resume;  // where the next page starts
  size_t scanned = 0;
  if (!s.key.empty() && s.match == "exact") {
    std::vector<std::string> tenants;
    if (!s.tenant.empty()) {
      tenants.push_back(s.tenant);
    } else {
      tenants = options_.tenants;
    }
    for (const std::string& t : tenants) {
      absl::StatusOr<std::optional<Record>> r = store_.Get(t, s.key);
      if (!r.ok()) return refuse(absl::StrCat("the store: ", r.status().message()));
      if (r->has_value() && matches(**r)) found.push_back(**std::move(r));
    }
  } else {
    const bool prefix = !s.key.empty();
    if (prefix && s.tenant.empty()) {
      return refuse("a key prefix is searched within one tenant: choose the tenant");
    }
    RecordQuery from;
    if (!s.tenant.empty()) from.tenant = s.tenant;
    if (!s.after.empty()) {
      // A page after the first: where the one before stopped.
      if (s.tenant.empty() && s.after_tenant.empty()) return refuse("'after' needs its tenant");
      from.after = std::make_pair(s.tenant.empty() ? s.after_tenant : s.tenant, s.after);
    } else if (prefix) {
      // The prefix itself, then the keys after it (ListRecords' `after` is exclusive).
      absl::StatusOr<std::optional<Record>> r = store_.Get(s.tenant, s.key);
      if (!r.ok()) return refuse(absl::StrCat("the store: ", r.status().message()));
      if (r->has_value() && matches(**r)) found.push_back(**std::move(r));
      from.after = std::make_pair(s.tenant, s.key);
    }
    bool past_prefix = false;
    absl::StatusOr<std::optional<std::pair<std::string, std::string>>> stopped =
        Scan(from, [&](const Record& r) {
          if (prefix && !absl::StartsWith(r.key, s.key)) {
            past_prefix = true;
            return true;
          }
          if (matches(r)) found.push_back(r);
          return found.size() >= static_cast<size_t>(kPageSize);
        }, &scanned);
    if (!stopped.ok()) return refuse(absl::StrCat("the store: ", stopped.status().message()));
    if (!past_prefix) resume = *std::move(stopped);
  }

  if (found.empty()) {
    absl::StrAppend(&body, "<p id=\"none\">No record matches",
                    resume.has_value() ? " among the records read so far" : "", ".</p>");
  } else {
    absl::StrAppend(&body,
                    "<table id=\"records\"><thead><tr><th>Tenant</th><th>biz_type</th><th>Key</th>"
                    "<th>State</th><th>Token</th><th>Created</th><th>Lease</th></tr></thead><tbody>");
    for (const Record& r : found) AppendRow(body, r, now);
    absl::StrAppend(&body, "</tbody></table>");
  }
  if (resume.has_value()) {
    // Each page reads for a bounded time (Scan): a rare filter over a large store
    // goes on from where the last page stopped.
    absl::StrAppend(&body, "<p><a id=\"next\" href=\"/console/records?tenant=", UrlEncode(s.tenant),
                    "&amp;biz_type=", UrlEncode(s.biz_type), "&amp;key=", UrlEncode(s.key),
                    "&amp;match=", s.match, "&amp;state=", UrlEncode(s.state),
                    "&amp;older_than=", UrlEncode(s.older_than), "&amp;newer_than=",
                    UrlEncode(s.newer_than), "&amp;after_tenant=", UrlEncode(resume->first),
                    "&amp;after=", UrlEncode(resume->second), "\">",
                    found.size() >= static_cast<size_t>(kPageSize) ? "Next page" : "Search further",
                    "</a> <span class=\"note\">(", scanned, " records read for this page)</span></p>");
  }
  return page(200, std::move(body));
}

absl::StatusOr<std::optional<std::pair<std::string, std::string>>> Console::Scan(
    RecordQuery from, const std::function<bool(const Record&)>& visit, size_t* scanned) {
  const absl::Time deadline = absl::Now() + kScanBudget;
  from.limit = kScanChunk;
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(std::vector<Record> chunk, store_.ListRecords(from));
    if (chunk.empty()) return std::nullopt;
    for (const Record& r : chunk) {
      ++*scanned;
      if (visit(r)) return std::make_pair(r.tenant, r.key);
    }
    if (chunk.size() < static_cast<size_t>(kScanChunk)) return std::nullopt;
    from.after = std::make_pair(chunk.back().tenant, chunk.back().key);
    if (absl::Now() >= deadline) return from.after;
  }
}

ConsoleAnswer Console::OneRecord(const Caller& caller, std::string_view query) {
  const auto form = ParseForm(query);
  const std::string tenant = console::Field(form, "tenant");
  const std::string key = console::Field(form, "key");
  const ConsoleAdmin& admin = *caller.admin;
  const auto page = [&](int status, std::string_view title, std::string b) {
    return ConsoleAnswer{.response = console::HtmlResponse(
                             status, console::Page(title, admin.name, caller.csrf, b))};
  };
  // An admin held to one tenant meets every other tenant's key as absent.
  std::optional<Record> rec;
  if (admin.tenant.empty() || admin.tenant == tenant) {
    absl::StatusOr<std::optional<Record>> r = store_.Get(tenant, key);
    if (!r.ok()) {
      return page(503, "Store unavailable",
                  absl::StrCat("<h1>The store did not answer</h1><p class=\"error\">",
                               Html(SV(r.status().message())), "</p>"));
    }
    rec = *std::move(r);
  }
  if (!rec.has_value()) {
    return page(404, "No record",
                absl::StrCat("<h1>No record</h1><p>Tenant <code>", Html(tenant),
                             "</code> has no record of key <code class=\"key\">", Html(key),
                             "</code>.</p>"));
  }
  const Record& r = *rec;
  const absl::Time now = options_.clock->Now();
  const std::string state = StateName(r);
  std::string body = absl::StrCat("<h1>Record</h1><table id=\"record\">");
  const auto row = [&](std::string_view name, std::string_view html_value) {
    absl::StrAppend(&body, "<tr><th>", AV(name), "</th><td id=\"f-", AV(name), "\">",
                    AV(html_value), "</td></tr>");
  };
  row("tenant", Html(r.tenant));
  row("biz_type", Html(r.biz_type));
  row("key", absl::StrCat("<span class=\"key\">", Html(r.key), "</span>"));
  row("state", absl::StrCat("<span class=\"state-", state, "\">", state, "</span>",
                            r.purged() ? absl::StrCat(" (it ended ", AV(RecordStateName(r.state)), ")")
                                       : std::string()));
  row("token", absl::StrCat(r.token));
  std::string lease = console::When(r.lease_until);
  if (r.state == RecordState::kProcessing && !r.purged()) {
    lease = absl::StrCat(r.lease_until > now ? "live until " : "expired at ", lease);
  }
  row("lease", lease);
  row("created", console::When(r.created_at));
  row("updated", console::When(r.updated_at));
  row("expires", console::When(r.expires_at));
  row("fingerprint", r.fingerprint.empty() ? "none" : Html(r.fingerprint));
  if (r.purged()) {
    row("tombstone", absl::StrCat("purged at ", console::When(r.purged_at),
                                  ": only this tombstone remembers the key, and a late duplicate "
                                  "is answered expired instead of running again"));
  } else {
    row("tombstone", "no (the record is live)");
  }
  absl::StrAppend(&body, "</table>");
  if (!r.result.empty()) {
    absl::StrAppend(&body, "<h2>Result</h2><pre id=\"result\">", Html(PrettyJson(r.result)), "</pre>");
  }
  if (!r.error.empty()) {
    absl::StrAppend(&body, "<h2>Error</h2><pre id=\"error-value\">", Html(PrettyJson(r.error)), "</pre>");
  }
  return page(200, "Record", std::move(body));
}

}  // namespace idem::http
