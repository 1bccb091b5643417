#include "cli/retention_config.h"

#include <toml++/toml.h>

#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/config_values.h"
#include "core/absl_compat.h"
#include "idem/status.h"

namespace idem::cli {
namespace {

constexpr std::string_view kSection = "retention";

// The [retention.*] items of the config file read by this process.
std::vector<CLI::ConfigItem>& RetentionItems() {
  static std::vector<CLI::ConfigItem>* items = new std::vector<CLI::ConfigItem>();
  return *items;
}

// CLI11's reader is INI at heart and takes what TOML refuses: an unclosed array
// (`tenant = ["a:tok"`), an unquoted string, text after a value, a broken section
// header, each read as some value or key that then fails somewhere else or not at
// all. The file is checked as TOML first (toml++), and a file that is not TOML is an
// error naming its line and column.
toml::table CheckToml(const std::string& text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& e) {
    std::string description(e.description());
    for (char& c : description) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    throw CLI::ConfigError(absl::StrCat("not valid TOML at line ", e.source().begin.line,
                                        ", column ", e.source().begin.column, ": ", description));
  }
}

// `store` and `store-password-file` of the [serve] section of the config file read
// by this process, kept when the program has no `serve` subcommand (idem-worker).
ServeStoreConfig& ServeStoreItems() {
  static ServeStoreConfig* items = new ServeStoreConfig();
  return *items;
}

bool HasServeCommand(const CLI::App* root) {
  if (root == nullptr) return true;  // no program to match sections to: CLI11 decides
  for (const CLI::App* sub : root->get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == "serve") return true;
  }
  return false;
}

class Reader final : public CLI::ConfigTOML {
 public:
  explicit Reader(const CLI::App* root) : root_(root) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    // The items of the file read last: a process that parses a command line again
    // (the config fuzzer does, once per input) must not see an earlier file's.
    RetentionItems().clear();
    ServeStoreItems() = {};
    const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
    const toml::table file = CheckToml(text);
    if (root_ != nullptr) {
      if (std::string wrong = CheckConfigValues(file, *root_); !wrong.empty()) {
        throw CLI::ConfigError(wrong);
      }
    }
    std::istringstream checked(text);
    std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(checked);
    std::vector<CLI::ConfigItem> rest;
    const bool serve_is_ours = HasServeCommand(root_);
    for (CLI::ConfigItem& item : items) {
      if (!item.parents.empty() && item.parents.front() == kSection) {
        RetentionItems().push_back(std::move(item));
      } else if (!serve_is_ours && !item.parents.empty() && item.parents.front() == "serve") {
        // The server's settings: only its store is this program's business.
        if (item.parents.size() == 1 && item.inputs.size() == 1) {
          if (item.name == "store") ServeStoreItems().url = item.inputs.front();
          if (item.name == "store-password-file") {
            ServeStoreItems().password_file = item.inputs.front();
          }
        }
      } else {
        rest.push_back(std::move(item));
      }
    }
    return rest;
  }

 private:
  const CLI::App* const root_;
};

struct Section {
  std::map<std::string, std::string> values;
};

std::string Where(std::string_view biz_type) {
  return absl::StrCat("config file: [retention.", AV(biz_type), "]");
}

}  // namespace

ServeStoreConfig ServeStoreFromConfig() { return ServeStoreItems(); }

std::shared_ptr<CLI::Config> ConfigReader(const CLI::App* root) {
  return std::make_shared<Reader>(root);
}

absl::StatusOr<RetentionPolicy> RetentionFromConfig(std::string* derivation) {
  std::map<std::string, Section> sections;
  for (const CLI::ConfigItem& item : RetentionItems()) {
    if (item.name == "++" || item.name == "--") {  // CLI11's section markers
      if (item.parents.size() >= 2) sections[item.parents[1]];
      continue;
    }
    if (item.parents.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file: '", item.fullname(),
                       "': retention is given per biz_type, in sections [retention.<biz_type>]"));
    }
    if (item.inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(Where(item.parents[1]), ": '", item.name,
                                                     "' takes one duration, e.g. \"30d\""));
    }
    sections[item.parents[1]].values[item.name] = item.inputs.front();
  }
  RetentionPolicy policy;
  for (const auto& entry : sections) {
    // Named references, not a structured binding: clang 14 (the fuzz build) cannot
    // capture a binding in the lambda below.
    const std::string& biz_type = entry.first;
    const Section& section = entry.second;
    TtlInputs inputs;
    std::optional<absl::Duration> ttl, tombstone;
    const std::pair<const char*, absl::Duration*> windows[] = {
        {"redelivery", &inputs.redelivery_window},
        {"recon_cycle", &inputs.recon_cycle},
        {"confirm_window", &inputs.confirm_window},
        {"margin", &inputs.safety_margin},
    };
    for (const auto& [name, value] : section.values) {
      bool known = name == "ttl" || name == "tombstone";
      for (const auto& w : windows) known = known || name == w.first;
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(biz_type), ": unknown key '", name,
            "' (keys: redelivery, recon_cycle, confirm_window, margin, ttl, tombstone)"));
      }
    }
    auto duration = [&](const char* name) -> absl::StatusOr<std::optional<absl::Duration>> {
      auto it = section.values.find(name);
      if (it == section.values.end()) return std::optional<absl::Duration>();
      IDEM_ASSIGN_OR_RETURN(absl::Duration d,
                            ParseTtlDuration(it->second, absl::StrCat(Where(biz_type), " ", name)));
      return std::optional<absl::Duration>(d);
    };
    for (const auto& [name, out] : windows) {
      IDEM_ASSIGN_OR_RETURN(std::optional<absl::Duration> d, duration(name));
      if (!d.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(biz_type), ": '", name,
            "' is missing; the TTL is derived from redelivery, recon_cycle, confirm_window and "
            "margin (docs/retention.md), so every window must be given (0s where there is none)"));
      }
      *out = *d;
    }
    IDEM_ASSIGN_OR_RETURN(ttl, duration("ttl"));
    IDEM_ASSIGN_OR_RETURN(tombstone, duration("tombstone"));
    absl::Status added = policy.Add(biz_type, inputs, ttl, tombstone);
    if (!added.ok()) {
      if (added.code() == absl::StatusCode::kFailedPrecondition && derivation != nullptr) {
        absl::StatusOr<TtlDerivation> d = DeriveTtl(inputs);
        if (d.ok()) *derivation = FormatDerivation(*d);
      }
      return absl::Status(added.code(), absl::StrCat(Where(biz_type), ": ", added.message()));
    }
  }
  return policy;
}

std::string FormatDerivation(const TtlDerivation& d) {
  const std::pair<TtlWindow, absl::Duration> windows[] = {
      {TtlWindow::kRedelivery, d.inputs.redelivery_window},
      {TtlWindow::kReconCycle, d.inputs.recon_cycle},
      {TtlWindow::kConfirmWindow, d.inputs.confirm_window},
  };
  std::string out =
      "TTL = max(upstream redelivery window, reconciliation cycle, downstream confirmation "
      "window) + safety margin\n";
  auto row = [&out](std::string_view name, std::string_view value, std::string_view note) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "  %-32.*s %-10.*s%s%.*s\n", static_cast<int>(name.size()),
                  name.data(), static_cast<int>(value.size()), value.data(),
                  note.empty() ? "" : " ", static_cast<int>(note.size()), note.data());
    std::string line = buf;
    // Trailing padding is noise in a terminal and in a diff.
    while (line.size() > 1 && line[line.size() - 2] == ' ') line.erase(line.size() - 2, 1);
    out += line;
  };
  for (const auto& [window, value] : windows) {
    row(TtlWindowName(window), FormatTtlDuration(value),
        window == d.dominant ? "<- dominates" : "");
  }
  row("safety margin", FormatTtlDuration(d.safety_margin), "");
  out += "TTL = " + FormatTtlDuration(d.dominant_window) + " + " +
         FormatTtlDuration(d.safety_margin) + " = " + FormatTtlDuration(d.total) + " (" +
         FormatTtlDays(d.total) + ")\n";
  return out;
}

std::string DescribePurge(const PurgeStats& s, bool dry_run) {
  return absl::StrCat(s.scanned, " expired records found, ", s.tombstoned,
                      dry_run ? " to tombstone, " : " tombstoned, ", s.deleted,
                      dry_run ? " to delete, " : " deleted, ", s.tombstones_dropped,
                      dry_run ? " old tombstones to drop, " : " old tombstones dropped, ",
                      s.kept, " kept, ", s.operations_deleted,
                      dry_run ? " step operations to delete" : " step operations deleted", " (",
                      s.batches, " batches)");
}

std::string DescribePolicy(const RetentionPolicy& policy) {
  std::string out;
  for (const auto& [biz_type, r] : policy.entries()) {
    const TtlDerivation& d = r.derivation;
    absl::StrAppend(&out, biz_type, ": ttl ", FormatTtlDuration(r.ttl()), " (derived ",
                    FormatTtlDuration(d.total), ": ", AV(TtlWindowName(d.dominant)), " ",
                    FormatTtlDuration(d.dominant_window), " + safety margin ",
                    FormatTtlDuration(d.safety_margin), "), tombstones ",
                    FormatTtlDuration(r.tombstone.value_or(r.ttl())), "\n");
  }
  return out;
}

}  // namespace idem::cli
