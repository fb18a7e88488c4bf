// One line of `oncely enqueue -` (parse_job_line). A line is refused with a ConfigError or
// gives a job the database will take: a kind, a queue and fields within their bounds, a
// 7-bit payload that is valid JSON and already compact. Written back as a line (strings
// through nlohmann, the payload as it came), the job parses to itself. nlohmann reads an
// accepted line the same (where its doubles can hold the numbers).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "api/bulk_enqueue.hpp"
#include "fuzz_check.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/job_rules.hpp"
#include "support/text.hpp"
#include "support/trace_context.hpp"

namespace {

using oncely::NewJob;
namespace exact_json = oncely::detail::exact_json;

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', true); }

std::string line_of(const NewJob& job) {
  std::string line = "{\"kind\":" + quoted(job.kind) + ",\"queue\":" + quoted(job.queue);
  if (job.payload_json) line += ",\"payload\":" + *job.payload_json;
  if (job.idempotency_key) line += ",\"key\":" + quoted(*job.idempotency_key);
  if (job.delay.count() > 0)
    line += ",\"run_at\":" + quoted("+" + oncely::detail::format_duration(job.delay));
  else if (job.run_at)
    line += ",\"run_at\":" + quoted(*job.run_at);
  line += ",\"priority\":" + std::to_string(job.priority);
  if (job.max_attempts) line += ",\"max_attempts\":" + std::to_string(*job.max_attempts);
  if (job.unique_key) {
    line += ",\"unique_key\":" + quoted(*job.unique_key);
    const char* c = job.on_conflict == oncely::OnConflict::skip      ? "skip"
                    : job.on_conflict == oncely::OnConflict::replace ? "replace"
                                                                     : "error";
    line += std::string(",\"on_conflict\":\"") + c + "\"";
  }
  if (job.traceparent) line += ",\"traceparent\":" + quoted(*job.traceparent);
  return line + "}";
}

bool same(const NewJob& a, const NewJob& b) {
  return a.kind == b.kind && a.queue == b.queue && a.payload_json == b.payload_json &&
         a.idempotency_key == b.idempotency_key && a.run_at == b.run_at && a.delay == b.delay &&
         a.priority == b.priority && a.max_attempts == b.max_attempts && a.unique_key == b.unique_key &&
         (!a.unique_key || a.on_conflict == b.on_conflict) && a.traceparent == b.traceparent;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace oncely::detail;
  const std::string_view line = oncely::fuzz::as_text(data, size);
  static_cast<void>(is_blank_line(line));
  NewJob job;
  try {
    job = parse_job_line(line);
  } catch (const oncely::ConfigError&) {
    return 0;
  }
  FUZZ_CHECK(!job.kind.empty() && job.kind.size() <= kMaxKindBytes && !has_control_character(job.kind), line, job.kind);
  FUZZ_CHECK(!job.queue.empty() && job.queue.size() <= kMaxQueueBytes && !has_control_character(job.queue), line,
             job.queue);
  FUZZ_CHECK(!job.idempotency_key || (!job.idempotency_key->empty() && job.idempotency_key->size() <= 1024), line,
             job.idempotency_key.value_or(""));
  FUZZ_CHECK(job.priority >= -32768 && job.priority <= 32767, line, std::to_string(job.priority));
  FUZZ_CHECK(!job.max_attempts || *job.max_attempts >= 1, line, std::to_string(job.max_attempts.value_or(0)));
  FUZZ_CHECK(!job.traceparent || is_traceparent(*job.traceparent), line, job.traceparent.value_or(""));
  FUZZ_CHECK(job.delay.count() >= 0, line, std::to_string(job.delay.count()));
  for (const std::string* text : {&job.kind, &job.queue}) {
    FUZZ_CHECK(text->find('\0') == std::string::npos, line, *text);
  }

  FUZZ_CHECK(job.payload_json.has_value(), line, "(no payload_json)");
  const std::string& payload = *job.payload_json;
  FUZZ_CHECK(std::all_of(payload.begin(), payload.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }),
             line, payload);
  try {
    exact_json::validate(payload);
  } catch (const exact_json::SyntaxError& e) {
    FUZZ_CHECK(!"the payload is valid JSON", line, payload + ": " + e.what());
  }
  FUZZ_CHECK(exact_json::compact(payload, exact_json::Encoding::ascii) == payload, line, payload);

  // Round trip.
  const std::string again = line_of(job);
  NewJob back;
  try {
    back = parse_job_line(again);
  } catch (const oncely::ConfigError& e) {
    FUZZ_CHECK(!"the job written back parses", line, again + ": " + e.what());
  }
  FUZZ_CHECK(same(job, back), line, again);

  // nlohmann agrees on the fields (it cannot hold every number: 1e400 is out of its range).
  if (!exact_json::first_number_beyond_double(line)) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      FUZZ_CHECK(!"nlohmann reads an accepted line", line, e.what());
    }
    FUZZ_CHECK(parsed.at("kind") == job.kind, line, parsed.dump());
    if (parsed.contains("payload") && !parsed["payload"].is_null()) {
      FUZZ_CHECK(nlohmann::json::parse(payload) == parsed["payload"], line, payload);
    }
  }
  return 0;
}
