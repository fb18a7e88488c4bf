// The dead_letters table's statements: the move (a failure's and the cancel's share its INSERT),
// listing, paging, grouping, replay and purge. Over 450 lines because it is one table's whole
// vocabulary, each statement named and prepared here, as every table of store/ is.
#include "store/dead_letters.hpp"

#include <tuple>
#include <utility>

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/job_stats.hpp"
#include "store/jobs.hpp"
#include "support/schema.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The dead-letter move is the schema's dead_letter_job() (migration 18), which the SQL
// worker protocol uses too: the job leaves jobs and enters dead_letters in one statement,
// never in both, never in neither. Its marker ($2, a transaction-mode claim's) goes in the
// same statement, so a replay is not mistaken for a duplicate. $3 attempts (NULL: the job's),
// $4 error, $5 the class of the errors[] entry it adds (NULL: none), $6 the dead letter's
// class, $7 the detail (its "stack" goes into the entry too). Returns the job's trace_context
// (from jobs: the worker role may not read it back from dead_letters), for the log line of a
// job whose claim could not read its row.
constexpr std::string_view kDeadLetterJob = R"sql(
  WITH unmarked AS (
    DELETE FROM :ONCELY_SCHEMA.processed_jobs WHERE ctid = $2::tid
  )
  SELECT :ONCELY_SCHEMA.dead_letter_job($1::bigint, $3::integer, $4::text, $6::text, $5::text, $7::jsonb)
)sql";

constexpr std::string_view kDeadLetterCounts = R"sql(
  SELECT queue,
         count(*) FILTER (WHERE replayed_at IS NULL),
         (count(*) FILTER (WHERE failed_at >= now() - interval '15 minutes'))::float8 / 15
    FROM :ONCELY_SCHEMA.dead_letters
   WHERE $1::text IS NULL OR queue = $1
   GROUP BY queue
)sql";

// The selection every dead-letter statement shares, over `dead_letters d`. Parameters:
// $1 ids (bigint[]), $2 job ids (bigint[]: the failed job's, or the job a replay made),
// $3 queue, $4 kind, $5 error class, $6 error text (case-insensitive substring), $7 older
// than (ms), $8 newer than (ms), $9 include replayed, and :PATTERN (one group of the
// grouping by error: the stored error_pattern, looked up by its hash in
// dead_letters_error_pattern_idx and then compared whole), and :KEY (an idempotency key).
// NULL: any. :PATTERN and :KEY are the statement's last parameters (its number depends on the statement's own
// parameters, which come before it). Substituted for :DEAD_LETTER_FILTER when the statements are rendered; it holds no
// values. The statements run unprepared, so each is planned with its values and an unused criterion folds away.
constexpr std::string_view kDeadLetterFilter = R"sql(
       ($1::bigint[] IS NULL OR d.id = ANY ($1::bigint[]))
   AND ($2::bigint[] IS NULL OR d.job_id = ANY ($2::bigint[]) OR d.replayed_job_id = ANY ($2::bigint[]))
   AND ($3::text IS NULL OR d.queue = $3)
   AND ($4::text IS NULL OR d.kind = $4)
   AND ($5::text IS NULL OR d.error_class = $5)
   AND ($6::text IS NULL OR strpos(lower(d.last_error), lower($6)) > 0)
   AND ($7::bigint IS NULL OR d.failed_at < now() - $7 * interval '1 millisecond')
   AND ($8::bigint IS NULL OR d.failed_at >= now() - $8 * interval '1 millisecond')
   AND ($9::boolean OR d.replayed_at IS NULL)
   AND (:PATTERN::text IS NULL OR (hashtextextended(d.error_pattern, 0) = hashtextextended(:PATTERN::text, 0)
                                   AND d.error_pattern = :PATTERN))
   AND (:KEY::text IS NULL OR d.idempotency_key = :KEY)
)sql";
constexpr std::string_view kFilterPlaceholder = ":DEAD_LETTER_FILTER";
constexpr std::string_view kPatternPlaceholder = ":PATTERN";

// Newest failure first. $10: load payload, errors and error_detail; $11: limit (NULL: none).
// The window count is taken before LIMIT: how many match in all.
constexpr std::string_view kListDeadLetters = R"sql(
  SELECT d.id, d.job_id, d.queue, d.kind,
         CASE WHEN $10::boolean THEN d.payload::text END,
         d.idempotency_key, d.priority, d.attempts, d.max_attempts, d.last_error, d.error_class,
         CASE WHEN $10::boolean THEN d.errors::text END,
         CASE WHEN $10::boolean THEN d.error_detail::text END,
         to_char(d.created_at AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(d.failed_at AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(d.replayed_at AT TIME ZONE 'UTC', :ISO_UTC),
         d.replayed_job_id,
         d.idempotency_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM :ONCELY_SCHEMA.processed_jobs p
            WHERE p.kind = d.kind AND p.idempotency_key = d.idempotency_key),
         count(*) OVER ()
    FROM :ONCELY_SCHEMA.dead_letters d
   WHERE :DEAD_LETTER_FILTER
   ORDER BY d.failed_at DESC, d.id DESC
   LIMIT $11::bigint
)sql";

// "The same error every time": errors that differ only in numbers (ids, amounts, ports)
// group together, by the column that stores that pattern (migration 13), so that no row's
// error is folded at query time. $10: 'error' | 'class' | 'kind' | 'queue'; $11: limit
// (NULL: none). The example is the newest dead letter of its group.
constexpr std::string_view kGroupDeadLetters = R"sql(
  WITH selected AS (
    SELECT CASE $10::text
             WHEN 'error' THEN d.error_pattern
             WHEN 'class' THEN d.error_class
             WHEN 'kind' THEN d.kind
             ELSE d.queue
           END AS key,
           d.id, d.failed_at
      FROM :ONCELY_SCHEMA.dead_letters d
     WHERE :DEAD_LETTER_FILTER
  ), groups AS (
    SELECT key, count(*) AS n, min(failed_at) AS first_failed_at, max(failed_at) AS last_failed_at,
           max(id) AS example_id
      FROM selected
     GROUP BY key
  )
  SELECT g.key, g.n,
         to_char(g.first_failed_at AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(g.last_failed_at AT TIME ZONE 'UTC', :ISO_UTC),
         g.example_id, e.last_error, count(*) OVER ()
    FROM groups g JOIN :ONCELY_SCHEMA.dead_letters e ON e.id = g.example_id
   ORDER BY g.n DESC, g.key
   LIMIT $11::bigint
)sql";

// Replays in one statement. `locked` takes the row locks in id order (two replays of
// overlapping sets cannot deadlock); a dead letter that a concurrent replay marked while
// we waited for its lock fails the re-check of `replayed_at IS NULL` and is skipped, so it
// is never enqueued twice. The new job's id is drawn from the jobs identity sequence
// while the dead letter is marked, so the mark and the job agree without a second pass.
// A new job starts over: attempts 0, no errors, run_at now(). $10: target queue (NULL:
// each dead letter's own).
constexpr std::string_view kReplayDeadLetters = R"sql(
  WITH locked AS (
    SELECT d.id
      FROM :ONCELY_SCHEMA.dead_letters d
     WHERE :DEAD_LETTER_FILTER
     ORDER BY d.id
     FOR UPDATE
  ), replayed AS (
    UPDATE :ONCELY_SCHEMA.dead_letters d
       SET replayed_at = now(),
           replayed_job_id = nextval(pg_get_serial_sequence(':ONCELY_SCHEMA.jobs', 'id'))
      FROM locked l
     WHERE d.id = l.id AND d.replayed_at IS NULL
    RETURNING d.id, d.replayed_job_id, coalesce($10::text, d.queue) AS queue, d.kind, d.payload,
              d.idempotency_key, d.priority, d.max_attempts, coalesce(d.origin_job_id, d.job_id) AS origin_job_id,
              d.trace_context, d.depends_on
  ), enqueued AS (
    -- origin_job_id: a job without a key keeps the key it had (the first job's id);
    -- trace_context: the replay stays in the producer's trace; depends_on: the parents, resolved
    -- again (a parent replayed before is its replay, migration 24); a batch counted its
    -- member when it was dead-lettered, and its replay runs outside the batch.
    INSERT INTO :ONCELY_SCHEMA.jobs (id, queue, kind, payload, idempotency_key, priority, max_attempts, origin_job_id,
                                     trace_context, depends_on)
    OVERRIDING SYSTEM VALUE
    SELECT replayed_job_id, queue, kind, payload, idempotency_key, priority, max_attempts, origin_job_id, trace_context,
           depends_on
      FROM replayed
  )
  SELECT r.id, r.replayed_job_id, r.queue, r.kind, r.idempotency_key,
         r.idempotency_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM :ONCELY_SCHEMA.processed_jobs p
            WHERE p.kind = r.kind AND p.idempotency_key = r.idempotency_key)
    FROM replayed r
   ORDER BY r.id
)sql";

// After the replay, in the same transaction (so with a fresh snapshot under READ
// COMMITTED): what the filter selects that was replayed before, or by someone else while
// we waited. $10: the dead letters this replay just marked.
constexpr std::string_view kAlreadyReplayed = R"sql(
  SELECT d.id, d.replayed_job_id, count(*) OVER ()
    FROM :ONCELY_SCHEMA.dead_letters d
   WHERE :DEAD_LETTER_FILTER
     AND d.replayed_at IS NOT NULL
     AND d.id <> ALL ($10::bigint[])
   ORDER BY d.id
   LIMIT 20
)sql";

constexpr std::string_view kPurgeDeadLetters = R"sql(
  DELETE FROM :ONCELY_SCHEMA.dead_letters d
   WHERE :DEAD_LETTER_FILTER
)sql";

// A page of the list, newest failure first, from after ($11 failed_at, $12 id) of the page
// before: keyset paging over dead_letters_failed_at_idx, so page 1000 costs what page 1
// does (no OFFSET, no count of every match). $10: load errors and error_detail; $13: limit.
// :PAYLOAD is d.payload::text, or NULL in the variant that must not name the column (a
// role without SELECT on it, the viewer's, may run that one).
constexpr std::string_view kPageDeadLetters = R"sql(
  SELECT d.id, d.job_id, d.queue, d.kind, :PAYLOAD,
         d.idempotency_key, d.priority, d.attempts, d.max_attempts, d.last_error, d.error_class,
         CASE WHEN $10::boolean THEN d.errors::text END,
         CASE WHEN $10::boolean THEN d.error_detail::text END,
         to_char(d.created_at AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(d.failed_at AT TIME ZONE 'UTC', :ISO_UTC),
         to_char(d.replayed_at AT TIME ZONE 'UTC', :ISO_UTC),
         d.replayed_job_id,
         d.idempotency_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM :ONCELY_SCHEMA.processed_jobs p
            WHERE p.kind = d.kind AND p.idempotency_key = d.idempotency_key),
         0::bigint
    FROM :ONCELY_SCHEMA.dead_letters d
   WHERE :DEAD_LETTER_FILTER
     AND ($11::timestamptz IS NULL OR (d.failed_at, d.id) < ($11::timestamptz, $12::bigint))
   ORDER BY d.failed_at DESC, d.id DESC
   LIMIT $13::bigint
)sql";

// Whether this session's role may read the payloads (of jobs, of dead letters). The
// viewer role has SELECT on every other column: a page that names the column must not run.
constexpr std::string_view kPayloadAccess = R"sql(
  SELECT has_column_privilege(':ONCELY_SCHEMA.jobs'::regclass, 'payload', 'SELECT'),
         has_column_privilege(':ONCELY_SCHEMA.dead_letters'::regclass, 'payload', 'SELECT'),
         has_column_privilege(':ONCELY_SCHEMA.processed_jobs'::regclass, 'output', 'SELECT')
)sql";

// How many the filter selects: what a replay or purge of it would touch (the dry run).
constexpr std::string_view kCountDeadLetters = R"sql(
  SELECT count(*) FROM :ONCELY_SCHEMA.dead_letters d WHERE :DEAD_LETTER_FILTER
)sql";

/// `pattern_param`: the number of the error pattern's parameter; the key's is the next, the last.
std::string render(std::string_view sql, std::string_view schema, int pattern_param,
                   std::string_view payload = "NULL::text") {
  std::string text(sql);
  if (const std::size_t at = text.find(kFilterPlaceholder); at != std::string::npos) {
    text.replace(at, kFilterPlaceholder.size(), kDeadLetterFilter);
  }
  const std::string pattern = "$" + std::to_string(pattern_param);
  for (std::size_t at; (at = text.find(kPatternPlaceholder)) != std::string::npos;) {
    text.replace(at, kPatternPlaceholder.size(), pattern);
  }
  const std::string key = "$" + std::to_string(pattern_param + 1);
  for (std::size_t at; (at = text.find(":KEY")) != std::string::npos;) text.replace(at, 4, key);
  if (const std::size_t at = text.find(":PAYLOAD"); at != std::string::npos) text.replace(at, 8, payload);
  return render_statement(text, schema);
}

std::optional<std::int64_t> to_ms(const std::optional<std::chrono::milliseconds>& d) {
  return d ? std::optional<std::int64_t>(d->count()) : std::nullopt;
}

std::optional<std::string> ids_param(const std::vector<std::int64_t>& ids) {
  return ids.empty() ? std::nullopt : std::optional<std::string>(to_array_literal(ids));
}

/// $1..$9 for kDeadLetterFilter.
auto filter_params(const DeadLetterFilter& f, bool include_replayed) {
  return std::make_tuple(ids_param(f.ids), ids_param(f.job_ids), f.queue, f.kind, f.error_class, f.error_text,
                         to_ms(f.older_than), to_ms(f.newer_than), include_replayed);
}

template <typename... Extra>
pqxx::result run(pqxx::transaction_base& tx, const std::string& sql, const DeadLetterFilter& f, bool include_replayed,
                 Extra&&... extra) {
  return std::apply(
      [&](auto&&... params) {
        return tx.exec_params(sql, params..., std::forward<Extra>(extra)..., f.error_pattern, f.idempotency_key);
      },
      filter_params(f, include_replayed));
}

std::optional<std::int64_t> limit_param(long limit) {
  if (limit < 0) throw ConfigError("limit", "must not be negative");
  return limit == 0 ? std::nullopt : std::optional<std::int64_t>(limit);
}

}  // namespace

std::string error_pattern_sql(std::string_view column) {
  return "coalesce(regexp_replace(" + std::string(column) + ", '[0-9]+', '#', 'g'), '(none)')";
}

void validate_filter(const DeadLetterFilter& f) {
  const auto not_empty = [](const std::optional<std::string>& v, const char* name) {
    if (v && v->empty()) throw InvalidArgument(name, "must not be empty");
  };
  not_empty(f.queue, "queue");
  not_empty(f.kind, "kind");
  not_empty(f.error_class, "class");
  not_empty(f.error_text, "error");
  not_empty(f.error_pattern, "pattern");
  if (f.older_than && f.older_than->count() < 0) throw InvalidArgument("older-than", "must not be negative");
  if (f.newer_than && f.newer_than->count() < 0) throw InvalidArgument("newer-than", "must not be negative");
}

void require_selection(const DeadLetterFilter& filter, std::string_view verb) {
  if (filter.empty() && !filter.all) {
    throw InvalidArgument("", "refusing to " + std::string(verb) + " every dead letter: give a filter or --all");
  }
}

DeadLettersTable::DeadLettersTable(StatementSet& statements)
    : statements_(statements),
      move_job_(&statements.add("dead_letter_job", kDeadLetterJob)),
      counts_(&statements.add("dead_letter_counts", kDeadLetterCounts)),
      list_(render(kListDeadLetters, statements.schema(), 12)),
      group_(render(kGroupDeadLetters, statements.schema(), 12)),
      replay_(render(kReplayDeadLetters, statements.schema(), 11)),
      already_replayed_(render(kAlreadyReplayed, statements.schema(), 11)),
      purge_(render(kPurgeDeadLetters, statements.schema(), 10)),
      page_(render(kPageDeadLetters, statements.schema(), 14, "d.payload::text")),
      page_without_payload_(render(kPageDeadLetters, statements.schema(), 14)),
      count_(render(kCountDeadLetters, statements.schema(), 10)),
      payload_access_(render_statement(std::string(kPayloadAccess), statements.schema())) {}

PayloadAccess DeadLettersTable::payload_access(pqxx::transaction_base& tx) const {
  const pqxx::row r = tx.exec1(payload_access_);
  return PayloadAccess{r[0].as<bool>(), r[1].as<bool>(), r[2].as<bool>()};
}

void DeadLettersTable::move_job(pqxx::transaction_base& tx, const FailureRecord& f) const {
  statements_.run(tx, *move_job_, f.job_id, f.marker, f.attempts, f.error, f.attempt_class, f.dead_letter_class,
                  f.detail.dump());
}

std::optional<std::string> DeadLettersTable::move_unclaimed(pqxx::transaction_base& tx, std::int64_t id,
                                                            const std::string& error,
                                                            const std::string& dead_letter_class,
                                                            const nlohmann::json& detail) const {
  const pqxx::result r = statements_.run(tx, *move_job_, id, std::optional<std::string>(), std::optional<int>(), error,
                                         std::optional<std::string>(), dead_letter_class, detail.dump());
  if (r.empty() || r[0][0].is_null()) return std::nullopt;
  return r[0][0].as<std::string>();
}

void DeadLettersTable::read_counts(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                                   std::map<std::string, QueueStats>& by_queue) const {
  for (const auto& r : statements_.run(tx, *counts_, queue)) {
    QueueStats& q = queue_entry(by_queue, r[0].as<std::string>());
    q.dead_letters = r[1].as<long>();
    q.dead_letters_per_minute_15m = r[2].as<double>();
  }
}

DeadLetterList DeadLettersTable::list(pqxx::transaction_base& tx, const DeadLetterFilter& filter, long limit,
                                      bool details) const {
  validate_filter(filter);
  const pqxx::result rows = run(tx, list_, filter, filter.include_replayed, details, limit_param(limit));
  DeadLetterList list;
  list.dead_letters.reserve(rows.size());
  for (const auto& row : rows) {
    list.total = row[18].as<long>();
    list.dead_letters.push_back(dead_letter_of(row));
  }
  return list;
}

DeadLetterPage DeadLettersTable::page(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                      const DeadLetterPageOptions& options) const {
  validate_filter(filter);
  if (options.limit < 1 || options.limit > 10000) throw InvalidArgument("limit", "must be between 1 and 10000");
  const auto after_at = options.after ? std::optional<std::string>(options.after->failed_at) : std::nullopt;
  const auto after_id = options.after ? std::optional<std::int64_t>(options.after->id) : std::nullopt;
  // One row more than asked: whether there is a next page, without counting.
  const pqxx::result rows = run(tx, options.payload ? page_ : page_without_payload_, filter, filter.include_replayed,
                                options.details, after_at, after_id, static_cast<std::int64_t>(options.limit + 1));
  DeadLetterPage page;
  for (const auto& row : rows) {
    if (static_cast<long>(page.dead_letters.size()) == options.limit) {
      page.next = DeadLetterCursor{page.dead_letters.back().failed_at, page.dead_letters.back().id};
      break;
    }
    page.dead_letters.push_back(dead_letter_of(row));
  }
  return page;
}

long DeadLettersTable::count(pqxx::transaction_base& tx, const DeadLetterFilter& filter) const {
  validate_filter(filter);
  return run(tx, count_, filter, filter.include_replayed)[0][0].as<long>();
}

DeadLetter DeadLettersTable::dead_letter_of(const pqxx::row& row) {
  {
    DeadLetter d;
    d.id = row[0].as<std::int64_t>();
    d.job_id = row[1].as<std::int64_t>();
    d.queue = row[2].as<std::string>();
    d.kind = row[3].as<std::string>();
    if (!row[4].is_null()) {
      d.payload_text = row[4].c_str();
      // nlohmann holds numbers as doubles: one it cannot hold must not make the row unreadable.
      d.payload = nlohmann::json::parse(d.payload_text, nullptr, /*allow_exceptions=*/false);
      if (d.payload.is_discarded()) d.payload = nullptr;
    }
    d.idempotency_key = nullable<std::string>(row[5]);
    d.priority = row[6].as<int>();
    d.attempts = row[7].as<int>();
    d.max_attempts = nullable<int>(row[8]);
    d.last_error = nullable<std::string>(row[9]);
    d.error_class = row[10].as<std::string>();
    d.errors = json_or_null(row[11]);
    d.error_detail = json_or_null(row[12]);
    d.created_at = row[13].as<std::string>();
    d.failed_at = row[14].as<std::string>();
    d.replayed_at = nullable<std::string>(row[15]);
    d.replayed_job_id = nullable<std::int64_t>(row[16]);
    d.key_processed = row[17].as<bool>();
    return d;
  }
}

DeadLetterGroups DeadLettersTable::group(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                         DeadLetterGrouping by, long limit) const {
  validate_filter(filter);
  const pqxx::result rows =
      run(tx, group_, filter, filter.include_replayed, std::string(to_string(by)), limit_param(limit));
  DeadLetterGroups result;
  result.groups.reserve(rows.size());
  for (const auto& row : rows) {
    DeadLetterGroup g;
    g.key = row[0].as<std::string>();
    g.count = row[1].as<long>();
    g.first_failed_at = row[2].as<std::string>();
    g.last_failed_at = row[3].as<std::string>();
    g.example_id = row[4].as<std::int64_t>();
    g.example_error = nullable<std::string>(row[5]);
    result.total_groups = row[6].as<long>();
    result.groups.push_back(std::move(g));
  }
  return result;
}

ReplayResult DeadLettersTable::replay(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                      const std::optional<std::string>& to_queue) const {
  validate_filter(filter);
  require_selection(filter, "replay");
  if (to_queue) {
    // The queue of every job it enqueues: held to the rules of an enqueued job's queue.
    NewJob probe;
    probe.kind = "-";
    probe.queue = *to_queue;
    try {
      validate_job_fields(probe);
    } catch (const ConfigError& e) {
      throw InvalidArgument("to-queue", e.reason());
    }
  }
  ReplayResult result;
  std::vector<std::int64_t> replayed_ids;
  for (const auto& row : run(tx, replay_, filter, /*include_replayed=*/false, to_queue)) {
    ReplayedDeadLetter r;
    r.dead_letter_id = row[0].as<std::int64_t>();
    r.job_id = row[1].as<std::int64_t>();
    r.queue = row[2].as<std::string>();
    r.kind = row[3].as<std::string>();
    r.idempotency_key = nullable<std::string>(row[4]);
    r.key_processed = row[5].as<bool>();
    replayed_ids.push_back(r.dead_letter_id);
    result.replayed.push_back(std::move(r));
  }
  for (const auto& row :
       run(tx, already_replayed_, filter, /*include_replayed=*/true, to_array_literal(replayed_ids))) {
    result.already_replayed_sample.emplace_back(row[0].as<std::int64_t>(), row[1].as<std::int64_t>());
    result.already_replayed = row[2].as<long>();
  }
  return result;
}

long DeadLettersTable::purge(pqxx::transaction_base& tx, const DeadLetterFilter& filter) const {
  validate_filter(filter);
  require_selection(filter, "purge");
  return static_cast<long>(run(tx, purge_, filter, /*include_replayed=*/true).affected_rows());
}

}  // namespace oncely::detail
