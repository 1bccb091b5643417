// The console's reconciliation page (console.h).
//
// GET /console/recon?all=&max_age=: each source's last successful run (its
// watermark, when it ended, its run id, late when older than `max_age`, default
// 15m as `idem recon status` has it), the open tickets per class, and the tickets
// (open and pending ones; every one with all=1), each open one with a form to close
// it with a note.
// POST /console/recon/close (csrf, id, note): what `idem recon tickets close ID
// --note NOTE` does, with the admin's name added to the note; closed_at says when.
//
// The recon tables are read from the server's own store, as its /metrics reads
// them: recon run with the server's store (`[recon] store` the same as `[serve]
// store`, docs/recon.md) shows here. Recon belongs to no tenant: an admin held to a
// tenant does not see it.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/api/console.h"
#include "http/api/console_html.h"
#include "recon/recon_time.h"
#include "recon/tables.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

constexpr size_t kTicketsShown = 200;

std::string Ago(int64_t us, absl::Time now) {
  const absl::Duration d = now - absl::FromUnixMicros(us);
  return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

void AppendTicket(std::string& out, const recon::Ticket& t, std::string_view csrf) {
  absl::StrAppend(&out, "<tr id=\"ticket-", Html(t.id), "\"><td class=\"key\">", Html(t.id),
                  "</td><td>", Html(t.source), "</td><td>", Html(t.cls), "</td><td>",
                  Html(t.severity), "</td><td>", Html(t.action), "</td><td class=\"ticket-state\">",
                  Html(t.state), "</td><td class=\"key\">", Html(t.key), "</td><td>",
                  Html(t.detail));
  if (t.attempts > 0) {
    absl::StrAppend(&out, "<br><span class=\"note\">", t.attempts, " attempt(s)");
    if (t.http_status != 0) absl::StrAppend(&out, ", last answer ", t.http_status);
    if (!t.last_error.empty()) absl::StrAppend(&out, ": ", Html(t.last_error));
    absl::StrAppend(&out, "</span>");
  }
  if (!t.note.empty()) {
    absl::StrAppend(&out, "<br><span class=\"note\">closed ", Html(recon::FormatTimeUs(t.closed_at_us)),
                    ": ", Html(t.note), "</span>");
  }
  absl::StrAppend(&out, "</td><td>");
  if (t.state == "open" || t.state == "pending") {
    absl::StrAppend(&out, "<form method=\"post\" action=\"/console/recon/close\" class=\"resolve\">"
                          "<input type=\"hidden\" name=\"csrf\" value=\"", Html(csrf),
                    "\"><input type=\"hidden\" name=\"id\" value=\"", Html(t.id),
                    "\"><textarea name=\"note\" required rows=\"1\" cols=\"30\" maxlength=\"",
                    recon::kMaxNoteBytes,
                    "\" placeholder=\"what was done\"></textarea><button type=\"submit\">Close"
                    "</button></form>");
  }
  absl::StrAppend(&out, "</td></tr>");
}

}  // namespace

ConsoleAnswer Console::Recon(const Caller& caller, std::string_view query) {
  const auto form = ParseForm(query);
  const ConsoleAdmin& admin = *caller.admin;
  const auto page = [&](int status, const std::string& body) {
    return ConsoleAnswer{.response = console::HtmlResponse(
                             status, console::Page("Recon", admin.name, caller.csrf, body))};
  };
  std::string body = "<h1>Reconciliation</h1>";
  if (!admin.tenant.empty()) {
    return page(200, body + "<p class=\"note\">Reconciliation belongs to no tenant: an admin "
                            "held to one does not see it.</p>");
  }
  const std::string closed = console::Field(form, "closed");
  if (!closed.empty()) {
    absl::StrAppend(&body, "<p class=\"done\" id=\"closed\">Closed ticket ", Html(closed), "</p>");
  }
  std::string max_age_text = console::Field(form, "max_age");
  if (max_age_text.empty()) max_age_text = "15m";
  absl::Duration max_age;
  if (!absl::ParseDuration(max_age_text, &max_age) || max_age <= absl::ZeroDuration()) {
    return page(400, absl::StrCat(body, "<p class=\"error\" id=\"error\">max age '",
                                  Html(max_age_text),
                                  "' is not a duration such as 15m or 26h</p>"));
  }
  if (!store_.SupportsSql()) {
    return page(200, absl::StrCat(body, "<p class=\"note\" id=\"recon-none\">Reconciliation keeps "
                                        "its runs and tickets in a SQL store; this one (",
                                  Html(store_.url()), ") has none.</p>"));
  }
  if (absl::Status s = recon::CheckTicketTable(store_); !s.ok()) {
    return page(200, absl::StrCat(body, "<p class=\"note\" id=\"recon-none\">",
                                  Html(SV(s.message())), "</p>"));
  }
  const absl::Time now = options_.clock->Now();
  absl::StatusOr<std::vector<recon::Watermark>> marks = recon::ReadWatermarks(store_);
  const bool all = console::Field(form, "all") == "1";
  bool more = false;
  absl::StatusOr<std::vector<recon::Ticket>> tickets =
      recon::ListTickets(store_, "", all, kTicketsShown, &more);
  if (!marks.ok() || !tickets.ok()) {
    return page(503, absl::StrCat(body, "<p class=\"error\">The recon store: ",
                                  Html(SV((marks.ok() ? tickets.status() : marks.status()).message())),
                                  "</p>"));
  }
  absl::StrAppend(&body, "<h2>Runs</h2><form method=\"get\" action=\"/console/recon\" "
                         "class=\"search\"><label>Late after<input name=\"max_age\" size=\"6\" "
                         "value=\"", Html(max_age_text),
                  "\"></label><button type=\"submit\">Show</button></form>");
  if (marks->empty()) {
    absl::StrAppend(&body, "<p id=\"runs-none\">No run has completed yet.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"runs\"><thead><tr><th>Source</th><th>Up to</th>"
                           "<th>Last success</th><th>Run</th><th>Late?</th></tr></thead><tbody>");
    for (const recon::Watermark& w : *marks) {
      const bool late = now - absl::FromUnixMicros(w.last_success_at_us) > max_age;
      absl::StrAppend(&body, "<tr><td>", Html(w.source), "</td><td>",
                      Html(recon::FormatTimeUs(w.upto_us)), "</td><td>",
                      Html(recon::FormatTimeUs(w.last_success_at_us)), " (",
                      Ago(w.last_success_at_us, now), " ago)</td><td class=\"key\">",
                      Html(w.run_id), "</td><td class=\"", late ? "late" : "fresh", "\">",
                      late ? "late" : "no", "</td></tr>");
    }
    absl::StrAppend(&body, "</tbody></table>");
  }
  // Per source and class: what is not settled, and what the last run found.
  absl::StatusOr<std::vector<recon::ClassCount>> counts = recon::CountByClass(store_);
  if (!counts.ok()) {
    return page(503, absl::StrCat(body, "<p class=\"error\">The recon store: ",
                                  Html(SV(counts.status().message())), "</p>"));
  }
  absl::StrAppend(&body, "<h2>Per class</h2>");
  if (counts->empty()) {
    absl::StrAppend(&body, "<p id=\"classes-none\">No difference found yet.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"classes\"><thead><tr><th>Source</th><th>Class</th>"
                           "<th>Open or pending</th><th>Found by the last run</th></tr></thead>"
                           "<tbody>");
    for (const recon::ClassCount& c : *counts) {
      absl::StrAppend(&body, "<tr><td>", Html(c.source), "</td><td>", Html(c.cls), "</td><td>",
                      c.unsettled, "</td><td>", c.found_by_last_run, "</td></tr>");
    }
    absl::StrAppend(&body, "</tbody></table>");
  }
  absl::StrAppend(&body, "<h2>Tickets</h2><p>",
                  all ? "Every ticket. <a href=\"/console/recon\">Open and pending only</a>"
                      : "Open and pending. <a href=\"/console/recon?all=1\" id=\"all\">Every "
                        "ticket</a>",
                  "</p>");
  if (tickets->empty()) {
    absl::StrAppend(&body, "<p id=\"tickets-none\">None.</p>");
  } else {
    absl::StrAppend(&body, "<table id=\"tickets\"><thead><tr><th>Id</th><th>Source</th>"
                           "<th>Class</th><th>Severity</th><th>Action</th><th>State</th>"
                           "<th>Key</th><th>Detail</th><th>Close</th></tr></thead><tbody>");
    for (const recon::Ticket& t : *tickets) AppendTicket(body, t, caller.csrf);
    absl::StrAppend(&body, "</tbody></table>");
    if (more) {
      absl::StrAppend(&body, "<p class=\"note\">The first ", kTicketsShown,
                      " are shown; <code>idem recon tickets list</code> lists all.</p>");
    }
  }
  return page(200, body);
}

ConsoleAnswer Console::CloseTicket(const Caller& caller, const HttpRequest& request) {
  const auto form = ParseForm(request.body);
  const ConsoleAdmin& admin = *caller.admin;
  const std::string id = console::Field(form, "id");
  const std::string note = console::Note(console::Field(form, "note"));
  const auto refuse = [&](int status, std::string_view why) {
    return ConsoleAnswer{.response = console::Refused(status, "Not closed", admin.name, caller.csrf,
                                                      why, "/console/recon", "Back to reconciliation")};
  };
  if (!admin.tenant.empty()) return refuse(403, "an admin held to a tenant cannot close tickets");
  if (note.empty()) return refuse(400, "say what was done in the note");
  const std::string signed_note = absl::StrCat(note, " [", admin.name, ", in the console]");
  absl::StatusOr<recon::Ticket> done = recon::CloseTicket(
      store_, id, signed_note, absl::ToUnixMicros(options_.clock->Now()));
  if (!done.ok()) {
    return refuse(console::StatusOf(done.status()), SV(done.status().message()));
  }
  spdlog::info("console: {} closed recon ticket {}", admin.name, absl::CHexEscape(id));
  return {.response = console::Redirect(absl::StrCat("/console/recon?closed=", UrlEncode(id)))};
}

}  // namespace idem::http
