#pragma once
// The claim order, one statement fragment for the transaction-mode claim and its fallback
// that locks rows one at a time: a queue's ready jobs in (priority, run_at, id) order. The
// lease claim is the schema's lease_lock_ready() (migration 18), the same scan written in SQL;
// tests/pg/claim_pgtest.cpp checks that all three take the same jobs in the same order.

#include <string>
#include <string_view>

namespace oncely::detail {

/// The statement parameters the scan reads: the queue ($queue), how many jobs ($limit), and
/// the claim start, the key after which the scan begins ($priority smallint, $run_at_us
/// bigint microseconds since the epoch, $id bigint; all NULL: from the head of the queue).
struct ReadyScanParams {
  int queue;
  int limit;
  int priority;
  int run_at_us;
  int id;
};

/// Two common table expressions, for a statement that begins `WITH RECURSIVE`: `levels`,
/// the queue's priority levels from the claim start's on, and `name`, which locks (FOR
/// NO KEY UPDATE SKIP LOCKED: see migration 24) up to $limit ready jobs, level by level, each level in (run_at, id)
/// order, returning `columns` (of table `jobs`, aliased j). `filter`, when given, is one more
/// condition a job must meet (over j).
[[nodiscard]] std::string ready_jobs_scan(std::string_view name, std::string_view columns,
                                          const ReadyScanParams& params, std::string_view filter = {});

}  // namespace oncely::detail
