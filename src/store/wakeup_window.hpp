#pragma once
// The insert trigger's wake-up window (migration 0016): the last NOTIFY it sent that no
// listener has acknowledged yet. While it is open (at most 10 ms), an INSERT into the same
// queues sends no NOTIFY of its own: the one on its way wakes the workers. A listener
// acknowledges the notifications that reached it, so that the next INSERT notifies again,
// and kFollowUp after the last one has the queues named look back for a job whose INSERT
// skipped its NOTIFY and committed after the claim the first one caused
// (process/look_backs.hpp).
//
// A value type holding its statement, not a table of the Store: the listener keeps a copy,
// since a listener left behind at exit may outlive the process's Store.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <pqxx/connection>

namespace oncely::detail {

class WakeupWindow {
 public:
  /// When the listener's second look comes after the last notification: the length of the
  /// trigger's window (the 10 in migration 0016's on_jobs_inserted(); change both together).
  static constexpr std::chrono::milliseconds kFollowUp{10};

  explicit WakeupWindow(std::string_view schema);
  /// Closes the window and returns how many NOTIFYs the trigger has skipped so far: one
  /// statement on `conn` outside any transaction (the listener's connection, which
  /// prepares no statements).
  std::int64_t acknowledge(pqxx::connection& conn) const;

 private:
  std::string acknowledge_;
};

}  // namespace oncely::detail
