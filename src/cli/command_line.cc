// RunCommandLine (cli/commands.h): what every `idem` program shares, the --config
// TOML file, --version, and the exit status contract (0 success and --help,
// 1 operational failure, 2 bad usage, each failure with one `idem: …` line on
// stderr). CLI11 reports usage errors with its own exit codes (100+); they are all
// mapped to 2 here.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/logging.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/config_values.h"
#include "cli/reason.h"
#include "cli/retention_config.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#ifndef IDEM_VERSION
#define IDEM_VERSION "unknown"
#endif

namespace idem::cli {
namespace {


constexpr std::string_view kFooter =
    "Configuration: every option can also be set in the TOML file given with\n"
    "--config, in a section named after the subcommand, using the option's long\n"
    "name without dashes:\n"
    "  [serve]\n"
    "  listen = \"127.0.0.1:0\"\n"
    "  tenant = [\"a:tok\"]\n"
    "Command-line options override the file. Unknown sections and keys are errors.\n"
    "[serve] store (and store-password-file) is also the store of every other\n"
    "subcommand given the file, unless it sets its own --store.\n"
    "Sections [retention.<biz_type>] give each biz_type's retention (serve, purge and\n"
    "records read them; docs/retention.md).\n"
    "\n"
    "Exit status: 0 success, 1 operational failure, 2 bad usage.";

// CLI11 names config problems after its INI heritage ("INI was not able to parse
// ttl.bogus"); say what is wrong in the user's terms.
std::string DescribeConfigError(const CLI::ConfigError& e, std::string_view config_file) {
  std::string what = e.what();
  constexpr std::string_view kPrefix = "INI was not able to parse ";
  std::string where =
      config_file.empty() ? std::string("config file") : "config file " + std::string(config_file);
  if (std::string_view(what).starts_with(kPrefix)) {
    std::string item = what.substr(kPrefix.size());
    constexpr std::string_view kSectionOpen = ".++";
    if (std::string_view(item).ends_with(kSectionOpen)) {
      return where + ": unknown section [" + item.substr(0, item.size() - kSectionOpen.size()) +
             "] (sections are subcommand names)";
    }
    return where + ": unknown key '" + item +
           "' (keys are option names without dashes, in the subcommand's section)";
  }
  return where + ": " + what;
}

// The innermost subcommand on the command line (`idem demo refund` → refund), or
// `root` when none was given.
const CLI::App* Innermost(const CLI::App& root) {
  const CLI::App* where = &root;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : where->get_subcommands()) {
      where = sub;
      deeper = true;
      break;
    }
  }
  return where;
}

// "idem demo refund" for `where`.
std::string CommandPath(const CLI::App* where) {
  std::string path;
  for (const CLI::App* a = where; a != nullptr; a = a->get_parent()) {
    path = a->get_name() + (path.empty() ? "" : " ") + path;
  }
  return path;
}

// The optimal string alignment distance of `a` and `b`: insertions, deletions,
// substitutions and swaps of two neighbours, each one edit.
size_t CommandLineEditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The name among `names` nearest to `typed` (the first of equals), when it is
// close enough to be the one meant: at most 2 edits, and at most a third of
// typed's length (1 for names shorter than 6), so that "x" suggests nothing.
// "" otherwise. Options are compared without their leading dashes.
std::string NearestName(std::string_view typed, const std::vector<std::string>& names) {
  auto bare = [](std::string_view n) {
    while (n.starts_with("-")) n.remove_prefix(1);
    return n;
  };
  const std::string_view t = bare(typed);
  if (t.empty() || t.size() > 64) return "";  // bounded work for a pasted value
  const size_t limit = std::min<size_t>(2, std::max<size_t>(1, t.size() / 3));
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& name : names) {
    const size_t distance = CommandLineEditDistance(t, bare(name));
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

// The subcommands of `app` that `idem --help` lists (the external ones too).
std::vector<std::string> VisibleSubcommands(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_group().empty()) names.push_back(sub->get_name());
  }
  return names;
}

// The long options `app` takes: its own and, since options fall through, its
// parents' (--config, --log-level).
std::vector<std::string> OptionNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent()) {
    for (const CLI::Option* o : a->get_options()) {
      for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    }
  }
  return names;
}

// "; did you mean 'serve'?" for the unknown `typed` (an option's value after '=' is
// left out), "" when no name is near.
std::string DidYouMean(std::string_view typed, const std::vector<std::string>& names) {
  if (typed.starts_with("-")) typed = typed.substr(0, typed.find('='));
  const std::string near = NearestName(typed, names);
  return near.empty() ? "" : "; did you mean '" + near + "'?";
}

// A usage error, in one line. CLI11's messages are mostly fine; a few are sharpened.
std::string DescribeParseError(const CLI::ParseError& e, const CLI::App& root,
                               std::string_view config_file) {
  if (const auto* config = dynamic_cast<const CLI::ConfigError*>(&e)) {
    return DescribeConfigError(*config, config_file);
  }
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
    return "cannot read config file " + std::string(config_file) + " (missing or unreadable)";
  }
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const CLI::App* where = Innermost(root);
    // Subcommands fall through to the root (so --config may follow them): their
    // extras may be counted there.
    std::vector<std::string> extras = where->remaining();
    if (extras.empty()) extras = root.remaining();
    if (where != &root && !extras.empty()) {
      const std::string path = CommandPath(where);
      const std::string& extra = extras.front();
      if (extra.starts_with("-")) {
        return "unknown option '" + extra + "'" + DidYouMean(extra, OptionNames(where)) +
               " (see " + path + " --help)";
      }
      return "unexpected argument '" + extra + "'" + DidYouMean(extra, VisibleSubcommands(where)) +
             " (see " + path + " --help)";
    }
  }
  if (what == "A subcommand is required" || what.starts_with("Requires at most")) {
    // The innermost subcommand given (e.g. `idem demo`) is the one missing its own.
    const CLI::App* where = Innermost(root);
    const std::string help = where == &root ? "idem --help" : CommandPath(where) + " --help";
    std::vector<std::string> remaining = root.remaining();
    if (!remaining.empty() && !remaining.front().starts_with("-")) {
      return "unknown subcommand '" + remaining.front() + "'" +
             DidYouMean(remaining.front(), VisibleSubcommands(where)) + " (see " + help + ")";
    }
    if (!remaining.empty()) {
      return "unknown option '" + remaining.front() + "'" +
             DidYouMean(remaining.front(), OptionNames(where)) + " (see " + help + ")";
    }
    std::string names;
    for (const CLI::App* sub : where->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_group().empty()) continue;  // hidden (internal) subcommands
      names += names.empty() ? "" : ", ";
      names += sub->get_name();
    }
    if (where != &root) {
      const std::string path = CommandPath(where);
      return path + " needs a subcommand: " + names + " (see " + path + " --help)";
    }
    return "a subcommand is required: " + names + " (see idem --help)";
  }
  return what + " (see --help)";
}

int Run(int argc, char** argv, std::initializer_list<AddCommandFn> commands_to_add,
        const std::vector<std::pair<std::string, std::string>>& listed_only) {
  // Logs go to stderr: stdout carries results (`serve`'s "listening on" line, migrate's
  // report) that scripts read, and a parent that reads only serve's first stdout
  // line must not see the server block on a full pipe once the logs fill it.
  spdlog::set_default_logger(spdlog::stderr_color_mt("idem"));
  CLI::App root("idem: exactly-once effects on at-least-once delivery", "idem");
  // Set before the subcommands are added: they copy these settings from the root.
  root.allow_config_extras(CLI::config_extras_mode::error);
  // Keeps [retention.*] for cli/retention_config.h; checks every other value's type
  // against its option (cli/config_values.h).
  root.config_formatter(ConfigReader(&root));
  root.fallthrough();  // root options (--config) may also follow the subcommand
  root.require_subcommand(1, 1);
  root.set_version_flag("--version", "idem " IDEM_VERSION, "Print the version and exit");
  CLI::Option* config =
      root.set_config("--config", "", "TOML file setting any option; see below", false);
  config->type_name("FILE");
  std::string log_level = "info";
  std::string log_format = "text";
  root.add_option("--log-level", log_level,
                  "Least severe log lines written: trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  root.add_option("--log-format", log_format,
                  "text, or json: one object per line (time, level, msg) for log collectors")
      ->capture_default_str();

  std::vector<std::pair<CLI::App*, CommandFn>> commands;
  auto add = [&](CommandFn (*add_command)(CLI::App&)) {
    CommandFn fn = add_command(root);
    std::vector<CLI::App*> subs = root.get_subcommands([](const CLI::App*) { return true; });
    commands.emplace_back(subs.back(), std::move(fn));
  };
  for (AddCommandFn add_command : commands_to_add) add(add_command);
  for (const auto& [name, help] : listed_only) root.add_subcommand(name, help);
  RefuseNegativeUnsigned(root);
  // After the subcommands: they copy the root's footer when they are added, and
  // this one is about the root.
  root.footer(std::string(kFooter));

  try {
    root.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      // --help, --help-all, --version: CLI11 prints them; the exit status is 0.
      root.exit(e);
      return kExitOk;
    }
    if (e.get_name() == kStoreOptionError) {  // its own reason and exit status
      PrintReason(e.what());
      return e.get_exit_code();
    }
    // Read the raw value: a config error is thrown before option callbacks run.
    std::string config_file = config->results().empty() ? "" : config->results().back();
    PrintReason(DescribeParseError(e, root, config_file));
    return kExitUsage;
  }

  if (absl::Status s = ConfigureLogging(log_level, log_format); !s.ok()) {
    PrintReason(std::string(s.message().data(), s.message().size()));
    return kExitUsage;
  }
  for (auto& [app, fn] : commands) {
    if (app->parsed()) return fn();
  }
  // require_subcommand(1, 1) makes this unreachable unless a subcommand was added
  // without a function.
  PrintReason("internal error: the chosen subcommand has no implementation");
  return kExitFailure;
}

}  // namespace

int RunCommandLine(int argc, char** argv, std::initializer_list<AddCommandFn> commands,
                   const std::vector<std::pair<std::string, std::string>>& listed_only) {
  // No exception may escape (STYLE.md); one from a dependency is an operational
  // failure of this run, reported in one line.
  try {
    return Run(argc, argv, commands, listed_only);
  } catch (const std::exception& e) {
    PrintReason(std::string("internal error: ") + e.what());
  } catch (...) {
    PrintReason("internal error: unknown exception");
  }
  return kExitFailure;
}

std::string_view Version() { return IDEM_VERSION; }

}  // namespace idem::cli

