#pragma once
// Listener: one LISTEN connection per process, on its own thread, that turns the jobs
// trigger's NOTIFY (payload: comma-separated queue names, or '*') into pool wake-ups, and
// acknowledges them to the trigger's wake-up window (store/wakeup_window.hpp).
// The connection stays idle outside await (notifications wait while a transaction is open).
// It also keeps the process's PauseWatcher current: on the pauses trigger's NOTIFY, after
// each (re)connect, and every PauseWatcher::kPollInterval (a short read-only transaction).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/wakeup_window.hpp"
#include "support/service_thread.hpp"

#include "oncely/database_url.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

class PauseWatcher;

class Listener {
 public:
  /// Listens on `schema`'s jobs channel. `on_queue(name)` is called for each queue named
  /// ("*": every queue), and `on_look_back(name)` for those of `queues` (the process's)
  /// that should look back (process/look_backs.hpp); `on_reconnect()` after the connection
  /// was re-established (notifications may have been missed). `pauses` (may be null) is
  /// refreshed on this connection and must outlive the listener.
  Listener(DatabaseUrl url, std::string_view schema, std::vector<std::string> queues,
           std::shared_ptr<spdlog::logger> log, std::function<void(const std::string&)> on_queue,
           std::function<void(const std::string&)> on_look_back, std::function<void()> on_reconnect,
           PauseWatcher* pauses = nullptr);
  ~Listener();  // stops and joins (unless stop_until() gave up on it)
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Stops listening and waits until `deadline`; false when the thread is still stuck in
  /// a call then (it is left running: this object must then outlive it, i.e. be leaked).
  bool stop_until(std::chrono::steady_clock::time_point deadline) { return thread_.stop_until(deadline); }
  void request_stop() noexcept { thread_.request_stop(); }

 private:
  void run(const std::stop_token& stop);
  /// Closes the trigger's window; the count of skipped NOTIFYs, when it could be read.
  std::optional<std::int64_t> acknowledge(pqxx::connection& conn);

  DatabaseUrl url_;
  std::string channel_;
  WakeupWindow window_;
  std::vector<std::string> queues_;
  bool acknowledging_ = true;  // the listener thread's own; false after a refusal, until it reconnects
  std::shared_ptr<spdlog::logger> log_;
  std::function<void(const std::string&)> on_queue_;
  std::function<void(const std::string&)> on_look_back_;
  std::function<void()> on_reconnect_;
  PauseWatcher* pauses_;
  ServiceThread thread_;
};

}  // namespace oncely::detail
