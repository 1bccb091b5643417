#include "recon/report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "idem/key.h"
#include "nlohmann/json.hpp"
#include "recon/recon_time.h"

namespace idem::recon {
namespace {

std::string Escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "?";
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

std::string WindowText(const ReportHeader& h) {
  return (h.from_us ? FormatTimeUs(*h.from_us) : std::string("(start)")) + " .. " +
         (h.to_us ? FormatTimeUs(*h.to_us) : std::string("(end)"));
}

std::string Where(const ReportHeader& h, const Row& row, bool upstream) {
  if (!upstream) return "ledger row " + std::to_string(row.line);
  const std::string file = row.source < h.statements.size() ? h.statements[row.source] : "?";
  return file + ":" + std::to_string(row.line);
}

std::string Describe(const Row& row) {
  std::string s = row.amount;
  if (!row.currency.empty()) s += " " + row.currency;
  if (!row.status.empty()) s += " " + row.status;
  if (row.has_time) s += " " + FormatTimeUs(row.time_us);
  return s;
}

// The ticket cell of a report row.
std::string TicketCell(const Ticket* t) {
  if (t == nullptr) return "no ticket";
  std::string cell = "<span class=\"ticket\" data-state=\"" + Escape(t->state) + "\">" +
                     Escape(t->id) + " " + Escape(t->action) + " " + Escape(t->state) + "</span>";
  if (t->state == "closed") {
    cell += "<br><small class=\"closed\">closed " + Escape(FormatTimeUs(t->closed_at_us)) + ": " +
            Escape(t->note) + "</small>";
  }
  if (t->http_status != 0) {
    cell += "<br><small class=\"refused\">HTTP " + std::to_string(t->http_status) + ": " +
            Escape(t->response) + "</small>";
  } else if (t->state == "pending" && !t->last_error.empty()) {
    cell += "<br><small class=\"refused\">" + Escape(t->last_error) + "</small>";
  }
  return cell;
}

}  // namespace

std::string FailureText(const ActionFailure& a) {
  std::string s =
      a.action + " of " + EscapeControl(a.key, 60) + " (" + a.cls + ", ticket " + a.id + "): ";
  if (a.http_status == 0) return s + a.error;
  return s + "HTTP " + std::to_string(a.http_status) + ": " + a.response;
}

std::vector<std::string> ReportedTicketIds(const std::string& source, const CompareResult& result,
                                           size_t examples) {
  std::vector<std::string> ids;
  std::array<size_t, kClassCount> shown{};
  for (const Difference& d : result.differences) {
    const int c = static_cast<int>(d.cls);
    if (shown[c]++ < examples) ids.push_back(TicketId(source, kClassNames[c], d.key));
  }
  return ids;
}

std::string JsonLine(const ReportHeader& header, const CompareResult& result,
                     const std::vector<ActionFailure>& failures) {
  nlohmann::ordered_json j;
  j["source"] = header.source;
  j["from"] = header.from_us ? nlohmann::ordered_json(FormatTimeUs(*header.from_us)) : nullptr;
  j["to"] = header.to_us ? nlohmann::ordered_json(FormatTimeUs(*header.to_us)) : nullptr;
  j["upstream_rows"] = result.upstream_rows;
  j["local_rows"] = result.local_rows;
  j["matched"] = result.matched;
  for (int c = 0; c < kClassCount; ++c) j[std::string(kClassNames[c])] = result.counts[c];
  if (!failures.empty()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ActionFailure& a : failures) {
      nlohmann::ordered_json f;
      f["ticket"] = a.id;
      f["key"] = a.key;
      f["class"] = a.cls;
      f["action"] = a.action;
      f["http_status"] = a.http_status == 0 ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(a.http_status);
      f["response"] =
          a.http_status == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.response);
      f["error"] = a.error;
      list.push_back(std::move(f));
    }
    j["failed_actions"] = std::move(list);
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SummaryTable(const ReportHeader& header, const CompareResult& result) {
  std::string out = "recon " + header.source + ": " + WindowText(header) + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-18s %12lld\n  %-18s %12lld\n\n", "upstream rows",
                static_cast<long long>(result.upstream_rows), "local rows",
                static_cast<long long>(result.local_rows));
  out += line;
  std::snprintf(line, sizeof line, "  %-18s %12s\n", "class", "keys");
  out += line;
  std::snprintf(line, sizeof line, "  %-18s %12lld\n", "matched",
                static_cast<long long>(result.matched));
  out += line;
  for (int c = 0; c < kClassCount; ++c) {
    std::snprintf(line, sizeof line, "  %-18s %12lld\n", std::string(kClassNames[c]).c_str(),
                  static_cast<long long>(result.counts[c]));
    out += line;
  }
  return out;
}

std::string HtmlReport(const ReportHeader& header, const CompareResult& result,
                       const std::map<std::string, Ticket>* tickets, size_t examples) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
       "style-src 'unsafe-inline'\">\n";
  h += "<title>idem recon " + Escape(header.source) + "</title>\n";
  h += "<style>body{font-family:sans-serif;margin:2em;color:#222}"
       "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;"
       "text-align:left}td.n{text-align:right}h2{margin-top:1.5em}</style>\n</head><body>\n";
  h += "<h1>Reconciliation: " + Escape(header.source) + "</h1>\n";
  h += "<p id=\"window\">" + Escape(WindowText(header)) + "</p>\n";
  h += "<table id=\"counts\"><tr><th>class</th><th>count</th></tr>\n";
  auto count_row = [&](std::string_view name, int64_t n) {
    h += "<tr><td>" + std::string(name) + "</td><td class=\"n\" data-class=\"" + std::string(name) +
         "\">" + std::to_string(n) + "</td></tr>\n";
  };
  count_row("upstream_rows", result.upstream_rows);
  count_row("local_rows", result.local_rows);
  count_row("matched", result.matched);
  for (int c = 0; c < kClassCount; ++c) count_row(kClassNames[c], result.counts[c]);
  h += "</table>\n";

  // The chart: one bar per class, scaled to the largest.
  int64_t most = 1;
  for (int64_t n : result.counts) most = std::max(most, n);
  const int bar_h = 28, width = 640, label_w = 150, chart_h = kClassCount * (bar_h + 8) + 8;
  h += "<svg id=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
       "\" height=\"" + std::to_string(chart_h) +
       "\" role=\"img\" aria-label=\"differences by class\">\n";
  const char* colors[kClassCount] = {"#d9822b", "#c23030", "#2b95d6", "#8f398f", "#5c7080"};
  for (int c = 0; c < kClassCount; ++c) {
    const int y = 8 + c * (bar_h + 8);
    const int w = static_cast<int>((width - label_w - 80) * result.counts[c] / most);
    h += "<text x=\"0\" y=\"" + std::to_string(y + 19) + "\" font-size=\"14\">" +
         std::string(kClassNames[c]) + "</text>";
    h += "<rect class=\"bar\" data-class=\"" + std::string(kClassNames[c]) + "\" x=\"" +
         std::to_string(label_w) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
         std::to_string(std::max(w, result.counts[c] > 0 ? 2 : 0)) + "\" height=\"" +
         std::to_string(bar_h) + "\" fill=\"" + colors[c] + "\"/>";
    h += "<text x=\"" + std::to_string(label_w + w + 6) + "\" y=\"" + std::to_string(y + 19) +
         "\" font-size=\"14\">" + std::to_string(result.counts[c]) + "</text>\n";
  }
  h += "</svg>\n";

  for (int c = 0; c < kClassCount; ++c) {
    if (result.counts[c] == 0) continue;
    h += "<h2>" + std::string(kClassNames[c]) + "</h2>\n<table class=\"examples\" data-class=\"" +
         std::string(kClassNames[c]) +
         "\"><tr><th>key</th><th>upstream</th><th>local</th><th>note</th>" +
         (tickets != nullptr ? "<th>ticket</th>" : "") + "</tr>\n";
    size_t shown = 0;
    for (const Difference& d : result.differences) {
      if (static_cast<int>(d.cls) != c) continue;
      if (shown++ == examples) break;
      std::string note;
      if (d.cls == DiffClass::kDuplicate) {
        note = std::to_string(d.duplicate_rows) + " rows " +
               (d.duplicate_side == Side::kUpstream ? "upstream" : "local");
      } else if (d.cls == DiffClass::kStatusMismatch) {
        note = d.stuck ? "stuck in an intermediate state" : "another final state";
      }
      h += "<tr><td>" + Escape(d.key) + "</td><td>" +
           (d.upstream ? Escape(Describe(*d.upstream)) + "<br><small>" +
                             Escape(Where(header, *d.upstream, true)) + "</small>"
                       : std::string("&mdash;")) +
           "</td><td>" +
           (d.local ? Escape(Describe(*d.local)) + "<br><small>" +
                          Escape(Where(header, *d.local, false)) + "</small>"
                    : std::string("&mdash;")) +
           "</td><td>" + Escape(note) + "</td>";
      if (tickets != nullptr) {
        const auto t = tickets->find(TicketId(header.source, kClassNames[c], d.key));
        h += "<td>" + TicketCell(t == tickets->end() ? nullptr : &t->second) + "</td>";
      }
      h += "</tr>\n";
    }
    if (result.counts[c] > static_cast<int64_t>(examples)) {
      h += "<tr><td colspan=\"" + std::string(tickets != nullptr ? "5" : "4") + "\">… and " +
           std::to_string(result.counts[c] - examples) + " more</td></tr>\n";
    }
    h += "</table>\n";
  }
  h += "</body></html>\n";
  return h;
}

}  // namespace idem::recon
