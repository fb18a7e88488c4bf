#include "store/queue_pauses.hpp"

#include <pqxx/pqxx>

#include "store/job_stats.hpp"

namespace oncely::detail {
namespace {

// Who paused, as the database knows the session: its role and its application_name.
// ON CONFLICT DO NOTHING: a second pause keeps the first one's time and reason (how long
// a queue has been paused is what `check` judges); the row is then read back as it is.
constexpr std::string_view kPauseQueue = R"sql(
  WITH inserted AS (
    INSERT INTO :ONCELY_SCHEMA.queue_pauses (queue, reason, paused_by)
    VALUES ($1, $2, current_user || coalesce(' (' || nullif(current_setting('application_name'), '') || ')', ''))
    ON CONFLICT (queue) DO NOTHING
    RETURNING queue, paused_at, reason, paused_by
  )
  SELECT queue, to_char(paused_at AT TIME ZONE 'UTC', :ISO_UTC), extract(epoch FROM now() - paused_at)::float8,
         reason, paused_by, true
    FROM inserted
  UNION ALL
  SELECT queue, to_char(paused_at AT TIME ZONE 'UTC', :ISO_UTC), extract(epoch FROM now() - paused_at)::float8,
         reason, paused_by, false
    FROM :ONCELY_SCHEMA.queue_pauses
   WHERE queue = $1 AND NOT EXISTS (SELECT FROM inserted)
)sql";

constexpr std::string_view kResumeQueue = R"sql(
  DELETE FROM :ONCELY_SCHEMA.queue_pauses WHERE queue = $1
  RETURNING queue, to_char(paused_at AT TIME ZONE 'UTC', :ISO_UTC), extract(epoch FROM now() - paused_at)::float8,
            reason, paused_by
)sql";

constexpr std::string_view kListPauses = R"sql(
  SELECT queue, to_char(paused_at AT TIME ZONE 'UTC', :ISO_UTC), extract(epoch FROM now() - paused_at)::float8,
         reason, paused_by
    FROM :ONCELY_SCHEMA.queue_pauses
   ORDER BY queue
)sql";

// Every worker process runs this once a second: a primary-key probe per queue it serves.
constexpr std::string_view kPausedAmong = R"sql(
  SELECT queue FROM :ONCELY_SCHEMA.queue_pauses WHERE queue = ANY ($1::text[])
)sql";

// DISTINCT queue over millions of jobs would read them all; this skip scan descends the
// claim index (queue, ...) once per queue instead.
constexpr std::string_view kJobQueues = R"sql(
  WITH RECURSIVE q(queue) AS (
    SELECT min(queue) FROM :ONCELY_SCHEMA.jobs
    UNION ALL
    SELECT (SELECT min(j.queue) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue > q.queue) FROM q WHERE q.queue IS NOT NULL
  )
  SELECT queue FROM q WHERE queue IS NOT NULL
)sql";

QueuePause pause_of(const pqxx::row& r) {
  QueuePause p;
  p.queue = r[0].as<std::string>();
  p.paused_at = r[1].as<std::string>();
  p.paused_for_s = r[2].as<double>();
  p.reason = nullable<std::string>(r[3]);
  p.paused_by = r[4].as<std::string>();
  return p;
}

}  // namespace

std::string queue_pauses_channel(std::string_view schema) { return std::string(schema) + ".queue_pauses"; }

QueuePausesTable::QueuePausesTable(StatementSet& statements)
    : statements_(statements),
      pause_(&statements.add("pause_queue", kPauseQueue)),
      resume_(&statements.add("resume_queue", kResumeQueue)),
      list_(&statements.add("list_pauses", kListPauses)),
      paused_among_(&statements.add("paused_among", kPausedAmong)),
      job_queues_(&statements.add("job_queues", kJobQueues)) {}

std::pair<QueuePause, bool> QueuePausesTable::pause(pqxx::transaction_base& tx, const std::string& queue,
                                                    const std::optional<std::string>& reason) const {
  const pqxx::row r = statements_.run(tx, *pause_, queue, reason).at(0);
  return {pause_of(r), r[5].as<bool>()};
}

std::optional<QueuePause> QueuePausesTable::resume(pqxx::transaction_base& tx, const std::string& queue) const {
  const pqxx::result rows = statements_.run(tx, *resume_, queue);
  if (rows.empty()) return std::nullopt;
  return pause_of(rows[0]);
}

std::vector<QueuePause> QueuePausesTable::list(pqxx::transaction_base& tx) const {
  std::vector<QueuePause> pauses;
  for (const auto& r : statements_.run(tx, *list_)) pauses.push_back(pause_of(r));
  return pauses;
}

std::vector<std::string> QueuePausesTable::paused_among(pqxx::transaction_base& tx,
                                                        const std::vector<std::string>& queues) const {
  std::vector<std::string> paused;
  // Unnamed: it runs on the listener's connection, which prepares nothing.
  for (const auto& r : tx.exec_params(paused_among_->sql, to_array_literal(queues))) {
    paused.push_back(r[0].as<std::string>());
  }
  return paused;
}

void QueuePausesTable::read_pauses(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                                   std::map<std::string, QueueStats>& by_queue) const {
  for (QueuePause& p : list(tx)) {
    if (queue && *queue != p.queue) continue;
    QueueStats& q = queue_entry(by_queue, p.queue);
    q.paused = true;
    q.paused_for_s = p.paused_for_s;
    q.pause_reason = p.reason;
  }
}

std::vector<std::string> QueuePausesTable::job_queues(pqxx::transaction_base& tx) const {
  std::vector<std::string> queues;
  for (const auto& r : statements_.run(tx, *job_queues_)) queues.push_back(r[0].as<std::string>());
  return queues;
}

}  // namespace oncely::detail
