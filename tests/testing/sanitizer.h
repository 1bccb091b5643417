// kUnderSanitizer: true in a build instrumented by AddressSanitizer or ThreadSanitizer;
// kUnderThreadSanitizer: by ThreadSanitizer
// (scripts/sanitize.sh's build-asan with clang, build-tsan with GCC). Load-shaped
// tests size their work by it: the instrumentation makes each operation 5-15x
// slower, and the races and memory errors they look for show in far fewer rounds.
#pragma once

namespace idem::testing {

// GCC 12 names the sanitizers with macros, clang with __has_feature (which GCC 12
// does not have).
#if defined(__has_feature)
#define IDEM_TESTING_HAS_FEATURE(x) __has_feature(x)
#else
#define IDEM_TESTING_HAS_FEATURE(x) 0
#endif

#if defined(__SANITIZE_THREAD__) || IDEM_TESTING_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || IDEM_TESTING_HAS_FEATURE(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = kUnderThreadSanitizer;
#endif

#undef IDEM_TESTING_HAS_FEATURE

}  // namespace idem::testing
