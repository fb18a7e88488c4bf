#include "store/ready_jobs.hpp"

#include <string_view>
#include <utility>

#include "support/text.hpp"

namespace oncely::detail {
namespace {

// One priority level at a time, so that within a level `run_at <= now()` ends the index
// range and jobs scheduled for later are never walked, and (run_at, id) > ... starts it
// (Postgres starts a scan at a row comparison only on the columns after the equalities).
// The next level is one index descent (`levels` skips through the index), taken only if the
// batch is not full yet. Starting after the previous claim's last job skips the index
// entries of jobs already done, which stay in the index until vacuum (where claims start:
// execution/claim_start.hpp).
constexpr std::string_view kReadyJobsScan = R"sql(levels(priority) AS (
    SELECT coalesce($P::smallint, (-32768)::smallint)
    UNION ALL
    SELECT (SELECT min(j.priority) FROM :ONCELY_SCHEMA.jobs j WHERE j.queue = $Q AND j.priority > levels.priority)
      FROM levels
     WHERE levels.priority IS NOT NULL
  ), :NAME AS MATERIALIZED (
    SELECT ready.* FROM levels CROSS JOIN LATERAL (
      SELECT :COLUMNS
        FROM :ONCELY_SCHEMA.jobs j
       WHERE j.queue = $Q AND j.priority = levels.priority AND j.run_at <= now()
         AND (j.run_at, j.id) > (CASE WHEN levels.priority = $P::smallint
                                      THEN 'epoch'::timestamptz + $R::bigint * interval '1 microsecond'
                                      ELSE '-infinity' END,
                                 CASE WHEN levels.priority = $P::smallint THEN $I::bigint ELSE 0 END):FILTER
       ORDER BY j.run_at, j.id
       LIMIT $L
         FOR NO KEY UPDATE SKIP LOCKED
    ) ready
    LIMIT $L
  ))sql";

}  // namespace

std::string ready_jobs_scan(std::string_view name, std::string_view columns, const ReadyScanParams& params,
                            std::string_view filter) {
  std::string sql(kReadyJobsScan);
  const std::pair<std::string_view, std::string> parts[] = {
      {":NAME", std::string(name)},
      {":COLUMNS", std::string(columns)},
      {":FILTER", filter.empty() ? std::string() : "\n         AND " + std::string(filter)},
      {"$Q", "$" + std::to_string(params.queue)},
      {"$L", "$" + std::to_string(params.limit)},
      {"$P", "$" + std::to_string(params.priority)},
      {"$R", "$" + std::to_string(params.run_at_us)},
      {"$I", "$" + std::to_string(params.id)},
  };
  for (const auto& [placeholder, value] : parts) replace_all(sql, placeholder, value);
  return sql;
}

}  // namespace oncely::detail
