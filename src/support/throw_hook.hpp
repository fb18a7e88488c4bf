#pragma once
// The frames of each C++ throw, captured where it was thrown (support/throw_hook.cpp).
// Capture is raw return addresses only (no symbols, no allocation); stack_trace.hpp turns
// them into text when a failure is recorded.
//
// This header must not include <cxxabi.h>: throw_hook.cpp defines __cxa_throw with the
// signature g++ declares implicitly, which differs from <cxxabi.h>'s.

#include <cstddef>

namespace oncely::detail::throw_hook {

/// Frames kept per throw: the ~64 a report shows below the handler's entry, plus the
/// runtime's own frames above it and a margin.
inline constexpr std::size_t kMaxFrames = 80;

/// Turns capture on or off for the whole process (off by default: a program that never
/// runs a Runtime pays one relaxed load per throw).
void set_capture(bool on) noexcept;
[[nodiscard]] bool capturing() noexcept;

/// Copies into `out` (room for `max` addresses) the frames of the most recent throw, on
/// this thread, of the exception object at `object` whose type_info is at `type`; returns
/// how many (0: none recorded, e.g. thrown on another thread, or too many throws since).
std::size_t find(const void* object, const void* type, void** out, std::size_t max) noexcept;

}  // namespace oncely::detail::throw_hook
