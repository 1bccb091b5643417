#include "refund/channel_book.h"

#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace idem::refund {
namespace {

using json = nlohmann::json;

ChannelReply Answer(int status, const json& body, ChannelFault fault = ChannelFault::kNone) {
  return ChannelReply{status, DumpJson(body), fault};
}

ChannelReply BadRequest(const absl::Status& status) {
  return ChannelReply::Error(400, std::string(status.message()));
}

json ToJson(const Reversal& r) {
  return json{{"id", r.id},
              {"request_id", r.request_id},
              {"order_no", r.order_no},
              {"amount", r.amount},
              {"cancelled", r.cancelled}};
}

absl::StatusOr<json> ParseObject(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  return j;
}

absl::StatusOr<std::string> StringField(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end())
    return absl::InvalidArgumentError(absl::StrCat("missing field \"", name, "\""));
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"", name, "\" must be a non-empty string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<int64_t> AmountField(const json& object) {
  auto it = object.find("amount");
  if (it == object.end()) return absl::InvalidArgumentError("missing field \"amount\"");
  const bool fits = it->is_number_integer() &&
                    (!it->is_number_unsigned() ||
                     it->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()});
  if (!fits || it->get<int64_t>() <= 0) {
    return absl::InvalidArgumentError("field \"amount\" must be a positive integer (cents)");
  }
  return it->get<int64_t>();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] != '%') {
      out += in[i];
    } else if (i + 2 < in.size() && HexValue(in[i + 1]) >= 0 && HexValue(in[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2]));
      i += 2;
    } else {
      return absl::InvalidArgumentError("malformed percent-encoding in the query");
    }
  }
  return out;
}

// "a=1&b=2" -> {a:1, b:2}; only request_id and order_no are known.
absl::StatusOr<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> params;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    IDEM_ASSIGN_OR_RETURN(std::string name, PercentDecode(pair.substr(0, eq)));
    IDEM_ASSIGN_OR_RETURN(
        std::string value,
        PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1)));
    if (name != "request_id" && name != "order_no") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown query parameter \"", name, "\" (request_id, order_no)"));
    }
    params[name] = std::move(value);
  }
  return params;
}

}  // namespace

ChannelReply ChannelReply::Error(int status, std::string message) {
  return ChannelReply{status, DumpJson(json{{"error", std::move(message)}})};
}

ChannelBook::ChannelBook(double fault_rate, uint64_t seed) : fault_rate_(fault_rate), rng_(seed) {}

ChannelReply ChannelBook::Handle(std::string_view method, std::string_view target,
                                 const std::string& body) {
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query =
      q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  const bool get = method == "GET";
  const bool post = method == "POST";
  if (path == "/reversals") {
    if (post) return Create(body);
    if (get) return List(query);
  } else if (path == "/reversals/cancel") {
    if (post) return Cancel(body);
  } else if (path == "/stats") {
    if (get) return Stats();
  } else if (path == "/healthz") {
    if (get) return Answer(200, json{{"ok", true}});
  } else {
    return ChannelReply::Error(404, absl::StrCat("no route ", std::string(path)));
  }
  return ChannelReply::Error(
      405, absl::StrCat("method ", std::string(method), " not allowed on ", std::string(path)));
}

// The top 53 bits: unlike std::uniform_real_distribution, the same on every
// standard library.
double ChannelBook::Draw() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

ChannelReply ChannelBook::Create(const std::string& body) {
  absl::StatusOr<json> request = ParseObject(body);
  if (!request.ok()) return BadRequest(request.status());
  absl::StatusOr<std::string> request_id = StringField(*request, "request_id");
  if (!request_id.ok()) return BadRequest(request_id.status());
  absl::StatusOr<std::string> order_no = StringField(*request, "order_no");
  if (!order_no.ok()) return BadRequest(order_no.status());
  absl::StatusOr<int64_t> amount = AmountField(*request);
  if (!amount.ok()) return BadRequest(amount.status());

  absl::MutexLock lock(&mu_);
  ChannelFault fault = ChannelFault::kNone;
  if (fault_rate_ > 0) {
    if (Draw() < fault_rate_ / 4) {
      ++busy_faults_;
      spdlog::info("fault busy: 503 for request_id={}, nothing recorded", *request_id);
      return ChannelReply::Error(503, "channel busy");
    }
    const double u = Draw();
    if (u < fault_rate_ / 2) {
      fault = ChannelFault::kTimeout;
    } else if (u < fault_rate_) {
      fault = ChannelFault::kLost;
    }
  }
  Reversal r{absl::StrCat("rv-", reversals_.size() + 1), *std::move(request_id),
             *std::move(order_no), *amount, false};
  if (fault == ChannelFault::kTimeout) {
    ++timeout_faults_;
    spdlog::info("fault timeout: {} recorded for request_id={}, answer held back", r.id,
                 r.request_id);
  } else if (fault == ChannelFault::kLost) {
    ++lost_faults_;
    spdlog::info("fault lost: {} recorded for request_id={}, connection dropped", r.id,
                 r.request_id);
  } else {
    spdlog::debug("reversal {} for request_id={}", r.id, r.request_id);
  }
  ChannelReply reply = Answer(201, ToJson(r), fault);
  reversals_.push_back(std::move(r));
  return reply;
}

ChannelReply ChannelBook::List(std::string_view query) {
  absl::StatusOr<std::map<std::string, std::string>> params = ParseQuery(query);
  if (!params.ok()) return BadRequest(params.status());
  auto request_id = params->find("request_id");
  auto order_no = params->find("order_no");
  json list = json::array();
  absl::MutexLock lock(&mu_);
  for (const Reversal& r : reversals_) {
    if (request_id != params->end() && r.request_id != request_id->second) continue;
    if (order_no != params->end() && r.order_no != order_no->second) continue;
    list.push_back(ToJson(r));
  }
  return Answer(200, json{{"reversals", std::move(list)}});
}

ChannelReply ChannelBook::Cancel(const std::string& body) {
  absl::StatusOr<json> request = ParseObject(body);
  if (!request.ok()) return BadRequest(request.status());
  absl::StatusOr<std::string> request_id = StringField(*request, "request_id");
  if (!request_id.ok()) return BadRequest(request_id.status());
  int cancelled = 0;
  absl::MutexLock lock(&mu_);
  for (Reversal& r : reversals_) {
    if (r.request_id == *request_id && !r.cancelled) {
      r.cancelled = true;
      ++cancelled;
    }
  }
  spdlog::info("cancel request_id={}: {} reversal(s) cancelled", *request_id, cancelled);
  return Answer(200, json{{"cancelled", cancelled}});
}

ChannelReply ChannelBook::Stats() {
  absl::MutexLock lock(&mu_);
  int64_t cancelled = 0;
  json by_order = json::object();
  for (const Reversal& r : reversals_) {
    json& active = by_order[r.order_no];
    if (active.is_null()) active = 0;
    if (r.cancelled) {
      ++cancelled;
    } else {
      active = active.get<int64_t>() + 1;
    }
  }
  return Answer(
      200, json{{"reversals", reversals_.size()},
                {"cancelled", cancelled},
                {"by_order", std::move(by_order)},
                {"faults",
                 {{"timeout", timeout_faults_}, {"lost", lost_faults_}, {"busy", busy_faults_}}}});
}

}  // namespace idem::refund
