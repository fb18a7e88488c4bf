#pragma once
// The stack of the exception that escaped a C++ handler, from its throw (support/
// stack_trace.hpp) to the record of the failure: kept when the handler's exception is
// caught, symbolised only when the failure is recorded and the process's stack_traces
// setting asks for it.
//
// The kept frames travel with the failure (HandlerRun::trace) to whichever thread records
// it: the handler's (transaction mode) or the queue's control thread (lease mode).

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

/// The frames to keep for `error`, which escaped a handler: none for a built-in handler's
/// HandlerError, whose message and detail already say what failed (an SQLSTATE, an exit
/// status, an HTTP status), and whose frames would be oncely's.
[[nodiscard]] std::shared_ptr<const ThrowTrace> trace_to_keep(const std::exception_ptr& error) noexcept;

/// When the process's setting asks for it, puts `trace` into record.detail["stack"], for
/// the failure `record` describes: the errors[] entry gets it, and a dead letter's
/// error_detail.
void add_stack(FailureRecord& record, bool dead_letter, const ThrowTrace* trace);

}  // namespace oncely::detail
