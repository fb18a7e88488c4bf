#pragma once
// QueueContext: what every worker of one queue shares, in either mode (Executor and its
// QueuePool; LeaseQueue), read-only while running; and a transaction-mode worker thread's
// connections.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include <pqxx/connection>

#include "execution/attempt_record.hpp"
#include "execution/attribution_gate.hpp"
#include "execution/claim_start.hpp"
#include "execution/registered_handler.hpp"
#include "oncely/config.hpp"
#include "oncely/database_url.hpp"
#include "oncely/values.hpp"
#include "store/store.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// What every worker of one queue shares, read-only while running.
struct QueueContext {
  std::string name;
  QueueConfig config;
  const Store* store = nullptr;
  const HandlerRegistry* handlers = nullptr;
  std::shared_ptr<spdlog::logger> log;
  std::function<void(const JobEvent&)> on_event;
  DatabaseUrl url{""};
  std::int64_t worker_id = 0;
  std::string worker_name;                // "host:pid": the worker in its completed jobs' records
  std::atomic<int>* in_flight = nullptr;  // handlers running now, across the pool
  std::stop_token abandon;                // requested when the pool gives up on its running handlers
  AttributionGate* gate = nullptr;        // the process's: suspects run with nothing else in flight
  // True while the queue is paused (`oncely queue pause`): nothing new may be claimed from
  // it; what runs finishes. Set by the process's PauseWatcher, which outlives the pools;
  // null: never paused. Every claim loop reads it before each claim.
  const std::atomic<bool>* paused = nullptr;
  // The process's attempt-record connection, shared by every thread (on the direct URL,
  // when the job path goes through a pooler); null: each thread opens its own on `url`.
  std::shared_ptr<RecordConnection> records;
  // Where the queue's claims start, shared by its threads (see claim_start.hpp).
  std::shared_ptr<ClaimStart> claim_start = std::make_shared<ClaimStart>();
  // Told how long each claim statement took (the metrics' oncely_claim_seconds); empty: off.
  std::function<void(ClaimStart::Clock::duration)> observe_claim;
};

/// Whether `queue`'s claim loops may claim now (not paused).
inline bool may_claim(const QueueContext& queue) noexcept {
  return queue.paused == nullptr || !queue.paused->load(std::memory_order_acquire);
}

/// A worker thread's job connection and its attempt record. Owned by that thread only.
struct WorkerConnections {
  std::unique_ptr<pqxx::connection> job;  // the job transactions
  AttemptRecord record;                   // on a connection of its own
  bool job_pooled = false;                // `job` goes through a pooler (behind_pooler)
};

}  // namespace oncely::detail
