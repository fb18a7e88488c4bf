#include "maintenance.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

namespace oncely::detail {
namespace {

// Registrations whose heartbeat (every 5 s) is this old belong to dead processes.
constexpr auto kStaleWorkerAfter = std::chrono::seconds(60);

}  // namespace

Maintenance::Maintenance(const Store& store, std::chrono::milliseconds dedup_window,
                         std::shared_ptr<spdlog::logger> log)
    : store_(store), dedup_window_(dedup_window), log_(std::move(log)) {}

Maintenance::Pass Maintenance::run_once(pqxx::connection& conn) const {
  Pass pass;
  {
    pqxx::work tx(conn);
    if (!store_.try_maintenance_lock(tx)) return pass;
    store_.remove_stale_workers(tx, kStaleWorkerAfter);
    tx.commit();
  }
  pass.elected = true;
  // One short transaction per batch; stop when a batch comes back short. Another process
  // may run a pass at the same time between our transactions: the deletes do not collide.
  while (true) {
    pqxx::work tx(conn);
    if (!store_.try_maintenance_lock(tx)) break;
    const long deleted = store_.prune_markers(tx, dedup_window_, kBatch);
    tx.commit();
    pass.markers_pruned += deleted;
    if (deleted < kBatch) break;
  }
  if (pass.markers_pruned > 0) {
    log_->info("maintenance pruned {} dedup marker(s) older than the dedup window", pass.markers_pruned);
  }
  return pass;
}

}  // namespace oncely::detail
