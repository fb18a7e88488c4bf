#include "process/maintenance.hpp"

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// `oncely stats` reads 15 minutes of job_stats; a day is kept for looking back.
constexpr auto kStatsKept = std::chrono::hours(24);
// A pass runs on the heartbeat thread, which also notices stop requests: a large backlog
// is pruned over several passes rather than in one long one.
constexpr auto kPassBudget = std::chrono::seconds(2);

}  // namespace

Maintenance::Maintenance(const Store& store, std::chrono::milliseconds dedup_window,
                         std::shared_ptr<spdlog::logger> log)
    : store_(store), dedup_window_(dedup_window), log_(std::move(log)) {}

long Maintenance::prune_in_batches(pqxx::connection& conn, const std::function<long(pqxx::work&)>& prune) const {
  // One short transaction per batch; stop when a batch comes back short. Another process
  // may run a pass at the same time between our transactions: the deletes do not collide.
  long total = 0;
  const auto deadline = std::chrono::steady_clock::now() + kPassBudget;
  while (std::chrono::steady_clock::now() < deadline) {
    pqxx::work tx(conn);
    if (!store_.locks.try_maintenance(tx)) break;
    const long deleted = prune(tx);
    tx.commit();
    total += deleted;
    if (deleted < kBatch) break;
  }
  return total;
}

Maintenance::Pass Maintenance::run_once(pqxx::connection& conn) const {
  Pass pass;
  {
    pqxx::work tx(conn);
    if (!store_.locks.try_maintenance(tx)) return pass;
    store_.workers.remove_stale(tx, kStaleAfter);
    tx.commit();
  }
  pass.elected = true;
  pass.markers_pruned =
      prune_in_batches(conn, [&](pqxx::work& tx) { return store_.processed_jobs.prune(tx, dedup_window_, kBatch); });
  prune_in_batches(conn,
                   [&](pqxx::work& tx) { return store_.processed_jobs.prune_completions(tx, dedup_window_, kBatch); });
  prune_in_batches(conn, [&](pqxx::work& tx) { return store_.job_stats.prune(tx, kStatsKept, kBatch); });
  // Handler-side completions a worker died before counting (migration 18).
  prune_in_batches(conn,
                   [&](pqxx::work& tx) { return store_.lease_completions.prune(tx, std::chrono::hours(24), kBatch); });
  // The windows of keys that no start has used for a period of their per-key rate (migration 23).
  prune_in_batches(conn, [&](pqxx::work& tx) { return store_.rate_windows.prune_keys(tx, kBatch); });
  if (pass.markers_pruned > 0) {
    log_->info("maintenance pruned {} dedup marker(s) older than the dedup window", pass.markers_pruned);
  }
  return pass;
}

}  // namespace oncely::detail
