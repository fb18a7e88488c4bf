#include "store/job_leases.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// The lease claim's two statements are the schema's functions lease_lock_ready() and
// lease_locked() (migration 18), which the SQL worker protocol's lease_jobs() calls too: one
// claim for C++ and SQL workers. Each is its own statement, so the second sees every lease
// committed before it began (the key locks the first takes make that enough).
constexpr std::string_view kLockReady = R"sql(
  SELECT id, priority, run_at_us
    FROM :ONCELY_SCHEMA.lease_lock_ready($1::text, $2::integer, $3::smallint, $4::bigint, $5::bigint)
)sql";

constexpr std::string_view kLease = R"sql(
  SELECT * FROM :ONCELY_SCHEMA.lease_locked($1::bigint[], $2::bigint, NULL, $3::bigint, $4::integer, $5::text)
)sql";

// The rows of (id, token) pairs still leased by their holder, locked in id order: the
// statements that lock held rows and wait (release, the lock before a settlement with
// effects or failures) do so in the same order. The renewal skips locked rows instead of
// waiting, and the completion's DELETE (the schema's complete_leases()) takes rows in no
// order: a completion never waits on a renewal, nor a renewal on a completion.
constexpr std::string_view kHeldRows = R"sql(
    SELECT j.id, h.token FROM unnest($1::bigint[], $2::bigint[]) AS h(id, token)
      JOIN :ONCELY_SCHEMA.jobs j ON j.id = h.id AND j.lease_token = h.token
     ORDER BY j.id
       FOR UPDATE OF j)sql";

// The held rows locked, for a settlement whose attempts have database effects or failures;
// and the transaction guarded as a transaction-mode batch's is (migration 0005): only the
// settlement may commit it, so an on_complete effect that runs COMMIT fails that COMMIT
// and its writes are undone with the rest, instead of committing without the completion.
std::string lock_held_sql() {
  return "\n  WITH held AS (" + std::string(kHeldRows) + R"sql(
  ), guarded AS (
    INSERT INTO :ONCELY_SCHEMA.commit_guards (xact) SELECT pg_current_xact_id() WHERE EXISTS (SELECT FROM held)
  )
  SELECT token FROM held
)sql";
}

// The guard's end: the settlement's own COMMIT follows.
constexpr std::string_view kUnguard = R"sql(
  DELETE FROM :ONCELY_SCHEMA.commit_guards WHERE xact = pg_current_xact_id()
)sql";

std::string with_held(std::string_view rest) {
  return "\n  WITH held AS (" + std::string(kHeldRows) + "\n  )" + std::string(rest);
}

// One statement per tick for every lease of the process: each pair still the holder's, and
// whether it was renewed. A row another transaction has locked (a settlement of this process,
// a handler's own complete_job() that has not committed yet, an operator) is skipped, not
// waited for: it is still held, and its lease is renewed at a later tick if it is still there
// (a renewal that waited held every other lease up with it). A pair not returned is lost.
std::string renew_sql() {
  return R"sql(
  WITH pairs AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS h(id, token, ms)
  ), held AS (
    SELECT j.id, h.token, h.ms FROM pairs h
      JOIN :ONCELY_SCHEMA.jobs j ON j.id = h.id AND j.lease_token = h.token
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
  ), renewed AS (
    UPDATE :ONCELY_SCHEMA.jobs j SET run_at = now() + held.ms * interval '1 millisecond'
      FROM held
     WHERE j.id = held.id
  )
  -- One hash join over the pairs; a pair not held is looked up by itself (OFFSET 0 keeps the
  -- EXISTS a per-row probe of the token index, not a hash of the whole jobs table). Written
  -- as NOT EXISTS over held, the planner rescanned held for every pair: 55 ms for 1,000 leases.
  SELECT h.token, held.token IS NOT NULL AS renewed
    FROM pairs h LEFT JOIN held ON held.token = h.token
   WHERE held.token IS NOT NULL
      OR EXISTS (SELECT FROM :ONCELY_SCHEMA.jobs j WHERE j.id = h.id AND j.lease_token = h.token OFFSET 0)
)sql";
}

// Fenced completion: the schema's complete_leases() (migrations 19 and 21), which the SQL
// worker protocol's complete_job() calls too: only rows whose token is still the holder's are
// completed, their markers inserted. A key processed meanwhile by another copy is nothing to
// do here, as at a claim: the job is done either way, and the claim deletes such copies
// before they are leased.
constexpr std::string_view kComplete = R"sql(
  SELECT lease_token FROM :ONCELY_SCHEMA.complete_leases($1::bigint[], $2::bigint[], $3::jsonb[],
                                                         ARRAY(SELECT us * interval '1 microsecond'
                                                                 FROM unnest($4::bigint[]) WITH ORDINALITY AS t(us, i)
                                                                ORDER BY i),
                                                         $5::text[], $6)
)sql";

// The attempt was counted at the claim: a failure only records its error. statement_timestamp():
// see kRetryJob in jobs.cpp.
constexpr std::string_view kRetry = R"sql(
  UPDATE :ONCELY_SCHEMA.jobs
     SET lease_token = NULL, leased_by = NULL, last_error = $3,
         errors = errors || jsonb_build_array(
                              :ONCELY_SCHEMA.error_entry(attempts, statement_timestamp(), $3::text, $4::text, $6::jsonb)),
         run_at = statement_timestamp() + $5::bigint * interval '1 millisecond'
   WHERE id = $1 AND lease_token = $2
)sql";

std::string release_sql() {
  return with_held(R"sql(
  UPDATE :ONCELY_SCHEMA.jobs j
     SET lease_token = NULL, leased_by = NULL, run_at = now(), attempts = greatest(j.attempts - 1, 0)
    FROM held WHERE j.id = held.id
)sql");
}

// The schema's limits_retry_in() (migration 23), in whole milliseconds rounded up.
constexpr std::string_view kLimitsRetryIn = R"sql(
  SELECT ceil(extract(epoch FROM :ONCELY_SCHEMA.limits_retry_in($1::text)) * 1000)::bigint
)sql";

// What the slot-freed triggers read (migration 25): this queue's freed slots are announced.
constexpr std::string_view kTakeBackFreedSlots = R"sql(
  SELECT set_config('oncely.slots_announced', $1::text, true)
)sql";

std::string ids_of(const std::vector<HeldLease>& held) {
  std::vector<std::int64_t> ids;
  ids.reserve(held.size());
  for (const auto& h : held) ids.push_back(h.job_id);
  return to_array_literal(ids);
}

std::string tokens_of(const std::vector<HeldLease>& held) {
  std::vector<std::int64_t> tokens;
  tokens.reserve(held.size());
  for (const auto& h : held) tokens.push_back(h.token);
  return to_array_literal(tokens);
}

std::vector<std::int64_t> first_column(const pqxx::result& rows) {
  std::vector<std::int64_t> ids;
  ids.reserve(rows.size());
  for (const auto& row : rows) ids.push_back(row[0].as<std::int64_t>());
  return ids;
}

}  // namespace

JobLeasesTable::JobLeasesTable(StatementSet& statements)
    : statements_(statements),
      lock_ready_(&statements.add("lease_lock_ready", kLockReady)),
      lease_(&statements.add("lease_claim", kLease)),
      renew_(&statements.add("lease_renew", renew_sql())),
      lock_held_(&statements.add("lease_lock_held", lock_held_sql())),
      unguard_(&statements.add("lease_unguard", kUnguard)),
      complete_(&statements.add("lease_complete", kComplete)),
      retry_(&statements.add("lease_retry", kRetry)),
      release_(&statements.add("lease_release", release_sql())),
      limits_retry_in_(&statements.add("lease_limits_retry_in", kLimitsRetryIn)),
      take_back_freed_slots_(&statements.add("lease_take_back_freed_slots", kTakeBackFreedSlots)) {}

LockedJobs JobLeasesTable::lock_ready(pqxx::transaction_base& tx, std::string_view queue, int limit,
                                      const std::optional<ClaimKey>& after) const {
  LockedJobs locked;
  for (const auto& row : statements_.run(tx, *lock_ready_, std::string(queue), limit,
                                         after ? std::optional<int>(after->priority) : std::nullopt,
                                         after ? std::optional<std::int64_t>(after->run_at_us) : std::nullopt,
                                         after ? std::optional<std::int64_t>(after->id) : std::nullopt)) {
    const auto id = row[0].as<std::int64_t>();
    locked.ids.push_back(id);
    locked.last =
        row[2].is_null() ? std::nullopt : std::optional(ClaimKey{row[1].as<int>(), row[2].as<std::int64_t>(), id});
  }
  return locked;
}

std::vector<LeasedJob> JobLeasesTable::lease(pqxx::transaction_base& tx, const std::vector<std::int64_t>& locked,
                                             std::int64_t worker_id, std::chrono::milliseconds lease,
                                             int default_max_attempts) const {
  static const std::string kExpired =
      "lease expired: its worker stopped renewing it (died, froze or lost the database)";
  std::vector<LeasedJob> jobs;
  const auto rows = statements_.run(tx, *lease_, to_array_literal(locked), worker_id,
                                    static_cast<std::int64_t>(lease.count()), default_max_attempts, kExpired);
  jobs.reserve(rows.size());
  for (const auto& r : rows) {
    LeasedJob l;
    const std::string kind = r[0].as<std::string>();
    l.kind = kind == "leased"      ? LeasedJob::Kind::leased
             : kind == "exhausted" ? LeasedJob::Kind::exhausted
                                   : LeasedJob::Kind::duplicate;
    l.job.id = r[1].as<std::int64_t>();
    l.job.kind = r[2].as<std::string>();
    if (!r[3].is_null()) l.job.payload_text = r[3].as<std::string>();
    if (!r[4].is_null()) l.job.idempotency_key = r[4].as<std::string>();
    if (!r[5].is_null()) l.job.attempts = r[5].as<int>();
    if (!r[6].is_null()) l.job.max_attempts = r[6].as<int>();
    if (!r[7].is_null()) l.token = r[7].as<std::int64_t>();
    if (!r[8].is_null()) l.job.waited_us = r[8].as<std::int64_t>();
    if (!r[9].is_null()) l.job.origin_job_id = r[9].as<std::int64_t>();
    l.took_expired = r[10].as<bool>();
    if (!r[11].is_null()) l.previous_holder = r[11].as<std::int64_t>();
    if (!r[12].is_null()) l.job.trace_context = r[12].as<std::string>();
    l.job.claimed_attempts = l.job.attempts;
    jobs.push_back(std::move(l));
  }
  return jobs;
}

RenewedLeases JobLeasesTable::renew(pqxx::transaction_base& tx, const std::vector<HeldLease>& held,
                                    const std::vector<std::chrono::milliseconds>& durations) const {
  std::vector<std::int64_t> ms;
  ms.reserve(durations.size());
  for (const auto d : durations) ms.push_back(d.count());
  RenewedLeases result;
  for (const auto& row : statements_.run(tx, *renew_, ids_of(held), tokens_of(held), to_array_literal(ms))) {
    (row[1].as<bool>() ? result.renewed : result.skipped).push_back(row[0].as<std::int64_t>());
  }
  return result;
}

std::vector<std::int64_t> JobLeasesTable::lock_held(pqxx::transaction_base& tx,
                                                    const std::vector<HeldLease>& held) const {
  return first_column(statements_.run(tx, *lock_held_, ids_of(held), tokens_of(held)));
}

void JobLeasesTable::unguard(pqxx::transaction_base& tx) const { statements_.run(tx, *unguard_); }

std::vector<std::int64_t> JobLeasesTable::complete(pqxx::transaction_base& tx, const std::vector<HeldLease>& held,
                                                   const std::vector<CompletionRecord>& records,
                                                   std::string_view worker) const {
  std::vector<std::optional<std::string>> outputs;
  std::vector<std::int64_t> run_us;
  std::vector<std::optional<std::string>> trace_ids;
  for (const CompletionRecord& r : records) {
    outputs.push_back(r.output);
    run_us.push_back(r.run_time_us);
    trace_ids.push_back(r.trace_id);
  }
  return first_column(statements_.run(tx, *complete_, ids_of(held), tokens_of(held), to_array_literal(outputs),
                                      to_array_literal(run_us), to_array_literal(trace_ids),
                                      worker.empty() ? std::nullopt : std::optional<std::string>(std::string(worker))));
}

void JobLeasesTable::retry(pqxx::transaction_base& tx, const HeldLease& held, const FailureRecord& failure,
                           std::chrono::milliseconds delay) const {
  statements_.run(
      tx, *retry_, held.job_id, held.token, failure.error, failure.attempt_class.value_or("retryable"),
      static_cast<std::int64_t>(delay.count()),
      failure.detail.contains("stack") ? std::optional<std::string>(failure.detail["stack"].dump()) : std::nullopt);
}

long JobLeasesTable::release(pqxx::transaction_base& tx, const std::vector<HeldLease>& held) const {
  return static_cast<long>(statements_.run(tx, *release_, ids_of(held), tokens_of(held)).affected_rows());
}

std::optional<std::chrono::milliseconds> JobLeasesTable::limits_retry_in(pqxx::transaction_base& tx,
                                                                         std::string_view queue) const {
  const pqxx::result r = statements_.run(tx, *limits_retry_in_, std::string(queue));
  if (r.empty() || r[0][0].is_null()) return std::nullopt;
  return std::chrono::milliseconds(r[0][0].as<std::int64_t>());
}

void JobLeasesTable::take_back_freed_slots(pqxx::transaction_base& tx, std::string_view queue) const {
  statements_.run(tx, *take_back_freed_slots_, std::string(queue));
}

}  // namespace oncely::detail
