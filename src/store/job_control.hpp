#pragma once
// The operator's statements over the jobs table (list, group by error, show, cancel) and
// the unique enqueue (migration 0009's enqueue_unique()). Apart from jobs.hpp, whose
// statements are the runtime's hot path: these run on callers' connections, unprepared.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/transaction_base>

#include "oncely/records.hpp"
#include "oncely/values.hpp"
#include "store/sql.hpp"
#include "support/job_rules.hpp"

namespace oncely::detail {

class JobControl {
 public:
  explicit JobControl(StatementSet& statements);

  [[nodiscard]] JobPage list(pqxx::transaction_base& tx, const JobFilter& filter, long limit,
                             std::optional<std::int64_t> after) const;
  [[nodiscard]] std::vector<JobErrorGroup> group_by_error(pqxx::transaction_base& tx, const JobFilter& filter,
                                                          long limit) const;
  /// Without `with_payload` the statement does not name the payload column at all.
  [[nodiscard]] std::optional<JobDetail> show(pqxx::transaction_base& tx, std::int64_t id,
                                              bool with_payload = true) const;
  /// In `tx`: the waiting descendants of the selected jobs, the move of what could be locked
  /// (taking the descendants along), then which of the rest still exist (locked by a worker's
  /// batch: running).
  CancelResult cancel(pqxx::transaction_base& tx, const JobFilter& filter) const;
  /// What cancel() would do, by the computed state, without locking anything.
  CancelResult cancel_dry_run(pqxx::transaction_base& tx, const JobFilter& filter) const;
  /// The jobs waiting, directly or not, for one of `ids` (not `ids` themselves), ascending.
  [[nodiscard]] std::vector<std::int64_t> waiting_descendants(pqxx::transaction_base& tx,
                                                              const std::vector<std::int64_t>& ids) const;

  /// One unique enqueue (job.unique_key set; validated by the caller): the id, and what
  /// happened ("inserted", "existing", "replaced", "running").
  std::pair<std::int64_t, std::string> enqueue_unique(pqxx::transaction_base& tx, const NewJob& job,
                                                      const std::string& payload) const;

 private:
  // A statement over the filter, and its variant for --state running (job_control.cpp).
  struct Variants {
    Variants(std::string_view sql, std::string_view schema);
    [[nodiscard]] const std::string& of(const JobFilter& f) const {
      return f.state == JobState::running ? running : any;
    }
    std::string any, running;
  };
  Variants list_, group_, cancel_, dry_run_;
  std::string show_, show_without_payload_, still_there_, waiting_descendants_, enqueue_unique_;
};

class Store;
/// One unique enqueue through `store` (validated by the caller), as an Enqueued.
Enqueued enqueue_unique(pqxx::transaction_base& tx, const Store& store, const NewJob& job);

/// ConfigError for a filter value that cannot be meant (an empty queue, kind or error
/// text; a negative duration).
void validate_job_filter(const JobFilter& filter);

}  // namespace oncely::detail
