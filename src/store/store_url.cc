#include "store/store_url.h"

#include <string>
#include <string_view>

namespace idem::store {
namespace {

bool IsSecretParam(std::string_view item) {
  const std::string_view name = item.substr(0, item.find('='));
  for (std::string_view secret : {"password", "pass", "passwd", "secret"}) {
    if (name == secret) return true;
  }
  return false;
}

}  // namespace

std::string RedactUrl(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    // Not a URL: it may still be "user:secret@host"; keep only what follows the '@'.
    const size_t at = url.rfind('@');
    return at == std::string_view::npos ? std::string(url) : "…@" + std::string(url.substr(at + 1));
  }
  const size_t start = sep + 3;
  std::string_view rest = url.substr(start);
  std::string_view query;
  bool has_query = false;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    has_query = true;
  }
  std::string out(url.substr(0, start));
  const std::string_view authority = rest.substr(0, rest.find('/'));
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    out.append(userinfo.substr(0, userinfo.find(':')));
    out.append(rest.substr(at));
  } else {
    out.append(rest);
  }
  if (has_query) {
    std::string kept;
    while (!query.empty()) {
      const size_t amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      if (!item.empty() && !IsSecretParam(item)) {
        kept.append(kept.empty() ? "" : "&");
        kept.append(item);
      }
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
    if (!kept.empty()) out.append("?").append(kept);
  }
  return out;
}

}  // namespace idem::store
