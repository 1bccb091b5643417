// `idem migrate --from URL --to URL` (migrate_copy.cc): copies every record of one
// store into another. Part of `idem migrate` (migrate.cc).
#pragma once

#include <string>

namespace idem::cli {

// Copies the records of `from` (opened read-only, never changed) into `to`, `batch`
// records per destination transaction; with `dry_run` only counts. Prints the
// counts on stdout; returns the exit status (0; 1 when a store fails or records
// differ between the two; 2 for bad usage).
int RunMigrateCopy(const std::string& from, const std::string& to, bool dry_run, int batch);

}  // namespace idem::cli
