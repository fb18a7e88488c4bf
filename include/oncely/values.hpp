#pragma once
// The values the API passes around, with nothing behind them: what to enqueue (NewJob),
// what a handler declares (Handler, HandlerOptions) and what happened to a job (JobEvent).
// A leaf header: the library's internals use these without the Client or the Runtime.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace pqxx {
class connection_base;
}

namespace oncely {

class JobContext;

/// What a unique enqueue does when a live job (waiting, scheduled, retrying or running)
/// already holds its (kind, unique_key).
enum class OnConflict {
  skip,     ///< enqueue nothing; return the live job's id
  replace,  ///< a waiting live job takes the new payload, run_at, priority and max_attempts;
            ///< a running one is left alone (reported as running)
  error,    ///< fail: DatabaseError naming the live job
};

[[nodiscard]] inline const char* to_string(OnConflict c) noexcept {
  return c == OnConflict::skip ? "skip" : c == OnConflict::replace ? "replace" : "error";
}

/// One job to enqueue. Only kind is required; the rest are the table's defaults.
/// The payload is `payload`, or `payload_json` when that is set: JSON text that goes to the
/// database as it is, so that every number keeps its digits. nlohmann::json holds a number
/// as a double unless it is a 64-bit integer: 12345678901234567.89 in `payload` is stored
/// as 12345678901234568, while `.payload_json = R"({"cents": 12345678901234567.89})"` is
/// stored exactly (the jsonb column keeps numbers as numeric).
struct NewJob {
  std::string kind;                                   ///< selects the handler; not empty
  nlohmann::json payload = nlohmann::json::object();  ///< handler input
  std::string queue = "default";                      ///< queue name; not empty
  std::optional<std::string> idempotency_key{};       ///< producer's stable id; none: the job id is the key
  std::optional<std::string> run_at{};                ///< any timestamptz literal Postgres accepts; none: now()
  std::chrono::milliseconds delay{0};                 ///< added to run_at (or now()) on the database's clock
  int priority = 0;                                   ///< smaller runs first; a smallint
  std::optional<int> max_attempts{};                  ///< none: the queue's configured default
  /// The payload as JSON text (any JSON value jsonb can store: checked before it is sent,
  /// ConfigError "payload_json: ..."); when set, `payload` is ignored.
  std::optional<std::string> payload_json{};
  /// At most one live job per (kind, unique_key): a job is live from its enqueue until it
  /// completes or is dead-lettered. Unlike idempotency_key, the key is free again once the
  /// job has left (an idempotency key is deduplicated for the whole dedup window).
  std::optional<std::string> unique_key{};
  OnConflict on_conflict = OnConflict::skip;  ///< with unique_key
  /// The producer's W3C trace context (a `traceparent`: "00-<32 hex trace id>-<16 hex span
  /// id>-<2 hex flags>"), stored as jobs.trace_context and kept through retries, dead
  /// letters and replays; handlers see it as the parent of each attempt's span.
  std::optional<std::string> traceparent{};
  /// Parents: ids of jobs enqueued before this one. The job waits, never claimed, until each
  /// has completed; it is dead-lettered (class dependency_failed) if one is dead-lettered. A
  /// parent that completed already counts as done; an id that was never a job is an error.
  std::vector<std::int64_t> depends_on{};
  /// The batch (Admin / SQL open_batch()) this job is a member of; the batch must be open.
  std::optional<std::int64_t> batch_id{};
};

/// What an enqueue did.
enum class EnqueueOutcome {
  inserted,  ///< a new job
  existing,  ///< unique_key, skip: the live job's id
  replaced,  ///< unique_key, replace: the waiting live job was updated
  running,   ///< unique_key, replace: the live job is running; nothing changed
};

struct Enqueued {
  std::int64_t id = 0;
  EnqueueOutcome outcome = EnqueueOutcome::inserted;
};

/// A handler for one job kind. Throw oncely::PermanentError to dead-letter the job at
/// once, oncely::RetryAfter to retry after a given delay; any other exception retries with
/// the queue's backoff. Returning normally completes the job.
using Handler = std::function<void(JobContext&)>;

/// What a handler declares about its effects when it is registered.
struct HandlerOptions {
  /// The handler's only effects are its writes through JobContext::tx(): no HTTP calls, no
  /// messages, no files. Such a handler needs no savepoint of its own (one round trip less
  /// per job, often twice the throughput): when it fails after writing, the whole batch is
  /// rolled back instead, its failure is recorded in a fresh transaction, and the other
  /// jobs of the batch run again at once (their writes were rolled back with it, so they
  /// still apply exactly once). Jobs of other handlers in the same batch are never re-run
  /// that way: after one of them has run, the batch isolates every job with a savepoint.
  /// Built-in `sql` handlers are transaction-only. Default false: each job that touches
  /// tx() gets a savepoint, and a failure rolls back only that job's writes.
  bool transaction_only = false;
  /// Optional: called once by Runtime::run() before any job is claimed, on a connection of
  /// the process with no transaction open, so that a handler that can never work (a
  /// statement naming a table that does not exist) stops the worker instead of
  /// dead-lettering every job. Throw to refuse to start: run() passes a ConfigError on as
  /// it is and turns any other exception into a ConfigError naming the kind (a lost
  /// connection into a DatabaseError). It must leave the connection as it found it (no
  /// named prepared statements, no session settings, no transaction).
  /// Built-in `sql` handlers describe their statement here.
  std::function<void(pqxx::connection_base&)> startup_check{};
};

/// What happened to one job, reported after the transaction that decided it committed.
struct JobEvent {
  /// crashed: an earlier attempt of this job was found unfinished (its worker died, or on a
  /// lease queue its lease expired); it is reported once, before the outcome of the attempt
  /// that found it. lease_stale: this worker's attempt finished after its lease was lost
  /// (another worker holds the job now, or it was cancelled); its outcome changed nothing.
  enum class Outcome { completed, deduplicated, retried, dead_lettered, crashed, lease_stale };
  std::int64_t id = 0;
  std::string queue;
  std::string kind;
  int attempt = 0;  ///< the attempt that produced this outcome (0 for a duplicate)
  Outcome outcome = Outcome::completed;
  std::string error_class;                   ///< for retried / dead_lettered: "retryable", "permanent", ...
  std::chrono::microseconds run_time{0};     ///< handler time
  std::chrono::microseconds wait{0};         ///< from created_at to the claim of this attempt
  std::string error;                         ///< retried / dead_lettered / crashed: what happened, one line
  std::chrono::milliseconds retry_delay{0};  ///< retried: until the next attempt
  std::optional<std::string> trace_context;  ///< the job's W3C traceparent, from its producer
  std::optional<std::string> key{};          ///< the job's idempotency key, when it has one
  /// When this attempt's handler started (the epoch for an outcome without a run: a
  /// duplicate, a crashed attempt found later).
  std::chrono::system_clock::time_point started_at{};
  /// The traceparent the attempt ran under: its `process` span (docs/opentelemetry.md).
  std::optional<std::string> attempt_traceparent{};
  /// lease_stale: when this worker found the lease lost (the epoch when it did not notice
  /// before the completion was refused).
  std::chrono::system_clock::time_point lease_lost_at{};
};

}  // namespace oncely
