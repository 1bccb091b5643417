#include "cli/keys_report.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/common.h"
#include "core/absl_compat.h"
#include "idem/fingerprint.h"
#include "idem/ttl.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

using ojson = nlohmann::ordered_json;

constexpr size_t kWholeUpTo = 16;
constexpr size_t kCutTo = 12;

std::string Short(std::string_view s) {
  if (s.size() <= kWholeUpTo) return Printable(s);
  size_t n = kCutTo;
  // Back up to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return absl::StrCat(Printable(s.substr(0, n)), "…");
}

std::string DigestStart(std::string_view key) { return Fingerprint(key).substr(0, 12); }

std::string Example(std::string_view key) {
  return absl::StrCat("\"", KeyShown(key), "\" (sha256:", DigestStart(key), ")");
}

ojson Time(absl::Time t) {
  std::string s = FormatUtc(t);
  return s.empty() ? ojson(nullptr) : ojson(s);
}

ojson KeyJson(const KeyExample& e, bool with_owner) {
  ojson j = ojson::object();
  if (with_owner) {
    j["tenant"] = Printable(e.tenant);
    j["biz_type"] = Printable(e.biz_type);
  }
  j["key"] = KeyShown(e.key);
  j["key_sha256"] = Fingerprint(e.key);
  j["created_at"] = Time(e.created_at);
  return j;
}

}  // namespace

std::string KeyShown(std::string_view key) { return Short(key); }

std::string KeyHealthText(const KeyHealthInput& in) {
  const KeyAnalysisReport& r = in.records;
  std::string out = absl::StrCat("key health of ", in.store, ": ", r.records,
                                 " records created since ", FormatUtc(in.since), " (",
                                 in.since_text, "), window ", FormatTtlDuration(in.window), "\n");
  absl::StrAppend(&out, "regenerated keys: ", r.regenerated_groups, " groups, ", r.regenerated_keys,
                  " keys (one request fingerprint under several keys: the key is remade on "
                  "retry)\n");
  for (const RegeneratedGroup& g : r.regenerated) {
    std::vector<std::string> keys;
    for (const KeyExample& e : g.examples) keys.push_back(Example(e.key));
    absl::StrAppend(&out, "  ", Printable(g.tenant), " ", Printable(g.biz_type), " fingerprint ",
                    Short(g.fingerprint), ": ", g.keys, " keys", keys.empty() ? "" : ": ",
                    absl::StrJoin(keys, ", "), "\n");
  }
  if (!in.over_coarse.has_value()) {
    absl::StrAppend(&out,
                    "over-coarse keys: not checked (no store keeps the 422s; give --server, the "
                    "idem serve answering the claims)\n");
  } else {
    const OverCoarse& oc = *in.over_coarse;
    int64_t mismatches = 0;
    for (const OverCoarseKey& k : oc.keys) mismatches += k.mismatches;
    absl::StrAppend(&out, "over-coarse keys: ", oc.keys.size(), " keys, ", mismatches,
                    " mismatches (one key, several fingerprints: the key is too broad; 422s of ",
                    oc.source, " for tenant ", Printable(oc.tenant), ")\n");
    for (size_t i = 0; i < oc.keys.size() && static_cast<int>(i) < in.examples; ++i) {
      const OverCoarseKey& k = oc.keys[i];
      absl::StrAppend(&out, "  ", Printable(oc.tenant), " ", Printable(k.biz_type), " ",
                      Example(k.key), ": ", k.fingerprints, " fingerprints, ", k.mismatches,
                      " mismatches\n");
    }
  }
  int64_t shaped = 0;
  for (const ShapeFinding& s : r.shapes) shaped += s.keys;
  absl::StrAppend(&out, "suspicious shapes: ", shaped, " keys\n");
  for (const ShapeFinding& s : r.shapes) {
    std::vector<std::string> keys;
    for (const KeyExample& e : s.examples) {
      keys.push_back(
          absl::StrCat(Printable(e.tenant), " ", Printable(e.biz_type), " ", Example(e.key)));
    }
    absl::StrAppend(&out, "  ", AV(KeyShapeName(s.shape)), ": ", s.keys, " keys",
                    keys.empty() ? "" : ": ", absl::StrJoin(keys, ", "), "\n");
  }
  return out;
}

std::string KeyHealthJson(const KeyHealthInput& in) {
  const KeyAnalysisReport& r = in.records;
  ojson j = ojson::object();
  j["store"] = in.store;
  j["since"] = Time(in.since);
  j["until"] = Time(in.until);
  j["window"] = FormatTtlDuration(in.window);
  j["records"] = r.records;
  ojson regen = ojson::object();
  regen["groups"] = r.regenerated_groups;
  regen["keys"] = r.regenerated_keys;
  regen["examples"] = ojson::array();
  for (const RegeneratedGroup& g : r.regenerated) {
    ojson e = ojson::object();
    e["tenant"] = Printable(g.tenant);
    e["biz_type"] = Printable(g.biz_type);
    e["fingerprint"] = Short(g.fingerprint);
    e["keys"] = g.keys;
    e["first_at"] = Time(g.first_at);
    e["last_at"] = Time(g.last_at);
    e["examples"] = ojson::array();
    for (const KeyExample& k : g.examples) e["examples"].push_back(KeyJson(k, false));
    regen["examples"].push_back(std::move(e));
  }
  j["regenerated"] = std::move(regen);
  if (!in.over_coarse.has_value()) {
    j["over_coarse"] = nullptr;
  } else {
    const OverCoarse& oc = *in.over_coarse;
    ojson o = ojson::object();
    o["source"] = oc.source;
    o["tenant"] = Printable(oc.tenant);
    int64_t mismatches = 0;
    for (const OverCoarseKey& k : oc.keys) mismatches += k.mismatches;
    o["keys"] = oc.keys.size();
    o["mismatches"] = mismatches;
    o["examples"] = ojson::array();
    for (size_t i = 0; i < oc.keys.size() && static_cast<int>(i) < in.examples; ++i) {
      const OverCoarseKey& k = oc.keys[i];
      ojson e = ojson::object();
      e["biz_type"] = Printable(k.biz_type);
      e["key"] = KeyShown(k.key);
      e["key_sha256"] = Fingerprint(k.key);
      e["fingerprints"] = k.fingerprints;
      e["mismatches"] = k.mismatches;
      e["first_mismatch_at"] = Time(k.first_at);
      e["last_mismatch_at"] = Time(k.last_at);
      o["examples"].push_back(std::move(e));
    }
    j["over_coarse"] = std::move(o);
  }
  ojson shapes = ojson::object();
  int64_t shaped = 0;
  for (const ShapeFinding& s : r.shapes) {
    shaped += s.keys;
    ojson e = ojson::object();
    e["keys"] = s.keys;
    e["examples"] = ojson::array();
    for (const KeyExample& k : s.examples) e["examples"].push_back(KeyJson(k, true));
    shapes[std::string(KeyShapeName(s.shape))] = std::move(e);
  }
  ojson suspicious = ojson::object();
  suspicious["keys"] = shaped;
  suspicious["shapes"] = std::move(shapes);
  j["suspicious"] = std::move(suspicious);
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace idem::cli
