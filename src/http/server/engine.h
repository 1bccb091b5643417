// ServerEngine: what a Server (server.h) runs on, one per HTTP engine: Boost.Beast
// with a few io_context threads (server.cc, the default) or the lean engine
// (lean/server.h: one epoll loop per core, requests parsed with http_parser).
// Server forwards each of its calls to it, with the same contract.
//
// Thread safety: as Server's.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace idem::http {

class ServerEngine {
 public:
  virtual ~ServerEngine() = default;
  virtual absl::Status Start() = 0;
  virtual std::string address() const = 0;
  virtual uint16_t port() const = 0;
  virtual void Shutdown() = 0;
  virtual void Wait() = 0;
};

}  // namespace idem::http
