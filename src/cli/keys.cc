// `idem keys analyze`: key health (docs/keys.md), what badly made keys
// look like in a store and on a server.
//
//   idem keys analyze --store URL [--since 24h] [--window 10m] [--tenant T]
//                     [--biz-type B] [--examples N] [--server URL] [--json]
//
// From the records created in the last --since (core/key_analysis.h): regenerated
// keys (one request fingerprint under several keys within --window) and suspicious
// shapes (core/key_shape.h). Over-coarse keys (one key, several fingerprints: the
// 422s) are not in any store, which keeps one fingerprint per key: with --server,
// they come from that `idem serve`'s GET /v1/keys/mismatches (its memory since it
// started), read with the bearer token in IDEM_TOKEN or --token-file, for that
// token's tenant. Keys are shown cut to 12 bytes past 16 ("…") with the start of their
// SHA-256, never whole: a key may carry what its maker did not mean to show; --json
// gives the whole digest (key_sha256) to match a key one knows.
//
// Read-only: opens the store as `idem records list` does. Exit status: 0 analysed
// (findings are not failures); 1 the store or the server cannot be reached or
// refuses; 2 bad usage.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/keys_report.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/absl_compat.h"
#include "http/client/upstream.h"
#include "idem/idem.h"
#include "idem/ttl.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct AnalyzeFlags {
  std::string store = std::string(DefaultServeStore());  // where `idem serve` keeps them
  std::string since = "24h";
  std::string window = "10m";
  std::string tenant;
  std::string biz_type;
  int examples = 3;
  std::string server;
  std::string token_file;
  bool json = false;
};

int KeysUsage(std::string_view why) {
  PrintReason(absl::StrCat("keys analyze: ", AV(why)));
  return kExitUsage;
}

// The bearer token for --server: --token-file's first line, else IDEM_TOKEN.
absl::StatusOr<std::string> ServerToken(const AnalyzeFlags& f) {
  std::string token;
  if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!in)
      return absl::UnavailableError(
          absl::StrCat("--token-file ", f.token_file, ": cannot be read"));
    std::getline(in, token);
  } else if (const char* env = std::getenv("IDEM_TOKEN"); env != nullptr) {
    token = env;
  }
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        "--server needs a tenant's bearer token in IDEM_TOKEN or --token-file FILE");
  }
  return token;
}

// The caller's keys answered 422, from the server's GET /v1/keys/mismatches.
absl::StatusOr<OverCoarse> FetchMismatches(const AnalyzeFlags& f, const http::UpstreamUrl& url,
                                           const std::string& token) {
  const http::Upstream upstream(url, {.timeout = absl::Seconds(10)});
  http::HttpRequest request;
  request.method = "GET";
  request.request_id = "keys-analyze";
  request.headers = {{"Authorization", absl::StrCat("Bearer ", token)}};
  const std::string where = absl::StrCat("server ", f.server);
  absl::StatusOr<http::UpstreamResponse> r = upstream.Send(request, "/v1/keys/mismatches");
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat(where, ": ", r.status().message()));
  }
  if (r->status == 401) {
    return absl::PermissionDeniedError(absl::StrCat(where, ": the bearer token is not accepted"));
  }
  if (r->status != 200) {
    return absl::UnavailableError(absl::StrCat(where, ": GET /v1/keys/mismatches answered ",
                                               r->status, " (an idem serve without key health?)"));
  }
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j["tenant"].is_string() || !j["keys"].is_array()) {
    return absl::UnavailableError(absl::StrCat(where, ": not an answer of idem serve"));
  }
  OverCoarse out;
  out.source = f.server;
  out.tenant = j["tenant"].get<std::string>();
  for (const nlohmann::json& k : j["keys"]) {
    OverCoarseKey key;
    absl::Time first, last;
    std::string err;
    if (!k.is_object() || !k["biz_type"].is_string() || !k["key"].is_string() ||
        !k["fingerprints"].is_number_integer() || !k["mismatches"].is_number_integer() ||
        !k["first_mismatch_at"].is_string() || !k["last_mismatch_at"].is_string() ||
        !absl::ParseTime(absl::RFC3339_full, k["first_mismatch_at"].get<std::string>(), &first,
                         &err) ||
        !absl::ParseTime(absl::RFC3339_full, k["last_mismatch_at"].get<std::string>(), &last,
                         &err)) {
      return absl::UnavailableError(absl::StrCat(where, ": a malformed entry in its answer"));
    }
    key.biz_type = k["biz_type"].get<std::string>();
    key.key = k["key"].get<std::string>();
    key.fingerprints = k["fingerprints"].get<int64_t>();
    key.mismatches = k["mismatches"].get<int64_t>();
    key.first_at = first;
    key.last_at = last;
    out.keys.push_back(std::move(key));
  }
  return out;
}

// The query --tenant and --biz-type ask for; errors are the usage line.
absl::StatusOr<RecordQuery> AnalyzeQuery(const AnalyzeFlags& f) {
  RecordQuery query;
  if (!f.tenant.empty()) {
    if (absl::Status s = ValidateTenant(f.tenant); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tenant: ", s.message()));
    }
    query.tenant = f.tenant;
  }
  if (!f.biz_type.empty()) {
    if (absl::Status s = ValidateBizType(f.biz_type); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--biz-type: ", s.message()));
    }
    query.biz_type = f.biz_type;
  }
  return query;
}

// Pages through the records `query` finds into `analysis`; returns the exit status
// (kExitOk, or the failure it printed).
int AnalyzeStoreRecords(Store& store, const AnalyzeFlags& f, RecordQuery query,
                        KeyAnalysis* analysis) {
  while (true) {
    query.limit = 1000;
    absl::StatusOr<std::vector<Record>> page = store.ListRecords(query);
    if (!page.ok()) {
      PrintReason(absl::StrCat("keys analyze: store ", AV(store.url()), ": ",
                               RedactStoreSecrets(page.status(), f.store).message()));
      return page.status().code() == absl::StatusCode::kUnimplemented ? kExitUsage : kExitFailure;
    }
    if (page->empty()) break;
    query.after = std::make_pair(page->back().tenant, page->back().key);
    for (const Record& r : *page) analysis->Add(r);
    if (static_cast<int>(page->size()) < query.limit) break;
  }
  return kExitOk;
}

// Adds --server's over-coarse keys (of the window and filters) to `in`; returns the
// exit status (kExitOk, or the failure it printed).
int AddServerMismatches(const AnalyzeFlags& f, const http::UpstreamUrl& server,
                        const std::string& token, KeyHealthInput* in) {
  absl::StatusOr<OverCoarse> oc = FetchMismatches(f, server, token);
  if (!oc.ok()) {
    PrintReason(absl::StrCat("keys analyze: ", oc.status().message()));
    return kExitFailure;
  }
  if (!f.tenant.empty() && oc->tenant != f.tenant) {
    return KeysUsage(absl::StrCat("--tenant ", f.tenant, ", but the token for --server is tenant ",
                                  oc->tenant, "'s"));
  }
  std::erase_if(oc->keys, [&](const OverCoarseKey& k) {
    return k.last_at < in->since || (!f.biz_type.empty() && k.biz_type != f.biz_type);
  });
  in->over_coarse = *std::move(oc);
  return kExitOk;
}

int RunAnalyze(const AnalyzeFlags& f) {
  absl::StatusOr<absl::Duration> since = ParseTtlDuration(f.since, "--since");
  if (!since.ok()) return KeysUsage(SV(since.status().message()));
  if (*since <= absl::ZeroDuration()) return KeysUsage("--since must be longer than 0s");
  absl::StatusOr<absl::Duration> window = ParseTtlDuration(f.window, "--window");
  if (!window.ok()) return KeysUsage(SV(window.status().message()));
  if (*window <= absl::ZeroDuration()) return KeysUsage("--window must be longer than 0s");
  if (f.examples < 0 || f.examples > 100) return KeysUsage("--examples must be 0 … 100");
  absl::StatusOr<RecordQuery> query = AnalyzeQuery(f);
  if (!query.ok()) return KeysUsage(SV(query.status().message()));
  std::optional<http::UpstreamUrl> server;
  std::string token;
  if (!f.server.empty()) {
    absl::StatusOr<http::UpstreamUrl> url = http::ParseUpstreamUrl(f.server);
    if (!url.ok()) return KeysUsage(absl::StrCat("--server: ", url.status().message()));
    absl::StatusOr<std::string> t = ServerToken(f);
    if (!t.ok()) {
      if (t.status().code() == absl::StatusCode::kInvalidArgument)
        return KeysUsage(SV(t.status().message()));
      PrintReason(absl::StrCat("keys analyze: ", t.status().message()));
      return kExitFailure;
    }
    server = *url;
    token = *std::move(t);
  } else if (!f.token_file.empty()) {
    return KeysUsage("--token-file is the token for --server; give --server too");
  }

  absl::StatusOr<std::unique_ptr<Store>> store = OpenReadOnlyStore(f.store);
  if (!store.ok()) {
    PrintReason(
        absl::StrCat("keys analyze: ", RedactStoreSecrets(store.status(), f.store).message()));
    return ExitCodeForStoreError(store.status());
  }
  const absl::Time now = Clock::Real()->Now();
  KeyHealthInput in;
  in.store = RedactStoreUrl(f.store);
  in.since = now - *since;
  in.until = now;
  in.since_text = f.since;
  in.window = *window;
  in.examples = f.examples;
  query->created_since = in.since;
  query->created_before = now;
  KeyAnalysis analysis({.window = *window, .examples = f.examples});
  if (int code = AnalyzeStoreRecords(**store, f, *query, &analysis); code != kExitOk) return code;
  in.records = analysis.Finish();

  if (server.has_value()) {
    if (int code = AddServerMismatches(f, *server, token, &in); code != kExitOk) return code;
  }
  const std::string out = f.json ? KeyHealthJson(in) : KeyHealthText(in);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

CommandFn AddKeysCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("keys", "Key health: badly made keys (read-only)");
  cmd->require_subcommand(1, 1);
  cmd->footer(
      "idem keys analyze --store URL [--since 24h] [--window 10m] [--server URL] [--json]:\n"
      "regenerated keys, over-coarse keys and suspicious shapes; `idem keys analyze --help`\n"
      "lists every option, docs/keys.md explains the findings.");
  CLI::App* analyze = cmd->add_subcommand(
      "analyze",
      "Report regenerated keys, over-coarse keys and suspicious key shapes (docs/keys.md)");
  analyze->footer(
      "Regenerated: one request fingerprint under 2+ keys, each within --window of the one\n"
      "before (the key is remade on retry). Suspicious shapes: random UUIDs, epoch seconds or\n"
      "milliseconds, topic-partition-offset. Both come from the records created in the last\n"
      "--since. Over-coarse keys (one key, several fingerprints: the 422s) are in no store:\n"
      "--server URL reads them from that idem serve (GET /v1/keys/mismatches, its memory\n"
      "since it started) with the tenant token in IDEM_TOKEN or --token-file; its\n"
      "/metrics counts all four (idem_key_*_total{tenant[,biz_type]}). Keys are shown cut, with\n"
      "their SHA-256's start. Read-only. Exit status: 0 analysed (findings included),\n"
      "1 store or server unreachable, 2 bad usage.");
  auto flags = std::make_shared<AnalyzeFlags>();
  AddStoreOptions(root, analyze,
                  {{"--store", &flags->store,
                    "Store URL: sqlite://PATH, rocksdb://DIR, postgres://…, mysql://… (never "
                    "creates a database)"}});
  analyze->add_option("--since", flags->since, "Records created in the last D")
      ->type_name("DURATION")
      ->capture_default_str();
  analyze
      ->add_option("--window", flags->window,
                   "Regenerated: keys of one fingerprint at most this far apart")
      ->type_name("DURATION")
      ->capture_default_str();
  analyze->add_option("--tenant", flags->tenant, "Only this tenant's records (default: every one)");
  analyze->add_option("--biz-type", flags->biz_type, "Only this biz_type");
  analyze->add_option("--examples", flags->examples, "Examples per finding (0 … 100)")
      ->capture_default_str();
  analyze
      ->add_option("--server", flags->server,
                   "http://HOST:PORT of the idem serve whose 422s show over-coarse keys")
      ->type_name("URL");
  analyze
      ->add_option("--token-file", flags->token_file,
                   "File whose first line is the tenant token for --server (else IDEM_TOKEN)")
      ->type_name("FILE");
  analyze->add_flag("--json", flags->json, "Print one JSON object");
  return [flags] { return RunAnalyze(*flags); };
}

}  // namespace idem::cli
