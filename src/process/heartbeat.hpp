#pragma once
// Heartbeat: a worker process's service thread for what it owes the database while it
// runs — refreshing its registration every 5 s (re-creating it if it was removed as
// stale), a maintenance pass every minute if elected, and, with metrics on, the database's
// view of the queues as gauges (one process per schema, the holder of a lease row) — all on
// one connection of its own, reconnected when lost.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include <pqxx/connection>

#include "oncely/database_url.hpp"
#include "store/store.hpp"
#include "support/service_thread.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class Metrics;
class QueueRunner;

/// The name workers register under.
std::string host_name();

class Heartbeat {
 public:
  struct Settings {
    const Store* store = nullptr;
    DatabaseUrl url{""};
    std::int64_t worker_id = 0;
    std::vector<std::string> queue_names;
    std::vector<const QueueRunner*> pools;  // for jobs_in_flight
    std::chrono::milliseconds dedup_window{0};
    Metrics* metrics = nullptr;  // null: off
    std::shared_ptr<spdlog::logger> log;
    std::atomic<std::int64_t>* last_db_contact_ms = nullptr;  // steady_ms() of its last success
  };
  /// Starts the thread on `conn` (the process's preflight connection, kept).
  Heartbeat(Settings settings, std::unique_ptr<pqxx::connection> conn);
  /// Stops the thread, waiting until `deadline`; false: it was left behind (detached, with
  /// what it uses, which it frees if it ever ends).
  bool stop_until(std::chrono::steady_clock::time_point deadline);

 private:
  struct State {
    Settings settings;
    std::unique_ptr<pqxx::connection> conn;
    bool exporting = false;  // holds the metrics lease and exports the database gauges
  };
  static void stop_exporting(State& state);
  static void loop(const std::stop_token& stopping, State& state);
  static void beat(State& state, int n);
  ServiceThread thread_;  // owns the State
};

}  // namespace oncely::detail
