#include "process/heartbeat.hpp"

#include <unistd.h>

#include <climits>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "api/stats_reader.hpp"
#include "execution/queue_pool.hpp"
#include "execution/queue_runner.hpp"
#include "process/maintenance.hpp"
#include "process/metrics.hpp"
#include "support/db.hpp"
#include "support/steady_clock.hpp"

namespace oncely::detail {
namespace {

// Every this many heartbeats, a maintenance pass (if this process wins the election).
constexpr int kHeartbeatsPerMaintenance = 12;

// The metrics exporter's lease, renewed every heartbeat (5 s): three missed heartbeats
// and another process takes over, within kMetricsLease + one heartbeat of the last renewal.
constexpr auto kMetricsLease = std::chrono::seconds(15);

}  // namespace

std::string host_name() {
  char buffer[HOST_NAME_MAX + 1] = {};
  return gethostname(buffer, sizeof buffer) == 0 ? std::string(buffer) : std::string("unknown");
}

Heartbeat::Heartbeat(Settings settings, std::unique_ptr<pqxx::connection> conn)
    : thread_(ServiceThread::owning(std::make_unique<State>(State{std::move(settings), std::move(conn)}), &loop)) {}

bool Heartbeat::stop_until(std::chrono::steady_clock::time_point deadline) { return thread_.stop_until(deadline); }

void Heartbeat::loop(const std::stop_token& stopping, State& state) {
  for (int n = 0; pause_for(stopping, kHeartbeatInterval); ++n) {
    try {
      beat(state, n);
    } catch (const std::exception& e) {
      state.settings.log->warn("heartbeat failed: {}", one_line(state.settings.url, e.what()));
      state.conn.reset();
      // Its lease cannot be confirmed: another process may take it over meanwhile.
      stop_exporting(state);
    }
  }
}

void Heartbeat::beat(State& state, int n) {
  const Settings& s = state.settings;
  const Store& store = *s.store;
  if (!state.conn || !state.conn->is_open()) {
    state.conn = connect(s.url);
    store.prepare(*state.conn);
  }
  int in_flight = 0;
  for (const QueueRunner* pool : s.pools) in_flight += pool->jobs_in_flight();
  {
    pqxx::work tx(*state.conn);
    store.workers.heartbeat(tx, s.worker_id, in_flight, host_name(), static_cast<int>(getpid()), s.queue_names);
    tx.commit();
  }
  s.last_db_contact_ms->store(steady_ms());
  if (n % kHeartbeatsPerMaintenance == 0) Maintenance(store, s.dedup_window, s.log).run_once(*state.conn);
  if (s.metrics == nullptr) return;
  for (const QueueRunner* pool : s.pools) s.metrics->set_in_flight(pool->name(), pool->jobs_in_flight());
  // The database's view of the queues comes from one process at a time: the holder of the
  // "metrics" lease (a row, renewed here; a session lock would not hold behind a pooler).
  bool leader = false;
  {
    pqxx::nontransaction tx(*state.conn);
    leader = store.leaders.take(tx, kMetricsRole, s.worker_id, kMetricsLease);
  }
  if (!leader) {
    stop_exporting(state);
    return;
  }
  if (!state.exporting) s.log->info("metrics: this process exports the database gauges (lease taken)");
  state.exporting = true;
  s.metrics->set_queue_stats(read_stats(*state.conn, store));
}

void Heartbeat::stop_exporting(State& state) {
  if (state.settings.metrics == nullptr || !state.exporting) return;
  state.exporting = false;
  state.settings.metrics->clear_queue_stats();
  state.settings.log->info("metrics: this process no longer exports the database gauges (lease lost)");
}

}  // namespace oncely::detail
