#include "cli/common.h"

#include <filesystem>
#include <memory>
#include <random>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "core/utf8.h"
#include "idem/idem.h"

namespace idem::cli {

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

void PutBytes(nlohmann::json& j, const std::string& name, std::string_view bytes) {
  if (IsUtf8(bytes)) {
    j[name] = std::string(bytes);
  } else {
    j[name + "_base64"] = absl::Base64Escape(AV(bytes));
  }
}

namespace {

// Whether `bytes`, read as JSON, can be parsed and printed again as the same value:
// it nests no deeper than `limit` (printing recurses once per level) and has no
// number of more than 19 digits (the parser would round an integer past 64 bits to a
// double). Brackets and digits inside strings do not count.
bool JsonSafeToEmbed(std::string_view bytes, int limit) {
  int depth = 0;
  int digits = 0;
  bool in_string = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    digits = c >= '0' && c <= '9' ? digits + 1 : 0;
    if (digits > 19) return false;
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

RawJsonValues::RawJsonValues() {
  std::random_device random;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&nonce_, absl::Hex(random(), absl::kZeroPad8));
}

std::string RawJsonValues::Add(std::string_view bytes) {
  values_.emplace_back(bytes);
  return absl::StrCat("\x01idem-raw-json-", nonce_, "-", values_.size() - 1, "\x01");
}

std::string RawJsonValues::Dump(const nlohmann::json& j, int indent) const {
  std::string out = j.dump(indent);
  for (size_t i = 0; i < values_.size(); ++i) {
    // As json::dump writes the placeholder: quoted, \x01 as \u0001.
    const std::string quoted =
        absl::StrCat("\"\\u0001idem-raw-json-", nonce_, "-", i, "\\u0001\"");
    if (const size_t at = out.find(quoted); at != std::string::npos) {
      out.replace(at, quoted.size(), values_[i]);
    }
  }
  return out;
}

void PutStored(nlohmann::json& j, const std::string& name, std::string_view bytes, bool present,
               RawJsonValues& raw) {
  const std::string encoding = name + "_encoding";
  if (!present) {
    j[name] = nullptr;
    j[encoding] = nullptr;
    return;
  }
  if (IsUtf8(bytes) && JsonSafeToEmbed(bytes, 256) && nlohmann::json::accept(bytes)) {
    j[name] = raw.Add(bytes);
    j[encoding] = "json";
    return;
  }
  if (IsUtf8(bytes)) {
    j[name] = std::string(bytes);
    j[encoding] = "text";
  } else {
    j[name] = absl::Base64Escape(AV(bytes));
    j[encoding] = "base64";
  }
}

void PutBytesOrNull(nlohmann::json& j, const std::string& name, std::string_view bytes) {
  if (bytes.empty()) {
    j[name] = nullptr;
  } else {
    PutBytes(j, name, bytes);
  }
}

void PutTime(nlohmann::json& j, const std::string& name, absl::Time t) {
  if (t == absl::InfinitePast()) {
    j[name] = nullptr;
  } else {
    j[name] = FormatUtc(t);
  }
}

nlohmann::json RecordJson(const Record& r) {
  nlohmann::json j = nlohmann::json::object();
  PutBytes(j, "tenant", r.tenant);
  PutBytes(j, "biz_type", r.biz_type);
  PutBytes(j, "key", r.key);
  j["state"] = std::string(RecordStateName(r.state));
  j["token"] = r.token;
  PutTime(j, "lease_until", r.lease_until);
  if (r.fingerprint.empty()) {
    j["fingerprint"] = nullptr;
  } else {
    PutBytes(j, "fingerprint", r.fingerprint);
  }
  PutTime(j, "created_at", r.created_at);
  PutTime(j, "updated_at", r.updated_at);
  if (r.expires_at == absl::InfiniteFuture()) {
    j["expires_at"] = nullptr;  // kept for ever
  } else {
    PutTime(j, "expires_at", r.expires_at);
  }
  PutTime(j, "purged_at", r.purged_at);
  return j;
}

std::string_view DefaultServeStore() {
#if IDEM_HAVE_ROCKSDB
  return "rocksdb://./idem-db";
#else
  return kLegacyDefaultStore;
#endif
}

std::string LegacyDefaultStoreInTheWay(std::string_view url, bool store_given) {
  if (store_given || url != DefaultServeStore() || url == kLegacyDefaultStore) return "";
  std::error_code ec;
  const bool legacy = std::filesystem::exists("./idem.db", ec);
  const bool current = std::filesystem::exists("./idem-db", ec);
  if (!legacy || current) return "";
  return absl::StrCat(
      "./idem.db holds an idem store (sqlite://./idem.db, the default before this "
      "version), and the default is now ", AV(url),
      ", which does not exist yet: starting on it would forget every key ./idem.db "
      "holds. Either keep it with --store ", AV(kLegacyDefaultStore),
      ", or copy it over first: idem migrate --from ", AV(kLegacyDefaultStore), " --to ",
      AV(url));
}

namespace {

// The path of a sqlite:// or rocksdb:// URL `url` (`scheme` given), without its
// parameters; "" for an in-memory SQLite database.
std::string_view CommonStorePath(std::string_view url, std::string_view scheme) {
  std::string_view path = url.substr(scheme.size());
  path = path.substr(0, path.find('?'));
  return path == ":memory:" ? std::string_view() : path;
}

}  // namespace

absl::Status CheckSqliteFileExists(std::string_view url) {
  constexpr std::string_view kScheme = "sqlite://";
  if (!url.starts_with(kScheme)) return absl::OkStatus();
  const std::string_view path = CommonStorePath(url, kScheme);
  if (path.empty()) return absl::OkStatus();
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(path), ec)) return absl::OkStatus();
  std::string probe = "sqlite://:memory:";
  if (const size_t query = url.find('?'); query != std::string_view::npos) {
    probe += url.substr(query);
  }
  if (absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(probe); !s.ok()) return s.status();
  return absl::UnavailableError("store " + RedactStoreUrl(url) + ": database file " +
                                std::string(path) + " does not exist; `idem migrate` creates one");
}

absl::Status CheckStoreExists(std::string_view url) {
  constexpr std::string_view kRocksdb = "rocksdb://";
  if (!url.starts_with(kRocksdb)) return CheckSqliteFileExists(url);
  const std::string_view path = CommonStorePath(url, kRocksdb);
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(std::filesystem::path(path), ec)) {
    return absl::OkStatus();  // the backend says what is wrong with it
  }
  return absl::UnavailableError("store " + RedactStoreUrl(url) + ": directory " +
                                std::string(path) + " does not exist; `idem migrate` creates one");
}

absl::StatusOr<std::unique_ptr<Store>> OpenReadOnlyStore(std::string_view url) {
  if (absl::Status s = CheckStoreExists(url); !s.ok()) return s;
  return OpenStore(url, StoreOptions{.read_only = true});
}

absl::StatusOr<std::unique_ptr<Store>> OpenExistingStore(std::string_view url) {
  if (absl::Status s = CheckStoreExists(url); !s.ok()) return s;
  return OpenStore(url, StoreOptions{.create_schema = false});
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

}  // namespace idem::cli
