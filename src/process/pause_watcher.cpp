#include "process/pause_watcher.hpp"

#include <algorithm>

#include <pqxx/pqxx>

#include "store/store.hpp"

namespace oncely::detail {

PauseWatcher::PauseWatcher(const Store& store, const std::vector<std::string>& queues,
                           std::function<void(const std::string&)> on_resume)
    : store_(store), queues_(queues), on_resume_(std::move(on_resume)), channel_(queue_pauses_channel(store.schema())) {
  for (const auto& q : queues_) flags_.try_emplace(q, false);
}

const std::atomic<bool>* PauseWatcher::flag(const std::string& queue) const {
  const auto it = flags_.find(queue);
  return it == flags_.end() ? nullptr : &it->second;
}

void PauseWatcher::refresh(pqxx::connection& conn) {
  std::vector<std::string> paused;
  {
    pqxx::read_transaction tx(conn);
    paused = store_.queue_pauses.paused_among(tx, queues_);
    tx.commit();
  }
  for (auto& [queue, flag] : flags_) {
    const bool now_paused = std::find(paused.begin(), paused.end(), queue) != paused.end();
    const bool was_paused = flag.exchange(now_paused, std::memory_order_acq_rel);
    if (was_paused && !now_paused && on_resume_) on_resume_(queue);
  }
}

}  // namespace oncely::detail
