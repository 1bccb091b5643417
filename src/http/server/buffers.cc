#include "http/server/buffers.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace idem::http {
namespace {

constexpr size_t kKeptStringBuffers = 64;
constexpr size_t kKeptStringBufferBytes = 4 << 10;
thread_local std::vector<std::string> kept_string_buffers;

}  // namespace

std::string TakeStringBuffer() {
  if (kept_string_buffers.empty()) return std::string();
  std::string buffer = std::move(kept_string_buffers.back());
  kept_string_buffers.pop_back();
  buffer.clear();
  return buffer;
}

void KeepStringBuffer(std::string&& buffer) {
  // A string that has allocated (more than the small-string capacity of an empty one).
  if (buffer.capacity() <= std::string().capacity() ||
      buffer.capacity() > kKeptStringBufferBytes ||
      kept_string_buffers.size() >= kKeptStringBuffers) {
    return;
  }
  if (kept_string_buffers.capacity() == 0) kept_string_buffers.reserve(kKeptStringBuffers);
  kept_string_buffers.push_back(std::move(buffer));
}

}  // namespace idem::http
