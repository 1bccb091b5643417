#include "chaos/checker.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace idem::chaos {
namespace {

// Everything the history says about one key.
struct KeyOps {
  std::map<int64_t, const Operation*> grants;  // token → the claim answered 201
  std::vector<const Operation*> completes;
  std::vector<const Operation*> fails;
  const Operation* final_read = nullptr;  // the last kReplay
};

class Violations {
 public:
  explicit Violations(std::string_view property) { r_.property = std::string(property); }
  void Checked(int64_t n = 1) { r_.checked += n; }
  void Add(std::string example) {
    if (r_.violations++ == 0) r_.first_example = std::move(example);
  }
  PropertyResult Take() { return std::move(r_); }

 private:
  PropertyResult r_;
};

class Checker {
 public:
  Checker(const std::vector<Operation>& history, const std::vector<Effect>& effects)
      : history_(history), effects_(effects) {
    if (!history.empty()) {
      t0_ = history.front().invoke;
      for (const Operation& op : history) t0_ = std::min(t0_, op.invoke);
    }
    for (const Operation& op : history) {
      KeyOps& k = keys_[op.key];
      switch (op.kind) {
        case OpKind::kClaim:
          if (op.status == 201 && op.token > 0) k.grants[op.token] = &op;
          break;
        case OpKind::kComplete:
          k.completes.push_back(&op);
          break;
        case OpKind::kFail:
          k.fails.push_back(&op);
          break;
        case OpKind::kReplay:
          k.final_read = &op;  // the history is in record order: the last one wins
          break;
      }
    }
  }

  Report Run() {
    Report r;
    r.properties.push_back(SingleHolder());
    r.properties.push_back(Durable());
    r.properties.push_back(OneResult());
    r.properties.push_back(AllowedErrors());
    r.properties.push_back(Converged());
    return r;
  }

 private:
  int64_t Ms(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - t0_).count();
  }

  std::string Describe(const Operation& op) const {
    std::string s = absl::StrCat(std::string(OpKindName(op.kind)), " by client ", op.client, " at +",
                                 Ms(op.invoke), "ms answered ", op.status);
    if (!op.error.empty()) absl::StrAppend(&s, " ", op.error);
    return s;
  }

  // A retryable fail of `token` sent before `before`: the holder let the key go.
  bool Released(const KeyOps& k, int64_t token, Clock::time_point before) const {
    return std::any_of(k.fails.begin(), k.fails.end(), [&](const Operation* f) {
      return f->token == token && f->retryable && f->invoke < before;
    });
  }

  PropertyResult SingleHolder() const {
    Violations v(kSingleHolder);
    std::map<std::string, std::map<int64_t, const Effect*>> by_key;  // key → token → effect
    for (const Effect& e : effects_) {
      v.Checked();
      auto it = keys_.find(e.key);
      const Operation* grant = nullptr;
      if (it != keys_.end()) {
        auto g = it->second.grants.find(e.token);
        if (g != it->second.grants.end()) grant = g->second;
      }
      if (grant == nullptr) {
        v.Add(absl::StrCat("key ", e.key, ": effect by client ", e.client, " under token ",
                           e.token, ", which no claim granted"));
        continue;
      }
      if (grant->client != e.client) {
        v.Add(absl::StrCat("key ", e.key, ": token ", e.token, " was granted to client ",
                           grant->client, " but client ", e.client, " performed the effect"));
        continue;
      }
      auto [pos, inserted] = by_key[e.key].emplace(e.token, &e);
      if (!inserted) {
        v.Add(absl::StrCat("key ", e.key, ": effect performed twice under token ", e.token,
                           " (+", Ms(pos->second->at), "ms and +", Ms(e.at), "ms)"));
      }
    }
    for (const auto& [key, tokens] : by_key) {
      const KeyOps& k = keys_.at(key);
      const Operation* prev = nullptr;
      int64_t prev_token = 0;
      for (const auto& [token, effect] : tokens) {
        const Operation* grant = k.grants.at(token);
        if (prev != nullptr && !Released(k, prev_token, grant->complete)) {
          const auto live_until = prev->invoke + std::chrono::milliseconds(prev->lease_ms);
          if (!grant->takeover) {
            v.Add(absl::StrCat("key ", key, ": token ", token, " (client ", grant->client,
                               ") was granted without a takeover after token ", prev_token,
                               " (client ", prev->client, ") had performed the effect"));
          } else if (grant->complete < live_until) {
            v.Add(absl::StrCat("key ", key, ": token ", token, " taken over at +",
                               Ms(grant->complete), "ms while token ", prev_token,
                               "'s lease was live until at least +", Ms(live_until), "ms"));
          }
        }
        prev = grant;
        prev_token = token;
      }
    }
    // Fencing: a complete is accepted only from the current holder. Once a newer
    // token was granted, the older one's record cannot have succeeded (else there
    // would have been nothing to grant), so its complete must lose.
    for (const auto& [key, k] : keys_) {
      for (const Operation* c : k.completes) {
        if (c->status != 200) continue;
        v.Checked();
        auto newer = k.grants.upper_bound(c->token);
        for (; newer != k.grants.end(); ++newer) {
          if (newer->second->complete < c->invoke) break;
        }
        if (newer != k.grants.end()) {
          v.Add(absl::StrCat("key ", key, ": stale token accepted: complete(token ", c->token,
                             ") by client ", c->client, " at +", Ms(c->invoke),
                             "ms answered 200 after token ", newer->first, " was granted to client ",
                             newer->second->client, " at +", Ms(newer->second->complete), "ms"));
        }
      }
    }
    return v.Take();
  }

  PropertyResult Durable() const {
    Violations v(kDurable);
    for (const auto& [key, k] : keys_) {
      for (const Operation* c : k.completes) {
        if (c->status != 200) continue;
        v.Checked();
        const Operation* f = k.final_read;
        const std::string head = absl::StrCat("key ", key, ": complete(token ", c->token,
                                              ") by client ", c->client, " at +", Ms(c->invoke),
                                              "ms answered 200");
        if (f == nullptr) {
          v.Add(absl::StrCat(head, ", but the key had no final read"));
        } else if (f->status != 200 || f->error != "replayed") {
          v.Add(absl::StrCat(head, ", but the final read answered ", f->status, " ", f->error));
        } else if (RawMember(f->body, "result") != c->result) {
          v.Add(absl::StrCat(head, " with ", c->result, ", but the final read replays ",
                             RawMember(f->body, "result")));
        }
      }
    }
    return v.Take();
  }

  PropertyResult OneResult() const {
    Violations v(kOneResult);
    for (const auto& [key, k] : keys_) {
      std::map<std::string, const Operation*> acked;  // result → first 200 complete
      std::set<std::string> sent;
      for (const Operation* c : k.completes) {
        sent.insert(c->result);
        if (c->status == 200) acked.emplace(c->result, c);
      }
      const bool replayed =
          k.final_read != nullptr && k.final_read->status == 200 && k.final_read->error == "replayed";
      if (acked.empty() && !replayed) continue;
      v.Checked();
      if (acked.size() > 1) {
        auto a = acked.begin(), b = std::next(a);
        v.Add(absl::StrCat("key ", key, ": two completes answered 200 with different results: ",
                           a->first, " (token ", a->second->token, ", client ",
                           a->second->client, ") and ", b->first, " (token ", b->second->token,
                           ", client ", b->second->client, ")"));
      } else if (replayed && !sent.contains(RawMember(k.final_read->body, "result"))) {
        v.Add(absl::StrCat("key ", key, ": the final read replays ",
                           RawMember(k.final_read->body, "result"),
                           ", a result no client sent"));
      }
    }
    return v.Take();
  }

  static bool Allowed(const Operation& op) {
    if (op.status == 0 || op.status == 503) return true;  // no answer / store unavailable
    switch (op.kind) {
      case OpKind::kClaim:
      case OpKind::kReplay:
        return op.status == 201 ||
               (op.status == 200 && (op.error == "replayed" || op.error == "cached_failure")) ||
               (op.status == 409 && op.error == "in_progress");
      case OpKind::kComplete:
      case OpKind::kFail:
        return op.status == 200 || (op.status == 409 && op.error == "lease_lost");
    }
    return false;
  }

  PropertyResult AllowedErrors() const {
    Violations v(kAllowedErrors);
    for (const Operation& op : history_) {
      v.Checked();
      if (!Allowed(op)) {
        std::string body = op.body.substr(0, 200);
        absl::StrReplaceAll({{"|", "\\|"}, {"\n", " "}}, &body);
        v.Add(absl::StrCat("key ", op.key, ": ", Describe(op), ": ", body));
      }
    }
    return v.Take();
  }

  PropertyResult Converged() const {
    Violations v(kConverged);
    for (const auto& [key, k] : keys_) {
      v.Checked();
      const Operation* f = k.final_read;
      if (f == nullptr) {
        v.Add(absl::StrCat("key ", key, ": no final read"));
      } else if (f->status != 200 || (f->error != "replayed" && f->error != "cached_failure")) {
        v.Add(absl::StrCat("key ", key, ": final ", Describe(*f)));
      }
    }
    return v.Take();
  }

  const std::vector<Operation>& history_;
  const std::vector<Effect>& effects_;
  Clock::time_point t0_{};
  std::map<std::string, KeyOps> keys_;
};

}  // namespace

bool Report::ok() const { return violations() == 0; }

int64_t Report::violations() const {
  int64_t n = 0;
  for (const PropertyResult& p : properties) n += p.violations;
  return n;
}

const PropertyResult& Report::Get(std::string_view property) const {
  for (const PropertyResult& p : properties) {
    if (p.property == property) return p;
  }
  assert(false && "unknown property");
  return properties.front();
}

std::string Report::Table() const {
  std::string out = "| property | checked | violations | first example |\n|---|---:|---:|---|\n";
  for (const PropertyResult& p : properties) {
    absl::StrAppend(&out, "| ", p.property, " | ", p.checked, " | ", p.violations, " | ",
                    p.first_example.empty() ? "-" : p.first_example, " |\n");
  }
  return out;
}

Report Check(const std::vector<Operation>& history, const std::vector<Effect>& effects) {
  return Checker(history, effects).Run();
}

}  // namespace idem::chaos
