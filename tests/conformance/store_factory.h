// The backends every conformance test runs against. Each factory returns a fresh,
// empty store; `dir` is a scratch directory that lives as long as the test.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "idem/idem.h"

namespace idem::testing {

struct Backend {
  std::string name;  // a GoogleTest-friendly name
  // Returns the URL of a fresh store whose files live under `dir`.
  std::function<std::string(const std::string& dir)> url;
};

// The backends with SQL (Transaction::Exec/Query): business rows live there.
inline std::vector<Backend> SqlBackends() {
  return {
      {"sqlite", [](const std::string& dir) { return "sqlite://" + dir + "/idem.db"; }},
  };
}

// Every backend: the reference memory:// store and the SQL ones.
inline std::vector<Backend> AllBackends() {
  std::vector<Backend> all = {
      {"memory", [](const std::string&) { return std::string("memory://"); }}};
  for (Backend& b : SqlBackends()) all.push_back(std::move(b));
  return all;
}

}  // namespace idem::testing
