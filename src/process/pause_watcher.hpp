#pragma once
// PauseWatcher: the process's view of which of its queues are paused (queue_pauses,
// migration 0009), as one flag per queue that every claim loop reads before it claims.
//
// The flags are refreshed on the listener's connection (listener.cpp): at once when the
// pauses trigger's NOTIFY arrives, at least every kPollInterval otherwise (a notification
// missed during a reconnect, or a pooler that drops LISTEN), and once before any pool
// starts, so that a worker started while a queue is paused claims nothing from it. While
// the database cannot be read, a flag keeps its last value.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <pqxx/connection>

namespace oncely::detail {

class Store;

class PauseWatcher {
 public:
  /// Every pause poll is at most this far apart: a pause holds on every worker within a
  /// second even when its NOTIFY is lost.
  static constexpr auto kPollInterval = std::chrono::milliseconds(500);

  /// `on_resume(queue)` runs (on the refreshing thread) when a queue's pause ends, to wake
  /// its idle workers at once.
  PauseWatcher(const Store& store, const std::vector<std::string>& queues,
               std::function<void(const std::string&)> on_resume);
  PauseWatcher(const PauseWatcher&) = delete;
  PauseWatcher& operator=(const PauseWatcher&) = delete;

  /// The flag of `queue` (true: paused), alive as long as this object; null for a queue
  /// the process does not serve. Read it with memory_order_acquire or stronger.
  [[nodiscard]] const std::atomic<bool>* flag(const std::string& queue) const;

  /// Reads the pauses of the queues on `conn` (no transaction may be open on it) and
  /// updates the flags. Throws pqxx exceptions (the flags keep their values).
  void refresh(pqxx::connection& conn);

  /// The NOTIFY channel to listen on.
  [[nodiscard]] const std::string& channel() const noexcept { return channel_; }

 private:
  const Store& store_;
  std::vector<std::string> queues_;
  std::map<std::string, std::atomic<bool>> flags_;
  std::function<void(const std::string&)> on_resume_;
  std::string channel_;
};

}  // namespace oncely::detail
