#include "store/cache/record_codec.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace idem::cache {
namespace {

// Bumped whenever the layout changes; old entries then decode as misses.
constexpr uint8_t kVersion = 1;

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutBytes(std::string& out, std::string_view s) {
  PutU64(out, s.size());
  out.append(s);
}

// Infinite times have no Unix value; they map to the ends of the int64 range.
int64_t TimeToInt(absl::Time t) {
  if (t == absl::InfinitePast()) return std::numeric_limits<int64_t>::min();
  if (t == absl::InfiniteFuture()) return std::numeric_limits<int64_t>::max();
  return absl::ToUnixMicros(t);
}

absl::Time IntToTime(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min()) return absl::InfinitePast();
  if (v == std::numeric_limits<int64_t>::max()) return absl::InfiniteFuture();
  return absl::FromUnixMicros(v);
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t& v) {
    if (in_.empty()) return false;
    v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U64(uint64_t& v) {
    if (in_.size() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
    in_.remove_prefix(8);
    return true;
  }
  bool Bytes(std::string& s) {
    uint64_t n = 0;
    if (!U64(n) || n > in_.size()) return false;
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Time(absl::Time& t) {
    uint64_t v = 0;
    if (!U64(v)) return false;
    t = IntToTime(static_cast<int64_t>(v));
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string CacheKey(std::string_view tenant, std::string_view key) {
  return absl::StrCat(tenant.size(), ":", AV(tenant), AV(key));
}

std::string EncodeRecord(const Record& r) {
  std::string out;
  out.reserve(64 + r.tenant.size() + r.biz_type.size() + r.key.size() + r.fingerprint.size() +
              r.result.size() + r.error.size());
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(static_cast<int>(r.state)));
  PutU64(out, static_cast<uint64_t>(r.token));
  PutU64(out, static_cast<uint64_t>(TimeToInt(r.lease_until)));
  PutU64(out, static_cast<uint64_t>(TimeToInt(r.created_at)));
  PutU64(out, static_cast<uint64_t>(TimeToInt(r.updated_at)));
  for (const std::string* s :
       {&r.tenant, &r.biz_type, &r.key, &r.fingerprint, &r.result, &r.error}) {
    PutBytes(out, *s);
  }
  return out;
}

std::optional<Record> DecodeRecord(std::string_view bytes) {
  Reader in(bytes);
  Record r;
  uint8_t version = 0, state = 0;
  uint64_t token = 0;
  if (!in.U8(version) || version != kVersion || !in.U8(state) ||
      state > static_cast<uint8_t>(RecordState::kReleased) || !in.U64(token) ||
      !in.Time(r.lease_until) || !in.Time(r.created_at) || !in.Time(r.updated_at)) {
    return std::nullopt;
  }
  r.state = static_cast<RecordState>(state);
  r.token = static_cast<int64_t>(token);
  for (std::string* s : {&r.tenant, &r.biz_type, &r.key, &r.fingerprint, &r.result, &r.error}) {
    if (!in.Bytes(*s)) return std::nullopt;
  }
  if (!in.done()) return std::nullopt;
  return r;
}

}  // namespace idem::cache
