#include "cli/secrets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/retention_config.h"
#include "core/absl_compat.h"
#include "http/api/api.h"
#include "idem/fingerprint.h"
#include "idem/idem.h"
#include "idem/key.h"

namespace idem::cli {
namespace {

constexpr std::string_view kHashPrefix = "sha256:";

// "sha256:" + 64 hex digits (either case): the digest, lower case.
std::optional<std::string> DigestOf(std::string_view hash) {
  if (!hash.starts_with(kHashPrefix)) return std::nullopt;
  std::string hex = Str(absl::AsciiStrToLower(AV(hash.substr(kHashPrefix.size()))));
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return std::nullopt;
  }
  return hex;
}

// Checks every tenant once all are read: names and tokens each appear once.
class TenantSet {
 public:
  explicit TenantSet(std::string noun) : noun_(std::move(noun)) {}
  absl::Status Add(std::string_view where, std::string name, std::string digest) {
    if (absl::Status s = ValidateTenant(name); !s.ok()) {
      return absl::InvalidArgumentError(std::string(where) + ": " + noun_ + " '" + name + "': " +
                                        Str(s.message()));
    }
    if (!names_.insert(name).second) {
      return absl::InvalidArgumentError(std::string(where) + ": " + noun_ + " '" + name +
                                        "' is given twice");
    }
    if (!digests_.insert(digest).second) {
      return absl::InvalidArgumentError(std::string(where) + ": " + noun_ + " '" + name +
                                        "' has the same token as another " + noun_);
    }
    tenants_.push_back(http::Tenant{std::move(name), std::move(digest)});
    return absl::OkStatus();
  }
  std::vector<http::Tenant> Take() { return std::move(tenants_); }
  const std::string& noun() const { return noun_; }

 private:
  std::string noun_;
  std::set<std::string> names_, digests_;
  std::vector<http::Tenant> tenants_;
};

// One NAME:TOKEN or NAME:sha256:HEX entry (--tenant, IDEM_TENANTS). Sets
// `*plaintext_elsewhere` for a token not found on the command line.
absl::Status AddSpec(std::string_view where, std::string_view spec, const TenantSources& names,
                     TenantSet* set, std::vector<std::string>* warnings,
                     bool* plaintext_elsewhere) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) {
    // Not quoted: without its "NAME:" the entry may be a bare token.
    return absl::InvalidArgumentError(std::string(where) +
                                      ": an entry must be NAME:TOKEN or NAME:sha256:HEX "
                                      "(no ':' found)");
  }
  std::string name(spec.substr(0, colon));
  const std::string_view secret = spec.substr(colon + 1);
  if (std::optional<std::string> digest = DigestOf(secret)) {
    return set->Add(where, std::move(name), *std::move(digest));
  }
  if (secret.starts_with(kHashPrefix)) {
    return absl::InvalidArgumentError(std::string(where) + ": " + names.noun + " '" + name +
                                      "': a sha256: hash must have 64 hex digits");
  }
  if (secret.empty() || secret.find_first_of(" \t\r\n") != std::string_view::npos) {
    return absl::InvalidArgumentError(std::string(where) + ": " + names.noun + " '" + name +
                                      "': the token must be non-empty, without spaces");
  }
  if (OnCommandLine(secret)) {
    warnings->push_back("the token of " + names.noun + " '" + name +
                        "' is on the command line, where every local user can read it (ps); "
                        "give its hash instead (" + names.option + " " + name + ":sha256:…, or " +
                        names.file_option + "; `idem token hash` prints it)");
  } else {
    *plaintext_elsewhere = true;
  }
  return set->Add(where, std::move(name), Fingerprint(secret));
}

absl::Status AddFile(const std::string& path, const TenantSources& names, TenantSet* set) {
  std::ifstream in(path);
  if (!in) {
    return absl::UnavailableError("cannot read " + names.file_option + " " + path + ": " +
                                  std::strerror(errno));
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number);
    std::string_view text = line;
    text = text.substr(0, text.find('#'));
    std::vector<absl::string_view> words =
        absl::StrSplit(AV(text), absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    std::optional<std::string> digest;
    if (words.size() == 2) digest = DigestOf(SV(words[1]));
    if (!digest) {
      // Never quote the line: it may hold a plaintext token written by mistake.
      return absl::InvalidArgumentError(
          where + ": expected \"NAME sha256:HEX\" (64 hex digits; `idem token hash` prints "
                  "the hash of a token, `idem token new` makes a token)");
    }
    if (absl::Status s = set->Add(where, Str(words[0]), *std::move(digest)); !s.ok()) return s;
  }
  if (in.bad()) return absl::UnavailableError("cannot read " + names.file_option + " " + path);
  return absl::OkStatus();
}

}  // namespace

std::string TokenHash(std::string_view token) {
  return std::string(kHashPrefix) + Fingerprint(token);
}

absl::StatusOr<std::vector<http::Tenant>> LoadTenants(const TenantSources& sources,
                                                      std::vector<std::string>* warnings) {
  TenantSet set(sources.noun);
  bool in_config = false;  // a plaintext --tenant not on the command line: from --config
  for (const std::string& spec : sources.specs) {
    if (absl::Status s = AddSpec(sources.option, spec, sources, &set, warnings, &in_config);
        !s.ok()) {
      return s;
    }
  }
  if (in_config && !sources.config_file.empty()) {
    if (std::string w = LooseFileWarning(sources.config_file,
                                         "config file " + sources.config_file +
                                             ", which holds a " + sources.noun + " token,");
        !w.empty()) {
      warnings->push_back(std::move(w));
    }
  }
  if (!sources.file.empty()) {
    const std::string file_what = sources.file_noun + " " + sources.file;
    if (absl::Status s = AddFile(sources.file, sources, &set); !s.ok()) return s;
    if (absl::Status s = CheckSecretFileOwnership(sources.file, file_what);
        !s.ok()) {
      return s;
    }
    if (std::string w = LooseFileWarning(sources.file, file_what); !w.empty()) {
      warnings->push_back(std::move(w));
    }
  }
  for (absl::string_view spec :
       absl::StrSplit(AV(sources.env), absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
    bool unused = false;
    if (absl::Status s = AddSpec(sources.env_name, SV(spec), sources, &set, warnings, &unused);
        !s.ok()) {
      return s;
    }
  }
  return set.Take();
}

absl::StatusOr<std::string> UrlWithSecret(std::string_view option, const std::string& url,
                                          const std::string& password_file,
                                          const std::string& config_file,
                                          std::vector<std::string>* warnings) {
  // "--store" → "store", --store-password-file, IDEM_STORE_PASSWORD, IDEM_STORE.
  const std::string name(option.substr(2));
  const std::string file_option = std::string(option) + "-password-file";
  const std::string url_env = "IDEM_" + Str(absl::AsciiStrToUpper(AV(name)));
  const std::string env_name = url_env + "_PASSWORD";
  const char* env = std::getenv(env_name.c_str());
  const bool from_env = env != nullptr && *env != '\0';
  if (!password_file.empty() && from_env) {
    return absl::InvalidArgumentError("the " + name + " password is given twice: " + file_option +
                                      " and " + env_name + "; keep one");
  }
  if (!password_file.empty()) {
    absl::StatusOr<std::string> password = ReadSecretFile(password_file, file_option, warnings);
    if (!password.ok()) return password.status();
    return StoreUrlWithPassword(url, *password);
  }
  if (from_env) return StoreUrlWithPassword(url, env);
  if (RedactStoreUrl(url) == url) return url;  // no secret in it
  if (OnCommandLine(url)) {
    warnings->push_back("the " + std::string(option) +
                        " URL carries a password on the command line, where every local user "
                        "can read it (ps); use " + file_option + " FILE or " + env_name +
                        " instead");
  } else if (const char* url_from_env = std::getenv(url_env.c_str());
             !config_file.empty() && (url_from_env == nullptr || url != url_from_env)) {
    if (std::string w = LooseFileWarning(config_file, "config file " + config_file +
                                                          ", which holds the " + name +
                                                          " password,");
        !w.empty()) {
      warnings->push_back(std::move(w));
    }
  }
  return url;
}

namespace {

// A failure found once the command line is read (AddStoreOptions).
class StoreOptionError : public CLI::ParseError {
 public:
  StoreOptionError(const std::string& message, int exit_code)
      : CLI::ParseError(std::string(kStoreOptionError), message, exit_code) {}
};

// "records list" for the subcommand `sub` of the root.
std::string SubcommandPath(const CLI::App* sub) {
  std::string path;
  for (; sub != nullptr && sub->get_parent() != nullptr; sub = sub->get_parent()) {
    path = sub->get_name() + (path.empty() ? "" : " ") + path;
  }
  return path;
}

// When the --store of `sub` was given neither on the command line nor in its own
// config section: the server's, from the config file's [serve] section (`store`, and
// `store-password-file` with it), so that the server's config file names the store
// for every subcommand. True when *url (and *password_file) were set from it.
bool UseServeStore(const CLI::App& root, const CLI::App* sub, std::string* url,
                   std::string* password_file) {
  const CLI::App* serve = nullptr;
  for (const CLI::App* candidate : root.get_subcommands([](const CLI::App*) { return true; })) {
    if (candidate->get_name() == "serve") serve = candidate;
  }
  if (serve == sub) return false;
  if (serve == nullptr) {
    // A program without `serve` (idem-worker): the config reader kept the section.
    const ServeStoreConfig config = ServeStoreFromConfig();
    if (config.url.empty()) return false;
    *url = config.url;
    *password_file = config.password_file;
    return true;
  }
  const CLI::Option* store = serve->get_option_no_throw("--store");
  if (store == nullptr || store->count() == 0 || store->results().empty()) return false;
  *url = store->results().back();
  if (const CLI::Option* file = serve->get_option_no_throw("--store-password-file");
      file != nullptr && file->count() > 0 && !file->results().empty()) {
    *password_file = file->results().back();
  }
  return true;
}

}  // namespace

void AddStoreOptions(CLI::App& root, CLI::App* sub, const std::vector<StoreOption>& options) {
  struct Bound {
    std::string name;
    std::string* url;
    const CLI::Option* url_option;
    std::shared_ptr<std::string> password_file;
  };
  std::vector<Bound> bound;
  for (const StoreOption& o : options) {
    auto password_file = std::make_shared<std::string>();
    const std::string help =
        o.name == "--store" ? o.help + "; not given: the --config file's [serve] store" : o.help;
    const CLI::Option* url_option =
        sub->add_option(o.name, *o.url, help)->type_name("URL")->capture_default_str();
    const std::string env = "IDEM_" + absl::AsciiStrToUpper(o.name.substr(2)) + "_PASSWORD";
    sub->add_option(o.name + "-password-file", *password_file,
                    "File holding the password of the " + o.name +
                        " URL on one line, written into it (else " + env +
                        "; keeps it out of ps)")
        ->type_name("FILE");
    bound.push_back({o.name, o.url, url_option, std::move(password_file)});
  }
  const CLI::Option* config = root.get_config_ptr();
  sub->final_callback([bound, config, sub, &root] {
    const std::string config_file =
        config != nullptr && !config->results().empty() ? config->results().back() : "";
    const std::string prefix = SubcommandPath(sub) + ": ";
    for (const Bound& b : bound) {
      if (b.url_option->count() == 0 && b.password_file->empty() &&
          (b.name != "--store" || !UseServeStore(root, sub, b.url, b.password_file.get()))) {
        continue;  // the default
      }
      if (b.url->empty()) {
        if (b.password_file->empty()) continue;
        throw StoreOptionError(prefix + b.name + "-password-file needs " + b.name, kExitUsage);
      }
      std::vector<std::string> warnings;
      absl::StatusOr<std::string> with =
          UrlWithSecret(b.name, *b.url, *b.password_file, config_file, &warnings);
      for (const std::string& w : warnings) std::fprintf(stderr, "idem: warning: %s\n", w.c_str());
      if (!with.ok()) {
        throw StoreOptionError(
            prefix + std::string(with.status().message()),
            with.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure);
      }
      *b.url = *std::move(with);
    }
  });
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, std::string_view what,
                                           std::vector<std::string>* warnings) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::UnavailableError("cannot read " + std::string(what) + " " + path + ": " +
                                  std::strerror(errno));
  }
  std::stringstream content;
  content << in.rdbuf();
  std::string secret = content.str();
  if (secret.ends_with("\n")) secret.pop_back();
  if (secret.ends_with("\r")) secret.pop_back();
  if (secret.empty() || secret.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError(std::string(what) + " " + path +
                                      " must hold the secret on one line");
  }
  if (absl::Status s = CheckSecretFileOwnership(path, std::string(what) + " " + path); !s.ok()) {
    return s;
  }
  if (std::string w = LooseFileWarning(path, std::string(what) + " " + path); !w.empty()) {
    warnings->push_back(std::move(w));
  }
  return secret;
}

absl::Status CheckSecretFileOwnership(const std::string& path, std::string_view what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();
  auto mode_of = [](const struct stat& s) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(s.st_mode & 0777));
    return std::string(mode);
  };
  const uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return absl::FailedPreconditionError(
        std::string(what) + " is owned by uid " + std::to_string(st.st_uid) +
        ", not by the user idem runs as (uid " + std::to_string(me) +
        ") or root, who could change it: chown it to the service's user");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(std::string(what) + " may be written by group or others (mode " +
                                         mode_of(st) + "); make it private: chmod 600 " + path);
  }
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(path, ec);
  if (ec) return absl::OkStatus();
  for (std::filesystem::path dir = real.parent_path();; dir = dir.parent_path()) {
    struct stat d {};
    if (stat(dir.c_str(), &d) == 0 && (d.st_mode & S_IWOTH) != 0 && (d.st_mode & S_ISVTX) == 0) {
      return absl::FailedPreconditionError(
          std::string(what) + " is in the folder " + dir.string() +
          ", which others may write (mode " + mode_of(d) +
          ", no sticky bit): another user could replace the file; keep it in a folder only "
          "its owner may write");
    }
    if (dir == dir.root_path() || dir.empty()) break;
  }
  return absl::OkStatus();
}

std::string LooseFileWarning(const std::string& path, std::string_view what) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) == 0) return "";
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
  return std::string(what) + " may be read by group or others (mode " + mode +
         "); make it private: chmod 600 " + path;
}

bool OnCommandLine(std::string_view secret) {
  if (secret.empty()) return false;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str().find(secret) != std::string::npos;
}

}  // namespace idem::cli
