#pragma once
// Store: THE place for SQL. One file per table under store/ holds every statement that
// table's rows see, as named constants rendered for one schema when the Store is built;
// callers use the tables' typed functions and never assemble SQL.
//
//   jobs                JobsTable              enqueue, claim, completion, retry, fold
//   jobs (lease mode)   JobLeasesTable         lease claim, renewal, fenced completion/retry/release
//   dead_letters        DeadLettersTable       the move into it; list, group, replay, purge
//   attempts_in_flight  AttemptsInFlightTable  the attempt records (see AttemptRecord)
//   workers             WorkersTable           registration, heartbeat, stale removal
//   job_stats           JobStatsTable          outcome counts, rates
//   processed_jobs      ProcessedJobsTable     dedup marker pruning (the claim inserts them)
//   schema_migrations   SchemaMigrationsTable  versions
//   cron_slots          CronSlotsTable         periodic jobs: one row per entry, one job per slot
//   queue_pauses        QueuePausesTable       pause, resume, what the workers watch
//   queue_policies      QueuePoliciesTable     each queue's policy (mode, lease, attempts, backoff, timeout)
//   lease_completions   LeaseCompletionsTable  lease jobs their exec/http handler completed itself
//   *_rate_windows      RateWindowsTable       the starts rates count: upkeep (the claim writes them)
//   jobs (operator's)   JobControl             list, group, show, cancel; unique enqueue
//   leaders             LeadersTable           role leases: the metrics exporter
//   batches             BatchesTable           open, close, list (members settle them: migration 24)
//   (no table)          AdvisoryLocks          the maintenance election (transaction-scoped)
//   (no table)          RetryDecisions         retry or dead letter, and the delay: the schema's functions

#include <string>
#include <string_view>

#include <pqxx/connection>

#include "store/advisory_locks.hpp"
#include "store/attempts_in_flight.hpp"
#include "store/batches.hpp"
#include "store/cron_slots.hpp"
#include "store/dead_letters.hpp"
#include "store/job_control.hpp"
#include "store/job_leases.hpp"
#include "store/job_stats.hpp"
#include "store/jobs.hpp"
#include "store/leaders.hpp"
#include "store/lease_completions.hpp"
#include "store/processed_jobs.hpp"
#include "store/queue_pauses.hpp"
#include "store/queue_policies.hpp"
#include "store/rate_windows.hpp"
#include "store/retry_decisions.hpp"
#include "store/schema_migrations.hpp"
#include "store/workers.hpp"

namespace oncely::detail {

class Store {
 public:
  /// `prepared`: run the runtime statements as named prepared statements (prepare() once
  /// per connection). Off for transaction-mode poolers that cannot carry them, and for
  /// connections that never prepare them (the operator's commands). Throws ConfigError for
  /// an invalid schema name.
  explicit Store(std::string_view schema, bool prepared = false);
  // The tables point into statements_: a Store is neither copied nor moved.
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  [[nodiscard]] const std::string& schema() const noexcept { return statements_.schema(); }
  /// Prepares every runtime statement on `conn` (a no-op when prepared statements are off).
  void prepare(pqxx::connection& conn) const { statements_.prepare(conn); }

 private:
  StatementSet statements_;  // first: the tables below add theirs to it

 public:
  const JobsTable jobs{statements_};
  const JobLeasesTable leases{statements_};
  const DeadLettersTable dead_letters{statements_};
  const AttemptsInFlightTable attempts_in_flight{statements_};
  const WorkersTable workers{statements_};
  const JobStatsTable job_stats{statements_};
  const ProcessedJobsTable processed_jobs{statements_};
  const SchemaMigrationsTable schema_migrations{statements_};
  const CronSlotsTable cron_slots{statements_};
  const AdvisoryLocks locks{statements_};
  const LeadersTable leaders{statements_};
  const QueuePausesTable queue_pauses{statements_};
  const QueuePoliciesTable queue_policies{statements_};
  const BatchesTable batches{statements_};
  const LeaseCompletionsTable lease_completions{statements_};
  const RateWindowsTable rate_windows{statements_};
  const RetryDecisions retry_decisions{statements_};
  const JobControl job_control{statements_};
};

}  // namespace oncely::detail
