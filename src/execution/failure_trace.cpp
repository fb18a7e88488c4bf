#include "execution/failure_trace.hpp"

#include <memory>

#include "execution/retry_policy.hpp"
#include "support/stack_trace.hpp"

namespace oncely::detail {
namespace {

struct Kept {
  std::int64_t job_id = 0;
  int attempt = 0;
  std::shared_ptr<const ThrowTrace> trace;
};
thread_local Kept t_kept;

}  // namespace

std::shared_ptr<const ThrowTrace> trace_to_keep(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const HandlerError&) {
    return nullptr;
  } catch (...) {
    return trace_of(error);
  }
}

void keep_trace(std::int64_t job_id, int attempt, const std::exception_ptr& error) noexcept {
  t_kept = Kept{job_id, attempt, trace_to_keep(error)};
}

void add_stack(FailureRecord& record, bool dead_letter, const ThrowTrace* trace) {
  if (trace == nullptr || !records_stack(stack_trace_mode(), dead_letter)) return;
  record.detail["stack"] = symbolise(*trace);
}

void add_stack(FailureRecord& record, bool dead_letter) {
  const Kept kept = std::exchange(t_kept, Kept{});
  // Another failure's (a timeout of the same job after an unrecorded one): not this one's.
  if (kept.job_id != record.job_id || kept.attempt != record.attempts) return;
  add_stack(record, dead_letter, kept.trace.get());
}

}  // namespace oncely::detail
