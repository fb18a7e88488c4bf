// Bulk enqueue: the streaming loop of `oncely enqueue -` and Client::enqueue_batch's check
// of its jobs. The loop's pieces live apart: its lines come from support/stdin_lines, its
// COPY is store/job_copy, and when a batch opens and commits is api/batch_ledger's
// decision. What stays here is the I/O and the errors, kept in one place because each
// ends with the ledger's account ("N jobs from lines 1..M were enqueued before it").
#include "api/bulk_enqueue.hpp"

#include <optional>
#include <string>
#include <utility>

#include <pqxx/pqxx>

#include "api/batch_ledger.hpp"
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

/// The I/O of a batch streamed into a COPY: its transaction, its clock (read first, in the
/// transaction), and the COPY, which ends before the commit. Destroyed uncommitted, the
/// transaction rolls back and none of the batch's jobs stay.
struct CopyBatch {
  CopyBatch(pqxx::connection& conn, const JobsTable& jobs)
      : tx(conn), clock(read_batch_clock(tx)), copy(std::in_place, tx, jobs, /*with_ids=*/false) {}

  pqxx::work tx;
  BatchClock clock;
  std::optional<JobCopy> copy;  // declared last: the COPY ends before its transaction does
};

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
                               const NewJob& defaults, std::size_t batch_size, std::string_view source, bool prepared) {
  const Store store(schema);  // validates the schema name
  if (batch_size == 0) throw ConfigError("batch-size", "must be at least 1");
  const std::string where = std::string(source) + " line ";
  // The single-job INSERT, prepared on this connection under a name of its own; unnamed
  // behind a transaction-mode pooler, whose next transaction may be another server's.
  const bool named = prepared_statements_allowed(prepared);
  if (named) conn.prepare(kInsertJobName, store.jobs.enqueue_sql());

  BatchLedger ledger(batch_size);
  const auto account = [&] { return ledger.account(); };

  // One batch at a time, opened at its first job and committed at its last, or earlier when
  // the input has nothing more ready (the ledger decides which). A batch of one job is one
  // autocommit INSERT. Otherwise each line is parsed and streamed straight into a COPY (the
  // server inserts while we parse); a bad line throws before the COPY ends, the batch's
  // transaction rolls back and none of its jobs stay.
  std::optional<CopyBatch> copy_batch;  // the open batch's COPY, unless it is a single job
  const auto database_error = [&](const std::string& what, const std::string& why) -> DatabaseError {
    return DatabaseError(what + ": " + one_line(url, why) + account());
  };

  const auto open = [&](bool single) {
    ledger.open(single);
    try {
      if (!single) copy_batch.emplace(conn, store.jobs);
    } catch (const pqxx::broken_connection& e) {
      throw database_error("connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      throw database_error("starting a batch at line " + std::to_string(ledger.lines()) + " failed", e.what());
    }
  };

  // Sends one job of the open batch (its line is already in the ledger's batch).
  const auto send = [&](const NewJob& job) {
    try {
      if (copy_batch) {
        copy_batch->copy->write(job, run_at_text(job, copy_batch->clock));
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
                         job.priority, job.max_attempts, job.traceparent, parents_literal(job), job.batch_id);
      } else {
        tx.exec_params(store.jobs.enqueue_sql(), job.kind, payload, job.queue, job.idempotency_key, job.run_at, delay,
                       job.priority, job.max_attempts, job.traceparent, parents_literal(job), job.batch_id);
      }
    } catch (const ConfigError& e) {
      throw ConfigError(where + std::to_string(ledger.last_line()), e.what() + account());
    } catch (const pqxx::broken_connection& e) {
      if (!copy_batch) {
        throw database_error(
            "line " + std::to_string(ledger.last_line()) + " may or may not have been enqueued (connection lost)",
            e.what());
      }
      throw database_error("enqueueing lines " + ledger.span() + " failed, connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      // Only the database reads run_at (our checks cover the other columns); name it as the
      // COPY's error context does.
      const std::string& state = e.sqlstate();
      if (!copy_batch && (state.starts_with("22") || state.starts_with("23"))) {
        const bool run_at = state.starts_with("22") && (job.run_at || job.delay.count() != 0);
        throw ConfigError(where + std::to_string(ledger.last_line()),
                          (run_at ? "run_at: " : "") + primary_message(e.what()) + account());
      }
      throw database_error("enqueueing lines " + ledger.span() + " failed", e.what());
    } catch (const pqxx::failure& e) {
      throw database_error("enqueueing lines " + ledger.span() + " failed", e.what());
    }
  };

  const auto commit = [&] {
    try {
      if (copy_batch) {
        copy_batch->copy->complete();
        copy_batch->copy.reset();
        copy_batch->tx.commit();
      }
    } catch (const CopyRowError& e) {
      throw ConfigError(where + std::to_string(ledger.line_of_row(e.row())), e.what() + account());
    } catch (const pqxx::in_doubt_error& e) {
      throw database_error(
          "lines " + ledger.span() + " may or may not have been enqueued (connection lost during COMMIT)", e.what());
    } catch (const pqxx::broken_connection& e) {
      throw database_error("enqueueing lines " + ledger.span() + " failed, connection lost", e.what());
    } catch (const pqxx::sql_error& e) {
      // The insert trigger's refusals of the batch's parents and batches (migration 24), at the
      // COPY's end: the input's to fix, in one of these lines.
      const std::string& state = e.sqlstate();
      if (state == "23503" || state == "OC105" || state == "22023" || state == "0A000") {
        throw ConfigError(std::string(source) + " lines " + ledger.span(), primary_message(e.what()) + account());
      }
      throw database_error("enqueueing lines " + ledger.span() + " failed", e.what());
    }
    ledger.committed();
    copy_batch.reset();
  };

  LineReader reader(fd);
  const auto more_ready = [&] { return reader.ready(); };
  std::string_view line;
  while (true) {
    if (ledger.commits_at_pause(more_ready)) commit();
    if (!reader.next(line)) break;
    const long number = ledger.read_line();
    if (is_blank_line(line)) continue;
    NewJob job;
    try {
      job = parse_job_line(line, defaults);
    } catch (const ConfigError& e) {
      throw ConfigError(where + std::to_string(number), e.what() + account());
    }
    const bool unique = job.unique_key.has_value();
    if (ledger.commits_before(unique)) commit();
    if (!ledger.is_open()) open(ledger.opens_single(unique, more_ready));
    ledger.add_line();
    send(job);
    if (ledger.full()) commit();
  }
  if (ledger.is_open()) commit();
  return BulkEnqueueResult{ledger.enqueued(), ledger.lines()};
}

}  // namespace oncely::detail
