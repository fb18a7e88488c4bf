#pragma once
// Retry policy, the C++ half: the one place where an exception becomes a classified Failure
// (classify()), and the Decision type the schema's answer is read into. Whether a failure
// retries, after what delay, or becomes a dead letter of which class is decided once, in
// SQL (failure_outcome() and backoff_delay(), migration 19), for C++ and SQL workers alike.
// Pure.

#include <chrono>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pqxx {
class sql_error;
}

namespace oncely::detail {

/// Why an attempt failed, as recorded in jobs.errors[].class and dead_letters.error_class.
enum class FailureClass {
  retryable,      // any other exception: retry with backoff
  permanent,      // oncely::PermanentError, or a handler that says the input is bad
  timeout,        // over job_timeout (or statement_timeout / query_canceled)
  connection,     // the job's connection broke (retry after reconnecting)
  unknown_kind,   // no handler for the job's kind
  exhausted,      // dead-letter class: the last allowed attempt failed
  crashed,        // dead-letter class / error class: the attempt never finished (worker died)
  unreadable,     // the job's row cannot be claimed or its payload read (never retried)
  lease_expired,  // lease mode: the attempt's worker stopped renewing its lease (died, froze, partitioned)
};

std::string_view to_string(FailureClass c);

/// One failed attempt, classified.
struct Failure {
  FailureClass cls = FailureClass::retryable;
  std::string message;                                   ///< human readable, one line
  nlohmann::json detail = nlohmann::json::object();      ///< e.g. {"exception": "std::runtime_error"}
  std::optional<std::chrono::milliseconds> retry_after;  ///< RetryAfter / HTTP Retry-After

  /// A failure the runtime names itself (no exception, no detail).
  [[nodiscard]] static Failure of(FailureClass cls, std::string message) {
    return Failure{cls, std::move(message), nlohmann::json::object(), std::nullopt};
  }
};

/// Thrown by the built-in handlers (sql, exec, http): a failure they have already
/// classified, with its detail (SQLSTATE; exit status and stderr tail; HTTP status and
/// body excerpt) and, for HTTP Retry-After, the delay to use.
class HandlerError : public std::runtime_error {
 public:
  HandlerError(FailureClass cls, const std::string& message, nlohmann::json detail = nlohmann::json::object(),
               std::optional<std::chrono::milliseconds> retry_after = std::nullopt)
      : std::runtime_error(message), cls_(cls), detail_(std::move(detail)), retry_after_(retry_after) {}
  [[nodiscard]] FailureClass cls() const noexcept { return cls_; }
  [[nodiscard]] const nlohmann::json& detail() const noexcept { return detail_; }
  [[nodiscard]] std::optional<std::chrono::milliseconds> retry_after() const noexcept { return retry_after_; }

 private:
  FailureClass cls_;
  nlohmann::json detail_;
  std::optional<std::chrono::milliseconds> retry_after_;
};

/// Maps an exception thrown by a handler (or by the job's transaction) to a Failure:
/// HandlerError -> its own class, detail and retry_after; PermanentError -> permanent; RetryAfter -> retryable with
/// retry_after; pqxx::broken_connection and SQLSTATE 25006 -> connection; pqxx::query_canceled (SQLSTATE 57014) ->
/// timeout; any other std::exception -> retryable with its type in detail; anything else -> retryable "unknown
/// exception". Never throws.
Failure classify(std::exception_ptr error) noexcept;

/// SQLSTATE 25006, read_only_sql_transaction: the server this connection reached cannot
/// write (a standby, a demoted primary after a failover, default_transaction_read_only).
/// The job is not at fault: the connection is dropped and made again, which with a
/// multi-host URL and target_session_attrs=read-write finds the writable server.
inline constexpr std::string_view kReadOnlySqlstate = "25006";

/// Whether `e` means the connection it came from is no use any more: it broke
/// (pqxx::broken_connection), or the server it reached is read-only (SQLSTATE 25006). The
/// worker then drops the connection and reconnects, never retrying on the same one.
bool is_connection_loss(const std::exception& e) noexcept;

/// SQLSTATE of the error that migration 0005's commit guard raises when a handler commits
/// its job's transaction itself: a bug in the handler, so permanent.
inline constexpr std::string_view kHandlerCommittedSqlstate = "OC001";

/// Whether a claim of one job that failed with `sqlstate` failed because of that job's row
/// (data exception, program limit exceeded such as an index entry too large): the job is
/// then dead-lettered as unreadable. Anything else (timeouts, lack of resources, a lost
/// connection) is the server's state, not the row's: the claim is retried later.
bool is_unclaimable_row(std::string_view sqlstate) noexcept;

/// The SQLSTATE of `e`. libpqxx 6.4 builds some of its exception types without the code it
/// had in hand (insufficient_privilege: sqlstate() is empty for 42501); for those the type
/// tells which code it was. Empty only when the server sent none.
std::string sqlstate_of(const pqxx::sql_error& e);

/// What becomes of a job after a failed attempt: a retry after a delay, or a dead letter of
/// some class. The decision itself is the schema's (failure_outcome() and backoff_delay(),
/// migration 19, shared with the SQL worker protocol), asked by decide() in attempt.cpp;
/// this is its answer in C++ terms.
struct Decision {
  enum class Action { retry, dead_letter };
  Action action = Action::retry;
  /// retry: the attempt's class (errors[].class); dead_letter: dead_letters.error_class.
  FailureClass cls = FailureClass::retryable;
  std::chrono::milliseconds delay{0};  ///< retry only: until the next attempt

  [[nodiscard]] bool dead_letter() const noexcept { return action == Action::dead_letter; }
};

/// The class named `name` (to_string()'s inverse), or none.
[[nodiscard]] std::optional<FailureClass> failure_class_named(std::string_view name) noexcept;

/// The Decision that the schema's `outcome` ("retry", or a dead letter's class) and `delay`
/// mean for a failure of class `failed`: a retry keeps the attempt's class. Throws
/// std::runtime_error for an outcome that names no class (a schema this binary does not know).
[[nodiscard]] Decision decision_of(FailureClass failed, std::string_view outcome, std::chrono::milliseconds delay);

}  // namespace oncely::detail
