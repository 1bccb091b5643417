// What `idem recon`'s files share (recon.cc: runs and status; recon_tickets.cc:
// `idem recon tickets`): where recon keeps its state and how that URL gets its
// password.
#pragma once

#include <string>

#include "cli/commands.h"

namespace CLI {
class App;
}

namespace idem::cli {

// Where recon keeps its tickets and watermark without --store: a file of its own in
// the working directory, so that the ledger it reads is never written.
inline constexpr char kDefaultReconStore[] = "sqlite://./idem-recon.db";

// `store`, or kDefaultReconStore when it is empty.
const std::string& ReconStoreUrl(const std::string& store);

// *url (the value of `option`, "--store" or "--ledger") with its password from
// `password_file` or IDEM_<NAME>_PASSWORD (UrlWithSecret), warnings on stderr.
// Returns the exit status to end with (the reason printed), or -1 to go on.
int ReconUrlWithSecret(const char* option, std::string* url, const std::string& password_file);

// Registers `idem recon tickets list|show|close` under `recon`, with --store and
// --store-password-file bound to `store` and `store_password_file` (the same
// variables as recon's own, so [recon] in --config sets them for both). Returns
// the subcommand and sets *run to the function that runs the chosen one.
CLI::App* AddReconTicketsCommand(CLI::App* recon, std::string* store,
                                 std::string* store_password_file, CommandFn* run);

}  // namespace idem::cli
