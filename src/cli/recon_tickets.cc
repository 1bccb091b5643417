// `idem recon tickets`: the tickets recon recorded, for the person who settles them.
//
//   idem recon tickets list [--source S] [--all] [--limit N] [--json] [--store URL]
//   idem recon tickets show ID [--json] [--store URL]
//   idem recon tickets close ID --note TEXT [--json] [--store URL]
//
// In the store recon runs use (--store, or [recon] store in --config, or
// sqlite://./idem-recon.db), which each names (redacted) in its output. list and
// show only read (a read-only session; a missing store or one no recon run has
// recorded in is an error, and nothing is created); close changes the one row.
// Exit status: 0 done; 1 the store cannot be read or has no tickets, no ticket ID,
// or it is closed already (or done); 2 bad usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/recon_cli.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "recon/recon_time.h"
#include "recon/tables.h"

namespace idem::cli {
namespace {

struct TicketsFlags {
  std::string* store = nullptr;  // recon's --store
  std::string* store_password_file = nullptr;
  std::string source;
  bool all = false;
  bool json = false;
  size_t limit = 100;
  std::string id;
  std::string note;
};

int TicketsFailure(const std::string& command, const std::string& why) {
  PrintReason("recon tickets " + command + ": " + why);
  return kExitFailure;
}

// The store of `url` for `command`: never created; read-only unless `write`; with
// a recon_ticket table. Returns the exit status to end with, or -1 with *store set.
int OpenTicketStore(const std::string& command, const std::string& url, bool write,
                    std::unique_ptr<Store>* store) {
  if (absl::Status s = CheckStoreExists(url); !s.ok()) {
    if (s.code() == absl::StatusCode::kInvalidArgument) {  // a malformed URL
      PrintReason("recon tickets " + command + ": " + std::string(s.message()));
      return kExitUsage;
    }
    return TicketsFailure(command, "the store " + RedactStoreUrl(url) +
                                       " does not exist: no `idem recon` run has recorded there "
                                       "(is it the --store the runs use?)");
  }
  absl::StatusOr<std::unique_ptr<Store>> opened =
      write ? OpenStore(url, StoreOptions{.create_schema = false})
            : OpenStore(url, StoreOptions{.read_only = true, .require_schema = false});
  if (!opened.ok()) {
    PrintReason("recon tickets " + command + ": " +
                std::string(RedactStoreSecrets(opened.status(), url).message()));
    return ExitCodeForStoreError(opened.status());
  }
  if (absl::Status s = recon::CheckTicketTable(**opened); !s.ok()) {
    return TicketsFailure(command, std::string(RedactStoreSecrets(s, url).message()));
  }
  *store = *std::move(opened);
  return -1;
}

nlohmann::ordered_json TicketJson(const recon::Ticket& t) {
  nlohmann::ordered_json j;
  j["id"] = t.id;
  j["source"] = t.source;
  j["key"] = t.key;
  j["class"] = t.cls;
  j["severity"] = t.severity;
  j["action"] = t.action;
  j["state"] = t.state;
  j["detail"] = t.detail;
  j["attempts"] = t.attempts;
  j["last_error"] = t.last_error;
  j["http_status"] =
      t.http_status == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(t.http_status);
  j["response"] =
      t.http_status == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(t.response);
  j["run_id"] = t.run_id;
  j["created_at"] = recon::FormatTimeUs(t.created_at_us);
  j["updated_at"] = recon::FormatTimeUs(t.updated_at_us);
  j["closed_at"] = t.closed_at_us == 0
                       ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json(recon::FormatTimeUs(t.closed_at_us));
  j["note"] =
      t.state == "closed" ? nlohmann::ordered_json(t.note) : nlohmann::ordered_json(nullptr);
  j["payload"] = t.payload;
  return j;
}

void PrintJson(const std::string& store_url, const char* name, nlohmann::ordered_json value,
               bool more = false) {
  nlohmann::ordered_json j;
  j["store"] = RedactStoreUrl(store_url);
  j[name] = std::move(value);
  if (more) j["more"] = true;
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// One ticket in full, for a person.
void PrintTicket(const recon::Ticket& t) {
  std::printf("ticket %s: %s %s (%s, %s severity)\n", t.id.c_str(), t.action.c_str(),
              t.state.c_str(), t.cls.c_str(), t.severity.c_str());
  std::printf("  source %s, key %s\n", Printable(t.source).c_str(), Printable(t.key).c_str());
  std::printf("  %s\n", Printable(t.detail).c_str());
  std::printf("  created %s by run %s, updated %s, %lld attempt(s)\n",
              recon::FormatTimeUs(t.created_at_us).c_str(), Printable(t.run_id).c_str(),
              recon::FormatTimeUs(t.updated_at_us).c_str(), static_cast<long long>(t.attempts));
  if (t.http_status != 0) {
    std::printf("  refused: HTTP %lld: %s\n", static_cast<long long>(t.http_status),
                Printable(t.response).c_str());
  } else if (!t.last_error.empty()) {
    std::printf("  last error: %s\n", Printable(t.last_error).c_str());
  }
  if (t.state == "closed") {
    std::printf("  closed %s: %s\n", recon::FormatTimeUs(t.closed_at_us).c_str(),
                Printable(t.note).c_str());
  }
  std::printf("  payload %s\n", Printable(t.payload).c_str());
}

int RunList(const TicketsFlags& f) {
  const std::string& url = ReconStoreUrl(*f.store);
  std::unique_ptr<Store> store;
  if (int exit = OpenTicketStore("list", url, false, &store); exit >= 0) return exit;
  bool more = false;
  absl::StatusOr<std::vector<recon::Ticket>> tickets =
      recon::ListTickets(*store, f.source, f.all, f.limit, &more);
  if (!tickets.ok()) {
    return TicketsFailure("list", std::string(RedactStoreSecrets(tickets.status(), url).message()));
  }
  if (f.json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const recon::Ticket& t : *tickets) list.push_back(TicketJson(t));
    PrintJson(url, "tickets", std::move(list), more);
    return kExitOk;
  }
  std::printf("store %s: %zu %sticket(s)%s\n", RedactStoreUrl(url).c_str(), tickets->size(),
              f.all ? "" : "open or pending ", more ? " (more: --limit)" : "");
  for (const recon::Ticket& t : *tickets) {
    std::string line = t.id + "  " + t.state + "  " + t.action + "  " + t.cls + "  " +
                       Printable(t.source) + "  " + Printable(t.key) + "  " + Printable(t.detail);
    if (t.http_status != 0) {
      line += "  [HTTP " + std::to_string(t.http_status) + ": " + Printable(t.response) + "]";
    }
    if (t.state == "closed") line += "  [closed: " + Printable(t.note) + "]";
    std::printf("  %s\n", line.c_str());
  }
  return kExitOk;
}

int RunShow(const TicketsFlags& f) {
  const std::string& url = ReconStoreUrl(*f.store);
  std::unique_ptr<Store> store;
  if (int exit = OpenTicketStore("show", url, false, &store); exit >= 0) return exit;
  absl::StatusOr<std::optional<recon::Ticket>> t = recon::FindTicket(*store, f.id);
  if (!t.ok()) {
    return TicketsFailure("show", std::string(RedactStoreSecrets(t.status(), url).message()));
  }
  if (!t->has_value()) {
    return TicketsFailure("show", "no ticket " + Printable(f.id) + " in " + RedactStoreUrl(url));
  }
  if (f.json) {
    PrintJson(url, "ticket", TicketJson(**t));
  } else {
    std::printf("store %s\n", RedactStoreUrl(url).c_str());
    PrintTicket(**t);
  }
  return kExitOk;
}

int RunClose(TicketsFlags f) {
  // Spaces around the note are not part of it.
  while (!f.note.empty() && f.note.back() == ' ') f.note.pop_back();
  while (!f.note.empty() && f.note.front() == ' ') f.note.erase(0, 1);
  if (f.note.empty()) {
    PrintReason("recon tickets close: --note TEXT is required (why it is settled)");
    return kExitUsage;
  }
  if (absl::Status s = ValidateFieldValue("--note", f.note, recon::kMaxNoteBytes); !s.ok()) {
    PrintReason("recon tickets close: " + std::string(s.message()));
    return kExitUsage;
  }
  const std::string& url = ReconStoreUrl(*f.store);
  std::unique_ptr<Store> store;
  if (int exit = OpenTicketStore("close", url, true, &store); exit >= 0) return exit;
  const int64_t now = absl::ToUnixMicros(absl::Now());
  absl::StatusOr<recon::Ticket> closed = recon::CloseTicket(*store, f.id, f.note, now);
  if (!closed.ok()) {
    std::string why(RedactStoreSecrets(closed.status(), url).message());
    if (closed.status().code() == absl::StatusCode::kNotFound) {
      why = "no ticket " + Printable(f.id) + " in " + RedactStoreUrl(url);
    }
    return TicketsFailure("close", why);
  }
  if (f.json) {
    PrintJson(url, "ticket", TicketJson(*closed));
  } else {
    std::printf("store %s: ticket %s closed %s: %s\n", RedactStoreUrl(url).c_str(),
                closed->id.c_str(), recon::FormatTimeUs(closed->closed_at_us).c_str(),
                Printable(closed->note).c_str());
  }
  return kExitOk;
}

}  // namespace

CLI::App* AddReconTicketsCommand(CLI::App* recon, std::string* store,
                                 std::string* store_password_file, CommandFn* run) {
  auto f = std::make_shared<TicketsFlags>();
  f->store = store;
  f->store_password_file = store_password_file;
  CLI::App* tickets = recon->add_subcommand(
      "tickets", "The tickets recon recorded: list, show, close (in --store, as recon runs)");
  tickets->require_subcommand(1);
  auto store_options = [&](CLI::App* sub) {
    sub->add_option("--store", *store,
                    std::string("Where recon keeps its tickets (default: ") + kDefaultReconStore +
                        "; or [recon] store in --config)");
    sub->add_option("--store-password-file", *store_password_file,
                    "The --store URL's password, from this file (or IDEM_STORE_PASSWORD)");
    sub->add_flag("--json", f->json, "Print JSON: {\"store\":URL,…}");
  };
  CLI::App* list = tickets->add_subcommand(
      "list", "Open tickets and pending replays/re-pushes (--all: closed and done too); read-only");
  store_options(list);
  list->add_option("--source", f->source, "Only this source's");
  list->add_flag("--all", f->all, "Closed tickets and done replays/re-pushes too");
  list->add_option("--limit", f->limit, "At most this many")
      ->check(CLI::Range(size_t{1}, size_t{100000}))
      ->capture_default_str();
  CLI::App* show = tickets->add_subcommand("show", "One ticket in full; read-only");
  store_options(show);
  show->add_option("ID", f->id, "The ticket's id (from list)")->required();
  CLI::App* close = tickets->add_subcommand(
      "close", "Close a ticket (or give up a pending replay/re-push) with a note of why");
  store_options(close);
  close->add_option("ID", f->id, "The ticket's id (from list)")->required();
  close
      ->add_option("--note", f->note,
                   "Why it is settled (required; at most 2000 bytes, no control characters)")
      ->required();
  *run = [f, list, show] {
    if (int exit = ReconUrlWithSecret("--store", f->store, *f->store_password_file); exit >= 0) {
      return exit;
    }
    if (list->parsed()) return RunList(*f);
    if (show->parsed()) return RunShow(*f);
    return RunClose(*f);
  };
  return tickets;
}

}  // namespace idem::cli
