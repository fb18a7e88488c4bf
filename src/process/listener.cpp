#include "process/listener.hpp"

#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "process/look_backs.hpp"
#include "process/pause_watcher.hpp"
#include "support/db.hpp"
#include "support/pooler.hpp"
#include "support/schema.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

class Receiver final : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& conn, const std::string& channel, std::function<void(std::string)> on_queue)
      : pqxx::notification_receiver(conn, channel), on_queue_(std::move(on_queue)) {}
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
  std::function<void(std::string)> on_queue_;
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

Listener::Listener(DatabaseUrl url, std::string_view schema, std::vector<std::string> queues,
                   std::shared_ptr<spdlog::logger> log, std::function<void(const std::string&)> on_queue,
                   std::function<void(const std::string&)> on_look_back, std::function<void()> on_reconnect,
                   PauseWatcher* pauses)
    : url_(std::move(url)),
      channel_(jobs_channel(schema)),
      window_(schema),
      queues_(std::move(queues)),
      log_(std::move(log)),
      on_queue_(std::move(on_queue)),
      on_look_back_(std::move(on_look_back)),
      on_reconnect_(std::move(on_reconnect)),
      pauses_(pauses),
      thread_([this](const std::stop_token& stop) { run(stop); }) {}

Listener::~Listener() = default;

std::optional<std::int64_t> Listener::acknowledge(pqxx::connection& conn) {
  if (!acknowledging_) return std::nullopt;
  try {
    return window_.acknowledge(conn);
  } catch (const pqxx::sql_error& e) {
    // A role without EXECUTE on wakeup_received() (roles of one's own, not `migrate
    // --roles`'): the window then closes by itself after 10 ms, and every queue due looks
    // back. Said once per connection; a lost connection is not an sql_error.
    acknowledging_ = false;
    log_->warn("listener cannot acknowledge wake-ups (producers' NOTIFYs are skipped for 10 ms after each): {}",
               one_line(url_, e.what()));
    return std::nullopt;
  }
}

void Listener::run(const std::stop_token& stop) {
  auto delay = std::chrono::milliseconds(100);
  bool connected_before = false;
  bool warned_pooler = false;
  while (!stop.stop_requested()) {
    try {
      auto conn = connect(url_);
      if (behind_pooler(*conn)) {
        // LISTEN through a transaction-mode pooler registers on whichever server
        // connection the statement got, and its notifications go to whoever holds that
        // connection next: not to us. So nothing is LISTENed (no session state left in
        // the pool); the workers' poll finds the jobs, this thread polls the pauses.
        if (!warned_pooler) {
          log_->warn(
              "the LISTEN connection goes through a connection pooler (pool {}): not listening; the workers poll "
              "each queue every poll_interval instead of being woken at once. Set ONCELY_LISTEN_DATABASE_URL "
              "to a direct connection",
              pool_name(url_));
          warned_pooler = true;
        }
        connected_before = true;
        delay = std::chrono::milliseconds(100);
        while (!stop.stop_requested()) {
          if (pauses_ != nullptr) pauses_->refresh(*conn);
          pause_for(stop, PauseWatcher::kPollInterval);
        }
        return;
      }
      // Each queue named is woken now, and may be asked to look back later (LookBacks); the
      // window is acknowledged once per batch of notifications.
      LookBacks look_backs(queues_);
      acknowledging_ = true;  // tried again on each connection (after a failover, a new server)
      bool received = false;
      Receiver receiver(*conn, channel_, [&](std::string queue) {
        on_queue_(queue);
        look_backs.notified(queue, Clock::now());
        received = true;
      });
      bool pauses_notified = false;
      std::optional<PauseReceiver> pause_receiver;
      if (pauses_ != nullptr) pause_receiver.emplace(*conn, pauses_->channel(), pauses_notified);
      // Listening first, then reading: a pause that commits in between is seen either way.
      auto next_pause_poll = Clock::now();
      if (connected_before) {
        log_->info("listener reconnected channel={}", channel_);
        on_reconnect_();
      }
      connected_before = true;
      delay = std::chrono::milliseconds(100);
      // Wake up at least every 200 ms to notice a stop request (and poll the pauses).
      while (!stop.stop_requested()) {
        if (pauses_ != nullptr && (pauses_notified || Clock::now() >= next_pause_poll)) {
          pauses_notified = false;
          next_pause_poll = Clock::now() + PauseWatcher::kPollInterval;
          pauses_->refresh(*conn);
        }
        if (received) {
          received = false;
          acknowledge(*conn);
        }
        auto wait = std::chrono::microseconds(200000);
        if (const auto due = look_backs.next_due()) {
          const auto now = Clock::now();
          if (*due <= now) {
            for (const std::string& queue : look_backs.take_due(now, acknowledge(*conn))) on_look_back_(queue);
            continue;
          }
          wait = std::min(wait, std::chrono::ceil<std::chrono::microseconds>(*due - now));
        }
        conn->await_notification(static_cast<long>(wait.count() / 1000000), static_cast<long>(wait.count() % 1000000));
      }
      return;
    } catch (const std::exception& e) {
      log_->error("listener lost its connection channel={} error={}; reconnecting", channel_, one_line(url_, e.what()));
    }
    pause_for(stop, delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(5000));
  }
}

}  // namespace oncely::detail
