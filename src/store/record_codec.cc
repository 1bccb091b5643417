#include "store/record_codec.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"

namespace idem::store {
namespace {

constexpr uint8_t kVersion = kRecordFormatVersion;
// The first format, without expires_at and purged_at; still read.
constexpr uint8_t kVersionWithoutRetention = 1;

// Writes `v` little-endian at `*at` and moves past it (into a string sized for
// the whole record first: byte by byte push_backs cost a new key ~1,500
// instructions, callgrind).
void PutU64(char*& at, uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(at, &v, sizeof v);
    at += sizeof v;
  } else {
    for (int i = 0; i < 8; ++i) *at++ = static_cast<char>((v >> (8 * i)) & 0xff);
  }
}

void PutBytes(char*& at, std::string_view s) {
  PutU64(at, s.size());
  if (!s.empty()) std::memcpy(at, s.data(), s.size());
  at += s.size();
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

void AppendRecordKey(std::string& out, std::string_view tenant, std::string_view key) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), tenant.size());
  (void)ec;  // 24 digits hold any size_t
  out.reserve(out.size() + (end - digits) + 1 + tenant.size() + key.size());
  out.append(digits, end);
  out.push_back(':');
  out.append(tenant);
  out.append(key);
}

std::string RecordKey(std::string_view tenant, std::string_view key) {
  std::string out;
  AppendRecordKey(out, tenant, key);
  return out;
}

std::string EncodeRecord(const Record& r) {
  std::string out;
  EncodeRecordInto(out, r);
  return out;
}

void EncodeRecordInto(std::string& out, const Record& r) {
  const std::initializer_list<const std::string*> bytes = {&r.tenant, &r.biz_type, &r.key,
                                                           &r.fingerprint, &r.result, &r.error};
  // The version and state, six times, then each of the bytes after its length.
  size_t size = 2 + 6 * 8;
  for (const std::string* s : bytes) size += 8 + s->size();
  out.resize(size);
  char* at = out.data();
  *at++ = static_cast<char>(kVersion);
  *at++ = static_cast<char>(static_cast<int>(r.state));
  PutU64(at, static_cast<uint64_t>(r.token));
  PutU64(at, static_cast<uint64_t>(TimeToInt(r.lease_until)));
  PutU64(at, static_cast<uint64_t>(TimeToInt(r.created_at)));
  PutU64(at, static_cast<uint64_t>(TimeToInt(r.updated_at)));
  PutU64(at, static_cast<uint64_t>(TimeToInt(r.expires_at)));
  PutU64(at, static_cast<uint64_t>(TimeToInt(r.purged_at)));
  for (const std::string* s : bytes) PutBytes(at, *s);
}

namespace {

absl::Status NotARecord(std::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("a stored record is unreadable (", AV(what), "): the data is damaged"));
}

// The version byte and the fixed fields, in EncodeRecord's order.
absl::StatusOr<RecordHead> ReadHead(Reader& in) {
  RecordHead h;
  uint8_t version = 0, state = 0;
  uint64_t token = 0;
  if (!in.U8(version)) return NotARecord("empty");
  if (version != kVersion && version != kVersionWithoutRetention) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a stored record has format version ", version, "; this build reads version ", kVersion,
        (version > kVersion ? " (a newer idem wrote it: upgrade idem)" : "")));
  }
  if (!in.U8(state) || state > static_cast<uint8_t>(RecordState::kReleased)) {
    return NotARecord("no or an unknown state");
  }
  if (!in.U64(token) || !in.Time(h.lease_until) || !in.Time(h.created_at) ||
      !in.Time(h.updated_at)) {
    return NotARecord("truncated");
  }
  if (version >= 2 && (!in.Time(h.expires_at) || !in.Time(h.purged_at))) {
    return NotARecord("truncated");
  }
  h.version = version;
  h.state = static_cast<RecordState>(state);
  h.token = static_cast<int64_t>(token);
  return h;
}

}  // namespace

absl::StatusOr<RecordHead> DecodeRecordHead(std::string_view bytes) {
  Reader in(bytes);
  return ReadHead(in);
}

absl::StatusOr<Record> DecodeRecord(std::string_view bytes) {
  Reader in(bytes);
  IDEM_ASSIGN_OR_RETURN(RecordHead h, ReadHead(in));
  Record r;
  r.state = h.state;
  r.token = h.token;
  r.lease_until = h.lease_until;
  r.created_at = h.created_at;
  r.updated_at = h.updated_at;
  r.expires_at = h.expires_at;
  r.purged_at = h.purged_at;
  for (std::string* s : {&r.tenant, &r.biz_type, &r.key, &r.fingerprint, &r.result, &r.error}) {
    if (!in.Bytes(*s)) return NotARecord("truncated");
  }
  if (!in.done()) return NotARecord("trailing bytes");
  return r;
}

}  // namespace idem::store
