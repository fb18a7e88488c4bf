#pragma once
// The values that pass between the tables' statements and the executor: a claimed job, the
// claim order's key, what other attempt records say, a failure to write, a transaction's
// outcome counts. Plain data, no I/O.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace oncely::detail {

/// A job's position in a queue's claim order (the claim index: priority, run_at, id).
struct ClaimKey {
  int priority = 0;
  std::int64_t run_at_us = 0;  // microseconds since the Unix epoch, exact
  std::int64_t id = 0;
};

/// A job as the claim returns it, locked by the claiming transaction.
struct ClaimedJob {
  std::int64_t id = 0;
  std::string kind;
  std::string payload_text;  // jsonb's text of the payload: every number exact
  std::optional<std::string> idempotency_key;
  int attempts = 0;                           // failed attempts recorded before this claim
  std::optional<int> max_attempts;            // null: the queue's default
  std::optional<std::string> marker;          // ctid of the dedup marker this claim inserted
  int claimed_attempts = 0;                   // attempts as the claim read them (before any fold)
  int interrupted = 0;                        // unfinished attempts charged to it (single-job records)
  bool suspect = false;                       // named by a record of an attempt that never finished
  std::int64_t waited_us = 0;                 // created_at to the claim
  std::optional<ClaimKey> key;                // where it stands in the queue's claim order (none: run_at infinite)
  std::optional<std::int64_t> origin_job_id;  // a replay: the job first enqueued (its id is the key)
  std::optional<std::string> trace_context;   // the producer's W3C traceparent (schema version 8)

  /// Its key was already processed (or is being processed by a job that committed first).
  [[nodiscard]] bool duplicate() const { return idempotency_key.has_value() && !marker.has_value(); }
  /// The key handlers see and pass downstream: the producer's, or the job id.
  /// A job without a key is keyed by its id, and a replay of it by the id of the job first
  /// enqueued, so that the key stays the same through replays.
  [[nodiscard]] std::string effective_key() const {
    return idempotency_key ? *idempotency_key : std::to_string(origin_job_id.value_or(id));
  }
};

/// What the attempt records of transactions that never finished say about one job.
struct UnfinishedAttempts {
  std::int64_t job_id = 0;
  int alone = 0;    // records naming only this job, run exclusively: each is an attempt of its own that crashed
                    // (any other record says only that a job of its process crashed it)
  int crashes = 1;  // records naming this job, of every kind: the crashes it was in flight for
  int narrowest_isolated = 0;  // the fewest jobs of a record of an isolated group naming it (0: none)
};

/// The per-transaction limits every job transaction sets (SET LOCAL), as Postgres text.
struct TransactionLimits {
  std::string statement_timeout;                    // e.g. "300000" (ms)
  std::string idle_in_transaction_session_timeout;  // e.g. "301000": job_timeout + 1 s
  std::string client_connection_check_interval;     // e.g. "2000"
};

/// A failed attempt to record (retry) or to dead-letter.
struct FailureRecord {
  std::int64_t job_id = 0;
  std::optional<std::string> marker;                 // the claim's marker, deleted with the failure
  int attempts = 0;                                  // the job's attempts after this failure
  std::string error;                                 // last_error, one line
  std::optional<std::string> attempt_class;          // class of this attempt's errors[] entry; none: no entry
  std::string dead_letter_class;                     // dead_letter_job only: "permanent", "exhausted", ...
  nlohmann::json detail = nlohmann::json::object();  // "stack": also this attempt's errors[] entry's
};

/// What a completed attempt leaves in its job's record (processed_jobs, schema 27), beyond
/// what the job itself says.
struct CompletionRecord {
  int attempt = 0;                      // the attempt that completed (1 for the first)
  std::int64_t run_time_us = 0;         // its handler's run time
  std::optional<std::string> trace_id;  // the attempt's trace (none: the job's own)
  std::optional<std::string> output;    // JSON text, checked by JobContext::set_output
};

/// A transaction-mode job its batch completed, and what its completion row says of it.
struct CompletedAttempt {
  std::int64_t job_id = 0;
  CompletionRecord record;
};

/// What one transaction did to a queue's jobs, for job_stats.
struct OutcomeCounts {
  long completed = 0;
  long deduplicated = 0;
  long retried = 0;
  long dead_lettered = 0;
  long crashed = 0;      // unfinished attempts found and counted
  long run_time_us = 0;  // handler time of the completed jobs

  OutcomeCounts& operator+=(const OutcomeCounts& o) noexcept {
    completed += o.completed;
    deduplicated += o.deduplicated;
    retried += o.retried;
    dead_lettered += o.dead_lettered;
    crashed += o.crashed;
    run_time_us += o.run_time_us;
    return *this;
  }
  [[nodiscard]] bool empty() const noexcept {
    return completed == 0 && deduplicated == 0 && retried == 0 && dead_lettered == 0 && crashed == 0;
  }
};

}  // namespace oncely::detail
