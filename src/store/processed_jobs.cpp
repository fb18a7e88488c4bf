#include "store/processed_jobs.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// Oldest first, in batches, by the BRIN index on processed_at.
constexpr std::string_view kPruneMarkers = R"sql(
  DELETE FROM :ONCELY_SCHEMA.processed_jobs
   WHERE ctid = ANY (ARRAY(SELECT ctid FROM :ONCELY_SCHEMA.processed_jobs
                            WHERE processed_at < now() - $1::bigint * interval '1 millisecond'
                            LIMIT $2))
)sql";

}  // namespace

ProcessedJobsTable::ProcessedJobsTable(StatementSet& statements)
    : statements_(statements), prune_(&statements.add("prune_markers", kPruneMarkers)) {}

long ProcessedJobsTable::prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const {
  return static_cast<long>(
      statements_.run(tx, *prune_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

}  // namespace oncely::detail
