#include "store/job_control.hpp"

#include <algorithm>
#include <tuple>

#include <set>

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/dead_letters.hpp"
#include "store/jobs.hpp"
#include "store/store.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The jobs a registered worker holds in a transaction-mode batch right now: named in its
// attempt record (written before its handlers run, deleted by the batch's COMMIT). A few
// ids per worker thread: one small array.
constexpr std::string_view kHeld = R"sql(held AS MATERIALIZED (
    SELECT coalesce(array_agg(x), '{}') AS ids
      FROM :ONCELY_SCHEMA.attempts_in_flight f
      JOIN :ONCELY_SCHEMA.workers w ON w.id = f.worker_id
     CROSS JOIN LATERAL unnest(f.job_ids) AS x
  ))sql";

// A waiting job's parents that have not completed yet (its open edges, by the primary key),
// as text: "{12,13}".
constexpr std::string_view kWaitingFor = R"sql(CASE WHEN j.parents_left IS NULL THEN '{}' ELSE ARRAY(
    SELECT x FROM unnest(j.depends_on) AS x
     WHERE EXISTS (SELECT FROM :ONCELY_SCHEMA.job_parents p WHERE p.parent_id = x AND p.child_id = j.id)
     ORDER BY x)::text END)sql";

// A job's state (see oncely/jobs.hpp), over `jobs j CROSS JOIN held h`.
constexpr std::string_view kState = R"sql(CASE
    WHEN j.id = ANY (h.ids) OR (j.lease_token IS NOT NULL AND j.run_at > now()) THEN 'running'
    WHEN j.parents_left IS NOT NULL THEN 'waiting'
    WHEN j.run_at <= now() THEN 'ready'
    WHEN j.attempts = 0 THEN 'scheduled'
    ELSE 'retrying' END)sql";

// The selection every statement shares. $1 ids (bigint[]), $2 queue, $3 kind, $4 state,
// $5 error text (case-insensitive substring of last_error), $6 older than (ms, by
// created_at), $7 batch id (its members: the partial index of members); NULL: any. Statements run unprepared, so each
// is planned with its values and an unused criterion folds away. The state is also said in terms an index can serve:
// run_at against now() (the claim index, with a queue), and for running (kRunningOnly, in
// the statements' running variant) the few ids held or leased, looked up by primary key.
constexpr std::string_view kFilter = R"sql(
       ($1::bigint[] IS NULL OR j.id = ANY ($1::bigint[]))
   AND ($2::text IS NULL OR j.queue = $2)
   AND ($3::text IS NULL OR j.kind = $3)
   AND ($4::text IS NULL OR :STATE = $4)
:RUNNING_ONLY   AND ($4::text IS DISTINCT FROM 'ready' OR j.run_at <= now())
   AND ($4::text IS NULL OR $4 NOT IN ('scheduled', 'retrying') OR j.run_at > now())
   AND ($5::text IS NULL OR strpos(lower(j.last_error), lower($5)) > 0)
   AND ($6::bigint IS NULL OR j.created_at < now() - $6 * interval '1 millisecond')
   AND ($7::bigint IS NULL OR j.batch_id = $7)
)sql";

// The running variant's extra condition: the ids held (attempt records) or leased (the
// partial index of leased rows), a semi-join driven by those few ids. A condition of its
// own, at the top level: inside an OR that only folds away at planning, Postgres keeps it
// as a filter over every row.
constexpr std::string_view kRunningOnly = R"sql(   AND j.id IN (
         SELECT unnest(held.ids) FROM held
         UNION ALL
         SELECT l.id FROM :ONCELY_SCHEMA.jobs l WHERE l.lease_token IS NOT NULL AND l.run_at > now())
)sql";

// Keyset paging by id: the primary key serves both the order and the start ($8, after).
constexpr std::string_view kListJobs = R"sql(
  WITH :HELD
  SELECT j.id, j.queue, j.kind, :STATE, j.priority, j.attempts, j.max_attempts,
         to_char(coalesce(j.run_after, j.run_at) AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(j.created_at AT TIME ZONE 'UTC', :ISO_UTC), j.idempotency_key, j.unique_key, j.last_error,
         :WAITING_FOR, j.batch_id
    FROM :ONCELY_SCHEMA.jobs j CROSS JOIN held h
   WHERE :FILTER
     AND ($8::bigint IS NULL OR j.id > $8)
   ORDER BY j.id
   LIMIT $9
)sql";

// "The same error": errors that differ only in numbers group together, folded as the
// dead letters' stored error_pattern is (:ERROR_PATTERN, error_pattern_sql). $8: limit.
constexpr std::string_view kGroupJobs = R"sql(
  WITH :HELD, selected AS (
    SELECT :ERROR_PATTERN AS key, j.id
      FROM :ONCELY_SCHEMA.jobs j CROSS JOIN held h
     WHERE :FILTER
  ), groups AS (
    SELECT key, count(*) AS n, max(id) AS example_id FROM selected GROUP BY key
  )
  SELECT g.key, g.n, g.example_id, e.last_error
    FROM groups g JOIN :ONCELY_SCHEMA.jobs e ON e.id = g.example_id
   ORDER BY g.n DESC, g.key
   LIMIT $8
)sql";

constexpr std::string_view kShowJob = R"sql(
  WITH :HELD
  SELECT j.id, j.queue, j.kind, :STATE, j.priority, j.attempts, j.max_attempts,
         to_char(coalesce(j.run_after, j.run_at) AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(j.created_at AT TIME ZONE 'UTC', :ISO_UTC), j.idempotency_key, j.unique_key, j.last_error,
         :WAITING_FOR, j.batch_id,
         j.payload::text, j.errors::text, j.origin_job_id,
         (SELECT f.worker_id FROM :ONCELY_SCHEMA.attempts_in_flight f
            JOIN :ONCELY_SCHEMA.workers w ON w.id = f.worker_id
           WHERE j.id = ANY (f.job_ids) LIMIT 1),
         j.lease_token, j.leased_by, j.lease_token IS NOT NULL AND j.run_at > now()
    FROM :ONCELY_SCHEMA.jobs j CROSS JOIN held h
   WHERE j.id = $1
)sql";

// The cancel, one statement: lock what the filter selects (SKIP LOCKED: a row a worker's
// batch has locked is that batch's, and the claim skips what we lock, so a job is either
// run or cancelled, never both), move each to dead_letters with the dead-letter move,
// dead_letter_job() (migration 18: the same columns, trace_context and origin_job_id too),
// saying who cancelled it ($8) and in which state, and drop a dedup marker it committed (a
// lease-mode claim's), so that its replay is not taken for a duplicate. A live lease is not a row lock: such a job is
// cancelled. Locks in id order: two cancels of overlapping sets cannot deadlock.
constexpr std::string_view kCancelJobs = R"sql(
  WITH :HELD, selected AS (
    SELECT j.id, :STATE AS state
      FROM :ONCELY_SCHEMA.jobs j CROSS JOIN held h
     WHERE :FILTER
  ), locked AS (
    SELECT j.id FROM :ONCELY_SCHEMA.jobs j
     WHERE j.id IN (SELECT id FROM selected)
     ORDER BY j.id
       FOR UPDATE SKIP LOCKED
  ), unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs p USING :ONCELY_SCHEMA.jobs m
     WHERE m.id IN (SELECT id FROM locked)
       AND p.kind = m.kind AND p.idempotency_key = m.idempotency_key AND p.job_id = m.id
  ), buried AS MATERIALIZED (
    SELECT j.id AS job_id,
           :ONCELY_SCHEMA.dead_letter_job(
             j.id, NULL, 'cancelled by ' || $8::text, 'cancelled', NULL,
             jsonb_build_object('cancelled_by', $8::text, 'state', (SELECT s.state FROM selected s WHERE s.id = j.id),
                                'last_error', j.last_error, 'unique_key', j.unique_key))
      FROM :ONCELY_SCHEMA.jobs j WHERE j.id IN (SELECT id FROM locked)
  )
  SELECT s.id, b.job_id IS NOT NULL
    FROM selected s LEFT JOIN buried b ON b.job_id = s.id
   ORDER BY s.id
)sql";

// After the cancel, with a new snapshot: of the jobs it could not lock, those still there
// are locked by a worker's batch (running); the others completed meanwhile.
constexpr std::string_view kStillThere = R"sql(
  SELECT id FROM :ONCELY_SCHEMA.jobs WHERE id = ANY ($1::bigint[]) ORDER BY id
)sql";

// --dry-run: nothing locked. Held in a transaction-mode batch: left alone; every other
// selected job (a live lease too) would be cancelled.
constexpr std::string_view kCancelDryRun = R"sql(
  WITH :HELD
  SELECT j.id, j.id = ANY (h.ids)
    FROM :ONCELY_SCHEMA.jobs j CROSS JOIN held h
   WHERE :FILTER
   ORDER BY j.id
)sql";

// The waiting descendants of jobs $1 (migration 24): a cancelled parent takes them along.
constexpr std::string_view kWaitingDescendants = R"sql(
  WITH RECURSIVE descendants(id) AS (
    SELECT p.child_id FROM :ONCELY_SCHEMA.job_parents p WHERE p.parent_id = ANY ($1::bigint[])
    UNION
    SELECT p.child_id FROM :ONCELY_SCHEMA.job_parents p JOIN descendants d ON p.parent_id = d.id
  )
  SELECT id FROM descendants WHERE id <> ALL ($1::bigint[]) ORDER BY id
)sql";

// Who cancels, as the database knows the session.
constexpr std::string_view kWho =
    "current_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', '')";

constexpr std::string_view kEnqueueUnique = R"sql(
  SELECT id, outcome
    FROM :ONCELY_SCHEMA.enqueue_unique($1, $2::jsonb, $3, $4,
                                       coalesce($5::timestamptz, now()) + $6::bigint * interval '1 millisecond',
                                       $7, $8, $9, $10)
)sql";

std::string render(std::string_view sql, std::string_view schema, bool running_only = false) {
  std::string text(sql);
  replace_all(text, ":HELD", kHeld);
  replace_all(text, ":FILTER", kFilter);
  replace_all(text, ":RUNNING_ONLY", running_only ? kRunningOnly : "");
  replace_all(text, ":STATE", kState);
  replace_all(text, ":WAITING_FOR", kWaitingFor);
  replace_all(text, ":ERROR_PATTERN", error_pattern_sql("j.last_error"));
  return render_statement(text, schema);
}

std::optional<std::int64_t> to_ms(const std::optional<std::chrono::milliseconds>& d) {
  return d ? std::optional<std::int64_t>(d->count()) : std::nullopt;
}

/// $1..$7 for kFilter.
auto filter_params(const JobFilter& f) {
  return std::make_tuple(f.ids.empty() ? std::nullopt : std::optional<std::string>(to_array_literal(f.ids)), f.queue,
                         f.kind, f.state ? std::optional<std::string>(std::string(to_string(*f.state))) : std::nullopt,
                         f.error_text, to_ms(f.older_than), f.batch_id);
}

template <typename... Extra>
pqxx::result run(pqxx::transaction_base& tx, const std::string& sql, const JobFilter& f, Extra&&... extra) {
  return std::apply([&](auto&&... params) { return tx.exec_params(sql, params..., std::forward<Extra>(extra)...); },
                    filter_params(f));
}

/// "{12,13}" -> {12, 13}.
std::vector<std::int64_t> parse_id_array(std::string_view text) {
  std::vector<std::int64_t> ids;
  std::size_t at = 1;
  while (at + 1 < text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size() - 1);
    ids.push_back(std::stoll(std::string(text.substr(at, comma - at))));
    at = comma + 1;
  }
  return ids;
}

JobSummary summary_of(const pqxx::row& r) {
  JobSummary s;
  s.id = r[0].as<std::int64_t>();
  s.queue = r[1].as<std::string>();
  s.kind = r[2].as<std::string>();
  s.state = parse_job_state(r[3].as<std::string>());
  s.priority = r[4].as<int>();
  s.attempts = r[5].as<int>();
  s.max_attempts = nullable<int>(r[6]);
  s.run_at = r[7].as<std::string>();
  s.created_at = r[8].as<std::string>();
  s.idempotency_key = nullable<std::string>(r[9]);
  s.unique_key = nullable<std::string>(r[10]);
  s.last_error = nullable<std::string>(r[11]);
  s.waiting_for = parse_id_array(r[12].as<std::string>());
  s.batch_id = nullable<std::int64_t>(r[13]);
  return s;
}

}  // namespace

Enqueued enqueue_unique(pqxx::transaction_base& tx, const Store& store, const NewJob& job) {
  const auto [id, outcome] = store.job_control.enqueue_unique(tx, job, payload_text(job));
  const EnqueueOutcome o = outcome == "inserted"   ? EnqueueOutcome::inserted
                           : outcome == "existing" ? EnqueueOutcome::existing
                           : outcome == "replaced" ? EnqueueOutcome::replaced
                                                   : EnqueueOutcome::running;
  return {id, o};
}

void validate_job_filter(const JobFilter& f) {
  const auto not_empty = [](const std::optional<std::string>& v, const char* name) {
    if (v && v->empty()) throw ConfigError(name, "must not be empty");
  };
  not_empty(f.queue, "queue");
  not_empty(f.kind, "kind");
  not_empty(f.error_text, "error");
  if (f.older_than && f.older_than->count() < 0) throw ConfigError("older_than", "must not be negative");
  for (const auto id : f.ids) {
    if (id <= 0) throw ConfigError("id", "must be positive");
  }
  if (f.batch_id && *f.batch_id <= 0) throw ConfigError("batch", "must be positive");
}

JobControl::Variants::Variants(std::string_view sql, std::string_view schema)
    : any(render(sql, schema)), running(render(sql, schema, true)) {}

JobControl::JobControl(StatementSet& statements)
    : list_(kListJobs, statements.schema()),
      group_(kGroupJobs, statements.schema()),
      cancel_(kCancelJobs, statements.schema()),
      dry_run_(kCancelDryRun, statements.schema()),
      show_(render(kShowJob, statements.schema())),
      show_without_payload_(show_),
      still_there_(render(kStillThere, statements.schema())),
      waiting_descendants_(render(kWaitingDescendants, statements.schema())),
      enqueue_unique_(render(kEnqueueUnique, statements.schema())) {
  for (std::string* sql : {&cancel_.any, &cancel_.running})
    replace_all(*sql, "$8::text", "(" + std::string(kWho) + ")");
  // Not even named: a role without SELECT on the payload column (the viewer's) may run it.
  replace_all(show_without_payload_, "j.payload::text", "NULL::text");
}

JobPage JobControl::list(pqxx::transaction_base& tx, const JobFilter& filter, long limit,
                         std::optional<std::int64_t> after) const {
  JobPage page;
  for (const auto& r : run(tx, list_.of(filter), filter, after, static_cast<std::int64_t>(limit)))
    page.jobs.push_back(summary_of(r));
  if (static_cast<long>(page.jobs.size()) == limit && !page.jobs.empty()) page.next_after = page.jobs.back().id;
  return page;
}

std::vector<JobErrorGroup> JobControl::group_by_error(pqxx::transaction_base& tx, const JobFilter& filter,
                                                      long limit) const {
  std::vector<JobErrorGroup> groups;
  for (const auto& r : run(tx, group_.of(filter), filter, static_cast<std::int64_t>(limit))) {
    groups.push_back({r[0].as<std::string>(), r[1].as<long>(), r[2].as<std::int64_t>(), nullable<std::string>(r[3])});
  }
  return groups;
}

std::optional<JobDetail> JobControl::show(pqxx::transaction_base& tx, std::int64_t id, bool with_payload) const {
  const pqxx::result rows = tx.exec_params(with_payload ? show_ : show_without_payload_, id);
  if (rows.empty()) return std::nullopt;
  const pqxx::row r = rows[0];
  JobDetail d;
  d.summary = summary_of(r);
  d.payload_hidden = r[14].is_null();
  if (!d.payload_hidden) d.payload_text = r[14].as<std::string>();
  d.errors_text = r[15].as<std::string>();
  d.origin_job_id = nullable<std::int64_t>(r[16]);
  d.held_by_worker = nullable<std::int64_t>(r[17]);
  d.lease_token = nullable<std::int64_t>(r[18]);
  d.leased_by = nullable<std::int64_t>(r[19]);
  d.lease_live = r[20].as<bool>();
  return d;
}

std::vector<std::int64_t> JobControl::waiting_descendants(pqxx::transaction_base& tx,
                                                          const std::vector<std::int64_t>& ids) const {
  std::vector<std::int64_t> out;
  if (ids.empty()) return out;
  for (const auto& r : tx.exec_params(waiting_descendants_, to_array_literal(ids))) {
    out.push_back(r[0].as<std::int64_t>());
  }
  return out;
}

CancelResult JobControl::cancel(pqxx::transaction_base& tx, const JobFilter& filter) const {
  CancelResult result;
  // The waiting descendants of what the filter selects, before the cancel takes them along.
  std::vector<std::int64_t> selected;
  for (const auto& r : run(tx, dry_run_.of(filter), filter)) selected.push_back(r[0].as<std::int64_t>());
  const std::vector<std::int64_t> descendants = waiting_descendants(tx, selected);
  std::vector<std::int64_t> not_locked;
  for (const auto& r : run(tx, cancel_.of(filter), filter)) {
    (r[1].as<bool>() ? result.cancelled : not_locked).push_back(r[0].as<std::int64_t>());
  }
  if (!descendants.empty()) {
    std::set<std::int64_t> left(result.cancelled.begin(), result.cancelled.end());
    for (const auto& r : tx.exec_params(still_there_, to_array_literal(descendants)))
      left.insert(r[0].as<std::int64_t>());
    for (const std::int64_t id : descendants) {
      if (!left.contains(id)) result.descendants.push_back(id);
    }
  }
  if (!not_locked.empty()) {
    for (const auto& r : tx.exec_params(still_there_, to_array_literal(not_locked))) {
      result.running.push_back(r[0].as<std::int64_t>());
    }
  }
  result.gone = static_cast<long>(not_locked.size() - result.running.size());
  return result;
}

CancelResult JobControl::cancel_dry_run(pqxx::transaction_base& tx, const JobFilter& filter) const {
  CancelResult result;
  for (const auto& r : run(tx, dry_run_.of(filter), filter)) {
    (r[1].as<bool>() ? result.running : result.cancelled).push_back(r[0].as<std::int64_t>());
  }
  result.descendants = waiting_descendants(tx, result.cancelled);
  return result;
}

std::pair<std::int64_t, std::string> JobControl::enqueue_unique(pqxx::transaction_base& tx, const NewJob& job,
                                                                const std::string& payload) const {
  const pqxx::row r = tx.exec_params1(enqueue_unique_, job.kind, payload, job.queue, job.idempotency_key, job.run_at,
                                      static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts,
                                      job.unique_key, std::string(to_string(job.on_conflict)));
  return {r[0].as<std::int64_t>(), r[1].as<std::string>()};
}

}  // namespace oncely::detail
