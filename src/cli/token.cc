// `idem token`: bearer tokens for `idem serve`'s tenants, kept as hashes.
//
//   idem token new --tenant acme    a fresh random token, and its tenants-file line
//   idem token new --console-admin ops   the same for an admin of the operator console
//   idem token hash < token.txt     the hash of an existing token, read from stdin
//
// `new` prints the token on its first stdout line and "acme sha256:HEX" (a line for
// --tenants-file) on the second; give the token to the client and keep only the
// hash. `hash` prints "sha256:HEX". The token is never taken as an argument: an
// argument is visible to every local user in `ps`.
//
// Exit status: 0 printed; 1 no random source; 2 bad usage (no token on stdin, a
// token with spaces, an invalid tenant name).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/tokens.h"
#include "idem/key.h"

namespace idem::cli {
namespace {

struct TokenFlags {
  std::string tenant;
  std::string console_admin;
};

int RunNew(const TokenFlags& flags) {
  const bool admin = !flags.console_admin.empty();
  const std::string& name = admin ? flags.console_admin : flags.tenant;
  if (absl::Status s = ValidateTenant(name); !s.ok()) {
    PrintReason(std::string("token new: ") + (admin ? "--console-admin '" : "--tenant '") + name +
                "': " + std::string(s.message().data(), s.message().size()));
    return kExitUsage;
  }
  std::string token;
  if (!NewToken(&token)) {
    PrintReason("token new: cannot read the system random source");
    return kExitFailure;
  }
  std::printf("%s\n%s %s\n", token.c_str(), name.c_str(), TokenHash(token).c_str());
  std::fflush(stdout);
  std::fprintf(stderr, admin ? "line 1 is the token: give it to the admin, it is stored nowhere;\n"
                               "line 2 goes into the --console-admins-file of idem serve\n"
                             : "line 1 is the token: give it to the client, it is stored nowhere;\n"
                               "line 2 goes into the --tenants-file of idem serve\n");
  return kExitOk;
}

int RunHash() {
  std::string token;
  if (!std::getline(std::cin, token)) token.clear();
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) {
    PrintReason("token hash: no token on stdin (e.g. idem token hash < token.txt)");
    return kExitUsage;
  }
  if (token.find_first_of(" \t") != std::string::npos) {
    PrintReason("token hash: a token has no spaces or tabs");
    return kExitUsage;
  }
  std::printf("%s\n", TokenHash(token).c_str());
  return kExitOk;
}

}  // namespace

CommandFn AddTokenCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("token", "Make tenant tokens and their hashes for idem serve");
  cmd->require_subcommand(1, 1);
  auto flags = std::make_shared<TokenFlags>();
  CLI::App* make = cmd->add_subcommand(
      "new", "Print a new random token and its --tenants-file line \"NAME sha256:HEX\"");
  CLI::Option* tenant = make->add_option("--tenant", flags->tenant, "The tenant the token is for")
                             ->type_name("NAME");
  CLI::Option* admin =
      make->add_option("--console-admin", flags->console_admin,
                       "Or the admin of the operator console the token is for (its line goes "
                       "into --console-admins-file)")
          ->type_name("NAME");
  tenant->excludes(admin);
  make->require_option(1, 1);
  CLI::App* hash =
      cmd->add_subcommand("hash", "Print the sha256: hash of the token read from stdin");
  return [flags, make, hash] {
    if (make->parsed()) return RunNew(*flags);
    if (hash->parsed()) return RunHash();
    return kExitUsage;
  };
}

}  // namespace idem::cli
