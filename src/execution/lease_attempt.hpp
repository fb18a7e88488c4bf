#pragma once
// LeaseAttempt: one attempt of a lease-mode job, from its claim to its settlement, shared
// by the three that look at it: the handler's thread (runs it, collects its database
// effects), the lease keeper (renews it, and stops the handler when the lease is lost) and
// the queue's control thread (settles it in a fenced transaction).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <pqxx/transaction>

#include "store/job_leases.hpp"
#include "store/records.hpp"

namespace oncely::detail {

struct LeaseAttempt {
  ClaimedJob job;  // attempts: this attempt's number (counted at the claim)
  HeldLease held;  // the job and the fencing token the claim handed out
  std::string queue;
  std::chrono::milliseconds lease{0};
  std::chrono::steady_clock::time_point deadline;  // the claim + job_timeout
  /// Until when the lease is surely still ours: the send time of the claim or of the last
  /// renewal that returned it, plus the lease. Past it, another worker may hold it.
  std::atomic<std::int64_t> valid_until_ms{0};   // steady_ms()
  std::stop_source stop;                         // requested when the lease is lost, past the deadline, or at exit
  std::atomic<bool> lost{false};                 // the lease is gone (renewal did not return it, or it ran out)
  std::atomic<std::int64_t> lost_at_unix_ns{0};  // when `lost` was found (for the span event)
  std::atomic<bool> finished{false};             // the handler has returned
  /// Database effects (JobContext::on_complete), applied in the completion's transaction.
  /// Written by the handler's thread only, read by the control thread after `finished`.
  std::vector<std::function<void(pqxx::work&)>> effects;
  /// The job's output, when an effect gave one (JobContext::on_complete_output).
  std::optional<std::string> effects_output;
};

}  // namespace oncely::detail
