// Bulk enqueue: the COPY writer and the streaming loop of `oncely enqueue -` (its lines
// come from support/stdin_lines) and Client::enqueue_batch. Over 350 lines because the
// loop's error accounting ("N jobs from lines 1..M were enqueued before it") needs the
// parser's and the COPY's errors in one place; the SQL it runs is JobsTable's (store/jobs.cpp).
#include "api/bulk_enqueue.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "support/db.hpp"
#include "support/duration.hpp"
#include "support/pooler.hpp"
#include "store/job_control.hpp"
#include "store/store.hpp"
#include "support/exact_json.hpp"
#include "support/schema.hpp"
#include "support/stdin_lines.hpp"
#include "store/store.hpp"

namespace oncely::detail {
namespace {

// The batch's clock, read once in the batch's own transaction: now() as text (exactly what
// the column's DEFAULT would store; COPY reads it back in the same session, so DateStyle
// and TimeZone round-trip) and as microseconds since the epoch, for "+DURATION" rows.
constexpr std::string_view kBatchClock = R"sql(
  SELECT now()::text, (extract(epoch FROM now()) * 1000000)::bigint
)sql";

// Only for C++ callers that give both a run_at text and a delay: the database adds them.
constexpr std::string_view kResolveRunAt = R"sql(
  SELECT (u.run_at::timestamptz + u.delay_ms * interval '1 millisecond')::text
    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(run_at, delay_ms, i)
   ORDER BY u.i
)sql";

constexpr const char* kInsertJobName = "oncely_bulk_insert_job";

/// The first line of a server message without its "ERROR:  " prefix.
std::string primary_message(std::string_view what) {
  std::string_view first = what.substr(0, what.find('\n'));
  for (const std::string_view prefix : {"ERROR:  ", "ERROR: "}) {
    if (first.starts_with(prefix)) {
      first.remove_prefix(prefix.size());
      break;
    }
  }
  return std::string(first);
}

/// From "CONTEXT:  COPY jobs, line 3, column run_at: ..." the row (1-based) and column.
std::optional<std::pair<std::size_t, std::string>> copy_context(std::string_view what) {
  const std::size_t context = what.find("CONTEXT:  COPY ");
  if (context == std::string_view::npos) return std::nullopt;
  const std::string_view rest = what.substr(context);
  const std::size_t at = rest.find(", line ");
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t pos = at + 7;
  std::size_t row = 0;
  bool digits = false;
  while (pos < rest.size() && std::isdigit(static_cast<unsigned char>(rest[pos]))) {
    row = row * 10 + static_cast<std::size_t>(rest[pos++] - '0');
    digits = true;
  }
  if (!digits || row == 0) return std::nullopt;
  std::string column;
  if (rest.substr(pos).starts_with(", column ")) {
    pos += 9;
    while (pos < rest.size() && rest[pos] != ':' && rest[pos] != '\n') column += rest[pos++];
  }
  return std::make_pair(row, column);
}

/// "YYYY-MM-DD HH:MM:SS.ffffff+00" for microseconds since the epoch (ISO 8601, which
/// Postgres reads the same whatever the session's DateStyle).
std::string utc_timestamp_text(std::int64_t epoch_us) {
  const std::int64_t seconds = epoch_us >= 0 ? epoch_us / 1000000 : -((-epoch_us + 999999) / 1000000);
  const auto micros = static_cast<int>(epoch_us - seconds * 1000000);
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[64];
  std::snprintf(text, sizeof text, "%04lld-%02d-%02d %02d:%02d:%02d.%06d+00", static_cast<long long>(tm.tm_year) + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
  return text;
}

struct BatchClock {
  std::string now_text;
  std::int64_t now_us = 0;
};

BatchClock read_clock(pqxx::transaction_base& tx) {
  const pqxx::row row = tx.exec1(std::string(kBatchClock));
  return BatchClock{row[0].as<std::string>(), row[1].as<std::int64_t>()};
}

/// The run_at text for a job: its own, or now() plus its delay from the batch's clock (a
/// delay on top of a text of its own is resolved by the database beforehand). Throws
/// ConfigError("run_at") for a delay that overflows.
std::string run_at_text(const NewJob& job, const BatchClock& clock) {
  if (job.run_at) return *job.run_at;
  if (job.delay.count() == 0) return clock.now_text;
  if (job.delay.count() > (std::numeric_limits<std::int64_t>::max() - clock.now_us) / 1000) {
    throw ConfigError("run_at", "too far in the future");
  }
  return utc_timestamp_text(clock.now_us + job.delay.count() * 1000);
}

/// One COPY into <schema>.jobs, written row by row, so that the server works on a batch
/// while the rest of it is still being read and parsed.
class JobCopy {
 public:
  /// Starts the COPY: from here until complete(), `tx` can run nothing else.
  JobCopy(pqxx::transaction_base& tx, const JobsTable& table, bool with_ids)
      : with_ids_(with_ids), stream_(tx, table.copy_table(), JobsTable::copy_columns(with_ids)) {}

  void write(const NewJob& job, const std::string& run_at, std::int64_t id = 0) {
    // ASCII-only JSON: jsonb stores the same value, and COPY's text stays 7-bit (text given
    // as payload_json goes as it is: it is the caller's, numbers and all).
    const std::string payload = payload_text(job, /*ascii=*/true);
    if (with_ids_) {
      stream_ << std::forward_as_tuple(id, job.kind, payload, job.queue, job.idempotency_key, run_at, job.priority,
                                       job.max_attempts, job.traceparent);
    } else {
      stream_ << std::forward_as_tuple(job.kind, payload, job.queue, job.idempotency_key, run_at, job.priority,
                                       job.max_attempts, job.traceparent);
    }
    ++rows_;
  }

  /// Ends the COPY. A row the server refused becomes a CopyRowError naming it.
  void complete() {
    try {
      stream_.complete();
    } catch (const pqxx::sql_error& e) {
      const std::string& state = e.sqlstate();
      if (state.starts_with("22") || state.starts_with("23")) {
        if (const auto context = copy_context(e.what()); context && context->first <= rows_) {
          const std::string why = primary_message(e.what());
          throw CopyRowError(context->first - 1, context->second.empty() ? why : context->second + ": " + why);
        }
      }
      throw;
    }
  }

 private:
  bool with_ids_;
  std::size_t rows_ = 0;
  pqxx::stream_to stream_;
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

std::vector<std::int64_t> copy_jobs(pqxx::transaction_base& tx, const JobsTable& table,
                                    const std::vector<NewJob>& jobs, bool with_ids) {
  if (jobs.empty()) return {};

  // A run_at text with a delay on top (C++ callers only) is added up by the database.
  std::vector<std::optional<std::string>> texts;
  std::vector<std::int64_t> delays;
  for (const NewJob& job : jobs) {
    if (job.run_at && job.delay.count() != 0) {
      texts.push_back(job.run_at);
      delays.push_back(static_cast<std::int64_t>(job.delay.count()));
    }
  }
  std::vector<std::string> resolved;
  if (!texts.empty()) {
    for (const auto& row : tx.exec_params(std::string(kResolveRunAt), to_array_literal(texts), to_array_literal(delays))) {
      resolved.push_back(row[0].as<std::string>());
    }
  }

  const std::vector<std::int64_t> ids =
      with_ids ? table.reserve_ids(tx, static_cast<int>(jobs.size())) : std::vector<std::int64_t>{};

  // Every run_at is settled before the COPY starts, so a bad one leaves `tx` untouched.
  const BatchClock clock = read_clock(tx);
  std::vector<std::string> run_at(jobs.size());
  std::size_t next_resolved = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const NewJob& job = jobs[i];
    try {
      run_at[i] = job.run_at && job.delay.count() != 0 ? resolved.at(next_resolved++) : run_at_text(job, clock);
    } catch (const ConfigError& e) {
      throw CopyRowError(i, e.what());
    }
  }

  JobCopy copy(tx, table, with_ids);
  for (std::size_t i = 0; i < jobs.size(); ++i) copy.write(jobs[i], run_at[i], with_ids ? ids[i] : 0);
  copy.complete();
  return ids;
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
        batch->clock = read_clock(*batch->tx);
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
