#include "support/job_rules.hpp"

#include <cstdint>
#include <limits>

#include "oncely/errors.hpp"
#include "support/exact_json.hpp"
#include "support/text.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {

void validate_new_job(const NewJob& job) {
  validate_job_fields(job);
  if (!job.payload_json) return;
  try {
    exact_json::validate(*job.payload_json);
  } catch (const exact_json::SyntaxError& e) {
    throw InvalidArgument("payload_json", exact_json::describe(e));
  }
}

std::string payload_text(const NewJob& job, bool ascii) {
  if (job.payload_json) return *job.payload_json;
  return ascii ? job.payload.dump(-1, ' ', true) : job.payload.dump();
}

void validate_job_fields(const NewJob& job) {
  if (job.kind.empty()) throw InvalidArgument("kind", "must not be empty");
  if (job.queue.empty()) throw InvalidArgument("queue", "must not be empty");
  // No worker serves a queue whose name holds a control character (the configuration
  // refuses them), and a kind's would reach log lines raw.
  if (has_control_character(job.kind)) throw InvalidArgument("kind", "must not contain control characters");
  if (has_control_character(job.queue)) throw InvalidArgument("queue", "must not contain control characters");
  // The bounds of migration 0005 (one btree entry must hold them), said before the server does.
  if (job.queue.size() > kMaxQueueBytes) throw InvalidArgument("queue", "must be at most 128 bytes");
  if (job.kind.size() > kMaxKindBytes) throw InvalidArgument("kind", "must be at most 255 bytes");
  if (job.idempotency_key && job.idempotency_key->size() > kMaxIdempotencyKeyBytes) {
    throw InvalidArgument("idempotency_key", "must be at most 1024 bytes");
  }
  if (job.idempotency_key && job.idempotency_key->empty()) {
    throw InvalidArgument("idempotency_key", "must not be empty (omit it to use the job id)");
  }
  if (job.priority < std::numeric_limits<std::int16_t>::min() ||
      job.priority > std::numeric_limits<std::int16_t>::max()) {
    throw InvalidArgument("priority", "must be between -32768 and 32767");
  }
  if (job.max_attempts && *job.max_attempts < 1) throw InvalidArgument("max_attempts", "must be at least 1");
  // Migration 0024's bounds, said before the server does.
  if (job.depends_on.size() > kMaxParents) throw InvalidArgument("depends_on", "must name at most 10000 parents");
  for (const std::int64_t parent : job.depends_on) {
    if (parent < 1) throw InvalidArgument("depends_on", "job ids are positive (got " + std::to_string(parent) + ")");
  }
  if (job.batch_id && *job.batch_id < 1) throw InvalidArgument("batch_id", "must be a batch id (positive)");
  // Migration 0008's CHECK, said before the server does and without its SQL message.
  if (job.traceparent && !is_traceparent(*job.traceparent)) {
    throw InvalidArgument("traceparent",
                          "must be a W3C traceparent such as "
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 (got \"" +
                              printable(*job.traceparent) + "\")");
  }
}

OnConflict parse_on_conflict(std::string_view text, const char* path) {
  if (text == "skip") return OnConflict::skip;
  if (text == "replace") return OnConflict::replace;
  if (text == "error") return OnConflict::error;
  throw ConfigError(path, "must be skip, replace or error, not '" + std::string(text) + "'");
}

void validate_unique_key(const NewJob& job) {
  if (!job.unique_key) return;
  if (!job.depends_on.empty() || job.batch_id) {
    throw InvalidArgument("unique_key", "a unique job cannot have depends_on or a batch_id (use an idempotency key)");
  }
  if (job.unique_key->empty())
    throw InvalidArgument("unique_key", "must not be empty (omit it for a job that is not unique)");
  if (job.unique_key->size() > kMaxIdempotencyKeyBytes)
    throw InvalidArgument("unique_key", "must be at most 1024 bytes");
}

}  // namespace oncely::detail
