// GET /v1/keys/mismatches (docs/keys.md): the caller's keys that this server answered
// 422 fingerprint_mismatch, from its KeyHealthTracker. The stores keep one
// fingerprint per key, so these over-coarse keys (one key for several requests) are
// known only to the server that refused them, since it started and as far as its
// bounded table remembers. `idem keys analyze --server` reads them.
//
// Only the caller's tenant is ever shown, as GET /v1/records does.
#include <string>
#include <utility>

#include "http/api/api.h"
#include "http/api/json.h"
#include "http/server/problem.h"
#include "nlohmann/json.hpp"

namespace idem::http {

Reply Api::KeyMismatches(bool has_query, const std::string& tenant) {
  using ojson = nlohmann::ordered_json;
  if (has_query) {
    Reply bad;
    bad.response = MakeProblem(400, "invalid_request", "Invalid request",
                               "/v1/keys/mismatches takes no query parameters");
    bad.route = Route::kKeyMismatches;
    return bad;
  }
  ojson keys = ojson::array();
  for (const http::KeyMismatches& k : key_health_.Mismatches(tenant)) {
    ojson j = ojson::object();
    j["biz_type"] = k.biz_type;
    j["key"] = k.key;
    j["fingerprints"] = k.fingerprints;
    j["mismatches"] = k.mismatches;
    j["first_mismatch_at"] = FormatRfc3339(k.first_at);
    j["last_mismatch_at"] = FormatRfc3339(k.last_at);
    keys.push_back(std::move(j));
  }
  ojson page = ojson::object();
  page["tenant"] = tenant;
  page["keys"] = std::move(keys);
  Reply r;
  r.response.body = page.dump(-1, ' ', false, ojson::error_handler_t::replace);
  r.route = Route::kKeyMismatches;
  return r;
}

}  // namespace idem::http
