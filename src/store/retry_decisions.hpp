#pragma once
// The retry decision, asked of the schema (migration 19): whether a failed attempt retries,
// after what delay, or becomes a dead letter of which class. The rule and the backoff
// formula are the SQL functions failure_outcome() and backoff_delay(), which the SQL worker
// protocol's fail_job() and retry_delay() call too, so every worker of a queue, C++ or not,
// decides alike. No table: one statement, which reads nothing and writes nothing.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <pqxx/transaction_base>

#include "oncely/config.hpp"
#include "store/sql.hpp"

namespace oncely::detail {

/// A failed attempt, as the decision needs it.
struct FailureQuestion {
  std::string_view failure_class;  // the attempt's class: "retryable", "timeout", "permanent", ...
  int attempt = 0;                 // the attempts counted, this one included (0: none was made)
  int max_attempts = 1;            // the job's own, or its queue's
  std::optional<std::chrono::milliseconds> retry_after;  // the failure's own delay (RetryAfter, HTTP Retry-After)
  const BackoffConfig& backoff;                          // the queue's
};

/// The schema's answer.
struct RetryAnswer {
  std::string outcome;                 // "retry", or the dead letter's class
  std::chrono::milliseconds delay{0};  // retry only: until the next attempt
};

class RetryDecisions {
 public:
  explicit RetryDecisions(StatementSet& statements);
  /// failure_outcome() of the failure, and for a retry its delay: the failure's own, else
  /// backoff_delay() with the queue's backoff (a random draw for its jitter). One round trip.
  [[nodiscard]] RetryAnswer decide(pqxx::transaction_base& tx, const FailureQuestion& failure) const;

 private:
  const StatementSet& statements_;
  const Statement* decide_;
};

}  // namespace oncely::detail
