#include "store/workers.hpp"

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

constexpr std::string_view kRegisterWorker = R"sql(
  INSERT INTO :ONCELY_SCHEMA.workers (host, pid, queues) VALUES ($1, $2, $3::text[]) RETURNING id
)sql";

// An upsert: a process whose heartbeat was late enough to be removed as stale (a long
// database outage) registers again under the same id.
constexpr std::string_view kHeartbeat = R"sql(
  INSERT INTO :ONCELY_SCHEMA.workers AS w (id, host, pid, queues, jobs_in_flight)
  OVERRIDING SYSTEM VALUE VALUES ($1, $3, $4, $5::text[], $2)
  ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), jobs_in_flight = EXCLUDED.jobs_in_flight
)sql";

constexpr std::string_view kUnregisterWorker = R"sql(
  WITH idle_records AS (
    DELETE FROM :ONCELY_SCHEMA.attempts_in_flight WHERE worker_id = $1 AND job_ids = '{}'
  )
  DELETE FROM :ONCELY_SCHEMA.workers WHERE id = $1
)sql";

// An attempt record stays while any job it names exists: it is what counts the attempt.
constexpr std::string_view kRemoveStaleWorkers = R"sql(
  WITH gone AS (
    DELETE FROM :ONCELY_SCHEMA.workers
     WHERE heartbeat_at < now() - $1::bigint * interval '1 millisecond'
    RETURNING id
  )
  DELETE FROM :ONCELY_SCHEMA.attempts_in_flight f
   WHERE (f.worker_id IN (SELECT id FROM gone)
          OR NOT EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.workers w WHERE w.id = f.worker_id))
     AND NOT EXISTS (SELECT 1 FROM :ONCELY_SCHEMA.jobs j WHERE j.id = ANY (f.job_ids))
)sql";

constexpr std::string_view kWorkers = R"sql(
  SELECT id, host, pid, array_to_json(queues)::text, to_char(started_at AT TIME ZONE 'UTC', :ISO_UTC),
         extract(epoch FROM now() - heartbeat_at)::float8, jobs_in_flight
    FROM :ONCELY_SCHEMA.workers
   WHERE $1::text IS NULL OR $1 = ANY (queues)
   ORDER BY id
)sql";

}  // namespace

WorkersTable::WorkersTable(StatementSet& statements)
    : statements_(statements),
      register_(&statements.add("register_worker", kRegisterWorker)),
      heartbeat_(&statements.add("heartbeat", kHeartbeat)),
      unregister_(&statements.add("unregister_worker", kUnregisterWorker)),
      remove_stale_(&statements.add("remove_stale_workers", kRemoveStaleWorkers)),
      list_(&statements.add("list_workers", kWorkers)) {}

std::int64_t WorkersTable::register_worker(pqxx::transaction_base& tx, const std::string& host, int pid,
                                           const std::vector<std::string>& queues) const {
  return statements_.run(tx, *register_, host, pid, to_array_literal(queues)).at(0).at(0).as<std::int64_t>();
}

void WorkersTable::heartbeat(pqxx::transaction_base& tx, std::int64_t worker_id, int jobs_in_flight,
                             const std::string& host, int pid, const std::vector<std::string>& queues) const {
  statements_.run(tx, *heartbeat_, worker_id, jobs_in_flight, host, pid, to_array_literal(queues));
}

void WorkersTable::unregister(pqxx::transaction_base& tx, std::int64_t worker_id) const {
  statements_.run(tx, *unregister_, worker_id);
}

void WorkersTable::remove_stale(pqxx::transaction_base& tx, std::chrono::milliseconds stale_after) const {
  statements_.run(tx, *remove_stale_, static_cast<std::int64_t>(stale_after.count()));
}

std::vector<WorkerInfo> WorkersTable::list(pqxx::transaction_base& tx, const std::optional<std::string>& queue) const {
  std::vector<WorkerInfo> workers;
  for (const auto& r : statements_.run(tx, *list_, queue)) {
    WorkerInfo w;
    w.id = r[0].as<long>();
    w.host = r[1].as<std::string>();
    w.pid = r[2].as<int>();
    w.queues = nlohmann::json::parse(r[3].c_str()).get<std::vector<std::string>>();
    w.started_at = r[4].as<std::string>();
    w.heartbeat_age_s = r[5].as<double>();
    w.jobs_in_flight = r[6].as<int>();
    workers.push_back(std::move(w));
  }
  return workers;
}

}  // namespace oncely::detail
