#include "process/listener.hpp"

#include <condition_variable>
#include <mutex>

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include "support/db.hpp"

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

}  // namespace

Listener::Listener(DatabaseUrl url, std::string channel, std::shared_ptr<spdlog::logger> log,
                   std::function<void(const std::string&)> on_queue, std::function<void()> on_reconnect)
    : url_(std::move(url)),
      channel_(std::move(channel)),
      log_(std::move(log)),
      on_queue_(std::move(on_queue)),
      on_reconnect_(std::move(on_reconnect)),
      thread_([this](const std::stop_token& stop) { run(stop); }) {}

Listener::~Listener() = default;

void Listener::run(const std::stop_token& stop) {
  auto delay = std::chrono::milliseconds(100);
  bool connected_before = false;
  std::mutex mutex;
  std::condition_variable_any sleeper;
  while (!stop.stop_requested()) {
    try {
      auto conn = connect(url_);
      Receiver receiver(*conn, channel_, on_queue_);
      if (connected_before) {
        log_->info("listener reconnected channel={}", channel_);
        on_reconnect_();
      }
      connected_before = true;
      delay = std::chrono::milliseconds(100);
      // Wake up at least every 200 ms to notice a stop request.
      while (!stop.stop_requested()) conn->await_notification(0, 200000);
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
