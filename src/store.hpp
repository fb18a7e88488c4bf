#pragma once
// Store: THE place for runtime SQL. Every statement the library runs at run time is a
// named constant in store.cpp, rendered for one schema when the Store is built; callers
// use the typed functions below and never assemble SQL.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/connection>
#include <pqxx/transaction_base>

#include "oncely/client.hpp"

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
  std::string payload_text;            // jsonb's text of the payload: every number exact
  std::optional<std::string> idempotency_key;
  int attempts = 0;                    // failed attempts recorded before this claim
  std::optional<int> max_attempts;     // null: the queue's default
  std::optional<std::string> marker;   // ctid of the dedup marker this claim inserted
  int claimed_attempts = 0;            // attempts as the claim read them (before any fold)
  int interrupted = 0;                 // unfinished attempts charged to it (single-job records)
  bool suspect = false;                // named by a record of an attempt that never finished
  std::int64_t waited_us = 0;          // created_at to the claim
  std::optional<ClaimKey> key;         // where it stands in the queue's claim order (none: run_at infinite)
  std::optional<std::int64_t> origin_job_id;  // a replay: the job first enqueued (its id is the key)

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
  int shared = 0;   // other records: a job of their process crashed it, not known which
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
  std::optional<std::string> marker;          // the claim's marker, deleted with the failure
  int attempts = 0;                           // the job's attempts after this failure
  std::string error;                          // last_error, one line
  std::optional<std::string> attempt_class;   // class of this attempt's errors[] entry; none: no entry
  std::string dead_letter_class;              // dead_letter_job only: "permanent", "exhausted", ...
  nlohmann::json detail = nlohmann::json::object();
};

/// What one transaction did to a queue's jobs, for job_stats.
struct OutcomeCounts {
  long completed = 0;
  long deduplicated = 0;
  long retried = 0;
  long dead_lettered = 0;
  long crashed = 0;      // unfinished attempts found and counted
  long run_time_us = 0;  // handler time of the completed jobs
};

class Store {
 public:
  /// `prepared`: run statements as named prepared statements (prepare() once per
  /// connection). Off for transaction-mode poolers that cannot carry them.
  explicit Store(std::string_view schema, bool prepared = false);
  // all_ points into this object: it cannot be copied or moved.
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  [[nodiscard]] const std::string& schema() const noexcept { return schema_; }

  /// Prepares every runtime statement on `conn` (a no-op when prepared statements are off).
  void prepare(pqxx::connection& conn) const;

  // ---- enqueue ----
  /// INSERT one job; returns its id. Validates what the database would reject less clearly.
  /// Runs on any connection (unnamed statement).
  std::int64_t enqueue(pqxx::transaction_base& tx, const NewJob& job) const;
  /// The same on a connection given to prepare(): a prepared statement when they are on.
  std::int64_t enqueue_prepared(pqxx::transaction_base& tx, const NewJob& job) const;

  // ---- the job transaction ----
  /// Locks up to `limit` ready jobs of `queue` (SKIP LOCKED), inserts their dedup markers,
  /// and sets the transaction's limits. Duplicates come back with duplicate() true. Jobs come
  /// in claim order; with `after`, only jobs after that key are considered.
  std::vector<ClaimedJob> claim(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                const TransactionLimits& limits, const std::optional<ClaimKey>& after) const;
  /// The ids of up to `limit` ready jobs of `queue`, locked (SKIP LOCKED), in claim order,
  /// without markers or limits: for claiming them one at a time after claim() failed.
  std::vector<std::int64_t> lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit) const;
  /// The same for one job by id (running a suspect alone), if it is still there and free.
  std::vector<ClaimedJob> claim_by_id(pqxx::transaction_base& tx, std::int64_t id, const TransactionLimits& limits) const;
  /// Charges unfinished attempts to jobs.attempts/errors (`jobs` holds (id, count); a count
  /// may be 0) and removes those jobs from every other attempt record. Returns the new
  /// attempts of the jobs charged.
  std::vector<std::pair<std::int64_t, int>> fold_interrupted(pqxx::transaction_base& tx,
                                                             const std::vector<std::pair<std::int64_t, int>>& jobs,
                                                             std::int64_t own_slot) const;
  /// Deletes completed and duplicate jobs, deletes the markers of jobs released unstarted,
  /// adds the batch's outcomes to job_stats and empties this thread's attempt record, in
  /// one statement.
  void complete_batch(pqxx::transaction_base& tx, const std::vector<std::int64_t>& finished_ids,
                      const std::vector<std::string>& released_markers, std::int64_t slot, std::string_view queue,
                      const OutcomeCounts& counts) const;
  /// Adds outcomes to job_stats (for transactions other than a batch's completion).
  void count_outcomes(pqxx::transaction_base& tx, std::int64_t slot, std::string_view queue,
                      const OutcomeCounts& counts) const;
  /// Records a retryable failure: attempts, errors, last_error, run_at = now() + delay.
  void retry_job(pqxx::transaction_base& tx, const FailureRecord& failure, std::chrono::milliseconds delay) const;
  /// Moves a job to dead_letters in the current transaction.
  void dead_letter_job(pqxx::transaction_base& tx, const FailureRecord& failure) const;
  /// The same for a job that could not be claimed (so never ran): its attempts stay as
  /// they are, and no errors[] entry is added.
  void dead_letter_unclaimed(pqxx::transaction_base& tx, std::int64_t id, const std::string& error,
                             const std::string& dead_letter_class, const nlohmann::json& detail) const;
  /// Re-locks one job by id after its batch transaction was lost, if its attempts are still
  /// `seen_attempts` (nobody else moved it meanwhile). Returns whether it was locked.
  bool relock_job(pqxx::transaction_base& tx, std::int64_t id, int seen_attempts) const;

  // ---- the attempt record (autocommit, on the thread's second connection) ----
  std::int64_t create_slot(pqxx::transaction_base& tx, std::int64_t worker_id) const;
  /// Writes `job_ids` into the thread's slot, with the backend pid of the connection whose
  /// transaction runs them; returns, per job, what other slots hold for it whose backend is
  /// gone (records of attempts whose transactions never finished). `exclusive`: the batch
  /// runs with nothing else in flight in this process (AttributionGate).
  std::vector<UnfinishedAttempts> record_attempts(pqxx::transaction_base& tx, std::int64_t slot, std::int64_t worker_id,
                                                  const std::vector<std::int64_t>& job_ids, int job_backend_pid,
                                                  bool exclusive) const;
  void clear_slot(pqxx::transaction_base& tx, std::int64_t slot) const;
  /// After a batch transaction was lost: keep in the record only the jobs whose handler
  /// had started (their attempts count). A no-op if the batch committed after all.
  void narrow_slot(pqxx::transaction_base& tx, std::int64_t slot, const std::vector<std::int64_t>& started) const;
  void delete_slot(pqxx::transaction_base& tx, std::int64_t slot) const;

  // ---- worker registry ----
  std::int64_t register_worker(pqxx::transaction_base& tx, const std::string& host, int pid,
                               const std::vector<std::string>& queues) const;
  /// Refreshes the registration (re-creating it if it was removed as stale).
  void heartbeat(pqxx::transaction_base& tx, std::int64_t worker_id, int jobs_in_flight, const std::string& host,
                 int pid, const std::vector<std::string>& queues) const;
  void unregister_worker(pqxx::transaction_base& tx, std::int64_t worker_id) const;
  /// Removes workers whose heartbeat is older than `stale_after`, and attempt records that
  /// can no longer matter (empty ones of gone workers; ones whose jobs are all gone).
  void remove_stale_workers(pqxx::transaction_base& tx, std::chrono::milliseconds stale_after) const;

  // ---- maintenance ----
  /// Takes (or confirms) this session's hold on the schema's metrics leadership: a
  /// session-level lock, kept until the connection closes. Not for pooled connections.
  bool try_metrics_leadership(pqxx::transaction_base& tx) const;
  /// Takes this schema's maintenance lock for the rest of `tx` if nobody holds it.
  bool try_maintenance_lock(pqxx::transaction_base& tx) const;
  /// Deletes up to `limit` dedup markers older than `window`; returns how many.
  long prune_markers(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;
  /// Deletes up to `limit` job_stats rows older than `window`; returns how many.
  long prune_stats(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const;

  /// The schema version recorded in the database (0 if none).
  int schema_version(pqxx::transaction_base& tx) const;

 private:
  struct Statement {
    std::string name;
    std::string sql;
  };
  Statement statement(std::string_view name, std::string_view sql) const;
  template <typename... Args>
  pqxx::result run(pqxx::transaction_base& tx, const Statement& s, Args&&... args) const;

  std::string schema_;
  bool prepared_;
  Statement enqueue_, claim_, lock_ready_, claim_by_id_, fold_interrupted_, complete_batch_, retry_job_, count_outcomes_, dead_letter_job_, relock_job_,
      create_slot_, record_attempts_, clear_slot_, narrow_slot_, delete_slot_, register_worker_, heartbeat_, unregister_worker_,
      remove_stale_workers_, try_metrics_leadership_, try_maintenance_lock_, prune_markers_, prune_stats_, schema_version_;
  std::vector<const Statement*> all_;
};

/// Bounds on what a jobs row may hold (CHECK constraints of migration 0005): the claim puts
/// (kind, idempotency_key) into one btree entry and the claim index holds the queue name.
inline constexpr std::size_t kMaxQueueBytes = 128;
inline constexpr std::size_t kMaxKindBytes = 255;
inline constexpr std::size_t kMaxIdempotencyKeyBytes = 1024;

/// Throws ConfigError when `job` cannot be a valid row (empty kind or queue, empty key,
/// names and keys over their bounds, priority outside smallint, max_attempts < 1, a
/// payload_json that is not JSON jsonb can store).
void validate_new_job(const NewJob& job);
/// The same without the check of payload_json (for callers that produced it themselves).
void validate_job_fields(const NewJob& job);

/// The payload's JSON text as it is sent: payload_json as given, else `payload` serialised
/// (with every non-ASCII character escaped when `ascii`).
[[nodiscard]] std::string payload_text(const NewJob& job, bool ascii = false);

/// Postgres array literals for parameters ("{1,2,3}", "{\"a\",\"b\"}").
std::string to_array_literal(const std::vector<std::int64_t>& values);
std::string to_array_literal(const std::vector<std::string>& values);
std::string to_array_literal(const std::vector<int>& values);

}  // namespace oncely::detail
