// Parsing of postgres:// URLs: idem's own parameters and the libpq connection URI
// (the password-free form shown in url() and messages is store::RedactUrl). Not part of the public
// API; the parameters are documented in postgres_store.h.
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "store/postgres/pg_conn.h"

namespace idem::postgres {

struct Options {
  int pool = 8;
  int pool_timeout_ms = 2000;
  int lock_timeout_ms = 2000;
  bool read_only = false;  // StoreOptions::read_only (not a URL parameter)
  // notify=on|off: finishing a claim NOTIFYs idem_finished, so waiting claims in
  // other processes wake at once (Store::SubscribeFinished). Default on.
  bool notify = true;
  ConnectSpec connect;  // what libpq gets; connect.display is the redacted URL
};

// Splits `url` into idem's parameters and the libpq URI and checks the URI with
// libpq's own parser (no connection is made). Errors: kInvalidArgument naming the
// scheme, parameter or libpq complaint.
absl::StatusOr<Options> ParseUrl(std::string_view url);

}  // namespace idem::postgres
