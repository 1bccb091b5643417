// Fuzzes the store URL module (store/store_url.h): ParseStoreUrl, ParsePathUrl,
// RedactUrl, RedactSecretsIn and WithPassword.
//
// The first byte chooses the mode:
//   even: the rest is a URL, parsed for a server scheme and a path scheme.
//         Properties: errors are kInvalidArgument; a parsed port is 1..65535; the
//         parse's `redacted` is RedactUrl(url); WithPassword on a URL without a
//         password (and without an '@' in its path or query, which it refuses)
//         gives a URL that parses back to the same password, user, host, port,
//         path and parameters, and whose RedactUrl parses without one.
//   odd:  a URL is built around a secret marker, as a password, as a password
//         without its host ("user:secret/db"), as a secret query parameter (its
//         name perhaps percent-encoded), as part of a password holding any of
//         '@', ':', '/', '?', '#' raw ("user:pa/ss@MARKER@host"), or as the
//         password= value of a keyword connection string ("host=h password=…",
//         quoted or not), with the fuzzed bytes around it. Properties: the marker
//         appears in no redacted URL and in no error message; a URL with such a
//         password that parses has the marker in its password and nowhere else
//         (parsing and redaction agree on where the password ends).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"
#include "store/store_url.h"

namespace idem::fuzz {
namespace {

constexpr std::string_view kMarker = "Zq9pW3xK";  // the secret

void CheckNoMarker(std::string_view text, std::string_view where) {
  Check(text.find(kMarker) == std::string_view::npos, where, text);
}

void RawUrl(std::string_view url, std::string_view password) {
  for (std::string_view scheme : {"postgres", "sqlite"}) {
    absl::StatusOr<store::StoreUrl> u = scheme == "sqlite"
                                            ? store::ParsePathUrl(url, scheme)
                                            : store::ParseStoreUrl(url, scheme, {"postgresql"});
    if (!u.ok()) {
      CheckBadInput(u.status(), "ParseStoreUrl/ParsePathUrl");
      continue;
    }
    Check(u->redacted == store::RedactUrl(url), "StoreUrl::redacted is RedactUrl(url)");
    if (u->port.has_value()) Check(*u->port >= 1 && *u->port <= 65535, "port in 1..65535");
    for (const auto& [k, v] : u->params) Check(!k.empty(), "a parameter has a name");
    if (scheme != "postgres" || u->password.has_value() || password.empty()) continue;
    absl::StatusOr<std::string> with = store::WithPassword(url, password);
    // With a password, an '@' in the path or query would make the URL ambiguous.
    const size_t start = url.find("://") + 3;
    if (url.find('@', std::min(url.find_first_of("/?#", start), url.size())) !=
        std::string_view::npos) {
      if (!with.ok()) CheckBadInput(with.status(), "WithPassword");
      continue;
    }
    Check(with.ok(), "WithPassword on a parsed URL without a password",
          idem::SV(with.status().message()));
    absl::StatusOr<store::StoreUrl> back = store::ParseStoreUrl(*with, scheme, {"postgresql"});
    Check(back.ok(), "the URL WithPassword made parses", *with);
    Check(back->password == std::string(password), "WithPassword's password parses back", *with);
    Check(back->user == u->user && back->host == u->host && back->port == u->port &&
              back->path == u->path && back->params == u->params,
          "WithPassword changes nothing but the password", *with);
    absl::StatusOr<store::StoreUrl> redacted =
        store::ParseStoreUrl(back->redacted, scheme, {"postgresql"});
    Check(redacted.ok() && !redacted->password.has_value(),
          "RedactUrl of WithPassword's URL parses without a password", back->redacted);
  }
}

// `s` has none of `chars`.
bool Lacks(std::string_view s, std::string_view chars) {
  return s.find_first_of(chars) == std::string_view::npos;
}

void MarkedUrl(FuzzedDataProvider& in) {
  static constexpr std::string_view kSchemes[] = {"postgres", "postgresql", "mysql", "redis"};
  static constexpr std::string_view kSecretParams[] = {"password", "pass", "passwd", "secret"};
  const std::string scheme(kSchemes[in.ConsumeIntegralInRange<size_t>(0, 3)]);
  const int form = in.ConsumeIntegralInRange(0, 4);
  std::string param(kSecretParams[in.ConsumeIntegralInRange<size_t>(0, 3)]);
  // A parameter's name is percent-decoded as its value is: "pass%77ord" is password.
  if (const size_t at = in.ConsumeIntegralInRange<size_t>(0, 15); at < param.size()) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const unsigned char c = static_cast<unsigned char>(param[at]);
    param.replace(at, 1, std::string({'%', kHex[c >> 4], kHex[c & 0xF]}));
  }
  std::string user = in.ConsumeRandomLengthString(64);
  std::string pre = form >= 3 ? in.ConsumeRandomLengthString(16) : "";
  std::string post = form >= 3 ? in.ConsumeRandomLengthString(16) : "";
  std::string rest = in.ConsumeRandomLengthString(256);
  std::string text = in.ConsumeRemainingBytesAsString();  // a driver message quoting it
  // Bytes that would move the marker out of the userinfo or the query (into a path,
  // a host, another parameter's value) make it no secret: such inputs are skipped.
  for (const std::string* part : {&user, &pre, &post, &rest, &text}) {
    if (part->find(kMarker) != std::string::npos) return;
  }
  std::string url;
  switch (form) {
    case 0:  // the password of user:password@host
      if (!Lacks(user, "/?#@:[")) return;
      url = scheme + "://" + user + ":" + std::string(kMarker) + "@" + rest;
      break;
    case 1:  // user:password with the @host left out
      if (!Lacks(user, "/?#@:[") || !Lacks(rest, "?#@") || user.empty()) return;
      url = scheme + "://" + user + ":" + std::string(kMarker) + "/" + rest;
      break;
    case 2:  // ?...&password=secret&...
      if (!Lacks(user, "?#") || !Lacks(rest, "?#&")) return;
      url = scheme + "://" + user + "?" + rest + "&" + param + "=" +
            std::string(kMarker);
      break;
    case 3:  // a password with any of '@', ':', '/', '?', '#' around the marker
      if (!Lacks(user, "/?#@:[")) return;
      url = scheme + "://" + user + ":" + pre + std::string(kMarker) + post + "@" + rest;
      break;
    default: {  // the keyword form: text password=VALUE text
      const bool quoted = !pre.empty() && pre[0] % 2 == 1;
      if (quoted ? !Lacks(pre + post, "'\\") : !Lacks(post, " \t\n\r\f\v")) return;
      const std::string value = quoted ? "'" + pre + std::string(kMarker) + post + "'"
                                       : std::string(kMarker) + post;
      url = user + " " + param + "=" + value + " " + rest;
      if (param.find('%') != std::string::npos) return;  // no keyword
      CheckNoMarker(store::RedactUrl(url), "RedactUrl of a keyword string");
      CheckNoMarker(store::RedactSecretsIn(text + "\n" + url + "\n" + text, url),
                    "RedactSecretsIn of a keyword string");
      CheckNoMarker(store::RedactSecretsIn(text + "\n" + url + "\n" + text, "memory://"),
                    "RedactSecretsIn of a message quoting a keyword string");
      return;
    }
  }
  CheckNoMarker(store::RedactUrl(url), "RedactUrl");
  // Newlines apart: the end of `rest` and the start of `text` could spell the marker.
  CheckNoMarker(store::RedactSecretsIn(text + "\n" + url + "\n" + text, url), "RedactSecretsIn");
  for (std::string_view s : {std::string_view("postgres"), std::string_view(scheme)}) {
    absl::StatusOr<store::StoreUrl> u = store::ParseStoreUrl(url, s);
    if (!u.ok()) {
      CheckNoMarker(idem::SV(u.status().message()), "a ParseStoreUrl error");
      continue;
    }
    CheckNoMarker(u->redacted, "StoreUrl::redacted");
    if (form == 3) {
      Check(u->password.has_value() &&
                u->password->find(kMarker) != std::string::npos,
            "a parsed URL has the marker in its password", url);
      std::string elsewhere = u->user + "\n" + u->host + "\n" + u->path;
      for (const auto& [k, v] : u->params) elsewhere += "\n" + k + "=" + v;
      CheckNoMarker(elsewhere, "a parsed URL's user, host, path or parameters");
    }
    for (const auto& [k, v] : u->params) {
      absl::StatusOr<int64_t> n = u->IntParam(k, 0, 0, 10);
      if (!n.ok()) CheckNoMarker(idem::SV(n.status().message()), "an IntParam error");
    }
    CheckNoMarker(idem::SV(u->OnlyParams({"pool"}).message()), "an OnlyParams error");
  }
  absl::StatusOr<std::string> with = store::WithPassword(url, "pw");
  if (!with.ok()) CheckNoMarker(idem::SV(with.status().message()), "a WithPassword error");
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  if (data[0] % 2 == 1) {
    idem::fuzz::MarkedUrl(in);
    return 0;
  }
  std::string password = in.ConsumeRandomLengthString(32);
  std::string url = in.ConsumeRemainingBytesAsString();
  idem::fuzz::RawUrl(url, password);
  return 0;
}
