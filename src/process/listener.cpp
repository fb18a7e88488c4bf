#include "process/listener.hpp"

#include <condition_variable>
#include <mutex>
#include <optional>

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include "process/pause_watcher.hpp"
#include "support/db.hpp"
#include "support/pooler.hpp"

namespace oncely::detail {
namespace {

class Receiver final : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& conn, const std::string& channel, std::function<void(const std::string&)>& on_queue)
      : pqxx::notification_receiver(conn, channel), on_queue_(on_queue) {}
  void operator()(const std::string& payload, int) override {
    std::size_t start = 0;
    while (start <= payload.size()) {
      std::size_t end = payload.find(',', start);
      if (end == std::string::npos) end = payload.size();
      if (end > start) on_queue_(payload.substr(start, end - start));
      start = end + 1;
    }
  }

 private:
  std::function<void(const std::string&)>& on_queue_;
};

// The pauses trigger's NOTIFY carries nothing: it only asks for a refresh.
class PauseReceiver final : public pqxx::notification_receiver {
 public:
  PauseReceiver(pqxx::connection_base& conn, const std::string& channel, bool& notified)
      : pqxx::notification_receiver(conn, channel), notified_(notified) {}
  void operator()(const std::string&, int) override { notified_ = true; }

 private:
  bool& notified_;
};

}  // namespace

Listener::Listener(DatabaseUrl url, std::string channel, std::shared_ptr<spdlog::logger> log,
                   std::function<void(const std::string&)> on_queue, std::function<void()> on_reconnect,
                   PauseWatcher* pauses)
    : url_(std::move(url)),
      channel_(std::move(channel)),
      log_(std::move(log)),
      on_queue_(std::move(on_queue)),
      on_reconnect_(std::move(on_reconnect)),
      pauses_(pauses),
      thread_([this](const std::stop_token& stop) { run(stop); }) {}

Listener::~Listener() = default;

void Listener::run(const std::stop_token& stop) {
  auto delay = std::chrono::milliseconds(100);
  bool connected_before = false;
  bool warned_pooler = false;
  std::mutex mutex;
  std::condition_variable_any sleeper;
  while (!stop.stop_requested()) {
    try {
      auto conn = connect(url_);
      if (behind_pooler(*conn)) {
        // LISTEN through a transaction-mode pooler registers on whichever server
        // connection the statement got, and its notifications go to whoever holds that
        // connection next: not to us. So nothing is LISTENed (no session state left in
        // the pool); the workers' poll finds the jobs, this thread polls the pauses.
        if (!warned_pooler) {
          log_->warn("the LISTEN connection goes through a connection pooler (pool {}): not listening; the workers poll "
                     "each queue every poll_interval instead of being woken at once. Set ONCELY_LISTEN_DATABASE_URL "
                     "to a direct connection",
                     pool_name(url_));
          warned_pooler = true;
        }
        connected_before = true;
        delay = std::chrono::milliseconds(100);
        while (!stop.stop_requested()) {
          if (pauses_ != nullptr) pauses_->refresh(*conn);
          std::unique_lock lock(mutex);
          sleeper.wait_for(lock, stop, PauseWatcher::kPollInterval, [] { return false; });
        }
        return;
      }
      Receiver receiver(*conn, channel_, on_queue_);
      bool pauses_notified = false;
      std::optional<PauseReceiver> pause_receiver;
      if (pauses_ != nullptr) pause_receiver.emplace(*conn, pauses_->channel(), pauses_notified);
      // Listening first, then reading: a pause that commits in between is seen either way.
      auto next_pause_poll = std::chrono::steady_clock::now();
      if (connected_before) {
        log_->info("listener reconnected channel={}", channel_);
        on_reconnect_();
      }
      connected_before = true;
      delay = std::chrono::milliseconds(100);
      // Wake up at least every 200 ms to notice a stop request (and poll the pauses).
      while (!stop.stop_requested()) {
        if (pauses_ != nullptr && (pauses_notified || std::chrono::steady_clock::now() >= next_pause_poll)) {
          pauses_notified = false;
          next_pause_poll = std::chrono::steady_clock::now() + PauseWatcher::kPollInterval;
          pauses_->refresh(*conn);
        }
        conn->await_notification(0, 200000);
      }
      return;
    } catch (const std::exception& e) {
      log_->error("listener lost its connection channel={} error={}; reconnecting", channel_, one_line(url_, e.what()));
    }
    std::unique_lock lock(mutex);
    sleeper.wait_for(lock, stop, delay, [] { return false; });
    delay = std::min(delay * 2, std::chrono::milliseconds(5000));
  }
}

}  // namespace oncely::detail
