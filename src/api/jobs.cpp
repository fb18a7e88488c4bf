// list_jobs(), group_jobs_by_error(), show_job(), cancel_jobs(): the operator's view of the
// jobs table, for the CLI and any console alike.

#include "oncely/jobs.hpp"

#include "api/operator_transaction.hpp"

namespace oncely {

JobState parse_job_state(std::string_view name) {
  if (name == "ready") return JobState::ready;
  if (name == "scheduled") return JobState::scheduled;
  if (name == "retrying") return JobState::retrying;
  if (name == "running") return JobState::running;
  if (name == "waiting") return JobState::waiting;
  throw ConfigError(
      "state", "unknown state '" + std::string(name) + "' (expected ready, scheduled, retrying, running or waiting)");
}

std::string_view to_string(JobState state) {
  switch (state) {
    case JobState::ready: return "ready";
    case JobState::scheduled: return "scheduled";
    case JobState::retrying: return "retrying";
    case JobState::running: return "running";
    case JobState::waiting: return "waiting";
  }
  return "ready";
}

namespace {

void check_limit(long limit) {
  if (limit < 1 || limit > kMaxJobsLimit) {
    throw ConfigError("limit", "must be between 1 and " + std::to_string(kMaxJobsLimit));
  }
}

}  // namespace

JobPage list_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter, long limit,
                  std::optional<std::int64_t> after) {
  detail::validate_job_filter(filter);
  check_limit(limit);
  return detail::operator_transaction(url, schema, "listing jobs", false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        return store.job_control.list(tx, filter, limit, after);
                                      });
}

std::vector<JobErrorGroup> group_jobs_by_error(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter,
                                               long limit) {
  detail::validate_job_filter(filter);
  check_limit(limit);
  return detail::operator_transaction(url, schema, "grouping jobs", false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        return store.job_control.group_by_error(tx, filter, limit);
                                      });
}

std::optional<JobDetail> show_job(const DatabaseUrl& url, std::string_view schema, std::int64_t id, bool with_payload) {
  if (id <= 0) throw ConfigError("id", "must be positive");
  return detail::operator_transaction(url, schema, "showing job " + std::to_string(id), false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        return store.job_control.show(tx, id, with_payload);
                                      });
}

CompletedJobPage list_completed_jobs(const DatabaseUrl& url, std::string_view schema, const CompletedJobFilter& filter,
                                     long limit, std::optional<std::int64_t> before, bool with_output) {
  check_limit(limit);
  if (filter.id && *filter.id <= 0) throw ConfigError("id", "must be positive");
  return detail::operator_transaction(url, schema, "listing completed jobs", false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        return store.processed_jobs.list(tx, filter, limit, before, with_output);
                                      });
}

CancelResult cancel_jobs(const DatabaseUrl& url, std::string_view schema, const JobFilter& filter, bool dry_run) {
  detail::validate_job_filter(filter);
  if (filter.empty() && !filter.all) {
    throw ConfigError("", "refusing to cancel every job: give --id or a filter, or --all");
  }
  return detail::operator_transaction(
      url, schema, "cancelling jobs", !dry_run, [&](pqxx::transaction_base& tx, const detail::Store& store) {
        return dry_run ? store.job_control.cancel_dry_run(tx, filter) : store.job_control.cancel(tx, filter);
      });
}

}  // namespace oncely
