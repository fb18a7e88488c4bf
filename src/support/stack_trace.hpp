#pragma once
// Stack traces of exceptions that escape a handler: where they were thrown, as text.
// The frames are captured at every throw by the __cxa_throw hook (throw_hook.cpp) while
// capture is on; they are symbolised (Boost.Stacktrace's libbacktrace backend: function,
// file and line from the binary's DWARF) only when a failure is recorded, on one thread of
// the process for every caller (the backend's state is per thread, and large).

#include <exception>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"
#include "oncely/values.hpp"

namespace oncely::detail {

/// The raw frames of one throw, innermost first.
struct ThrowTrace {
  std::vector<void*> frames;
};

/// Frames a symbolised trace shows at most, below the handler's entry.
inline constexpr std::size_t kMaxStackFrames = 64;

/// Sets the process's policy (the last Runtime to start sets it): capture on unless off,
/// and the symboliser warmed (it reads the binary's debug information once, ~10-100 ms,
/// before any job rather than at the first failure).
void enable_stack_traces(StackTraces mode);
[[nodiscard]] StackTraces stack_trace_mode() noexcept;

/// The frames captured when `error` was thrown on this thread; null when none were
/// (capture off, thrown on another thread, or too many throws on this one since).
std::shared_ptr<const ThrowTrace> trace_of(const std::exception_ptr& error) noexcept;

/// `trace` as text, one string per frame ("#0 fn(args) at file.cpp:12", or "#1 0x7f.. in
/// libstdc++.so.6" without debug information), innermost first, cut where the handler
/// was entered (invoke_handler and the runtime above it are not shown; std::function's
/// _M_invoke is, as a lambda handler is often inlined into it) and at kMaxStackFrames.
nlohmann::json symbolise(const ThrowTrace& trace);

/// Calls `handler`: a frame of its own, so that symbolise() knows where the handler began.
void invoke_handler(const Handler& handler, JobContext& context);

}  // namespace oncely::detail
