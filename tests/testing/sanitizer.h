// kUnderSanitizer: true in a build instrumented by AddressSanitizer or ThreadSanitizer;
// kUnderThreadSanitizer: by ThreadSanitizer
// (scripts/sanitize.sh's build-asan with clang, build-tsan with GCC). Load-shaped
// tests size their work by it: the instrumentation makes each operation 5-15x
// slower, and the races and memory errors they look for show in far fewer rounds.
#pragma once

namespace idem::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;  // GCC
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;  // clang
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;  // GCC
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;  // clang
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace idem::testing
