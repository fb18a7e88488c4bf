#pragma once
// Maintenance: housekeeping that one worker process at a time does for the whole schema.
// Elected per pass with a transaction-scoped advisory lock (pooler-friendly; whoever holds
// it does the pass, the others skip it). Every delete is batched so that a large table
// never sees one long transaction.

#include <chrono>
#include <functional>
#include <memory>

#include <pqxx/connection>
#include <pqxx/transaction>

#include "store/store.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class Maintenance {
 public:
  Maintenance(const Store& store, std::chrono::milliseconds dedup_window, std::shared_ptr<spdlog::logger> log);

  struct Pass {
    bool elected = false;     // this process held the lock and did the work
    long markers_pruned = 0;  // processed_jobs rows older than the dedup window
  };

  /// One pass on `conn`: if elected, prunes dedup markers past the window and removes
  /// stale worker registrations. Throws on database errors (the caller logs and retries).
  Pass run_once(pqxx::connection& conn) const;

  /// Rows deleted per statement.
  static constexpr int kBatch = 5000;

 private:
  long prune_in_batches(pqxx::connection& conn, const std::function<long(pqxx::work&)>& prune) const;

  const Store& store_;
  std::chrono::milliseconds dedup_window_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace oncely::detail
