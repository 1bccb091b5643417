// The record routes of Api, and how records are shown (records.h).
//
// GET /v1/records/{biz_type}/{key}: one of the caller's records, its result or
// error as stored; 410 expired once only its tombstone is left.
//
// GET /v1/records?biz_type=&state=&limit=&cursor=: a page of the caller's
// records, for finding keys (one at a time is GET /v1/records/{biz_type}/{key}).
//
// Only the caller's tenant is ever read (the tenant is the query's, never a
// parameter). Records are listed without their result or error; tombstones and
// released keys are left out, as GET of one key hides them. The cursor is opaque
// to clients: the last key of the page, base64url, which the next page starts
// after, so a page never skips or repeats a record that stays.
#include "http/api/records.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/absl_compat.h"
#include "http/api/api.h"
#include "http/api/json.h"
#include "http/server/problem.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace idem::http {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kDefaultLimit = 100;
constexpr int kMaxLimit = 1000;

Reply Page(HttpResponse response) {
  Reply r;
  r.response = std::move(response);
  r.route = Route::kRecords;
  return r;
}

Reply Bad(std::string_view detail) {
  return Page(MakeProblem(400, "invalid_request", "Invalid request", detail));
}

ojson TimeOrNull(absl::Time t) {
  std::string s = FormatRfc3339(t);
  return s.empty() ? ojson(nullptr) : ojson(s);
}

Reply RecordReply(HttpResponse response) {
  Reply r;
  r.response = std::move(response);
  r.route = Route::kRecord;
  return r;
}

Reply BadRecordPath(const absl::Status& status) {
  return RecordReply(MakeProblem(400, "invalid_request", "Invalid request", SV(status.message())));
}

absl::StatusOr<RecordState> ParseState(std::string_view s) {
  for (RecordState state :
       {RecordState::kProcessing, RecordState::kSucceeded, RecordState::kFailed}) {
    if (RecordStateName(state) == s) return state;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("query parameter state='", AV(s), "' must be PROCESSING, SUCCEEDED or FAILED"));
}

}  // namespace

ojson RecordJson(const Record& rec) {
  ojson j = ojson::object();
  j["biz_type"] = rec.biz_type;
  j["key"] = rec.key;
  j["state"] = std::string(RecordStateName(rec.state));
  j["token"] = rec.token;
  j["lease_until"] = TimeOrNull(rec.lease_until);
  j["fingerprint"] = rec.fingerprint.empty() ? ojson(nullptr) : ojson(rec.fingerprint);
  j["created_at"] = TimeOrNull(rec.created_at);
  j["updated_at"] = TimeOrNull(rec.updated_at);
  j["expires_at"] = TimeOrNull(rec.expires_at);
  return j;
}

HttpResponse ExpiredProblem(absl::Time purged_at, absl::Time tombstone_until) {
  Problem p;
  p.status = 410;
  p.slug = "expired";
  p.title = "Expired";
  p.detail = absl::StrCat(
      "the key's record was purged after its retention; its tombstone remembers the "
      "key, so this very late request is not run again");
  p.outcome = "expired";
  p.extra["purged_at"] = TimeOrNull(purged_at);
  p.extra["tombstone_until"] = TimeOrNull(tombstone_until);
  return ProblemResponse(p);
}

std::string SpliceMember(std::string object, std::string_view name, std::string_view value) {
  object.pop_back();
  if (object.size() > 1) object += ',';
  AppendJsonString(&object, name);
  object += ':';
  AppendRawJsonOrString(&object, value);
  object += '}';
  return object;
}

Reply Api::GetRecord(std::string_view biz_type_enc, std::string_view key_enc,
                     const std::string& tenant) {
  absl::StatusOr<std::string> biz_type = PercentDecode(biz_type_enc);
  if (!biz_type.ok()) return BadRecordPath(biz_type.status());
  absl::StatusOr<std::string> key = PercentDecode(key_enc);
  if (!key.ok()) return BadRecordPath(key.status());
  for (const auto& [name, value] :
       {std::pair<std::string_view, const std::string*>{"biz_type", &*biz_type}, {"key", &*key}}) {
    if (value->find('\0') != std::string::npos ||
        simdjson::validate_utf8(value->data(), value->size()) == false) {
      return BadRecordPath(absl::InvalidArgumentError(
          absl::StrCat("path segment ", AV(name), " must be UTF-8 without NUL once decoded")));
    }
  }
  if (absl::Status s = ValidateIds(*biz_type, *key); !s.ok()) return BadRecordPath(s);

  Request req;
  req.tenant = tenant;
  req.biz_type = std::move(*biz_type);
  req.key = std::move(*key);
  absl::StatusOr<Record> rec = guard_.Get(req);
  if (!rec.ok()) {
    Reply r = StatusReply(rec.status(), "get record");
    r.route = Route::kRecord;
    r.outcome.clear();  // a read reports no guard outcome
    return r;
  }
  // Only the tombstone is left: the record is gone, as a late claim is told.
  if (rec->purged()) return RecordReply(ExpiredProblem(rec->purged_at, rec->expires_at));
  std::string body = RecordJson(*rec).dump(-1, ' ', false, ojson::error_handler_t::replace);
  if (rec->state == RecordState::kSucceeded) {
    body = SpliceMember(std::move(body), "result", rec->result);
  } else if (rec->state == RecordState::kFailed) {
    body = SpliceMember(std::move(body), "error", rec->error);
  }
  HttpResponse r;
  r.body = std::move(body);
  return RecordReply(std::move(r));
}

Reply Api::ListRecords(std::string_view params, const std::string& tenant) {
  RecordQuery query;
  query.tenant = tenant;
  query.purged = false;
  query.states = {RecordState::kProcessing, RecordState::kSucceeded, RecordState::kFailed};
  query.limit = kDefaultLimit;
  bool seen[4] = {false, false, false, false};
  for (absl::string_view item : absl::StrSplit(AV(params), '&', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    const std::string_view name = SV(item.substr(0, eq));
    absl::StatusOr<std::string> value =
        PercentDecode(eq == absl::string_view::npos ? std::string_view() : SV(item.substr(eq + 1)));
    if (!value.ok())
      return Bad(absl::StrCat("query parameter ", AV(name), ": ", value.status().message()));
    int which = name == "biz_type" ? 0
                : name == "state"  ? 1
                : name == "limit"  ? 2
                : name == "cursor" ? 3
                                   : -1;
    if (which < 0) {
      return Bad(absl::StrCat("unknown query parameter '", AV(name),
                              "'; use biz_type, state, limit and cursor"));
    }
    if (seen[which]) return Bad(absl::StrCat("query parameter ", AV(name), " is given twice"));
    seen[which] = true;
    if (value->empty()) continue;  // "biz_type=": no filter
    switch (which) {
      case 0:
        if (value->find('\0') != std::string::npos ||
            !simdjson::validate_utf8(value->data(), value->size())) {
          return Bad("query parameter biz_type must be UTF-8 without NUL once decoded");
        }
        if (absl::Status s = ValidateBizType(*value, guard_.options().limits); !s.ok()) {
          return Bad(absl::StrCat("query parameter biz_type: ", s.message()));
        }
        query.biz_type = *std::move(value);
        break;
      case 1: {
        absl::StatusOr<RecordState> state = ParseState(*value);
        if (!state.ok()) return Bad(SV(state.status().message()));
        query.states = {*state};
        break;
      }
      case 2:
        if (!absl::SimpleAtoi(*value, &query.limit) || query.limit < 1 || query.limit > kMaxLimit ||
            value->find_first_not_of("0123456789") != std::string::npos) {
          return Bad(absl::StrCat("query parameter limit must be 1 … ", kMaxLimit));
        }
        break;
      case 3: {
        std::string key;
        if (!absl::WebSafeBase64Unescape(*value, &key) || key.empty() ||
            !ValidateKey(key, guard_.options().limits).ok()) {
          return Bad("query parameter cursor is not one this server gave (pass next_cursor as is)");
        }
        query.after = std::make_pair(tenant, std::move(key));
        break;
      }
    }
  }
  // One more than the page: whether another page follows, without a second read.
  const int limit = query.limit;
  query.limit = limit + 1;
  absl::StatusOr<std::vector<Record>> records = store_.ListRecords(query);
  if (!records.ok()) {
    Reply r = StatusReply(records.status(), "list records");
    r.route = Route::kRecords;
    r.outcome.clear();  // a read reports no guard outcome
    return r;
  }
  const bool more = static_cast<int>(records->size()) > limit;
  if (more) records->resize(limit);
  ojson page = ojson::object();
  page["records"] = ojson::array();
  for (const Record& r : *records) page["records"].push_back(RecordJson(r));
  if (more) {
    page["next_cursor"] = absl::WebSafeBase64Escape(records->back().key);
  } else {
    page["next_cursor"] = nullptr;
  }
  HttpResponse response;
  response.body = page.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return Page(std::move(response));
}

}  // namespace idem::http
