#include "chaos/history.h"

#include <utility>

#include "nlohmann/json.hpp"

namespace idem::chaos {

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kClaim:
      return "claim";
    case OpKind::kComplete:
      return "complete";
    case OpKind::kFail:
      return "fail";
    case OpKind::kReplay:
      return "replay";
  }
  return "?";
}

void FillAnswer(Operation* op, int status, std::string_view body,
                std::string_view transport_error) {
  op->body = std::string(body);
  if (!transport_error.empty()) {
    op->status = 0;
    op->error = std::string(transport_error);
    return;
  }
  op->status = status;
  op->error.clear();
  // The answer is the server's: a body that does not parse is recorded as is and
  // judged by the checker (no outcome), never thrown.
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  if (auto it = j.find("outcome"); it != j.end() && it->is_string()) {
    op->error = it->get<std::string>();
  }
  if (op->kind == OpKind::kClaim && status == 201) {
    if (auto it = j.find("token"); it != j.end() && it->is_number_integer()) {
      op->token = it->get<int64_t>();
    }
    if (auto it = j.find("takeover"); it != j.end() && it->is_boolean()) {
      op->takeover = it->get<bool>();
    }
    if (auto it = j.find("previous_token"); it != j.end() && it->is_number_integer()) {
      op->previous_token = it->get<int64_t>();
    }
  }
}

namespace {

void SkipSpace(std::string_view s, size_t* i) {
  while (*i < s.size() && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == '\n' || s[*i] == '\r')) ++*i;
}

// Moves *i past the JSON string that starts at s[*i] ('"'); false if unterminated.
bool SkipString(std::string_view s, size_t* i) {
  for (++*i; *i < s.size(); ++*i) {
    if (s[*i] == '\\') {
      ++*i;
    } else if (s[*i] == '"') {
      ++*i;
      return true;
    }
  }
  return false;
}

// Moves *i past the JSON value at s[*i]: strings are skipped whole, nesting is
// counted; scalars end at the next ',', '}' or ']' of this level.
bool SkipValue(std::string_view s, size_t* i) {
  int depth = 0;
  while (*i < s.size()) {
    const char c = s[*i];
    if (c == '"') {
      if (!SkipString(s, i)) return false;
      if (depth == 0) return true;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return true;  // the end of the enclosing object: a scalar ended
      if (--depth == 0) {
        ++*i;
        return true;
      }
    } else if (c == ',' && depth == 0) {
      return true;
    }
    ++*i;
  }
  return depth == 0;
}

}  // namespace

std::string RawMember(std::string_view json, std::string_view name) {
  size_t i = 0;
  SkipSpace(json, &i);
  if (i >= json.size() || json[i] != '{') return "";
  ++i;
  while (true) {
    SkipSpace(json, &i);
    if (i >= json.size() || json[i] != '"') return "";
    const size_t name_start = i + 1;
    if (!SkipString(json, &i)) return "";
    const std::string_view member = json.substr(name_start, i - 1 - name_start);
    SkipSpace(json, &i);
    if (i >= json.size() || json[i] != ':') return "";
    ++i;
    SkipSpace(json, &i);
    const size_t value_start = i;
    if (!SkipValue(json, &i)) return "";
    size_t value_end = i;
    while (value_end > value_start && (json[value_end - 1] == ' ' || json[value_end - 1] == '\n' ||
                                       json[value_end - 1] == '\t' || json[value_end - 1] == '\r')) {
      --value_end;
    }
    if (member == name) return std::string(json.substr(value_start, value_end - value_start));
    SkipSpace(json, &i);
    if (i >= json.size() || json[i] != ',') return "";
    ++i;
  }
}

std::string FormatOperation(const Operation& op, Clock::time_point t0) {
  const auto ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - t0).count();
  };
  std::string s = "+" + std::to_string(ms(op.invoke)) + "..+" + std::to_string(ms(op.complete)) +
                  "ms client " + std::to_string(op.client) + " " + std::string(OpKindName(op.kind)) +
                  " " + op.key + " token " + std::to_string(op.token) +
                  (op.takeover ? " takeover" : "") + " -> " + std::to_string(op.status) + " " +
                  op.error + " " + op.body;
  if (!op.result.empty()) s += " result " + op.result;
  return s;
}

void History::Record(Operation op) {
  std::lock_guard<std::mutex> lock(mu_);
  ops_.push_back(std::move(op));
}

std::vector<Operation> History::Operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

size_t History::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_.size();
}

}  // namespace idem::chaos
