#pragma once
// JobContext: what a handler sees of the job it runs.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <pqxx/transaction>

namespace oncely {

namespace detail {
class JobTransaction;
}

/// One attempt of one job, handed to its handler on a worker thread. Valid only during
/// the handler call; not thread-safe (neither is the transaction it gives access to).
class JobContext {
 public:
  /// `payload` is `payload_text` as nlohmann read it (discarded if it could not); both must
  /// outlive the context.
  JobContext(detail::JobTransaction& transaction, std::int64_t id, std::string_view queue, std::string_view kind,
             const nlohmann::json& payload, int attempt, std::string idempotency_key,
             std::chrono::steady_clock::time_point deadline, std::string_view payload_text = {})
      : transaction_(transaction),
        id_(id),
        queue_(queue),
        kind_(kind),
        payload_(payload),
        payload_text_(payload_text),
        attempt_(attempt),
        idempotency_key_(std::move(idempotency_key)),
        deadline_(deadline) {}
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;

  [[nodiscard]] std::int64_t id() const noexcept { return id_; }
  [[nodiscard]] const std::string& queue() const noexcept { return queue_; }
  [[nodiscard]] const std::string& kind() const noexcept { return kind_; }
  /// The payload as nlohmann::json, whose numbers are 64-bit integers or doubles: a
  /// fraction or an integer beyond 64 bits is the nearest double (12345678901234567.89
  /// reads as 12345678901234568). Throws PermanentError (the job is dead-lettered) when a
  /// number is beyond a double's range, rather than hand over inf or 0: 1e400, 1.5e-400.
  /// For exact numbers read payload_text().
  [[nodiscard]] const nlohmann::json& payload() const;
  /// The payload exactly as stored, as JSON text (jsonb's, e.g. {"cents": 12345678901234567.89}):
  /// every number digit for digit (jsonb writes them without exponents: 1e3 as 1000).
  /// Hand it to SQL as it is (`$1::jsonb ->> 'cents'`) or read it with a parser that keeps
  /// numbers as text.
  [[nodiscard]] std::string_view payload_text() const;
  /// 1 for the first attempt; attempts that crashed their worker count too.
  [[nodiscard]] int attempt() const noexcept { return attempt_; }
  /// The producer's idempotency key, or the job id as text when it has none. Pass it to
  /// external services (an HTTP Idempotency-Key, a payment API) so they deduplicate too.
  [[nodiscard]] const std::string& idempotency_key() const noexcept { return idempotency_key_; }
  /// When this attempt becomes a `timeout` failure (start + the queue's job_timeout).
  /// Long-running handlers should check it; SQL through tx() is cut off by the server.
  [[nodiscard]] std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }

  /// The job's transaction: what a handler writes through it commits together with the
  /// job's dedup marker, or not at all. A failing handler's writes are rolled back (the
  /// first call opens a savepoint). Use exec_params/exec_prepared: an error raised through
  /// a plain exec() ends the whole transaction in libpqxx 6, taking the rest of the batch
  /// with it (those jobs are redelivered). Never commit or abort it yourself.
  pqxx::work& tx();

 private:
  detail::JobTransaction& transaction_;
  std::int64_t id_;
  std::string queue_;
  std::string kind_;
  const nlohmann::json& payload_;
  std::string_view payload_text_;
  mutable bool payload_checked_ = false;  // payload() found every number within a double's range
  mutable std::string dumped_;            // payload_text() of a context made without the text
  int attempt_;
  std::string idempotency_key_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace oncely
