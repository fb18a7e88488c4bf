#include "store.hpp"

#include <limits>

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "schema.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kEnqueue = R"sql(
  INSERT INTO :ONCELY_SCHEMA.jobs (kind, payload, queue, idempotency_key, run_at, priority, max_attempts)
  VALUES ($1, $2::jsonb, $3, $4,
          coalesce($5::timestamptz, now()) + $6::bigint * interval '1 millisecond',
          $7::smallint, $8)
  RETURNING id
)sql";

}  // namespace

void validate_new_job(const NewJob& job) {
  if (job.kind.empty()) throw ConfigError("kind", "must not be empty");
  if (job.queue.empty()) throw ConfigError("queue", "must not be empty");
  if (job.idempotency_key && job.idempotency_key->empty()) {
    throw ConfigError("idempotency_key", "must not be empty (omit it to use the job id)");
  }
  if (job.priority < std::numeric_limits<std::int16_t>::min() || job.priority > std::numeric_limits<std::int16_t>::max()) {
    throw ConfigError("priority", "must be between -32768 and 32767");
  }
  if (job.max_attempts && *job.max_attempts < 1) throw ConfigError("max_attempts", "must be at least 1");
}

Store::Store(std::string_view schema) : schema_(schema), enqueue_(render_sql(kEnqueue, schema)) {}

std::int64_t Store::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  validate_new_job(job);
  return tx.exec_params1(enqueue_, job.kind, job.payload.dump(), job.queue, job.idempotency_key, job.run_at,
                         static_cast<std::int64_t>(job.delay.count()), job.priority, job.max_attempts)[0]
      .as<std::int64_t>();
}

}  // namespace oncely::detail
