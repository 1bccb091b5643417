// The console's "what is stuck" page (console.h).
//
// GET /console/stuck?older_than=: claims whose lease ended without a complete or a
// fail (their holder stopped: the next claim of the key takes it over), claims
// PROCESSING for longer than `older_than` (default 1h) whose lease still runs, and
// the step operations `idem stuck` lists (due with no runner, an UNKNOWN step,
// compensation required), each with the reason the CLI gives.
// POST /console/stuck/resolve (csrf, biz_key, note): what `idem stuck --resolve
// BIZ_KEY --note NOTE` does to an operation that needs compensation by hand, with
// the admin's name added to the note; the operation's updated_at says when.
//
// Step operations live in SQL stores only, and belong to no tenant: an admin held
// to a tenant sees only its claims.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/api/console.h"
#include "http/api/console_html.h"
#include "idem/steps.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

constexpr int kShown = 50;
constexpr size_t kMaxNoteBytes = 2000;

void AppendClaims(std::string& out, const std::vector<Record>& records, std::string_view id,
                  std::string_view none) {
  if (records.empty()) {
    absl::StrAppend(&out, "<p id=\"", AV(id), "-none\">", AV(none), "</p>");
    return;
  }
  absl::StrAppend(&out, "<table id=\"", AV(id),
                  "\"><thead><tr><th>Tenant</th><th>biz_type</th><th>Key</th><th>Token</th>"
                  "<th>Lease</th><th>Created</th></tr></thead><tbody>");
  for (const Record& r : records) {
    absl::StrAppend(&out, "<tr><td>", Html(r.tenant), "</td><td>", Html(r.biz_type),
                    "</td><td class=\"key\"><a href=\"", console::RecordLink(r), "\">", Html(r.key),
                    "</a></td><td>", r.token, "</td><td>", console::When(r.lease_until),
                    "</td><td>", console::When(r.created_at), "</td></tr>");
  }
  absl::StrAppend(&out, "</tbody></table>");
}

void AppendOperation(std::string& out, const OperationState& op, absl::Time now,
                     std::string_view csrf) {
  const std::string status(OperationStatusName(op.status));
  absl::StrAppend(&out, "<section class=\"operation\"><h3 class=\"key\">", Html(op.biz_key),
                  "</h3><table><tr><th>type</th><td>", Html(op.type),
                  "</td></tr><tr><th>status</th><td class=\"op-status\">", status,
                  "</td></tr><tr><th>why</th><td class=\"why\">", Html(StuckReason(op, now)),
                  "</td></tr>");
  if (!op.object_key.empty()) {
    absl::StrAppend(&out, "<tr><th>object key</th><td class=\"key\">", Html(op.object_key), "</td></tr>");
  }
  absl::StrAppend(&out, "<tr><th>next retry</th><td>", console::When(op.next_retry_at),
                  "</td></tr><tr><th>last error</th><td>", Html(op.last_error),
                  "</td></tr><tr><th>created</th><td>", console::When(op.created_at),
                  "</td></tr><tr><th>updated</th><td>", console::When(op.updated_at),
                  "</td></tr></table><table class=\"steps\"><thead><tr><th>#</th><th>step</th>"
                  "<th>status</th><th>retries</th><th>request id</th><th>last error</th></tr>"
                  "</thead><tbody>");
  for (const StepRecord& s : op.steps) {
    absl::StrAppend(&out, "<tr><td>", s.step_seq, "</td><td>", Html(s.name), "</td><td>",
                    AV(StepStatusName(s.status)), "</td><td>", s.retry_count,
                    "</td><td class=\"key\">", Html(s.request_id), "</td><td>", Html(s.last_error),
                    "</td></tr>");
  }
  absl::StrAppend(&out, "</tbody></table>");
  if (op.status == OperationStatus::kCompensationRequired) {
    absl::StrAppend(&out,
                    "<form method=\"post\" action=\"/console/stuck/resolve\" class=\"resolve\">"
                    "<input type=\"hidden\" name=\"csrf\" value=\"", Html(csrf),
                    "\"><input type=\"hidden\" name=\"biz_key\" value=\"", Html(op.biz_key),
                    "\"><label>What was done by hand<textarea name=\"note\" required maxlength=\"",
                    kMaxNoteBytes,
                    "\" rows=\"2\" cols=\"60\"></textarea></label>"
                    "<button type=\"submit\">Mark compensated</button></form>");
  }
  absl::StrAppend(&out, "</section>");
}

}  // namespace

StepRunner* Console::Runner() {
  absl::MutexLock lock(&mu_);
  if (runner_ == nullptr && store_.SupportsSql()) {
    runner_ = std::make_unique<StepRunner>(store_, StepRunnerOptions{.clock = options_.clock});
  }
  return runner_.get();
}

ConsoleAnswer Console::Stuck(const Caller& caller, std::string_view query) {
  const auto form = ParseForm(query);
  const ConsoleAdmin& admin = *caller.admin;
  std::string older_than = console::Field(form, "older_than");
  if (older_than.empty()) older_than = "1h";
  absl::Duration bound;
  std::string body = "<h1>What is stuck</h1>";
  const std::string resolved = console::Field(form, "resolved");
  if (!resolved.empty()) {
    absl::StrAppend(&body, "<p class=\"done\" id=\"resolved\">Marked compensated: <span class=\"key\">",
                    Html(resolved), "</span></p>");
  }
  if (!absl::ParseDuration(older_than, &bound) || bound < absl::ZeroDuration()) {
    absl::StrAppend(&body, "<p class=\"error\" id=\"error\">older than '", Html(older_than),
                    "' is not a duration such as 10m or 2h</p>");
    return {.response = console::HtmlResponse(
                400, console::Page("Stuck", admin.name, caller.csrf, body))};
  }
  const absl::Time now = options_.clock->Now();
  RecordQuery from;
  if (!admin.tenant.empty()) from.tenant = admin.tenant;
  const std::string after_tenant = console::Field(form, "after_tenant");
  const std::string after = console::Field(form, "after");
  if (!after.empty()) from.after = std::make_pair(after_tenant, after);
  std::vector<Record> lapsed, old;
  size_t scanned = 0;
  absl::StatusOr<std::optional<std::pair<std::string, std::string>>> stopped =
      Scan(from, [&](const Record& r) {
        if (r.state != RecordState::kProcessing || r.purged()) return false;
        if (r.lease_until <= now) {
          if (lapsed.size() < kShown) lapsed.push_back(r);
        } else if (r.created_at < now - bound) {
          if (old.size() < kShown) old.push_back(r);
        }
        return lapsed.size() >= kShown && old.size() >= kShown;
      }, &scanned);
  if (!stopped.ok()) {
    absl::StrAppend(&body, "<p class=\"error\">The store: ", Html(SV(stopped.status().message())),
                    "</p>");
    return {.response = console::HtmlResponse(
                503, console::Page("Stuck", admin.name, caller.csrf, body))};
  }
  absl::StrAppend(&body, "<h2>Claims past their lease</h2><p class=\"note\">Their holder stopped "
                         "before completing or failing them; the next claim of the key takes it "
                         "over, so check whether the effect happened before it is retried.</p>");
  AppendClaims(body, lapsed, "lapsed", "None.");
  absl::StrAppend(&body, "<h2>Claims PROCESSING for longer than ", Html(older_than),
                  "</h2><form method=\"get\" action=\"/console/stuck\" class=\"search\">"
                  "<label>Older than<input name=\"older_than\" size=\"6\" value=\"",
                  Html(older_than), "\"></label><button type=\"submit\">Show</button></form>");
  AppendClaims(body, old, "old", "None.");
  if (stopped->has_value()) {
    // A page reads for a bounded time: on a large store, the rest on the next.
    absl::StrAppend(&body, "<p class=\"note\">", scanned,
                    " records were read for this page, not all of them. <a id=\"further\" "
                    "href=\"/console/stuck?older_than=", UrlEncode(older_than), "&amp;after_tenant=",
                    UrlEncode((*stopped)->first), "&amp;after=", UrlEncode((*stopped)->second),
                    "\">Read further</a></p>");
  }

  absl::StrAppend(&body, "<h2>Step operations that need a person</h2>");
  StepRunner* runner = admin.tenant.empty() ? Runner() : nullptr;
  if (!admin.tenant.empty()) {
    absl::StrAppend(&body, "<p class=\"note\">Step operations belong to no tenant: an admin held "
                           "to one does not see them.</p>");
  } else if (runner == nullptr) {
    absl::StrAppend(&body, "<p class=\"note\" id=\"steps-none\">This server's store (",
                    Html(store_.url()),
                    ") keeps no step operations: they live in a SQL store (sqlite://, "
                    "postgres://, mysql://).</p>");
  } else {
    absl::StatusOr<std::vector<OperationState>> stuck = runner->ListStuck(kShown);
    if (!stuck.ok()) {
      absl::StrAppend(&body, "<p class=\"error\">The step journal: ",
                      Html(SV(stuck.status().message())), "</p>");
    } else if (stuck->empty()) {
      absl::StrAppend(&body, "<p id=\"steps-none\">None.</p>");
    } else {
      absl::StrAppend(&body, "<div id=\"operations\">");
      for (const OperationState& op : *stuck) AppendOperation(body, op, now, caller.csrf);
      absl::StrAppend(&body, "</div>");
    }
  }
  return {.response = console::HtmlResponse(200, console::Page("Stuck", admin.name, caller.csrf, body))};
}

ConsoleAnswer Console::Resolve(const Caller& caller, const HttpRequest& request) {
  const auto form = ParseForm(request.body);
  const ConsoleAdmin& admin = *caller.admin;
  const std::string biz_key = console::Field(form, "biz_key");
  const std::string note = console::Note(console::Field(form, "note"));
  const auto refuse = [&](int status, std::string_view why) {
    return ConsoleAnswer{.response = console::Refused(status, "Not resolved", admin.name,
                                                      caller.csrf, why, "/console/stuck",
                                                      "Back to what is stuck")};
  };
  StepRunner* runner = admin.tenant.empty() ? Runner() : nullptr;
  if (runner == nullptr) return refuse(403, "this admin cannot settle step operations here");
  if (note.empty()) return refuse(400, "say what was done by hand in the note");
  if (note.size() > kMaxNoteBytes) return refuse(400, "the note is longer than 2000 bytes");
  // Who settled it, in the note the journal keeps; when is the operation's updated_at.
  absl::StatusOr<OperationState> done =
      runner->Resolve(biz_key, absl::StrCat(note, " [", admin.name, ", in the console]"));
  if (!done.ok()) {
    return refuse(console::StatusOf(done.status()), SV(done.status().message()));
  }
  spdlog::info("console: {} resolved step operation {} (now {})", admin.name, absl::CHexEscape(biz_key),
               std::string(OperationStatusName(done->status)));
  return {.response = console::Redirect(
              absl::StrCat("/console/stuck?resolved=", UrlEncode(biz_key)))};
}

}  // namespace idem::http
