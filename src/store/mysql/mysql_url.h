// The mysql:// URL of the MySQL/MariaDB store, parsed. Not part of the public API.
//
//   mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE&...]
//
// USER, PASSWORD, DATABASE and parameter values are percent-decoded, so a password
// holding one of `@ : / ? # & % =` must be written percent-encoded (p%40ss for p@ss).
// HOST is a name, an IPv4 address or a bracketed IPv6 address ([::1]); PORT
// defaults to 3306. The connection always uses TCP to HOST:PORT (also for
// "localhost", which libmariadb would otherwise take to mean the default Unix
// socket) unless `socket=` is given; then HOST may be empty (mysql://u:p@/db?socket=…).
//
// Parameters (each at most once; anything else is kInvalidArgument):
//   pool=N                 connections kept open, 1..256 (default 8)
//   pool_wait_ms=N         how long Begin/Get/Ping wait for a free connection before
//                          kUnavailable, 0..600000 (default 2000)
//   lock_wait_timeout_s=N  innodb_lock_wait_timeout of every session, whole seconds
//                          1..3600 (default 2): a claim that waits longer on another
//                          transaction's lock is answered as a claim in progress
//   connect_timeout_s=N    TCP connect + handshake, 1..600 (default 1), within the
//                          store call's time
//   io_timeout_s=N         one store call's time, 1..86400 (default 3): each read or
//                          write on the socket waits at most this long, and a call
//                          starts no wait for a connection, no new connection and no
//                          retry past it; must be greater than lock_wait_timeout_s
//   socket=PATH            connect through this Unix socket instead of TCP
//   ssl=disabled|required|verify   TLS (default disabled); verify also checks the
//                          server certificate and host name
//   ssl_ca=PATH            CA file for ssl=verify
//
// Thread safety: plain values and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idem::mysql {

enum class SslMode { kDisabled, kRequired, kVerify };

struct MysqlOptions {
  std::string user;
  std::string password;
  bool has_password = false;
  std::string host;  // without brackets for IPv6
  int port = 3306;
  std::string database;
  std::string socket;  // empty: TCP

  int pool = 8;
  int pool_wait_ms = 2000;
  int lock_wait_timeout_s = 2;
  int connect_timeout_s = 1;
  int io_timeout_s = 3;
  SslMode ssl = SslMode::kDisabled;
  std::string ssl_ca;
  // Create and call idem's stored procedures (docs/operations.md §3); off: the
  // classic statements only, for servers or policies without stored procedures.
  bool procedures = true;

  // The URL with the password replaced by "***" (Store::url()).
  std::string redacted_url;
};

// Parses a mysql:// URL. Returns kInvalidArgument naming what is wrong for a
// malformed URL, a bad percent-escape, an unknown, repeated or out-of-range
// parameter. Never echoes the password in an error message.
absl::StatusOr<MysqlOptions> ParseMysqlUrl(std::string_view url);

}  // namespace idem::mysql
