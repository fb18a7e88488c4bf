#pragma once
// CronScheduler: a worker process's service thread for its "cron" entries. Each turn reads
// every entry's row and the database's clock in one statement, lets cron::plan() decide,
// and runs one advancing statement per entry with a due slot (store/cron_slots.hpp); then
// it sleeps until the next slot falls due by the database's clock (at most a minute, so
// that a server clock step or another worker's progress is seen). Any number of
// processes may carry the same entry: the statement gives each slot one job.
// On its own connection, reconnected after a failure with a growing pause.

#include <atomic>
#include <chrono>
#include <memory>
#include <stop_token>
#include <vector>

#include <pqxx/connection>

#include "oncely/config.hpp"
#include "oncely/database_url.hpp"
#include "scheduling/cron_plan.hpp"
#include "store/store.hpp"
#include "support/service_thread.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class CronScheduler {
 public:
  /// The longest sleep between two reads.
  static constexpr std::chrono::milliseconds kMaxSleep{std::chrono::seconds(60)};

  struct Turn {
    int statements = 0;                          ///< sent to the server
    long enqueued = 0;                           ///< jobs this process inserted
    std::chrono::milliseconds sleep{kMaxSleep};  ///< until the next slot, by the database's clock
  };
  /// One turn on `conn` (autocommit statements). Throws on database errors.
  static Turn run_once(pqxx::connection& conn, const Store& store, const std::vector<cron::CompiledEntry>& entries,
                       spdlog::logger& log);

  /// Starts the thread. `entries` must be valid (Config::validate()).
  CronScheduler(const Store& store, DatabaseUrl url, const std::map<std::string, CronEntry>& entries,
                std::shared_ptr<spdlog::logger> log);
  /// Stops the thread, waiting until `deadline`; false: it was left behind (detached, with
  /// what it uses, which it frees if it ever ends).
  bool stop_until(std::chrono::steady_clock::time_point deadline);

 private:
  struct State {
    const Store* store = nullptr;
    DatabaseUrl url{""};
    std::vector<cron::CompiledEntry> entries;
    std::shared_ptr<spdlog::logger> log;
    std::atomic<long> statements{0};
  };
  static void loop(const std::stop_token& stopping, State& state);
  ServiceThread thread_;  // owns the State
};

/// The scheduler for `config.cron`, or null when it has no entries.
std::unique_ptr<CronScheduler> start_cron_scheduler(const Config& config, const Store& store, const DatabaseUrl& url,
                                                    const std::shared_ptr<spdlog::logger>& log);

}  // namespace oncely::detail
