#pragma once
// The stack of the exception that escaped a C++ handler, from its throw (support/
// stack_trace.hpp) to the record of the failure: kept when the handler's exception is
// caught, symbolised only when the failure is recorded and the process's stack_traces
// setting asks for it.
//
// Kept per worker thread, for the one failure the thread is about to record (an executor
// records a failure on the thread that ran the handler, in the same batch or in the
// recovery right after it), so that the Failure and record types stay as they are.

#include <cstdint>
#include <exception>
#include <memory>

#include "oncely/config.hpp"
#include "store/records.hpp"

namespace oncely::detail {

struct ThrowTrace;

/// Whether a failure that is (or is not) a dead letter records its stack under `mode`.
[[nodiscard]] constexpr bool records_stack(StackTraces mode, bool dead_letter) noexcept {
  return mode == StackTraces::all_failures || (mode == StackTraces::dead_letters && dead_letter);
}

/// Keeps the frames captured when `error` (which escaped the handler of attempt `attempt`
/// of job `job_id`) was thrown. A built-in handler's HandlerError is kept without any: its
/// message and detail already say what failed (an SQLSTATE, an exit status, an HTTP
/// status), and its frames would be oncely's.
void keep_trace(std::int64_t job_id, int attempt, const std::exception_ptr& error) noexcept;

/// When the process's setting asks for it, puts the kept stack of the failure `record`
/// describes (its job and attempt) into record.detail["stack"]: the errors[] entry gets it,
/// and a dead letter's error_detail. The kept stack is let go either way.
void add_stack(FailureRecord& record, bool dead_letter);

/// For an executor that records failures on another thread than the handler's (lease
/// mode): the frames to keep for `error`, none for a HandlerError (as keep_trace), and
/// the same setting-dependent addition to the record.
[[nodiscard]] std::shared_ptr<const ThrowTrace> trace_to_keep(const std::exception_ptr& error) noexcept;
void add_stack(FailureRecord& record, bool dead_letter, const ThrowTrace* trace);

}  // namespace oncely::detail
