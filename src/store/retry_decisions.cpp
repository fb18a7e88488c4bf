#include "store/retry_decisions.hpp"

#include <cstdint>
#include <vector>

#include <pqxx/pqxx>

#include "support/queue_policy.hpp"

namespace oncely::detail {
namespace {

// The backoff is this worker's own (its configuration file's), passed in, rather than its
// queue's row in queue_policies read back: the worker wrote that row from the same file at
// its start, and a worker applies its file's policy throughout (its lease, max_attempts and
// job_timeout too) even if `oncely queue set` changes the row meanwhile; so it reads nothing
// per failure. Whichever parameters, the formula and the rule are the schema's alone.
// Durations travel as milliseconds; the delay comes back rounded to the millisecond, which
// the retry statements add to statement_timestamp().
constexpr std::string_view kDecide = R"sql(
  SELECT f.outcome,
         CASE WHEN f.outcome = 'retry' THEN round(extract(epoch FROM coalesce(
           $4::bigint * interval '1 millisecond',
           :ONCELY_SCHEMA.backoff_delay(
             $5::bigint * interval '1 millisecond', $6::bigint * interval '1 millisecond', $7::text,
             (SELECT array_agg(s.ms * interval '1 millisecond' ORDER BY s.n)
                FROM unnest($8::bigint[]) WITH ORDINALITY AS s(ms, n)),
             $2::integer))) * 1000)::bigint END
    FROM :ONCELY_SCHEMA.failure_outcome($1::text, $2::integer, $3::integer) AS f(outcome)
)sql";

}  // namespace

RetryDecisions::RetryDecisions(StatementSet& statements)
    : statements_(statements), decide_(&statements.add("decide_retry", kDecide)) {}

RetryAnswer RetryDecisions::decide(pqxx::transaction_base& tx, const FailureQuestion& failure) const {
  std::vector<std::int64_t> schedule;
  schedule.reserve(failure.backoff.schedule.size());
  for (const auto step : failure.backoff.schedule) schedule.push_back(step.count());
  const auto row =
      statements_
          .run(tx, *decide_, std::string(failure.failure_class), failure.attempt, failure.max_attempts,
               failure.retry_after ? std::optional<std::int64_t>(failure.retry_after->count()) : std::nullopt,
               static_cast<std::int64_t>(failure.backoff.base.count()),
               static_cast<std::int64_t>(failure.backoff.cap.count()), std::string(jitter_name(failure.backoff.jitter)),
               to_array_literal(schedule))
          .at(0);
  RetryAnswer answer;
  answer.outcome = row[0].as<std::string>();
  if (!row[1].is_null()) answer.delay = std::chrono::milliseconds(row[1].as<std::int64_t>());
  return answer;
}

}  // namespace oncely::detail
