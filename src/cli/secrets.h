// Secrets kept off the command line: where `idem serve` takes its
// tenants' tokens and the store's password from, and the checks that warn when a
// secret is where other local users can read it.
//
// Tenants come from any mix of
//   --tenant NAME:sha256:HEX    the token's SHA-256 (`idem token hash`); not a secret
//   --tenant NAME:TOKEN         the token itself: development only, since every local
//                               user sees it in `ps` (a warning says so)
//   --tenants-file FILE         one "NAME sha256:HEX" per line; '#' starts a comment
//   IDEM_TENANTS                entries as for --tenant, separated by commas or
//                               whitespace (an environment is readable by the
//                               process's user and root only)
// and are kept only as token digests (http::Tenant).
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

// http/api/api.h: declared here only, so that the commands that read secrets but
// serve no API (recon, keys, migrate, ...) do not include the API.
namespace idem::http {
struct Tenant;
}  // namespace idem::http

namespace idem::cli {

// "sha256:" followed by the 64 lowercase hex digits of SHA-256(token).
std::string TokenHash(std::string_view token);

struct TenantSources {
  std::vector<std::string> specs;  // --tenant, from the command line or --config
  std::string file;                // --tenants-file, "" for none
  std::string env;                 // the value of IDEM_TENANTS, "" for none
  std::string config_file;         // the --config file, "" for none
  // How errors and warnings name what is read; the console's admins are read as
  // tenants are, under their own names.
  std::string noun = "tenant";
  std::string option = "--tenant";
  std::string file_option = "--tenants-file";
  std::string file_noun = "tenants file";
  std::string env_name = "IDEM_TENANTS";
};

// Every tenant of `sources`, each checked (a valid name, a token without spaces or
// a well-formed hash, no name or token twice across all sources). Errors are
// kInvalidArgument naming the source (the option, "FILE:LINE", IDEM_TENANTS) and
// never a token; a tenants file that cannot be read is kUnavailable, one another
// user could write is kFailedPrecondition (CheckSecretFileOwnership). `warnings`
// gets one line per plaintext token found in this process's command line, and one
// for a tenants file, or a config file that holds a plaintext token, that group or
// others may read.
absl::StatusOr<std::vector<http::Tenant>> LoadTenants(const TenantSources& sources,
                                                      std::vector<std::string>* warnings);

// `url`, the value of `option` ("--store", "--cache"), with its password from
// OPTION-password-file (`password_file`) or else the environment variable
// IDEM_<NAME>_PASSWORD (IDEM_STORE_PASSWORD, IDEM_CACHE_PASSWORD), when either is set
// (StoreUrlWithPassword); both set, or a URL that already has a password, is
// kInvalidArgument; an unreadable file is kUnavailable. A URL that carries a secret
// itself adds a warning to `warnings` when it is on this process's command line, or
// when it came from `config_file` (not from IDEM_<NAME>) and that file is readable
// by group or others.
absl::StatusOr<std::string> UrlWithSecret(std::string_view option, const std::string& url,
                                          const std::string& password_file,
                                          const std::string& config_file,
                                          std::vector<std::string>* warnings);

// A store URL option of a subcommand that opens a store: `name` ("--store",
// "--from"), where the subcommand keeps its value, and its --help line.
struct StoreOption {
  std::string name;
  std::string* url;
  std::string help;
};

// Adds each option of `options` to `sub` with its NAME-password-file FILE, and
// has the password of each given URL read, once the command line is parsed, from
// that file or else the environment (IDEM_STORE_PASSWORD for --store; UrlWithSecret)
// and written into *url before the subcommand runs. Both may also be set in the
// subcommand's --config section (`store`, `store-password-file`); a --store given in
// neither place is the server's, `store` (and `store-password-file`) of the config
// file's [serve] section, when it sets one. A URL left at its
// default (a path URL, which takes no password) is not touched. A failure (both
// sources, a password for a path URL or for a URL that has one, an unreadable or
// unsafe file) ends the run before the subcommand's function with one line and
// exit 2, or 1 for a file that cannot be read or is unsafe; a warning (a password
// in a URL on the command line) is written to stderr. The one place every
// subcommand that opens a store declares it, so none can leave the password on
// the command line.
void AddStoreOptions(CLI::App& root, CLI::App* sub, const std::vector<StoreOption>& options);

// The content of the secret file `path` (one trailing newline dropped), named
// `what` in errors ("--store-password-file"): kUnavailable when it cannot be read,
// kInvalidArgument when it is empty or has more than one line, kFailedPrecondition
// when another user could write it (CheckSecretFileOwnership). Adds a warning to
// `warnings` when group or others may read it.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, std::string_view what,
                                           std::vector<std::string>* warnings);

// OK when no other user may change the secret file `path` (`what` names it:
// "tenants file /etc/idem/tenants"): kFailedPrecondition naming the file and what
// is wrong when it is owned by a user other than this process's (root excepted),
// group or others may write it, or a folder on its path may be written by others
// without the sticky bit (another user could replace the file). OK too when it
// cannot be examined: reading it then reports the problem.
absl::Status CheckSecretFileOwnership(const std::string& path, std::string_view what);

// A warning line when the file `path` may be read by group or others (`what`
// names it: "tenants file /etc/idem/tenants"), "" otherwise or when it cannot be
// examined (reading it then reports the problem).
std::string LooseFileWarning(const std::string& path, std::string_view what);

// Whether `secret` (non-empty) appears in this process's /proc/self/cmdline, i.e.
// in what `ps` shows every local user.
bool OnCommandLine(std::string_view secret);

}  // namespace idem::cli
