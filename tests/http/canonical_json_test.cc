#include "http/proxy/canonical_json.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace idem::http {
namespace {

// The bytes a vector's hex spells (json_hex: input that no JSON string holds).
std::string CanonicalJsonTestBytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// tests/jcs_vectors.json, shared with the Go and TypeScript middlewares' tests: the
// proxy's canonicalizer is the reference their RFC 8785 forms must match.
TEST(CanonicalJson, AnswersTheSharedRfc8785Vectors) {
  std::ifstream file(IDEM_JCS_VECTORS);
  ASSERT_TRUE(file) << "cannot read " << IDEM_JCS_VECTORS;
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json table = nlohmann::json::parse(text.str());
  const nlohmann::json& vectors = table.at("vectors");
  ASSERT_FALSE(vectors.empty());
  for (const nlohmann::json& v : vectors) {
    const std::string name = v.at("name").get<std::string>();
    SCOPED_TRACE(name);
    ASSERT_NE(v.contains("json"), v.contains("json_hex")) << "give one of json, json_hex";
    ASSERT_NE(v.contains("canonical"), v.value("refused", false))
        << "give one of canonical, refused";
    const std::string input = v.contains("json")
                                  ? v.at("json").get<std::string>()
                                  : CanonicalJsonTestBytes(v.at("json_hex").get<std::string>());
    const std::optional<std::string> got = CanonicalJson(input);
    if (v.value("refused", false)) {
      EXPECT_FALSE(got.has_value()) << "canonicalised as " << *got;
    } else {
      ASSERT_TRUE(got.has_value()) << "refused";
      EXPECT_EQ(*got, v.at("canonical").get<std::string>());
    }
  }
}

}  // namespace
}  // namespace idem::http
