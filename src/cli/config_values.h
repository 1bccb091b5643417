// What a --config file's values must be, checked in one place for every option of
// every subcommand, before CLI11 converts them. CLI11 reads a TOML value as text
// and converts that text as the option's type would from a command line, so a
// boolean, a number or a string where another type was meant passed without a
// word: `fail-open = true` made a biz_type named "true", `metrics-token = "no"` was
// read as false, and `cache-entries = -1` wrapped to 18446744073709551615.
//
// Each value is checked against the option it sets:
//   a flag (--metrics-token)                         true or false
//   an unsigned number (--cache-entries)             an integer, 0 or more
//   a signed number (--threads)                      an integer
//   a real number (--purge-max-rate)                 an integer or a float
//   anything else (--store, --fail-open, durations)  a string
// and an option that may be repeated (--tenant, --fail-open) takes an array of such
// values, or one. Ranges (--threads 1-1024, say) are each command's own checks,
// which name the option. The [retention.*] sections are checked by
// cli/retention_config.h.
//
// Thread safety: called from main's thread only.
#pragma once

#include <toml++/toml.h>

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace idem::cli {

// "" when every value in `file` has the type its option takes, else one line naming
// the section, the key, what it takes and what it was: "[serve] fail-open: takes a
// string (BIZ_TYPE) or an array of them, not a boolean". Keys and sections that
// name no option are left to CLI11, which reports them as unknown.
std::string CheckConfigValues(const toml::table& file, const CLI::App& root);

// Makes every unsigned option of `root` and its subcommands refuse a negative value
// on the command line too ("--cache-entries: -1 is negative"), which CLI11 2.1
// otherwise wraps around. Call once every subcommand has been added.
void RefuseNegativeUnsigned(CLI::App& root);

}  // namespace idem::cli
