#pragma once
// JobContext: what a handler sees of the job it runs.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <pqxx/transaction>

namespace oncely {

namespace detail {
class JobTransaction;
struct LeaseAttempt;
struct JobContextFactory;
}  // namespace detail

/// One attempt of one job, handed to its handler on a worker thread. Valid only during
/// the handler call; not thread-safe (neither is the transaction it gives access to).
/// Only the runtime makes one.
class JobContext {
 public:
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;

  [[nodiscard]] std::int64_t id() const noexcept { return id_; }
  [[nodiscard]] const std::string& queue() const noexcept { return queue_; }
  [[nodiscard]] const std::string& kind() const noexcept { return kind_; }
  /// The payload as nlohmann::json, read on first use, whose numbers are 64-bit integers or
  /// doubles: a fraction or an integer beyond 64 bits is the nearest double
  /// (12345678901234567.89 reads as 12345678901234568). A number beyond a double's range
  /// (1e400; 1.5e-400, which would read as 0) is never handed over as inf or 0: payload()
  /// throws, and the job is dead-lettered as `unreadable`. For exact numbers read
  /// payload_text().
  [[nodiscard]] const nlohmann::json& payload() const;
  /// The payload exactly as stored, as JSON text (jsonb's, e.g. {"cents": 12345678901234567.89}):
  /// every number digit for digit (jsonb writes them without exponents: 1e3 as 1000).
  /// Hand it to SQL as it is (`($1::jsonb ->> 'cents')::numeric`) or read it with a parser
  /// that keeps numbers as text.
  [[nodiscard]] std::string_view payload_text() const noexcept { return payload_text_; }
  /// 1 for the first attempt; attempts that crashed their worker count too.
  [[nodiscard]] int attempt() const noexcept { return attempt_; }
  /// The producer's idempotency key, or the job id as text when it has none (for a replay:
  /// the id of the job first enqueued, so the key survives replays). Pass it to external
  /// services (an HTTP Idempotency-Key, a payment API) so they deduplicate too.
  [[nodiscard]] const std::string& idempotency_key() const noexcept { return idempotency_key_; }
  /// When this attempt becomes a `timeout` failure (start + the queue's job_timeout).
  /// Long-running handlers should check it; SQL through tx() is cut off by the server.
  [[nodiscard]] std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }
  /// Requested when the worker gives up on this attempt: its shutdown grace is over and it
  /// is about to exit, leaving the job's transaction to roll back (the job is redelivered).
  /// On a lease queue also when the lease is lost (lease_lost()) or the attempt is past its
  /// deadline. A handler that waits on something outside (a child process, a socket)
  /// should return promptly then; the exec handler terminates its processes, the http
  /// handler aborts its request.
  [[nodiscard]] const std::stop_token& stop_token() const noexcept { return stop_; }

  /// The job's transaction: what a handler writes through it commits together with the
  /// job's dedup marker, or not at all. A failing handler's writes are rolled back (the
  /// first call opens a savepoint). Use exec_params/exec_prepared: an error raised through
  /// a plain exec() ends the whole transaction in libpqxx 6, taking the rest of the batch
  /// with it (those jobs are redelivered). Never commit or abort it yourself.
  /// On a transaction queue only; on a lease queue it throws oncely::PermanentError (no transaction
  /// is open while a lease job runs: register database effects with on_complete()).
  pqxx::work& tx();

  /// Whether this job runs on a lease queue (no transaction open while it runs).
  [[nodiscard]] bool lease_mode() const noexcept { return lease_ != nullptr; }
  /// Lease queues: true once this attempt's lease is lost (it expired and another worker
  /// may run the job now, or the job was cancelled). Its outcome will be discarded: stop
  /// as soon as possible (stop_token() is requested too). Always false on a transaction queue.
  [[nodiscard]] bool lease_lost() const noexcept;
  /// Lease queues: this attempt's lease token. A handler that completes the job itself calls
  /// `<schema>.complete_job(id, lease_token)` in its own transaction, beside its own writes
  /// (docs/protocol.md); the worker then counts the job as completed. The exec handler passes
  /// it as ONCELY_LEASE_TOKEN, the http handler as the `Oncely-Lease-Token` header. None on a
  /// transaction queue.
  [[nodiscard]] std::optional<std::int64_t> lease_token() const noexcept;
  /// A database effect of this job, applied exactly once: `effect` runs in the transaction
  /// that completes the job (inserts its dedup marker and deletes it), after the handler
  /// returned, and only if this worker still holds the lease. If it throws, nothing of it
  /// is kept and the attempt fails as if the handler had thrown that. On a transaction
  /// queue it runs at once, in the job's transaction (tx()), which is the same guarantee.
  void on_complete(std::function<void(pqxx::work&)> effect);
  /// on_complete() for an effect whose result becomes the job's output, as set_output_text()
  /// takes it (JSON text; none: no output), e.g. the row an INSERT ... RETURNING wrote. An
  /// output it cannot keep fails the attempt as set_output_text() would.
  void on_complete_output(std::function<std::optional<std::string>(pqxx::work&)> effect);
  /// What this job returned, kept with its completed record (`oncely jobs show`) for the
  /// dedup window: JSON of at most 64 KiB (65,536 bytes of its compact text). Kept only if
  /// the attempt completes; the last call wins. Too large, or not storable as jsonb (a
  /// string with a NUL character): throws oncely::PermanentError, and the job fails
  /// permanently with that message (unless the handler catches it).
  void set_output(const nlohmann::json& output);
  /// The same from JSON text, kept as Postgres reads it (every number digit for digit).
  /// Text that is not JSON throws PermanentError too.
  void set_output_text(std::string json_text);

  /// This attempt's W3C traceparent: the job's trace id (jobs.trace_context, from its
  /// producer) with a span id of the attempt's own, whose parent is the producer's span;
  /// none when the job has no trace context. The exec handler passes it as TRACEPARENT,
  /// the http handler as the `traceparent` header.
  [[nodiscard]] const std::optional<std::string>& traceparent() const noexcept { return traceparent_; }

 private:
  friend struct detail::JobContextFactory;
  /// `transaction` on a transaction queue, `lease` on a lease queue (no transaction is open
  /// while it runs). `payload_text`: the payload as stored (jsonb's text); it must outlive
  /// the context.
  JobContext(detail::JobTransaction* transaction, detail::LeaseAttempt* lease, std::int64_t id, std::string_view queue,
             std::string_view kind, std::string_view payload_text, int attempt, std::string idempotency_key,
             std::chrono::steady_clock::time_point deadline, std::stop_token stop)
      : transaction_(transaction),
        lease_(lease),
        id_(id),
        queue_(queue),
        kind_(kind),
        payload_text_(payload_text),
        attempt_(attempt),
        idempotency_key_(std::move(idempotency_key)),
        deadline_(deadline),
        stop_(std::move(stop)) {}

  detail::JobTransaction* transaction_ = nullptr;  // transaction queues
  detail::LeaseAttempt* lease_ = nullptr;          // lease queues
  std::int64_t id_;
  std::string queue_;
  std::string kind_;
  std::string_view payload_text_;
  mutable std::optional<nlohmann::json> payload_;  // payload_text_, once read
  int attempt_;
  std::string idempotency_key_;
  std::chrono::steady_clock::time_point deadline_;
  std::stop_token stop_;
  std::optional<std::string> traceparent_;
  std::optional<std::string> output_;  // set_output's JSON text
};

}  // namespace oncely
