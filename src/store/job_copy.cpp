// The COPY of a batch of jobs (store/job_copy.hpp): its clock, its run_at texts, the rows
// and the server's errors about them.
#include "store/job_copy.hpp"

#include <cctype>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include <pqxx/pqxx>

#include "store/jobs.hpp"
#include "store/sql.hpp"
#include "support/job_rules.hpp"

namespace oncely::detail {
namespace {

// The batch's clock (BatchClock): now() as text and as microseconds since the epoch.
constexpr std::string_view kBatchClock = R"sql(
  SELECT now()::text, (extract(epoch FROM now()) * 1000000)::bigint
)sql";

// Only for C++ callers that give both a run_at text and a delay: the database adds them.
constexpr std::string_view kResolveRunAt = R"sql(
  SELECT (u.run_at::timestamptz + u.delay_ms * interval '1 millisecond')::text
    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(run_at, delay_ms, i)
   ORDER BY u.i
)sql";

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

}  // namespace

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

BatchClock read_batch_clock(pqxx::transaction_base& tx) {
  const pqxx::row row = tx.exec1(std::string(kBatchClock));
  return BatchClock{row[0].as<std::string>(), row[1].as<std::int64_t>()};
}

std::string run_at_text(const NewJob& job, const BatchClock& clock) {
  if (job.run_at) return *job.run_at;
  if (job.delay.count() == 0) return clock.now_text;
  if (job.delay.count() > (std::numeric_limits<std::int64_t>::max() - clock.now_us) / 1000) {
    throw ConfigError("run_at", "too far in the future");
  }
  return utc_timestamp_text(clock.now_us + job.delay.count() * 1000);
}

JobCopy::JobCopy(pqxx::transaction_base& tx, const JobsTable& table, bool with_ids)
    : with_ids_(with_ids), stream_(tx, table.copy_table(), JobsTable::copy_columns(with_ids)) {}

void JobCopy::write(const NewJob& job, const std::string& run_at, std::int64_t id) {
  // ASCII-only JSON: jsonb stores the same value, and COPY's text stays 7-bit (text given
  // as payload_json goes as it is: it is the caller's, numbers and all).
  const std::string payload = payload_text(job, /*ascii=*/true);
  if (with_ids_) {
    stream_ << std::forward_as_tuple(id, job.kind, payload, job.queue, job.idempotency_key, run_at, job.priority,
                                     job.max_attempts, job.traceparent, parents_literal(job), job.batch_id);
  } else {
    stream_ << std::forward_as_tuple(job.kind, payload, job.queue, job.idempotency_key, run_at, job.priority,
                                     job.max_attempts, job.traceparent, parents_literal(job), job.batch_id);
  }
  ++rows_;
}

void JobCopy::complete() {
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

std::vector<std::int64_t> copy_jobs(pqxx::transaction_base& tx, const JobsTable& table, const std::vector<NewJob>& jobs,
                                    bool with_ids) {
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
    for (const auto& row :
         tx.exec_params(std::string(kResolveRunAt), to_array_literal(texts), to_array_literal(delays))) {
      resolved.push_back(row[0].as<std::string>());
    }
  }

  const std::vector<std::int64_t> ids =
      with_ids ? table.reserve_ids(tx, static_cast<int>(jobs.size())) : std::vector<std::int64_t>{};

  // Every run_at is settled before the COPY starts, so a bad one leaves `tx` untouched.
  const BatchClock clock = read_batch_clock(tx);
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

}  // namespace oncely::detail
