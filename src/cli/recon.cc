// `idem recon`: the upstream statement against the local ledger.
//
//   idem recon --source wechat --statement bill-2024-06-18.csv
//              --map
//              key=out_trade_no,amount=total_fee,currency=fee_type,status=trade_state,time=trade_time
//              --upstream-scale 2 --tz Asia/Shanghai
//              --ledger postgres://recon@db/shop
//              --ledger-query "SELECT order_no AS key, amount::text AS amount, … FROM ledger"
//              --status-map SUCCESS=PAID,REFUND=REFUNDED --intermediate PENDING,PROCESSING
//              --day 2024-06-18 [--replay-url URL] [--repush-url URL] [--dry-run]
//              [--replay-header-file FILE] [--json] [--report FILE.html]
//   idem recon status --source wechat --max-age 15m [--store URL] [--json]
//   idem recon tickets list|show ID|close ID --note TEXT   (recon_tickets.cc)
//
// The comparison only reads; then each difference is recorded and acted on
// (recon/dispositions.h) and the watermark advances, in --store (default:
// sqlite://./idem-recon.db, never the ledger unless --store names it). Bad input
// (and a bad replay header, from --replay-header-file or IDEM_RECON_REPLAY_HEADERS)
// stops the run before anything is written or sent. A replay or re-push not done
// is shown with its answer's status and first bytes on stdout, in the JSON line,
// in the report and in its ticket.
// Exit status: 0 the run completed (differences are findings, not failures);
// 1 bad input, a store or file that cannot be read, a replay/re-push that failed
// (it stays pending), or for `status` a last success older than --max-age (or none);
// 2 bad usage.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/recon_cli.h"
#include "cli/secrets.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "recon/comparer.h"
#include "recon/decimal.h"
#include "recon/dispositions.h"
#include "recon/ledger_reader.h"
#include "recon/recon_time.h"
#include "recon/replay_headers.h"
#include "recon/report.h"
#include "recon/statement_readers.h"
#include "recon/tables.h"

namespace idem::cli {
namespace {

using recon::Action;

struct ReconFlags {
  std::string source;
  std::vector<std::string> statements;
  std::string format;  // csv, jsonl; "" = by extension
  std::string delimiter = ",";
  std::string map;
  std::string ledger;
  std::string ledger_query;
  std::string store;
  std::string ledger_password_file, store_password_file;
  int upstream_scale = 0;
  int local_scale = 0;
  std::string tz = "UTC";
  std::string status_map;
  std::string intermediate;
  std::string from, to, day, hot;
  std::string overlap;
  std::string lateness = "1m";
  std::string skew = "0s";
  bool dry_run = false;
  bool json = false;
  std::string report;
  std::string replay_url, repush_url;
  std::string replay_header_file;
  std::vector<std::string> on;
  std::string temp_dir;
  int memory_mib = 256;
  // recon status
  std::string max_age = "15m";
};

int ReconUsage(const std::string& why) {
  PrintReason("recon: " + why);
  return kExitUsage;
}

int Failure(const std::string& why) {
  PrintReason("recon: " + why);
  return kExitFailure;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string NewRunId(int64_t now_us) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llx-%x", static_cast<unsigned long long>(now_us),
                static_cast<unsigned>(getpid()));
  return buf;
}

// --ledger and --store with their passwords from --ledger-password-file /
// IDEM_LEDGER_PASSWORD and --store-password-file / IDEM_STORE_PASSWORD (never the
// command line, which `ps` shows); a warning line for a password left in a URL there.
// Returns the exit status to end with, or -1 to go on.
int ResolveSecrets(ReconFlags* f) {
  if (int exit = ReconUrlWithSecret("--ledger", &f->ledger, f->ledger_password_file); exit >= 0) {
    return exit;
  }
  return ReconUrlWithSecret("--store", &f->store, f->store_password_file);
}

absl::StatusOr<std::unique_ptr<Store>> OpenLedgerStore(const std::string& url) {
  if (absl::Status s = CheckSqliteFileExists(url); !s.ok()) return s;
  // Read only and without needing idem's schema: the ledger is the business's
  // database, and comparing writes nothing there.
  absl::StatusOr<std::unique_ptr<Store>> store =
      OpenStore(url, StoreOptions{.read_only = true, .require_schema = false});
  if (!store.ok()) return RedactStoreSecrets(store.status(), url);
  return store;
}

int RunStatus(ReconFlags f) {
  if (int exit = ResolveSecrets(&f); exit >= 0) return exit;
  if (f.source.empty()) return ReconUsage("status needs --source");
  absl::StatusOr<absl::Duration> max_age = recon::ParseDurationFlag(f.max_age, false);
  if (!max_age.ok()) return ReconUsage("--max-age: " + Msg(max_age.status()));
  const std::string& url = ReconStoreUrl(f.store);
  if (absl::Status s = CheckSqliteFileExists(url); !s.ok()) return Failure(Msg(s));
  absl::StatusOr<std::unique_ptr<Store>> store =
      OpenStore(url, StoreOptions{.read_only = true, .require_schema = false});
  if (!store.ok()) {
    PrintReason("recon status: " + Msg(RedactStoreSecrets(store.status(), url)));
    return ExitCodeForStoreError(store.status());
  }
  absl::StatusOr<std::optional<recon::Watermark>> w = recon::ReadWatermark(**store, f.source);
  if (!w.ok()) return Failure("status: " + Msg(w.status()));
  const int64_t now = absl::ToUnixMicros(absl::Now());
  const bool fresh =
      w->has_value() && now - (*w)->last_success_at_us <= absl::ToInt64Microseconds(*max_age);
  if (f.json) {
    nlohmann::ordered_json j;
    j["source"] = f.source;
    j["last_success_at"] =
        w->has_value() ? nlohmann::ordered_json(recon::FormatTimeUs((*w)->last_success_at_us))
                       : nullptr;
    j["upto"] =
        w->has_value() ? nlohmann::ordered_json(recon::FormatTimeUs((*w)->upto_us)) : nullptr;
    j["run_id"] = w->has_value() ? nlohmann::ordered_json((*w)->run_id) : nullptr;
    j["fresh"] = fresh;
    std::printf("%s\n", j.dump().c_str());
  } else if (w->has_value()) {
    std::printf("recon %s: last success %s (%llds ago), up to %s, run %s\n", f.source.c_str(),
                recon::FormatTimeUs((*w)->last_success_at_us).c_str(),
                static_cast<long long>((now - (*w)->last_success_at_us) / 1000000),
                recon::FormatTimeUs((*w)->upto_us).c_str(), (*w)->run_id.c_str());
  }
  if (!w->has_value()) return Failure("status: source " + f.source + " has never completed a run");
  if (!fresh) {
    return Failure("status: the last success of " + f.source + " is older than " + f.max_age +
                   " (" + recon::FormatTimeUs((*w)->last_success_at_us) + ")");
  }
  return kExitOk;
}

// The environment variable that may hold the replay headers instead of
// --replay-header-file (an environment is readable by the process's user and root
// only; a command line by every local user).
constexpr char kReplayHeadersEnv[] = "IDEM_RECON_REPLAY_HEADERS";

// The headers of every replay and re-push, from --replay-header-file or
// IDEM_RECON_REPLAY_HEADERS (recon/replay_headers.h), into *headers. A file another
// user could change is refused, one group or others may read is warned about.
// Returns the exit status to end with (the reason printed), or -1 to go on.
int ReplayHeadersOf(const ReconFlags& f, std::vector<recon::Header>* headers) {
  const char* env = std::getenv(kReplayHeadersEnv);
  const bool from_env = env != nullptr && *env != '\0';
  if (f.replay_header_file.empty()) {
    if (!from_env) return -1;
    absl::StatusOr<std::vector<recon::Header>> h =
        recon::ParseReplayHeaders(env, kReplayHeadersEnv);
    if (!h.ok()) return ReconUsage(Msg(h.status()));
    *headers = *std::move(h);
    return -1;
  }
  const std::string& path = f.replay_header_file;
  if (from_env) {
    return ReconUsage(std::string("--replay-header-file and ") + kReplayHeadersEnv +
                      " are both set: give the headers in one of them");
  }
  if (f.replay_url.empty() && f.repush_url.empty()) {
    return ReconUsage("--replay-header-file needs --replay-url or --repush-url");
  }
  const std::string what = "replay header file " + path;
  if (absl::Status s = CheckSecretFileOwnership(path, what); !s.ok()) return Failure(Msg(s));
  std::ifstream in(path, std::ios::binary);
  std::string text(recon::kMaxReplayHeaderBytes + 1, '\0');
  if (in.is_open()) in.read(text.data(), static_cast<std::streamsize>(text.size()));
  // A folder opens, but reads nothing and sets no eof.
  if (!in.is_open() || in.bad() || (!in.eof() && in.gcount() == 0)) {
    return Failure("--replay-header-file " + path + ": cannot be read");
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (std::string w = LooseFileWarning(path, what); !w.empty()) {
    std::fprintf(stderr, "idem: warning: %s\n", w.c_str());
  }
  absl::StatusOr<std::vector<recon::Header>> h = recon::ParseReplayHeaders(text, path);
  if (!h.ok()) return ReconUsage(Msg(h.status()));
  if (h->empty()) return ReconUsage(path + ": holds no header (Name: value)");
  *headers = *std::move(h);
  return -1;
}

// What the flags of a run ask for, checked.
struct ReconSetup {
  recon::ColumnMap map;
  recon::StatusRules rules;
  absl::TimeZone tz;
  recon::StatementOptions statement_options;
  std::vector<recon::StatementFormat> formats;  // one for each of f.statements
  std::array<Action, recon::kClassCount> plan;
  std::unique_ptr<recon::ActionSink> sink;
  absl::Duration lateness;
  absl::Duration skew;
};

// Checks the flags of a run into *setup. Returns the exit status to end with (the
// reason printed), or -1 to go on.
int ParseReconSetup(const ReconFlags& f, ReconSetup* setup) {
  if (f.source.empty()) return ReconUsage("--source NAME is required (e.g. the payment channel)");
  if (f.statements.empty()) return ReconUsage("--statement FILE is required");
  if (f.map.empty()) return ReconUsage("--map key=COLUMN,… is required");
  if (f.ledger.empty() || f.ledger_query.empty()) {
    return ReconUsage("--ledger URL and --ledger-query SQL are required");
  }
  absl::StatusOr<recon::ColumnMap> map = recon::ParseColumnMap(f.map);
  if (!map.ok()) return ReconUsage(Msg(map.status()));
  setup->map = *std::move(map);
  absl::StatusOr<recon::StatusRules> rules = recon::ParseStatusRules(f.status_map, f.intermediate);
  if (!rules.ok()) return ReconUsage(Msg(rules.status()));
  setup->rules = *std::move(rules);
  if (!setup->rules.map.empty() && !setup->map.has(recon::Field::kStatus)) {
    return ReconUsage("--status-map needs status=COLUMN in --map");
  }
  for (int scale : {f.upstream_scale, f.local_scale}) {
    if (scale < 0 || scale > recon::kMaxScale)
      return ReconUsage("--upstream-scale/--local-scale: 0 to 18");
  }
  absl::StatusOr<absl::TimeZone> tz = recon::ParseTimeZone(f.tz);
  if (!tz.ok()) return ReconUsage("--tz: " + Msg(tz.status()));
  setup->tz = *tz;
  if (f.delimiter == "\\t" || f.delimiter == "tab") {
    setup->statement_options.delimiter = '\t';
  } else if (f.delimiter.size() == 1 && f.delimiter[0] != '"' && f.delimiter[0] != '\n') {
    setup->statement_options.delimiter = f.delimiter[0];
  } else {
    return ReconUsage("--delimiter: one character (or tab)");
  }
  for (const std::string& path : f.statements) {
    std::string format = f.format;
    if (format.empty()) {
      format = path.ends_with(".jsonl") || path.ends_with(".ndjson") ? "jsonl" : "csv";
    }
    if (format != "csv" && format != "jsonl") return ReconUsage("--format: csv or jsonl");
    setup->formats.push_back(format == "csv" ? recon::StatementFormat::kCsv
                                             : recon::StatementFormat::kJsonl);
  }
  std::array<Action, recon::kClassCount>& plan = setup->plan;
  plan = {f.replay_url.empty() ? Action::kTicket : Action::kReplay, Action::kTicket,
          f.repush_url.empty() ? Action::kTicket : Action::kRepush, Action::kTicket,
          Action::kTicket};
  for (const std::string& on : f.on) {
    if (absl::Status s = recon::ParseActionFlag(on, &plan); !s.ok()) return ReconUsage(Msg(s));
  }
  if (plan[0] == Action::kReplay && f.replay_url.empty()) {
    return ReconUsage("--on missing_local=replay needs --replay-url");
  }
  if (plan[2] == Action::kRepush && f.repush_url.empty()) {
    return ReconUsage("--on status_mismatch=repush needs --repush-url");
  }
  std::vector<recon::Header> headers;
  if (int exit = ReplayHeadersOf(f, &headers); exit >= 0) return exit;
  absl::StatusOr<std::unique_ptr<recon::ActionSink>> sink =
      recon::NewHttpActionSink(f.replay_url, f.repush_url, absl::Seconds(30), std::move(headers));
  if (!sink.ok()) return ReconUsage(Msg(sink.status()));
  setup->sink = *std::move(sink);
  absl::StatusOr<absl::Duration> lateness = recon::ParseDurationFlag(f.lateness, true);
  if (!lateness.ok()) return ReconUsage("--lateness: " + Msg(lateness.status()));
  setup->lateness = *lateness;
  absl::StatusOr<absl::Duration> skew = recon::ParseDurationFlag(f.skew, true);
  if (!skew.ok()) return ReconUsage("--skew: " + Msg(skew.status()));
  setup->skew = *skew;
  const int modes = (!f.from.empty() || !f.to.empty()) + !f.day.empty() + !f.hot.empty();
  if (modes > 1) return ReconUsage("choose one window: --from/--to, --day or --hot");
  if (modes == 1 && !setup->map.has(recon::Field::kTime)) {
    return ReconUsage("a window needs time=COLUMN in --map");
  }
  if (f.memory_mib < 16 || f.memory_mib > 65536) return ReconUsage("--memory-mib: 16 to 65536");
  return -1;
}

// The window of keys a run judges (--from/--to, --day, or --hot from the watermark in
// `store_url`), into *window. Returns the exit status to end with (the reason
// printed), or -1 to go on.
int ReconWindowOf(const ReconFlags& f, const ReconSetup& setup, int64_t now,
                  const std::string& store_url, recon::Window* window) {
  window->skew_us = absl::ToInt64Microseconds(setup.skew);
  if (!f.from.empty() || !f.to.empty()) {
    if (!f.from.empty()) {
      absl::StatusOr<int64_t> t = recon::ParseTimeUs(f.from, setup.tz);
      if (!t.ok()) return ReconUsage("--from: " + Msg(t.status()));
      window->from_us = *t;
    }
    if (!f.to.empty()) {
      absl::StatusOr<int64_t> t = recon::ParseTimeUs(f.to, setup.tz);
      if (!t.ok()) return ReconUsage("--to: " + Msg(t.status()));
      window->to_us = *t;
    }
  } else if (!f.day.empty()) {
    absl::CivilDay day;
    if (!absl::ParseCivilTime(f.day, &day)) return ReconUsage("--day: YYYY-MM-DD");
    window->from_us = absl::ToUnixMicros(absl::FromCivil(day, setup.tz));
    window->to_us = absl::ToUnixMicros(absl::FromCivil(day + 1, setup.tz));
  } else if (!f.hot.empty()) {
    absl::StatusOr<absl::Duration> hot = recon::ParseDurationFlag(f.hot, false);
    if (!hot.ok()) return ReconUsage("--hot: " + Msg(hot.status()));
    absl::StatusOr<absl::Duration> overlap =
        f.overlap.empty() ? *hot : recon::ParseDurationFlag(f.overlap, true);
    if (!overlap.ok()) return ReconUsage("--overlap: " + Msg(overlap.status()));
    std::optional<recon::Watermark> mark;
    if (absl::Status s = CheckSqliteFileExists(store_url); s.ok()) {
      absl::StatusOr<std::unique_ptr<Store>> store =
          OpenStore(store_url, StoreOptions{.read_only = true, .require_schema = false});
      if (!store.ok()) return Failure(Msg(RedactStoreSecrets(store.status(), store_url)));
      absl::StatusOr<std::optional<recon::Watermark>> w = recon::ReadWatermark(**store, f.source);
      if (!w.ok()) return Failure("reading the watermark: " + Msg(w.status()));
      mark = *w;
    }
    window->to_us = now - absl::ToInt64Microseconds(setup.lateness);
    window->from_us = mark.has_value() ? mark->upto_us - absl::ToInt64Microseconds(*overlap)
                                       : *window->to_us - absl::ToInt64Microseconds(*hot);
  }
  // Rows near the open edge are left for the next run: nothing newer than
  // now - lateness is judged, whatever the window asked for.
  const int64_t edge = now - absl::ToInt64Microseconds(setup.lateness);
  if (setup.map.has(recon::Field::kTime) && (!window->to_us.has_value() || *window->to_us > edge)) {
    window->to_us = edge;
  }
  return -1;
}

// Reads the statements and the ledger and compares them (nothing is written), into
// *result. Returns the exit status to end with (the reason printed), or -1 to go on.
int CompareRecon(const ReconFlags& f, const ReconSetup& setup, const recon::Window& window,
                 recon::CompareResult* result) {
  recon::Normalizer up_norm(recon::Side::kUpstream, setup.map, f.upstream_scale, setup.tz,
                            setup.rules);
  recon::Normalizer local_norm(recon::Side::kLocal, setup.map, f.local_scale, setup.tz,
                               setup.rules);
  recon::StatementOptions statement_options = setup.statement_options;
  std::vector<std::unique_ptr<recon::StatementReader>> readers;
  std::vector<recon::StatementReader*> upstream;
  for (size_t i = 0; i < f.statements.size(); ++i) {
    statement_options.format = setup.formats[i];
    absl::StatusOr<std::unique_ptr<recon::StatementReader>> r = recon::OpenStatement(
        f.statements[i], static_cast<uint32_t>(i), setup.map, statement_options, up_norm);
    if (!r.ok()) return Failure(Msg(r.status()));
    upstream.push_back(r->get());
    readers.push_back(*std::move(r));
  }
  absl::StatusOr<std::unique_ptr<Store>> ledger = OpenLedgerStore(f.ledger);
  if (!ledger.ok()) {
    PrintReason("recon: --ledger: " + Msg(ledger.status()));
    return ExitCodeForStoreError(ledger.status());
  }
  absl::StatusOr<std::unique_ptr<recon::StatementReader>> local =
      recon::OpenLedger(**ledger, f.ledger_query, local_norm);
  if (!local.ok()) return ReconUsage(Msg(local.status()));

  recon::CompareOptions options;
  options.window = window;
  options.status = &setup.rules;
  options.compare_status = setup.map.has(recon::Field::kStatus);
  options.memory_budget = static_cast<size_t>(f.memory_mib) << 20;
  if (!f.temp_dir.empty()) {
    options.temp_dir = f.temp_dir;
  } else if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') {
    options.temp_dir = t;
  }
  // A progress line for big inputs: at 100,000 rows of a side, then every million.
  options.progress = [](recon::Side side, int64_t up, int64_t loc) {
    const int64_t n = side == recon::Side::kUpstream ? up : loc;
    if (n != 100000 && n % 1000000 != 0) return;
    std::fprintf(stderr, "recon: read %lld upstream, %lld local rows\n", static_cast<long long>(up),
                 static_cast<long long>(loc));
  };
  absl::StatusOr<recon::CompareResult> compared = recon::Compare(upstream, **local, options);
  if (!compared.ok()) return Failure(Msg(RedactStoreSecrets(compared.status(), f.ledger)));
  *result = *std::move(compared);
  return -1;
}

// What recording a run did, for its output.
struct Recorded {
  std::string disposition_line;                  // "  N new ticket/action row(s), …"
  std::vector<recon::ActionFailure> failures;    // the first replays/re-pushes not done
  std::map<std::string, recon::Ticket> tickets;  // the report's rows' tickets, by id
};

// Acts on the differences and records them and the watermark in `store_url` (not in a
// dry run) into *recorded, with the tickets of the rows the report shows when there
// is one; *exit becomes kExitFailure while actions are pending. Returns the exit
// status to end with (the reason printed), or -1 to go on.
int RecordRecon(const ReconFlags& f, const ReconSetup& setup, const recon::Window& window,
                const recon::CompareResult& result, const std::string& store_url, int64_t now,
                Recorded* recorded, int* exit) {
  if (f.dry_run) {
    recorded->disposition_line = "  dry run: nothing written\n";
    return -1;
  }
  if (result.truncated) {
    return Failure(
        "more than 2,000,000 differences: check --map and the window before acting "
        "on them (nothing was written)");
  }
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(store_url);
  if (!store.ok()) {
    PrintReason("recon: --store: " + Msg(RedactStoreSecrets(store.status(), store_url)));
    return ExitCodeForStoreError(store.status());
  }
  const std::string run_id = NewRunId(now);
  absl::StatusOr<recon::DispositionResult> done = recon::ApplyDispositions(
      **store, f.source, run_id, result.differences, setup.plan, setup.sink.get(), now);
  if (!done.ok())
    return Failure("recording the differences: " +
                   Msg(RedactStoreSecrets(done.status(), store_url)));
  recorded->disposition_line = "  " + std::to_string(done->new_rows) +
                               " new ticket/action row(s), " + std::to_string(done->sent) +
                               " replay/re-push sent, " + std::to_string(done->failed) +
                               " pending\n";
  for (const recon::ActionFailure& a : done->failures) {
    recorded->disposition_line += "  not done: " + recon::FailureText(a) + "\n";
  }
  if (done->failed > static_cast<int64_t>(done->failures.size())) {
    recorded->disposition_line +=
        "  … and " + std::to_string(done->failed - static_cast<int64_t>(done->failures.size())) +
        " more (idem recon tickets list)\n";
  }
  recorded->failures = std::move(done->failures);
  if (!f.report.empty()) {
    absl::StatusOr<std::vector<recon::Ticket>> tickets =
        recon::FindTickets(**store, recon::ReportedTicketIds(f.source, result));
    if (!tickets.ok()) {
      return Failure("reading the tickets for --report: " +
                     Msg(RedactStoreSecrets(tickets.status(), store_url)));
    }
    for (recon::Ticket& t : *tickets) recorded->tickets[t.id] = std::move(t);
  }
  if (done->failed > 0) {
    PrintReason("recon: " + std::to_string(done->failed) +
                " replay/re-push still pending (retried by the next run); first: " +
                recon::FailureText(recorded->failures.front()));
    *exit = kExitFailure;
    return -1;
  }
  absl::Status w =
      recon::WriteWatermark(**store, recon::Watermark{.source = f.source,
                                                      .upto_us = window.to_us.value_or(now),
                                                      .last_success_at_us = now,
                                                      .run_id = run_id});
  if (!w.ok()) return Failure("writing the watermark: " + Msg(RedactStoreSecrets(w, store_url)));
  return -1;
}

int RunRecon(ReconFlags f) {
  if (int exit = ResolveSecrets(&f); exit >= 0) return exit;
  ReconSetup setup;
  if (int exit = ParseReconSetup(f, &setup); exit >= 0) return exit;

  const int64_t now = absl::ToUnixMicros(absl::Now());
  const std::string& store_url = ReconStoreUrl(f.store);
  recon::Window window;
  if (int exit = ReconWindowOf(f, setup, now, store_url, &window); exit >= 0) return exit;
  recon::CompareResult result;
  if (int exit = CompareRecon(f, setup, window, &result); exit >= 0) return exit;

  recon::ReportHeader header{.source = f.source,
                             .from_us = window.from_us,
                             .to_us = window.to_us,
                             .statements = f.statements};
  Recorded recorded;
  int exit = kExitOk;
  if (int end = RecordRecon(f, setup, window, result, store_url, now, &recorded, &exit); end >= 0) {
    return end;
  }

  if (!f.report.empty()) {
    std::ofstream out(f.report, std::ios::binary | std::ios::trunc);
    out << recon::HtmlReport(header, result, f.dry_run ? nullptr : &recorded.tickets);
    out.close();
    if (!out) return Failure("--report " + f.report + ": cannot be written");
  }
  std::fputs(recon::SummaryTable(header, result).c_str(), stdout);
  std::fputs(recorded.disposition_line.c_str(), stdout);
  if (f.json) std::printf("%s\n", recon::JsonLine(header, result, recorded.failures).c_str());
  std::fflush(stdout);
  return exit;
}

}  // namespace

const std::string& ReconStoreUrl(const std::string& store) {
  static const std::string default_url = kDefaultReconStore;
  return store.empty() ? default_url : store;
}

int ReconUrlWithSecret(const char* option, std::string* url, const std::string& password_file) {
  if (url->empty()) {
    if (!password_file.empty()) {
      return ReconUsage(std::string(option) + "-password-file needs " + option);
    }
    return -1;
  }
  std::vector<std::string> warnings;
  absl::StatusOr<std::string> with = UrlWithSecret(option, *url, password_file, "", &warnings);
  if (!with.ok()) {
    PrintReason("recon: " + Msg(with.status()));
    return with.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  for (const std::string& w : warnings) std::fprintf(stderr, "idem: warning: %s\n", w.c_str());
  *url = *std::move(with);
  return -1;
}

CommandFn AddReconCommand(CLI::App& root) {
  auto f = std::make_shared<ReconFlags>();
  CLI::App* cmd =
      root.add_subcommand("recon", "Reconcile an upstream statement with the local ledger");
  cmd->add_option("--source", f->source,
                  "Name of the upstream (the watermark's and tickets' source)");
  cmd->add_option("--statement", f->statements,
                  "The upstream statement file (CSV or JSONL); repeatable (e.g. the day before "
                  "too, for rows at the boundary)");
  cmd->add_option("--format", f->format, "csv or jsonl (default: by the file's extension)");
  cmd->add_option("--delimiter", f->delimiter, "CSV delimiter: one character, or tab")
      ->capture_default_str();
  cmd->add_option(
      "--map", f->map,
      "Statement columns: key=COL,amount=COL,currency=COL,status=COL,time=COL (key required)");
  cmd->add_option("--ledger", f->ledger,
                  "The local ledger's store URL (sqlite://, postgres://, mysql://); read only");
  cmd->add_option("--ledger-query", f->ledger_query,
                  "SELECT … AS key, … AS amount, … AS currency, … AS status, … AS time FROM …");
  cmd->add_option("--store", f->store,
                  std::string("Where recon keeps its tickets and watermark (default: ") +
                      kDefaultReconStore + "; never the --ledger unless named here)");
  cmd->add_option("--ledger-password-file", f->ledger_password_file,
                  "The --ledger URL's password, from this file (or IDEM_LEDGER_PASSWORD)");
  cmd->add_option("--store-password-file", f->store_password_file,
                  "The --store URL's password, from this file (or IDEM_STORE_PASSWORD)");
  cmd->add_option("--upstream-scale", f->upstream_scale,
                  "Decimal places implied in upstream amounts (2: 1250 is 12.50)")
      ->capture_default_str();
  cmd->add_option("--local-scale", f->local_scale, "Decimal places implied in ledger amounts")
      ->capture_default_str();
  cmd->add_option("--tz", f->tz, "Zone of times without an offset: UTC, Asia/Shanghai, +08:00")
      ->capture_default_str();
  cmd->add_option("--status-map", f->status_map,
                  "Upstream status → local status, e.g. SUCCESS=PAID,REFUND=REFUNDED");
  cmd->add_option("--intermediate", f->intermediate,
                  "Local statuses stuck in between, e.g. PENDING,PROCESSING");
  cmd->add_option("--from", f->from,
                  "Window start (inclusive), RFC 3339 or YYYY-MM-DD HH:MM:SS in --tz");
  cmd->add_option("--to", f->to, "Window end (exclusive)");
  cmd->add_option("--day", f->day, "The window is this day in --tz (the T+1 full run)");
  cmd->add_option(
      "--hot", f->hot,
      "A hot run: from the watermark minus --overlap (or this long ago) to now minus --lateness");
  cmd->add_option(
      "--overlap", f->overlap,
      "With --hot: how far before the watermark to start again (default: the --hot duration)");
  cmd->add_option("--lateness", f->lateness,
                  "Rows newer than now minus this are left for the next run")
      ->capture_default_str();
  cmd->add_option("--skew", f->skew,
                  "How much later a local-only row may be than its upstream row (judged by the "
                  "next window when within this of the end)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", f->dry_run,
                "Classify and print; write no ticket, send nothing, leave the watermark");
  cmd->add_flag("--json", f->json,
                "End with one JSON line of the counts (and failed_actions: the replays and "
                "re-pushes not done, with their answer's status and first bytes)");
  cmd->add_option("--report", f->report,
                  "Write a self-contained HTML report to this file (counts, chart, rows and "
                  "their tickets)");
  cmd->add_option(
      "--replay-url", f->replay_url,
      "missing_local: POST each upstream row here as JSON "
      "{source,key,class,upstream,local} with Idempotency-Key = the key (docs/recon.md)");
  cmd->add_option("--replay-header-file", f->replay_header_file,
                  "Headers for every replay and re-push, one 'Name: value' a line (e.g. "
                  "Authorization; or IDEM_RECON_REPLAY_HEADERS; never on the command line)");
  cmd->add_option("--repush-url", f->repush_url,
                  "status_mismatch (stuck): POST the upstream event here again");
  cmd->add_option("--on", f->on, "CLASS=ACTION (ticket, replay, repush, none); repeatable");
  cmd->add_option("--temp-dir", f->temp_dir, "Directory for sort runs (default: $TMPDIR or /tmp)");
  cmd->add_option("--memory-mib", f->memory_mib,
                  "Rows held in memory per side before sorting to disk")
      ->capture_default_str();
  CLI::App* status = cmd->add_subcommand(
      "status", "Exit 1 when the last successful run of --source is older than --max-age");
  status->add_option("--source", f->source, "The source");
  status->add_option(
      "--store", f->store,
      std::string("Where recon_watermark lives (default: ") + kDefaultReconStore + ")");
  status->add_option("--store-password-file", f->store_password_file,
                     "The --store URL's password, from this file (or IDEM_STORE_PASSWORD)");
  status->add_option("--max-age", f->max_age, "How old the last success may be")
      ->capture_default_str();
  status->add_flag("--json", f->json, "Print the watermark as JSON");
  cmd->footer(
      "Exit status: 0 the run completed (differences are findings), 1 bad input, a store or "
      "file that cannot be read, or a replay/re-push not done (it stays pending and is "
      "retried by the next run), 2 bad usage. The tickets: idem recon tickets list|show|close. "
      "docs/recon.md says what is sent and recorded.");
  CommandFn run_tickets;
  CLI::App* tickets = AddReconTicketsCommand(cmd, &f->store, &f->store_password_file, &run_tickets);
  cmd->require_subcommand(0, 1);
  return [f, status, tickets, run_tickets] {
    if (tickets->parsed()) return run_tickets();
    return status->parsed() ? RunStatus(*f) : RunRecon(*f);
  };
}

}  // namespace idem::cli
