#include "execution/failure_trace.hpp"

#include <memory>

#include "execution/retry_policy.hpp"
#include "support/stack_trace.hpp"

namespace oncely::detail {

std::shared_ptr<const ThrowTrace> trace_to_keep(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const HandlerError&) {
    return nullptr;
  } catch (...) {
    return trace_of(error);
  }
}

void add_stack(FailureRecord& record, bool dead_letter, const ThrowTrace* trace) {
  if (trace == nullptr || !records_stack(stack_trace_mode(), dead_letter)) return;
  record.detail["stack"] = symbolise(*trace);
}

}  // namespace oncely::detail
