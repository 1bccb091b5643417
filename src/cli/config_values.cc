#include "cli/config_values.h"

#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace idem::cli {
namespace {

// What an option takes, as CLI11 describes its value type.
enum class ValueKind { kFlag, kUnsigned, kInteger, kNumber, kString };

ValueKind KindOf(const CLI::Option& option) {
  // As CLI11 tells a flag when it applies a config value (App::_parse_single_config).
  if (option.get_expected_min() == 0) return ValueKind::kFlag;
  const std::string type = option.get_type_name();
  if (type == "UINT") return ValueKind::kUnsigned;
  if (type == "INT") return ValueKind::kInteger;
  if (type == "FLOAT") return ValueKind::kNumber;
  return ValueKind::kString;
}

const char* Expected(ValueKind kind) {
  switch (kind) {
    case ValueKind::kFlag:
      return "true or false";
    case ValueKind::kUnsigned:
      return "an integer, 0 or more";
    case ValueKind::kInteger:
      return "an integer";
    case ValueKind::kNumber:
      return "a number";
    case ValueKind::kString:
      break;
  }
  return "a string";
}

const char* TomlTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

// "" when `node` is one value of `kind`, else what it is instead ("a boolean", "-1").
std::string CheckScalar(const toml::node& node, ValueKind kind) {
  switch (kind) {
    case ValueKind::kFlag:
      if (node.is_boolean()) return "";
      break;
    case ValueKind::kUnsigned:
      if (const auto* n = node.as_integer(); n != nullptr) {
        if (n->get() >= 0) return "";
        return absl::StrCat(n->get());
      }
      break;
    case ValueKind::kInteger:
      if (node.is_integer()) return "";
      break;
    case ValueKind::kNumber:
      if (node.is_integer() || node.is_floating_point()) return "";
      break;
    case ValueKind::kString:
      if (node.is_string()) return "";
      break;
  }
  return TomlTypeName(node);
}

std::string CheckOption(const toml::node& node, const CLI::Option& option) {
  const ValueKind kind = KindOf(option);
  std::string type = std::string(Expected(kind));
  if (kind == ValueKind::kString && option.get_type_name() != "TEXT") {
    absl::StrAppend(&type, " (", option.get_type_name(), ")");
  }
  const bool repeatable = kind != ValueKind::kFlag && option.get_items_expected_max() > 1;
  const std::string takes = absl::StrCat("takes ", type, repeatable ? " or an array of them" : "");
  if (const toml::array* values = node.as_array(); values != nullptr && repeatable) {
    for (size_t i = 0; i < values->size(); ++i) {
      if (std::string got = CheckScalar(*values->get(i), kind); !got.empty()) {
        return absl::StrCat(takes, "; element ", i + 1, " is ", got);
      }
    }
    return "";
  }
  std::string got = CheckScalar(node, kind);
  if (got.empty()) return "";
  return absl::StrCat(takes, ", not ", got);
}

// The option a config key sets in `app`, found as CLI11 finds it.
const CLI::Option* OptionNamed(const CLI::App& app, const std::string& key) {
  const CLI::Option* option = app.get_option_no_throw("--" + key);
  if (option == nullptr && key.size() == 1) option = app.get_option_no_throw("-" + key);
  if (option == nullptr) option = app.get_option_no_throw(key);
  return option;
}

std::string CheckSection(const toml::table& table, const CLI::App& app,
                         const std::string& section) {
  for (const auto& [name, node] : table) {
    const std::string key(name.str());
    if (const toml::table* sub = node.as_table(); sub != nullptr) {
      if (section.empty() && key == "retention") continue;  // cli/retention_config.h
      const CLI::App* command = nullptr;
      for (const CLI::App* candidate : app.get_subcommands([](const CLI::App*) { return true; })) {
        if (candidate->check_name(key)) command = candidate;
      }
      if (command == nullptr) continue;  // CLI11: unknown section
      const std::string path = section.empty() ? key : section + "." + key;
      if (std::string why = CheckSection(*sub, *command, path); !why.empty()) return why;
      continue;
    }
    const CLI::Option* option = OptionNamed(app, key);
    if (option == nullptr || !option->get_configurable()) continue;  // CLI11 says why
    if (std::string why = CheckOption(node, *option); !why.empty()) {
      return absl::StrCat(section.empty() ? "" : "[" + section + "] ", key, ": ", why);
    }
  }
  return "";
}

}  // namespace

std::string CheckConfigValues(const toml::table& file, const CLI::App& root) {
  return CheckSection(file, root, "");
}

void RefuseNegativeUnsigned(CLI::App& root) {
  const CLI::Validator not_negative(
      [](std::string& value) -> std::string {
        const size_t first = value.find_first_not_of(" \t");
        if (first != std::string::npos && value[first] == '-') return value + " is negative";
        return "";
      },
      "", "NOT_NEGATIVE");
  for (CLI::Option* option : root.get_options()) {
    if (KindOf(*option) == ValueKind::kUnsigned) option->check(not_negative);
  }
  for (CLI::App* sub : root.get_subcommands([](CLI::App*) { return true; })) {
    RefuseNegativeUnsigned(*sub);
  }
}

}  // namespace idem::cli
