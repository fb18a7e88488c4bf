#include "store/queue_policies.hpp"

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/job_stats.hpp"
#include "support/queue_policy.hpp"

namespace oncely::detail {
namespace {

// Durations travel as milliseconds; the schedule as an array of them, in order. The limits
// (migrations 22 and 23) are a row of queue_limits, when the queue has any.
constexpr std::string_view kLimitColumns = R"sql(
    l.concurrency, l.key, l.per_key_concurrency,
    l.rate_count, l.rate_period_ms, l.per_key_rate_count, l.per_key_rate_period_ms)sql";
constexpr std::string_view kColumns = R"sql(
    p.queue, p.mode, (extract(epoch FROM p.lease) * 1000)::bigint, p.max_attempts,
    (extract(epoch FROM p.backoff_base) * 1000)::bigint, (extract(epoch FROM p.backoff_cap) * 1000)::bigint,
    p.backoff_jitter,
    (SELECT array_agg((extract(epoch FROM s.d) * 1000)::bigint ORDER BY s.n)
       FROM unnest(p.backoff_schedule) WITH ORDINALITY AS s(d, n)),
    (extract(epoch FROM p.job_timeout) * 1000)::bigint,
    l.queue IS NOT NULL,)sql";
constexpr std::string_view kFromPolicies = R"sql(
  FROM :ONCELY_SCHEMA.queue_policies p LEFT JOIN :ONCELY_SCHEMA.queue_limits l ON l.queue = p.queue)sql";

// Sets the limits, or removes them (every argument NULL), and keys the queue's jobs.
constexpr std::string_view kWriteLimits = R"sql(
  SELECT :ONCELY_SCHEMA.set_queue_limits($1, $2, $3, $4, $5, $6::bigint * interval '1 millisecond',
                                         $7, $8::bigint * interval '1 millisecond'))sql";

// What each limited queue's limits hold back now (migration 23); $1 NULL: every queue.
constexpr std::string_view kLimitsHeld = R"sql(
  SELECT queue, running, held_back, keys_at_limit FROM :ONCELY_SCHEMA.queue_limits_held($1::text)
)sql";

constexpr std::string_view kWritePolicy = R"sql(
  INSERT INTO :ONCELY_SCHEMA.queue_policies AS p
         (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, backoff_schedule, job_timeout)
  VALUES ($1, $2, $3::bigint * interval '1 millisecond', $4, $5::bigint * interval '1 millisecond',
          $6::bigint * interval '1 millisecond', $7,
          (SELECT array_agg(s.ms * interval '1 millisecond' ORDER BY s.n)
             FROM unnest($8::bigint[]) WITH ORDINALITY AS s(ms, n)),
          $9::bigint * interval '1 millisecond')
  ON CONFLICT (queue) DO UPDATE
     SET mode = EXCLUDED.mode, lease = EXCLUDED.lease, max_attempts = EXCLUDED.max_attempts,
         backoff_base = EXCLUDED.backoff_base, backoff_cap = EXCLUDED.backoff_cap,
         backoff_jitter = EXCLUDED.backoff_jitter, backoff_schedule = EXCLUDED.backoff_schedule,
         job_timeout = EXCLUDED.job_timeout, updated_at = now()
)sql";

std::chrono::milliseconds ms(const pqxx::field& f) { return std::chrono::milliseconds(f.as<std::int64_t>()); }

// A queue_limits row's limits, from column `at` on (kLimitColumns' order).
QueueLimits limits_of(const pqxx::row& r, pqxx::row::size_type at) {
  QueueLimits limits;
  if (!r[at].is_null()) limits.concurrency = r[at].as<int>();
  if (!r[at + 1].is_null()) limits.key = r[at + 1].as<std::string>();
  if (!r[at + 2].is_null()) limits.per_key_concurrency = r[at + 2].as<int>();
  if (!r[at + 3].is_null()) limits.rate = StartRate{r[at + 3].as<int>(), ms(r[at + 4])};
  if (!r[at + 5].is_null()) limits.per_key_rate = StartRate{r[at + 5].as<int>(), ms(r[at + 6])};
  return limits;
}

QueueConfig policy_of(const pqxx::row& r) {
  QueueConfig q;
  q.mode = r[1].as<std::string>() == "lease" ? QueueConfig::Mode::lease : QueueConfig::Mode::transaction;
  q.lease = ms(r[2]);
  q.max_attempts = r[3].as<int>();
  q.backoff.base = ms(r[4]);
  q.backoff.cap = ms(r[5]);
  q.backoff.jitter = jitter_named(r[6].as<std::string>());
  if (!r[7].is_null()) {
    auto array = r[7].as_array();
    for (auto item = array.get_next(); item.first != pqxx::array_parser::done; item = array.get_next()) {
      if (item.first == pqxx::array_parser::string_value) {
        q.backoff.schedule.emplace_back(std::stoll(item.second));
      }
    }
  }
  q.job_timeout = ms(r[8]);
  if (r[9].as<bool>()) q.limits = limits_of(r, 10);
  return q;
}

}  // namespace

QueuePoliciesTable::QueuePoliciesTable(StatementSet& statements)
    : statements_(statements),
      read_(render_statement("SELECT " + std::string(kColumns) + std::string(kLimitColumns) +
                                 std::string(kFromPolicies) + " WHERE p.queue = $1",
                             statements.schema())),
      read_limits_(render_statement(
          "SELECT " + std::string(kLimitColumns) + " FROM :ONCELY_SCHEMA.queue_limits l WHERE l.queue = $1",
          statements.schema())),
      list_(render_statement("SELECT " + std::string(kColumns) + std::string(kLimitColumns) +
                                 std::string(kFromPolicies) + " ORDER BY p.queue",
                             statements.schema())),
      write_(render_statement(kWritePolicy, statements.schema())),
      write_limits_(render_statement(kWriteLimits, statements.schema())),
      limits_held_(render_statement(kLimitsHeld, statements.schema())) {}

std::optional<QueueConfig> QueuePoliciesTable::read(pqxx::transaction_base& tx, const std::string& queue) const {
  const pqxx::result r = tx.exec_params(read_, queue);
  if (r.empty()) return std::nullopt;
  return policy_of(r[0]);
}

QueueConfig QueuePoliciesTable::read_or_defaults(pqxx::transaction_base& tx, const std::string& queue,
                                                 bool& stored) const {
  std::optional<QueueConfig> policy = read(tx, queue);
  stored = policy.has_value();
  if (stored) return *policy;
  QueueConfig defaults;
  const pqxx::result limits = tx.exec_params(read_limits_, queue);
  if (!limits.empty()) defaults.limits = limits_of(limits[0], 0);
  return defaults;
}

std::map<std::string, QueueConfig> QueuePoliciesTable::list(pqxx::transaction_base& tx) const {
  std::map<std::string, QueueConfig> policies;
  for (const auto& row : tx.exec(list_)) policies.emplace(row[0].as<std::string>(), policy_of(row));
  return policies;
}

void QueuePoliciesTable::write(pqxx::transaction_base& tx, const std::string& queue, const QueueConfig& policy) const {
  std::vector<std::int64_t> schedule;
  for (const auto d : policy.backoff.schedule) schedule.push_back(d.count());
  tx.exec_params(write_, queue, policy.mode == QueueConfig::Mode::lease ? "lease" : "transaction",
                 static_cast<std::int64_t>(policy.lease.count()), policy.max_attempts,
                 static_cast<std::int64_t>(policy.backoff.base.count()),
                 static_cast<std::int64_t>(policy.backoff.cap.count()), std::string(jitter_name(policy.backoff.jitter)),
                 to_array_literal(schedule), static_cast<std::int64_t>(policy.job_timeout.count()));
  const QueueLimits none;
  const QueueLimits& limits = policy.limits ? *policy.limits : none;
  const auto count = [](const std::optional<StartRate>& r) { return r ? std::optional(r->count) : std::nullopt; };
  const auto period = [](const std::optional<StartRate>& r) {
    return r ? std::optional<std::int64_t>(r->period.count()) : std::nullopt;
  };
  tx.exec_params(write_limits_, queue, limits.concurrency, limits.key, limits.per_key_concurrency, count(limits.rate),
                 period(limits.rate), count(limits.per_key_rate), period(limits.per_key_rate));
}

void QueuePoliciesTable::read_held_back(pqxx::transaction_base& tx, const std::optional<std::string>& queue,
                                        std::map<std::string, QueueStats>& by_queue) const {
  for (const auto& r : tx.exec_params(limits_held_, queue)) {
    QueueStats& q = queue_entry(by_queue, r[0].as<std::string>());
    q.running_under_limits = r[1].as<long>();
    q.held_by_limit = r[2].as<long>();
    q.keys_at_limit = r[3].as<long>();
  }
}

}  // namespace oncely::detail
