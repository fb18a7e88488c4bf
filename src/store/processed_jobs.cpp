#include "store/processed_jobs.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// Completed jobs (the schema's completed_jobs view), newest first: keyset paging down the
// markers' job-id index ($5 before). $1 id, $2 queue, $3 kind, $4 key; NULL: any. :OUTPUT:
// the output column, or NULL when it is not to be read.
constexpr std::string_view kListCompleted = R"sql(
  SELECT p.job_id, p.queue, p.kind, p.idempotency_key, to_char(p.completed_at AT TIME ZONE 'UTC', :ISO_UTC),
         p.attempt, extract(epoch FROM p.run_time) * 1000, p.worker, p.trace_id, :OUTPUT
    FROM :ONCELY_SCHEMA.completed_jobs p
   WHERE ($1::bigint IS NULL OR p.job_id = $1)
     AND ($2::text IS NULL OR p.queue = $2)
     AND ($3::text IS NULL OR p.kind = $3)
     AND :BY_KEY
     AND ($5::bigint IS NULL OR p.job_id < $5)
   ORDER BY p.job_id DESC
   LIMIT $6
)sql";

// A key of any kind, by the unique (kind, key) index: one probe per kind, the kinds found by
// skipping through that index (a loose index scan), not a scan of every record.
constexpr std::string_view kByKey = R"sql((p.kind, p.idempotency_key) IN (
         WITH RECURSIVE kinds AS (
           SELECT min(m.kind) AS kind FROM :ONCELY_SCHEMA.processed_jobs m WHERE m.idempotency_key IS NOT NULL
           UNION ALL
           SELECT (SELECT min(m.kind) FROM :ONCELY_SCHEMA.processed_jobs m
                    WHERE m.idempotency_key IS NOT NULL AND m.kind > k.kind)
             FROM kinds k WHERE k.kind IS NOT NULL)
         SELECT k.kind, $4::text FROM kinds k WHERE k.kind IS NOT NULL))sql";

std::string list_sql(std::string_view schema, std::string_view by_key) {
  std::string sql(kListCompleted);
  sql.replace(sql.find(":BY_KEY"), std::string_view(":BY_KEY").size(), by_key);
  return render_statement(sql, schema);
}

std::string with_output(std::string sql, bool output) {
  sql.replace(sql.find(":OUTPUT"), std::string_view(":OUTPUT").size(), output ? "p.output::text" : "NULL::text");
  return sql;
}

}  // namespace

ProcessedJobsTable::ProcessedJobsTable(StatementSet& statements)
    : statements_(statements),
      // Oldest first, in batches, by the BRIN indexes on their times. A batch's completion row
      // goes once older than the window: its markers, written before it, are too.
      prune_(&statements.add("prune_markers", prune_older_sql("processed_jobs", "processed_at"))),
      prune_completions_(
          &statements.add("prune_transaction_completions", prune_older_sql("transaction_completions", "completed_at"))),
      list_(list_sql(statements.schema(), "$4::text IS NULL")),
      list_by_key_(list_sql(statements.schema(), kByKey)) {}

long ProcessedJobsTable::prune(pqxx::transaction_base& tx, std::chrono::milliseconds window, int limit) const {
  return static_cast<long>(
      statements_.run(tx, *prune_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

long ProcessedJobsTable::prune_completions(pqxx::transaction_base& tx, std::chrono::milliseconds window,
                                           int limit) const {
  return static_cast<long>(
      statements_.run(tx, *prune_completions_, static_cast<std::int64_t>(window.count()), limit).affected_rows());
}

CompletedJobPage ProcessedJobsTable::list(pqxx::transaction_base& tx, const CompletedJobFilter& filter, long limit,
                                          std::optional<std::int64_t> before, bool output) const {
  const std::string sql = with_output(filter.idempotency_key ? list_by_key_ : list_, output);
  CompletedJobPage page;
  for (const auto& r : tx.exec_params(sql, filter.id, filter.queue, filter.kind, filter.idempotency_key, before,
                                      static_cast<std::int64_t>(limit))) {
    CompletedJob& job = page.jobs.emplace_back();
    job.id = r[0].as<std::int64_t>();
    job.queue = r[1].as<std::string>();
    job.kind = r[2].as<std::string>();
    job.idempotency_key = nullable<std::string>(r[3]);
    job.completed_at = r[4].as<std::string>();
    job.attempt = nullable<int>(r[5]);
    job.run_time_ms = nullable<double>(r[6]);
    job.worker = nullable<std::string>(r[7]);
    job.trace_id = nullable<std::string>(r[8]);
    job.output_text = nullable<std::string>(r[9]);
    job.output_hidden = !output;
  }
  if (static_cast<long>(page.jobs.size()) == limit && !page.jobs.empty()) page.next_before = page.jobs.back().id;
  return page;
}

}  // namespace oncely::detail
