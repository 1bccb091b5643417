// `idem inspect`: shows the dedupe record of one key (SPEC §10).
//
//   idem inspect --store sqlite://./idem.db --tenant default --biz-type refund --key R-1 [--json]
//
// Read-only: it never creates a database file (OpenStore would) and never changes
// a record. Exit status: 0 the record was printed; 1 no record, another biz_type,
// or the store cannot be reached; 2 a malformed store URL, key or option.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct InspectFlags {
  std::string store = "sqlite://./idem.db";
  std::string tenant = Request{}.tenant;
  std::string biz_type;
  std::string key;
  bool json = false;
};

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF), as nlohmann::json requires of the strings it writes.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return false;
    for (size_t k = 2; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Keys, tenants and stored bytes are opaque: text (UTF-8 without control bytes)
// is shown as it is, anything else C-escaped, so that a byte cannot forge a line
// of output or garble the terminal.
std::string Printable(std::string_view bytes) {
  bool plain = IsUtf8(bytes);
  for (char c : bytes) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) plain = false;
  }
  return plain ? std::string(bytes) : absl::CHexEscape(AV(bytes));
}

std::string FormatUtc(absl::Time t) {
  if (t == absl::InfinitePast()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// JSON strings must be UTF-8; other bytes are given base64-encoded under
// `<name>_base64` so that nothing is lost or altered.
void PutBytes(nlohmann::json& j, const std::string& name, std::string_view bytes) {
  if (IsUtf8(bytes)) {
    j[name] = std::string(bytes);
  } else {
    j[name + "_base64"] = absl::Base64Escape(AV(bytes));
  }
}

void PutTime(nlohmann::json& j, const std::string& name, absl::Time t) {
  if (t == absl::InfinitePast()) {
    j[name] = nullptr;
  } else {
    j[name] = FormatUtc(t);
  }
}

std::string Human(const Record& r, absl::Time now) {
  std::string out;
  auto row = [&out](std::string_view name, std::string_view value) {
    out += std::string(name) + std::string(13 - name.size(), ' ') + std::string(value) + "\n";
  };
  auto bytes = [](std::string_view b) {
    if (b.empty()) return std::string("-");
    return Printable(b) + " (" + std::to_string(b.size()) + " bytes)";
  };
  row("tenant", Printable(r.tenant));
  row("biz_type", Printable(r.biz_type));
  row("key", Printable(r.key));
  row("state", RecordStateName(r.state));
  row("token", std::to_string(r.token));
  if (r.lease_until == absl::InfinitePast()) {
    row("lease_until", "-");
  } else {
    row("lease_until", FormatUtc(r.lease_until) + (r.lease_until > now ? " (live)" : " (expired)"));
  }
  row("fingerprint", r.fingerprint.empty() ? "-" : Printable(r.fingerprint));
  row("result", bytes(r.result));
  row("error", bytes(r.error));
  row("created_at", r.created_at == absl::InfinitePast() ? "-" : FormatUtc(r.created_at));
  row("updated_at", r.updated_at == absl::InfinitePast() ? "-" : FormatUtc(r.updated_at));
  return out;
}

nlohmann::json Json(const Record& r, absl::Time now) {
  nlohmann::json j = nlohmann::json::object();
  PutBytes(j, "tenant", r.tenant);
  PutBytes(j, "biz_type", r.biz_type);
  PutBytes(j, "key", r.key);
  j["state"] = std::string(RecordStateName(r.state));
  j["token"] = r.token;
  PutTime(j, "lease_until", r.lease_until);
  j["lease_live"] = r.lease_until != absl::InfinitePast() && r.lease_until > now;
  if (r.fingerprint.empty()) {
    j["fingerprint"] = nullptr;
  } else {
    PutBytes(j, "fingerprint", r.fingerprint);
  }
  PutBytes(j, "result", r.result);
  PutBytes(j, "error", r.error);
  PutTime(j, "created_at", r.created_at);
  PutTime(j, "updated_at", r.updated_at);
  return j;
}

// OpenStore creates a missing SQLite file (and its schema); inspecting a typo'd
// path must not leave an empty database behind, so a missing file is reported here
// as kUnavailable. The URL's parameters are still checked first (by opening an
// in-memory database with them) so that a malformed URL stays a usage error.
// Returns OK when the URL is not a sqlite file URL or the file exists.
absl::Status CheckSqliteFileExists(std::string_view url) {
  constexpr std::string_view kScheme = "sqlite://";
  if (!url.starts_with(kScheme)) return absl::OkStatus();
  std::string_view path = url.substr(kScheme.size());
  const size_t query = path.find('?');
  path = path.substr(0, query);
  if (path.empty() || path == ":memory:") return absl::OkStatus();
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(path), ec)) return absl::OkStatus();
  std::string probe = "sqlite://:memory:";
  if (query != std::string_view::npos) probe += url.substr(kScheme.size() + query);
  if (absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(probe); !s.ok()) return s.status();
  return absl::UnavailableError("store " + std::string(url) + ": database file " +
                                std::string(path) + " does not exist");
}

int ExitCodeForStoreError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:  // malformed URL or parameter
    case absl::StatusCode::kNotFound:         // a backend not compiled into this build
      return kExitUsage;
    default:  // unreachable, locked, not an idem database
      return kExitFailure;
  }
}

int RunInspect(const InspectFlags& flags) {
  Request request{.tenant = flags.tenant, .biz_type = flags.biz_type, .key = flags.key};
  // Validate what the user typed before touching the store: a bad key is usage.
  for (absl::Status s :
       {ValidateTenant(request.tenant), ValidateKey(request.key),
        request.biz_type.empty() ? absl::OkStatus() : ValidateBizType(request.biz_type)}) {
    if (!s.ok()) {
      PrintReason(s.message());
      return kExitUsage;
    }
  }
  if (absl::Status s = CheckSqliteFileExists(flags.store); !s.ok()) {
    PrintReason(s.message());
    return ExitCodeForStoreError(s);
  }
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(flags.store);
  if (!store.ok()) {
    PrintReason(store.status().message());
    return ExitCodeForStoreError(store.status());
  }
  Guard guard(**store);
  absl::StatusOr<Record> record = guard.Get(request);
  if (!record.ok()) {
    const absl::Status& s = record.status();
    if (s.code() == absl::StatusCode::kNotFound) {
      PrintReason("no record for tenant " + Printable(request.tenant) + " key " +
                  Printable(request.key));
      return kExitFailure;
    }
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      PrintReason(s.message());
      return kExitUsage;
    }
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      PrintReason("tenant " + Printable(request.tenant) + " key " + Printable(request.key) +
                  " is not of biz_type " + Printable(request.biz_type) + ": " +
                  std::string(s.message()));
      return kExitFailure;
    }
    PrintReason("store " + std::string((*store)->url()) + ": " + std::string(s.message()));
    return kExitFailure;
  }
  const absl::Time now = guard.options().clock->Now();
  if (flags.json) {
    std::printf("%s\n", Json(*record, now).dump(2).c_str());
  } else {
    std::fputs(Human(*record, now).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

CommandFn AddInspectCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("inspect", "Show the dedupe record of one key (read-only)");
  cmd->footer(
      "Exit status: 0 printed, 1 no record / another biz_type / store unreachable, 2 bad usage.");
  auto flags = std::make_shared<InspectFlags>();
  cmd->add_option("--store", flags->store,
                  "Store URL: sqlite://PATH, memory:// (never creates a database)")
      ->type_name("URL")
      ->capture_default_str();
  cmd->add_option("--tenant", flags->tenant, "Tenant of the key")->capture_default_str();
  cmd->add_option("--biz-type", flags->biz_type,
                  "Expected biz_type; another one is reported (exit 1). Empty: any");
  cmd->add_option("--key", flags->key, "The idempotency key (bytes, as given)")->required();
  cmd->add_flag("--json", flags->json, "Print the record as JSON");
  return [flags] { return RunInspect(*flags); };
}

}  // namespace idem::cli
