#pragma once
// Client: enqueue jobs from C++, on its own connection or inside the caller's transaction.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/transaction_base>

#include "oncely/admin.hpp"
#include "oncely/batches.hpp"
#include "oncely/database_url.hpp"
#include "oncely/values.hpp"

namespace oncely {

struct ClientOptions {
  /// Enqueue through a prepared statement on the Client's connection (a fifth faster per
  /// job). Turn off behind a transaction-mode pooler that does not keep them (PgBouncer
  /// before 1.21, such as Debian 12's 1.18), as Config::prepared_statements for workers.
  bool prepared_statements = true;
};

/// Sends the OpenTelemetry spans this process has queued and its metrics
/// (docs/opentelemetry.md), and waits for them, up to `timeout`. Export runs on a background
/// thread: a program that enqueues and then exits calls this first. True when nothing is
/// left (or export is off).
bool flush_telemetry(std::chrono::milliseconds timeout);

/// What this process's span export has done so far (all 0 when it is off); the worker's
/// metrics carry the same as oncely_otel_spans_total.
struct SpanExportCounts {
  std::uint64_t exported = 0;               ///< spans a receiver accepted
  std::uint64_t dropped_queue_full = 0;     ///< dropped: the queue was full (the collector slow or down)
  std::uint64_t dropped_export_failed = 0;  ///< dropped: in a POST that failed
};
SpanExportCounts span_export_counts();

/// Enqueues jobs. With OTEL_EXPORTER_OTLP_ENDPOINT set, each enqueue is a `send` span and
/// the job carries its context (docs/opentelemetry.md). A Client owns one connection and is not thread-safe: give each
/// thread its own, or use the transactional overload with the thread's own transaction. Errors: oncely::ConfigError for
/// a job that cannot be valid (empty kind, priority out of range...), oncely::DatabaseError when the database rejects
/// it or cannot be reached.
class Client {
 public:
  explicit Client(DatabaseUrl url, std::string schema = std::string(kDefaultSchema), ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  /// Enqueues one job in its own transaction (one autocommit INSERT: one round trip);
  /// returns the new job id. A connection lost during the call leaves the outcome unknown
  /// (DatabaseError says so): enqueue again with the same idempotency key.
  std::int64_t enqueue(const NewJob& job);

  /// Transactional enqueue: the job exists if and only if `tx` commits. Uses only `tx`
  /// (not this Client's connection), so it works on any connection of the caller's.
  std::int64_t enqueue(pqxx::transaction_base& tx, const NewJob& job) const;

  /// enqueue() that also says what happened: with a unique_key, whether the job was
  /// inserted, an existing live job's id came back (skip), the waiting live job was
  /// replaced, or the live job is running and was left alone (replace). A unique enqueue
  /// always comes back with an id (on_conflict error aside: DatabaseError naming the live
  /// job); a producer that inserted the key and rolled back leaves it free.
  Enqueued enqueue_with_outcome(const NewJob& job);
  Enqueued enqueue_with_outcome(pqxx::transaction_base& tx, const NewJob& job) const;

  /// Enqueues many jobs in one transaction with COPY, all or none: far faster than one
  /// enqueue() per job, each of which is a transaction of its own (5,000 jobs: ~70 ms
  /// against ~2.7 s on a development machine). Returns the new ids, in the order of `jobs`. Every job is validated
  /// before anything is sent (ConfigError names it: "jobs[3].priority: ..."); a run_at the database cannot read is a
  /// ConfigError too. COPY cannot RETURN, so the ids are drawn from the jobs id sequence first: one extra round trip
  /// per call.
  std::vector<std::int64_t> enqueue_batch(const std::vector<NewJob>& jobs);

  /// Transactional batch enqueue: the jobs exist if and only if `tx` commits. A job the
  /// database rejects during the COPY aborts `tx` (as any failed statement does).
  std::vector<std::int64_t> enqueue_batch(pqxx::transaction_base& tx, const std::vector<NewJob>& jobs) const;

  /// Opens a batch (oncely/batches.hpp) and returns its id, for its members' NewJob::batch_id.
  /// ConfigError for a callback that is not a job description (the database's message).
  std::int64_t open_batch(const BatchCallbacks& callbacks);
  std::int64_t open_batch(pqxx::transaction_base& tx, const BatchCallbacks& callbacks) const;
  /// Closes batch `id`: no member may join it any more, and its callbacks are enqueued when
  /// its last member settles (at once, if every member has). Closing it again does nothing;
  /// ConfigError for a batch that does not exist.
  void close_batch(std::int64_t id);
  void close_batch(pqxx::transaction_base& tx, std::int64_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oncely
