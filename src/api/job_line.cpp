// The NDJSON line parser of `oncely enqueue -` (declared in api/bulk_enqueue.hpp): one
// line to one NewJob, pure, so that tests/fuzz can drive it without a database.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/bulk_enqueue.hpp"
#include "store/job_control.hpp"
#include "store/jobs.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kFieldNames =
    "kind, payload, queue, key, idempotency_key, run_at, priority, max_attempts, unique_key, on_conflict, traceparent, "
    "depends_on, batch_id";

std::string text_field(const exact_json::Value& value, const char* field) {
  if (value.type != exact_json::Type::string) {
    throw ConfigError(field, std::string("must be a string, got ") + exact_json::type_name(value.type));
  }
  if (value.text.find('\0') != std::string::npos) throw ConfigError(field, "must not contain NUL characters");
  return value.text;
}

std::int64_t integer_field(const exact_json::Value& value, const char* field, std::int64_t min, std::int64_t max) {
  if (value.type != exact_json::Type::number) {
    throw ConfigError(field, std::string("must be an integer, got ") + exact_json::type_name(value.type));
  }
  if (value.json.find_first_of(".eE") != std::string::npos) {
    throw ConfigError(field, "must be an integer, got a fraction");
  }
  std::int64_t n = 0;
  const char* const end = value.json.data() + value.json.size();
  const auto [at, ec] = std::from_chars(value.json.data(), end, n);
  if (ec != std::errc() || at != end || n < min || n > max) {
    throw ConfigError(field, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  return n;
}

// depends_on: an array of job ids.
std::vector<std::int64_t> parents_field(const exact_json::Value& value) {
  if (value.type != exact_json::Type::array) {
    throw ConfigError("depends_on",
                      std::string("must be an array of job ids, got ") + exact_json::type_name(value.type));
  }
  std::vector<std::int64_t> parents;
  for (const nlohmann::json& element : nlohmann::json::parse(value.json)) {
    // is_number_integer() is false for fractions and for integers beyond 64 bits.
    if (!element.is_number_integer() || element.get<std::int64_t>() < 1) {
      throw ConfigError("depends_on", "must hold job ids (positive integers), got " + element.dump());
    }
    parents.push_back(element.get<std::int64_t>());
  }
  return parents;
}

}  // namespace

bool is_blank_line(std::string_view line) noexcept {
  for (const char c : line) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

NewJob parse_job_line(std::string_view line, const NewJob& defaults) {
  // Read without nlohmann::json, which would turn the payload's numbers into doubles: the
  // payload is kept as text, every number as written (7-bit, as COPY's text is).
  std::vector<exact_json::Member> members;
  try {
    members = exact_json::object_members(line, exact_json::Encoding::ascii);
  } catch (const exact_json::SyntaxError& e) {
    throw ConfigError("", exact_json::describe(e, "column"));
  } catch (const exact_json::NotAnObject& e) {
    throw ConfigError("", e.what());
  }

  NewJob job = defaults;
  job.idempotency_key.reset();  // a key names one job: never a default
  job.unique_key.reset();
  bool has_payload = false;
  bool has_kind = false;
  bool has_key = false;
  bool has_on_conflict = false;
  std::vector<std::string_view> seen;
  for (const exact_json::Member& member : members) {
    const std::string& name = member.name;
    const exact_json::Value& value = member.value;
    const bool is_null = value.type == exact_json::Type::null;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      throw ConfigError(name, "given twice");
    }
    seen.push_back(name);
    if (name == "key" || name == "idempotency_key") {
      if (has_key) throw ConfigError(name, "give either key or idempotency_key, not both");
      has_key = true;
      if (is_null) continue;
      job.idempotency_key = text_field(value, name == "key" ? "key" : "idempotency_key");
      if (job.idempotency_key->empty()) {
        throw ConfigError(name, "must not be empty (leave it out to use the job id)");
      }
    } else if (name == "unique_key") {
      if (is_null) continue;
      job.unique_key = text_field(value, "unique_key");
    } else if (name == "on_conflict") {
      if (is_null) continue;
      const std::string text = text_field(value, "on_conflict");
      job.on_conflict = parse_on_conflict(text, "on_conflict");
      has_on_conflict = true;
    } else if (name == "kind") {
      has_kind = !is_null;
      if (has_kind) job.kind = text_field(value, "kind");
    } else if (name == "payload") {
      if (member.value_has_nul) {
        throw ConfigError("payload", "contains the character U+0000, which PostgreSQL's jsonb cannot store");
      }
      has_payload = true;
      job.payload_json = is_null ? "{}" : value.json;
    } else if (name == "queue") {
      if (!is_null) job.queue = text_field(value, "queue");
    } else if (name == "run_at") {
      if (is_null) continue;
      const std::string text = text_field(value, "run_at");
      if (text.empty()) throw ConfigError("run_at", "must not be empty (leave it out to run now)");
      if (text.starts_with('+')) {
        try {
          job.delay = parse_duration(std::string_view(text).substr(1));
        } catch (const ConfigError& e) {
          throw ConfigError("run_at", e.what());
        }
        job.run_at.reset();
      } else {
        job.run_at = text;
        job.delay = std::chrono::milliseconds(0);
      }
    } else if (name == "priority") {
      if (!is_null) {
        job.priority = static_cast<int>(integer_field(value, "priority", std::numeric_limits<std::int16_t>::min(),
                                                      std::numeric_limits<std::int16_t>::max()));
      }
    } else if (name == "depends_on") {
      if (!is_null) job.depends_on = parents_field(value);
    } else if (name == "batch_id") {
      if (!is_null) job.batch_id = integer_field(value, "batch_id", 1, std::numeric_limits<std::int64_t>::max());
    } else if (name == "traceparent") {
      if (!is_null) job.traceparent = text_field(value, "traceparent");
    } else if (name == "max_attempts") {
      job.max_attempts = is_null ? std::nullopt
                                 : std::optional<int>(static_cast<int>(integer_field(
                                       value, "max_attempts", 1, std::numeric_limits<std::int32_t>::max())));
    } else {
      throw ConfigError("", "unknown field '" + name + "' (expected " + std::string(kFieldNames) + ")");
    }
  }
  if (!has_kind) throw ConfigError("kind", "missing (every job needs a kind)");
  if (has_on_conflict && !job.unique_key) throw ConfigError("on_conflict", "needs a unique_key");
  validate_unique_key(job);
  if (!has_payload) job.payload_json = payload_text(defaults, /*ascii=*/true);
  validate_job_fields(job);  // payload_json was checked as it was read
  return job;
}

}  // namespace oncely::detail
