#include "refund/channel_client.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "idem/status.h"
#include "nlohmann/json.hpp"

namespace idem::refund {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

constexpr size_t kMaxReplyBytes = 16 << 20;

std::string UrlEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : in) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::string Context(std::string_view name, std::string_view value) {
  return absl::StrCat(" (", std::string(name), "=", std::string(value), ")");
}

// The server's {"error": ...} text, else the start of the body.
std::string ErrorText(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto it = j.find("error");
    if (it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return body.substr(0, 200);
}

absl::Status Malformed(std::string_view what, std::string_view why) {
  return absl::InternalError(
      absl::StrCat("channel: malformed answer to ", std::string(what), ": ", std::string(why)));
}

absl::StatusOr<json> ParseReply(const std::string& body, std::string_view what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Malformed(what, "not a JSON object");
  return j;
}

absl::StatusOr<Reversal> ParseReversal(const json& j, std::string_view what) {
  if (!j.is_object()) return Malformed(what, "a reversal is not a JSON object");
  auto id = j.find("id");
  auto request_id = j.find("request_id");
  auto order_no = j.find("order_no");
  auto amount = j.find("amount");
  auto cancelled = j.find("cancelled");
  if (id == j.end() || !id->is_string() || request_id == j.end() || !request_id->is_string() ||
      order_no == j.end() || !order_no->is_string() || amount == j.end() ||
      !amount->is_number_integer() || cancelled == j.end() || !cancelled->is_boolean()) {
    return Malformed(what, "a reversal lacks id, request_id, order_no, amount or cancelled");
  }
  return Reversal{id->get<std::string>(), request_id->get<std::string>(),
                  order_no->get<std::string>(), amount->get<int64_t>(), cancelled->get<bool>()};
}

absl::StatusOr<int64_t> IntField(const json& j, const char* name, std::string_view what) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) {
    return Malformed(what, absl::StrCat("\"", name, "\" is not an integer"));
  }
  return it->get<int64_t>();
}

}  // namespace

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ChannelClient::ChannelClient(std::string host, uint16_t port, absl::Duration timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

absl::StatusOr<ChannelClient> ChannelClient::FromUrl(std::string_view base_url,
                                                     absl::Duration timeout) {
  const absl::Status bad = absl::InvalidArgumentError(absl::StrCat(
      "channel URL \"", std::string(base_url), "\" must be http://HOST[:PORT] (port 1-65535)"));
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("channel: the timeout must be positive");
  }
  constexpr std::string_view kScheme = "http://";
  if (base_url.substr(0, kScheme.size()) != kScheme) return bad;
  std::string_view rest = base_url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) return bad;
  std::string_view host = rest;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad;
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad;
      port_text = after.substr(1);
      if (port_text.empty()) return bad;
    }
  } else if (const size_t colon = rest.find(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
    if (port_text.empty()) return bad;
  }
  uint32_t port = 80;
  if (!port_text.empty() &&
      (port_text.find_first_not_of("0123456789") != std::string_view::npos ||
       !absl::SimpleAtoi(absl::string_view(port_text.data(), port_text.size()), &port))) {
    return bad;
  }
  if (host.empty() || port < 1 || port > 65535) return bad;
  return ChannelClient(std::string(host), static_cast<uint16_t>(port), timeout);
}

absl::StatusOr<ChannelClient::Reply> ChannelClient::Call(bool post, const std::string& target,
                                                         const std::string& body,
                                                         std::string_view what,
                                                         std::string_view context) const {
  const std::string server = absl::StrCat(host_, ":", port_);
  const std::string within = absl::FormatDuration(timeout_);
  try {
    asio::io_context ioc;
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    const auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("channel: cannot resolve ", host_, ": ", ec.message()));
    }

    bhttp::request<bhttp::string_body> request(post ? bhttp::verb::post : bhttp::verb::get, target,
                                               11);
    request.set(bhttp::field::host, server);
    request.set(bhttp::field::user_agent, "idem-refund-channel-client");
    if (post) {
      request.set(bhttp::field::content_type, "application/json");
      request.body() = body;
    }
    request.keep_alive(false);
    request.prepare_payload();

    // One deadline for the whole exchange: the stream's timer closes the socket when
    // it fires, and the pending operation completes with beast::error::timeout.
    beast::tcp_stream stream(ioc);
    stream.expires_after(absl::ToChronoNanoseconds(timeout_));
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    bool connected = false;
    beast::error_code result;
    stream.async_connect(endpoints, [&](beast::error_code connect_ec, const tcp::endpoint&) {
      if (connect_ec) {
        result = connect_ec;
        return;
      }
      connected = true;
      bhttp::async_write(stream, request, [&](beast::error_code write_ec, size_t) {
        if (write_ec) {
          result = write_ec;
          return;
        }
        bhttp::async_read(stream, buffer, parser,
                          [&](beast::error_code read_ec, size_t) { result = read_ec; });
      });
    });
    ioc.run();
    stream.close();

    if (!connected) {
      if (result == beast::error::timeout) {
        return absl::UnavailableError(
            absl::StrCat("channel: cannot connect to ", server, " within ", within));
      }
      return absl::UnavailableError(
          absl::StrCat("channel: cannot connect to ", server, ": ", result.message()));
    }
    if (result == beast::error::timeout) {
      return absl::DeadlineExceededError(absl::StrCat("channel: no response to ", std::string(what),
                                                      " within ", within, std::string(context)));
    }
    if (result) {
      return absl::UnavailableError(
          absl::StrCat("channel: connection closed without a response to ", std::string(what),
                       std::string(context), ": ", result.message()));
    }
    bhttp::response<bhttp::string_body> response = parser.release();
    return Reply{static_cast<int>(response.result_int()), std::move(response.body())};
  } catch (const std::exception& e) {
    // Asio reports I/O errors through error codes; this is resource exhaustion.
    return absl::InternalError(absl::StrCat("channel: ", std::string(what), ": ", e.what()));
  }
}

namespace {

// Maps a reply whose status is not the expected one.
absl::Status StatusFromReply(int status, const std::string& body, std::string_view what,
                             std::string_view context) {
  const std::string text = absl::StrCat("channel: ", std::string(what), " answered ", status, ": ",
                                        ErrorText(body), std::string(context));
  if (status >= 400 && status < 500) return absl::InvalidArgumentError(text);
  if (status >= 500) return absl::UnavailableError(text);
  return absl::InternalError(text);
}

}  // namespace

absl::StatusOr<std::string> ChannelClient::Reverse(std::string_view request_id,
                                                   std::string_view order_no,
                                                   int64_t amount) const {
  constexpr std::string_view kWhat = "POST /reversals";
  const std::string context = Context("request_id", request_id);
  const json body{{"request_id", std::string(request_id)},
                  {"order_no", std::string(order_no)},
                  {"amount", amount}};
  IDEM_ASSIGN_OR_RETURN(Reply reply, Call(true, "/reversals", DumpJson(body), kWhat, context));
  if (reply.status != 201) return StatusFromReply(reply.status, reply.body, kWhat, context);
  IDEM_ASSIGN_OR_RETURN(json j, ParseReply(reply.body, kWhat));
  IDEM_ASSIGN_OR_RETURN(Reversal reversal, ParseReversal(j, kWhat));
  return reversal.id;
}

absl::StatusOr<std::vector<Reversal>> ChannelClient::List(std::string_view param,
                                                          std::string_view value) const {
  constexpr std::string_view kWhat = "GET /reversals";
  const std::string context = Context(param, value);
  const std::string target = absl::StrCat("/reversals?", std::string(param), "=", UrlEncode(value));
  IDEM_ASSIGN_OR_RETURN(Reply reply, Call(false, target, "", kWhat, context));
  if (reply.status != 200) return StatusFromReply(reply.status, reply.body, kWhat, context);
  IDEM_ASSIGN_OR_RETURN(json j, ParseReply(reply.body, kWhat));
  auto list = j.find("reversals");
  if (list == j.end() || !list->is_array()) return Malformed(kWhat, "no \"reversals\" list");
  std::vector<Reversal> reversals;
  for (const json& item : *list) {
    IDEM_ASSIGN_OR_RETURN(Reversal reversal, ParseReversal(item, kWhat));
    reversals.push_back(std::move(reversal));
  }
  return reversals;
}

absl::StatusOr<std::vector<Reversal>> ChannelClient::Lookup(std::string_view request_id) const {
  return List("request_id", request_id);
}

absl::StatusOr<std::vector<Reversal>> ChannelClient::LookupOrder(std::string_view order_no) const {
  return List("order_no", order_no);
}

absl::StatusOr<int> ChannelClient::Cancel(std::string_view request_id) const {
  constexpr std::string_view kWhat = "POST /reversals/cancel";
  const std::string context = Context("request_id", request_id);
  const json body{{"request_id", std::string(request_id)}};
  IDEM_ASSIGN_OR_RETURN(Reply reply, Call(true, "/reversals/cancel", DumpJson(body), kWhat, context));
  if (reply.status != 200) return StatusFromReply(reply.status, reply.body, kWhat, context);
  IDEM_ASSIGN_OR_RETURN(json j, ParseReply(reply.body, kWhat));
  IDEM_ASSIGN_OR_RETURN(int64_t cancelled, IntField(j, "cancelled", kWhat));
  return static_cast<int>(cancelled);
}

absl::StatusOr<ChannelStats> ChannelClient::Stats() const {
  constexpr std::string_view kWhat = "GET /stats";
  IDEM_ASSIGN_OR_RETURN(Reply reply, Call(false, "/stats", "", kWhat, ""));
  if (reply.status != 200) return StatusFromReply(reply.status, reply.body, kWhat, "");
  IDEM_ASSIGN_OR_RETURN(json j, ParseReply(reply.body, kWhat));
  ChannelStats stats;
  IDEM_ASSIGN_OR_RETURN(stats.reversals, IntField(j, "reversals", kWhat));
  IDEM_ASSIGN_OR_RETURN(stats.cancelled, IntField(j, "cancelled", kWhat));
  auto by_order = j.find("by_order");
  auto faults = j.find("faults");
  if (by_order == j.end() || !by_order->is_object() || faults == j.end() || !faults->is_object()) {
    return Malformed(kWhat, "no \"by_order\" or \"faults\" object");
  }
  for (const auto& [order_no, active] : by_order->items()) {
    if (!active.is_number_integer()) return Malformed(kWhat, "a by_order count is not an integer");
    stats.by_order[order_no] = active.get<int64_t>();
  }
  IDEM_ASSIGN_OR_RETURN(stats.timeout_faults, IntField(*faults, "timeout", kWhat));
  IDEM_ASSIGN_OR_RETURN(stats.lost_faults, IntField(*faults, "lost", kWhat));
  IDEM_ASSIGN_OR_RETURN(stats.busy_faults, IntField(*faults, "busy", kWhat));
  return stats;
}

}  // namespace idem::refund
