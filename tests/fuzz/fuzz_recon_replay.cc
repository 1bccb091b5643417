// Fuzzes the way a statement's key reaches the wire: the statement readers' key
// field (recon/statement_readers.h, through the Normalizer's key check) into the
// replay request (recon::ActionRequest) as http::Upstream writes it
// (Upstream::RequestBytes, the bytes Send writes).
//
// Input: one byte of settings (bit 0: JSONL, else CSV), then the key's bytes. They
// are written as the key field of a one-row statement (a quoted CSV field with ""
// doubled; a JSON string with every control character, '"' and '\' escaped, so the
// reader sees the very bytes). Properties:
//   - a key the reader yields is one ValidateHeaderKey accepts, and its replay
//     request is built; its bytes parse (Beast's parser, the receiver's view) as
//     exactly one request, every byte consumed, POST /replay with exactly the six
//     headers Send writes and the key as the Idempotency-Key value, byte for byte;
//   - a key the reader refuses is refused with kInvalidArgument "FILE:LINE: ...";
//   - whatever the key, a request carrying it as a header (built directly, so not
//     checked by the reader or ActionRequest) is refused by the client when the key
//     holds CR, LF or NUL, and otherwise its head is exactly the request line, six
//     header lines and the blank line, none holding a CR, LF or NUL of its own.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "boost/beast/http.hpp"
#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"
#include "http/client/upstream.h"
#include "idem/key.h"
#include "recon/dispositions.h"
#include "recon/fields.h"
#include "recon/statement_readers.h"

namespace {

namespace bhttp = boost::beast::http;
using idem::fuzz::Check;
namespace recon = idem::recon;

constexpr size_t kHeaderLines = 6;  // Idempotency-Key, Content-Type, Host, X-Request-Id,
                                    // Connection, Content-Length
constexpr std::string_view kPayload = R"({"source":"fuzz"})";

std::string CsvStatement(std::string_view key) {
  std::string out = "id,amt\n\"";
  for (char c : key) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out += "\",100\n";
  return out;
}

std::string JsonlStatement(std::string_view key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = R"({"id":")";
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20) {
      const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 0xf]};
      out.append(esc, sizeof esc);
    } else {
      out.push_back(c);
    }
  }
  out += R"(","amt":100})";
  out += "\n";
  return out;
}

const idem::http::Upstream& Replay() {
  static const auto* upstream = new idem::http::Upstream(
      *idem::http::ParseUpstreamUrl("http://127.0.0.1:9/replay"), {.timeout = absl::Seconds(1)});
  return *upstream;
}

// The head of `bytes` (up to the blank line) is the request line, kHeaderLines
// header lines and the blank line, and no line holds a CR, LF or NUL of its own.
void CheckHeadLines(std::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  Check(end != std::string_view::npos, "a request has a head");
  std::string_view head = bytes.substr(0, end + 2);
  size_t lines = 0;
  while (!head.empty()) {
    const size_t crlf = head.find("\r\n");
    Check(crlf != std::string_view::npos, "every head line ends with CRLF");
    const std::string_view line = head.substr(0, crlf);
    Check(line.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos,
          "no CR, LF or NUL inside a head line", idem::EscapeControl(line, 200));
    ++lines;
    head.remove_prefix(crlf + 2);
  }
  Check(lines == 1 + kHeaderLines, "the head is the request line and the six headers",
        idem::EscapeControl(bytes.substr(0, end), 400));
}

// `bytes` parse as exactly one request, every byte consumed, with exactly the
// headers Send writes and `key` as its Idempotency-Key.
void CheckOneRequest(std::string_view bytes, std::string_view key) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  const size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  Check(!ec && parser.is_done(), "the request bytes parse as a whole request",
        idem::EscapeControl(bytes, 400));
  Check(used == bytes.size(), "nothing follows the one request (no second, smuggled one)",
        idem::EscapeControl(bytes.substr(used), 400));
  const auto& req = parser.get();
  Check(req.method_string() == "POST" && req.target() == "/replay", "POST /replay");
  size_t fields = 0;
  for (const auto& field : req) {
    (void)field;
    ++fields;
  }
  Check(fields == kHeaderLines, "exactly the six headers Send writes");
  for (std::string_view name : {"Content-Type", "Host", "X-Request-Id", "Connection",
                                "Content-Length"}) {
    Check(req.count(boost::beast::string_view(name.data(), name.size())) == 1,
          "each header once", name);
  }
  Check(req.count("Idempotency-Key") == 1, "one Idempotency-Key");
  const auto value = req["Idempotency-Key"];
  Check(std::string_view(value.data(), value.size()) == key,
        "the Idempotency-Key is the statement's key, byte for byte", idem::EscapeControl(key, 200));
  Check(req.body() == kPayload, "the body is the payload");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool jsonl = (data[0] & 1) != 0;
  const std::string_view key(reinterpret_cast<const char*>(data + 1), size - 1);

  // The statement reader's view of the key.
  const std::string& path = idem::fuzz::ScratchFile("replay");
  const std::string statement = jsonl ? JsonlStatement(key) : CsvStatement(key);
  idem::fuzz::WriteFile(path, reinterpret_cast<const uint8_t*>(statement.data()),
                        statement.size());
  static const recon::ColumnMap map = *recon::ParseColumnMap("key=id,amount=amt");
  static const recon::StatusRules rules;
  const recon::Normalizer normalizer(recon::Side::kUpstream, map, 0, absl::UTCTimeZone(), rules);
  const recon::StatementOptions options{
      .format = jsonl ? recon::StatementFormat::kJsonl : recon::StatementFormat::kCsv};
  absl::StatusOr<std::unique_ptr<recon::StatementReader>> reader =
      recon::OpenStatement(path, 0, map, options, normalizer);
  Check(reader.ok(), "a readable statement opens", idem::SV(reader.status().message()));
  recon::Row row;
  absl::StatusOr<bool> got = (*reader)->Next(&row);
  if (!got.ok()) {
    idem::fuzz::CheckBadInput(got.status(), "StatementReader::Next");
    Check(absl::StartsWith(got.status().message(), path + ":"), "an error names FILE:LINE",
          idem::SV(got.status().message()));
  } else if (*got) {
    Check(idem::ValidateHeaderKey(row.key).ok(), "a key the reader yields can be a header",
          idem::EscapeControl(row.key, 200));
    absl::StatusOr<idem::http::HttpRequest> request =
        recon::ActionRequest(row.key, std::string(kPayload));
    Check(request.ok(), "a key the reader yields makes a replay request",
          idem::SV(request.status().message()));
    absl::StatusOr<std::string> bytes =
        Replay().RequestBytes(*request, recon::ActionTarget(Replay()));
    Check(bytes.ok(), "the client writes a replay request of a key the reader yields",
          idem::SV(bytes.status().message()));
    CheckHeadLines(*bytes);
    CheckOneRequest(*bytes, row.key);
  }

  // The client on its own, whoever built the request.
  Check(recon::ActionRequest(std::string(key), std::string(kPayload)).ok() ==
            idem::ValidateHeaderKey(key).ok(),
        "ActionRequest refuses exactly the keys ValidateHeaderKey refuses");
  idem::http::HttpRequest direct;
  direct.method = "POST";
  direct.body = std::string(kPayload);
  direct.request_id = "recon";
  direct.headers = {{"Idempotency-Key", std::string(key)}, {"Content-Type", "application/json"}};
  absl::StatusOr<std::string> bytes = Replay().RequestBytes(direct, recon::ActionTarget(Replay()));
  const bool breaks = key.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
  if (breaks) {
    Check(!bytes.ok() && bytes.status().code() == absl::StatusCode::kInvalidArgument,
          "a header value with CR, LF or NUL is refused", idem::EscapeControl(key, 200));
    Check(absl::StrContains(bytes.status().message(), "'Idempotency-Key'"),
          "the refusal names the header", idem::SV(bytes.status().message()));
  } else {
    Check(bytes.ok(), "a header value without CR, LF or NUL is written",
          idem::SV(bytes.status().message()));
    CheckHeadLines(*bytes);
    if (idem::ValidateHeaderKey(key).ok()) CheckOneRequest(*bytes, key);
  }
  return 0;
}
