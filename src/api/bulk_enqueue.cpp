// Bulk enqueue: the streaming loop of `oncely enqueue -` (its lines come from
// support/stdin_lines, its COPY is store/job_copy) and Client::enqueue_batch's check of
// its jobs. The loop keeps the parser's, the INSERT's and the COPY's errors in one place
// because each ends with the same account ("N jobs from lines 1..M were enqueued before it").
#include "api/bulk_enqueue.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include <pqxx/pqxx>

#include "store/job_control.hpp"
#include "store/job_copy.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/job_rules.hpp"
#include "support/pooler.hpp"
#include "support/stdin_lines.hpp"

namespace oncely::detail {
namespace {

constexpr const char* kInsertJobName = "oncely_bulk_insert_job";

}  // namespace

void validate_jobs(const std::vector<NewJob>& jobs) {
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    try {
      validate_new_job(jobs[i]);
    } catch (const ConfigError& e) {
      // Re-rooted at the job's index.
      throw InvalidArgument("jobs[" + std::to_string(i) + "]" + (e.path().empty() ? "" : "." + e.path()), e.reason());
    }
    if (jobs[i].unique_key) {
      throw InvalidArgument("jobs[" + std::to_string(i) + "].unique_key",
                            "enqueue_batch cannot enqueue unique jobs (COPY has no ON CONFLICT): use enqueue()");
    }
  }
}

BulkEnqueueResult bulk_enqueue(pqxx::connection& conn, const DatabaseUrl& url, std::string_view schema, int fd,
                               const NewJob& defaults, std::size_t batch_size, std::string_view source,
                               bool prepared) {
  const Store store(schema);  // validates the schema name
  if (batch_size == 0) throw ConfigError("batch-size", "must be at least 1");
  const std::string where = std::string(source) + " line ";
  // The single-job INSERT, prepared on this connection under a name of its own; unnamed
  // behind a transaction-mode pooler, whose next transaction may be another server's.
  const bool named = prepared_statements_allowed(prepared);
  if (named) conn.prepare(kInsertJobName, store.jobs.enqueue_sql());

  BulkEnqueueResult result;
  long committed_through = 0;  // the last line of the last committed batch
  const auto account = [&] {
    if (result.enqueued == 0) return std::string("; no jobs were enqueued");
    return "; " + std::to_string(result.enqueued) + " jobs from lines 1.." + std::to_string(committed_through) +
           " were enqueued before it";
  };

  // One batch at a time, opened at its first job and committed at its last, or earlier when
  // the input has nothing more ready. A batch of one job (--batch-size 1, or a line that
  // arrived alone) is one autocommit INSERT. Otherwise each line is parsed and streamed
  // straight into a COPY (the server inserts while we parse); a bad line throws before the
  // COPY ends, the batch's transaction rolls back and none of its jobs stay.
  struct Batch {
    std::optional<pqxx::work> tx;  // COPY only
    BatchClock clock;              // COPY only
    std::optional<JobCopy> copy;   // COPY only, opened after the clock was read
    std::vector<long> lines;       // the input line of each row, for the server's errors
  };
  std::optional<Batch> batch;
  const auto span = [&] { return std::to_string(batch->lines.front()) + ".." + std::to_string(batch->lines.back()); };
  const auto database_error = [&](const std::string& what, const std::string& why) -> DatabaseError {
    return DatabaseError(what + ": " + one_line(url, why) + account());
  };

  const auto open = [&](bool single) {
    batch.emplace();
    try {
      if (!single) {
        batch->tx.emplace(conn);
        batch->clock = read_batch_clock(*batch->tx);
        batch->copy.emplace(*batch->tx, store.jobs, /*with_ids=*/false);
      }
    } catch (const pqxx::broken_connection& e) {
      throw database_error("connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      throw database_error("starting a batch at line " + std::to_string(result.lines) + " failed", e.what());
    }
    batch->lines.reserve(std::min<std::size_t>(batch_size, kDefaultBulkBatchSize));
  };

  // Sends one job of the open batch (its line is already in batch->lines).
  const auto send = [&](const NewJob& job) {
    try {
      if (batch->copy) {
        batch->copy->write(job, run_at_text(job, batch->clock));
        return;
      }
      pqxx::nontransaction tx{conn};
      if (job.unique_key) {
        enqueue_unique(tx, store, job);
        return;
      }
      const std::string payload = payload_text(job, /*ascii=*/true);
      const auto delay = static_cast<std::int64_t>(job.delay.count());
      if (named) {
        tx.exec_prepared(kInsertJobName, job.kind, payload, job.queue, job.idempotency_key, job.run_at, delay,
                         job.priority, job.max_attempts, job.traceparent);
      } else {
        tx.exec_params(store.jobs.enqueue_sql(), job.kind, payload, job.queue, job.idempotency_key, job.run_at, delay,
                       job.priority, job.max_attempts, job.traceparent);
      }
    } catch (const ConfigError& e) {
      throw ConfigError(where + std::to_string(batch->lines.back()), e.what() + account());
    } catch (const pqxx::broken_connection& e) {
      if (!batch->copy) {
        throw database_error("line " + std::to_string(batch->lines.back()) +
                                 " may or may not have been enqueued (connection lost)",
                             e.what());
      }
      throw database_error("enqueueing lines " + span() + " failed, connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      // Only the database reads run_at (our checks cover the other columns); name it as the
      // COPY's error context does.
      const std::string& state = e.sqlstate();
      if (!batch->copy && (state.starts_with("22") || state.starts_with("23"))) {
        const bool run_at = state.starts_with("22") && (job.run_at || job.delay.count() != 0);
        throw ConfigError(where + std::to_string(batch->lines.back()),
                          (run_at ? "run_at: " : "") + primary_message(e.what()) + account());
      }
      throw database_error("enqueueing lines " + span() + " failed", e.what());
    } catch (const pqxx::failure& e) {
      throw database_error("enqueueing lines " + span() + " failed", e.what());
    }
  };

  const auto commit = [&] {
    try {
      if (batch->copy) {
        batch->copy->complete();
        batch->copy.reset();
      }
      if (batch->tx) batch->tx->commit();
    } catch (const CopyRowError& e) {
      throw ConfigError(where + std::to_string(batch->lines.at(e.row())), e.what() + account());
    } catch (const pqxx::in_doubt_error& e) {
      throw database_error("lines " + span() + " may or may not have been enqueued (connection lost during COMMIT)",
                           e.what());
    } catch (const pqxx::broken_connection& e) {
      throw database_error("enqueueing lines " + span() + " failed, connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      throw database_error("enqueueing lines " + span() + " failed", e.what());
    }
    result.enqueued += static_cast<long>(batch->lines.size());
    committed_through = batch->lines.back();
    batch.reset();
  };

  LineReader reader(fd);
  std::string_view line;
  while (true) {
    // A producer that writes slowly (tail -f | oncely enqueue -) gets its jobs committed as
    // soon as it pauses, not when a whole batch has come together.
    if (batch && !reader.ready()) commit();
    if (!reader.next(line)) break;
    ++result.lines;
    if (is_blank_line(line)) continue;
    NewJob job;
    try {
      job = parse_job_line(line, defaults);
    } catch (const ConfigError& e) {
      throw ConfigError(where + std::to_string(result.lines), e.what() + account());
    }
    // A unique job goes alone, one call of enqueue_unique() (COPY has no ON CONFLICT): the
    // batch before it commits first, so that the input's order is kept.
    if (job.unique_key && batch) commit();
    // A job with nothing behind it goes alone: an INSERT costs one round trip, a COPY five.
    if (!batch) open(/*single=*/batch_size == 1 || !reader.ready() || job.unique_key.has_value());
    batch->lines.push_back(result.lines);
    send(job);
    if (!batch->copy || batch->lines.size() >= batch_size) commit();
  }
  if (batch) commit();
  return result;
}

}  // namespace oncely::detail
