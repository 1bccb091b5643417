#include "cli/logging.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/key.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {

// %* in the JSON pattern: the message as the inside of a JSON string.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : msg.payload) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (c == '\n') {
        dest.append(std::string_view("\\n"));
      } else if (u < 0x20) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 0xf]};
        dest.append(esc, esc + sizeof esc);
      } else {
        dest.push_back(c);  // UTF-8 passes through; invalid bytes as they are
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

// %* in the text pattern: the message on one line, whatever its fields hold (a key
// or a request id with CR, LF or an escape sequence cannot forge a line or recolour
// the terminal): idem::EscapeControl, the same escaping as error messages.
class TextEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (!NeedsEscape(payload)) {
      dest.append(payload.data(), payload.data() + payload.size());
      return;
    }
    const std::string escaped = EscapeControl(payload);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<TextEscapedMessage>();
  }
};

}  // namespace

absl::Status ConfigureLogging(std::string_view level, std::string_view format) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str answers `off` for any name it does not know: only "off" means it.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level '", AV(level), "' must be trace, debug, info, warn, error, critical or off"));
  }
  spdlog::set_level(parsed);
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%*"})");
    spdlog::set_formatter(std::move(formatter));
  } else if (format == "text") {
    // spdlog's default line, with the message escaped.
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<TextEscapedMessage>('*').set_pattern(
        "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %*");
    spdlog::set_formatter(std::move(formatter));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-format '", AV(format), "' must be text or json"));
  }
  return absl::OkStatus();
}

}  // namespace idem::cli
