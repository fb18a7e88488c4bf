// Payload numbers on the enqueue paths: kept as the producer wrote them, never through a
// double (the text is what goes to jsonb).
#include <doctest/doctest.h>

#include <string>

#include "api/bulk_enqueue.hpp"
#include "oncely/errors.hpp"
#include "store/store.hpp"

using oncely::ConfigError;
using oncely::NewJob;
using oncely::detail::parse_job_line;

namespace {

std::string error_of(const std::string& line) {
  try {
    (void)parse_job_line(line);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("exact_numbers: an NDJSON line's payload keeps every number as written") {
  const NewJob job =
      parse_job_line(R"({"kind": "charge", "payload": {"cents": 12345678901234567.89, "big": 99999999999999999999,)"
                     R"( "tiny": 1.5e-400, "neg": -0.000000000000000000001, "huge": 1e400, "scale": 1.50}})");
  CHECK(job.payload_json == R"({"cents":12345678901234567.89,"big":99999999999999999999,"tiny":1.5e-400,)"
                            R"("neg":-0.000000000000000000001,"huge":1e400,"scale":1.50})");
  CHECK(oncely::detail::payload_text(job, /*ascii=*/true) == *job.payload_json);
}

TEST_CASE("exact_numbers: a scalar payload and a deeply nested one are kept too") {
  CHECK(parse_job_line(R"({"kind": "k", "payload": 12345678901234567.89})").payload_json == "12345678901234567.89");
  // As deep as input may nest (deeper is refused: deep_input_test.cpp).
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  CHECK(parse_job_line(R"({"kind": "k", "payload": )" + deep + "}").payload_json == deep);
}

TEST_CASE("exact_numbers: integer fields are read from their text, exactly") {
  CHECK(parse_job_line(R"({"kind": "k", "priority": -32768, "max_attempts": 2147483647})").priority == -32768);
  CHECK(error_of(R"({"kind": "k", "priority": 99999999999999999999})").find("priority: must be between") == 0);
  CHECK(error_of(R"({"kind": "k", "priority": 1e2})") == "priority: must be an integer, got a fraction");
  CHECK(error_of(R"({"kind": "k", "max_attempts": true})") == "max_attempts: must be an integer, got boolean");
  CHECK(error_of(R"({"kind": "k", "max_attempts": -0})").find("max_attempts: must be between 1 and") == 0);
}

TEST_CASE("exact_numbers: a field given twice is refused rather than one of them dropped") {
  CHECK(error_of(R"({"kind": "a", "kind": "b"})") == "kind: given twice");
  CHECK(error_of(R"({"kind": "a", "payload": {"cents": 1}, "payload": {"cents": 2}})") == "payload: given twice");
}

TEST_CASE("exact_numbers: payload_json is checked before it is sent, naming the field") {
  NewJob job{.kind = "k"};
  job.payload_json = R"({"cents": 12345678901234567.89, "huge": 1e400})";
  CHECK_NOTHROW(oncely::detail::validate_new_job(job));
  CHECK(oncely::detail::payload_text(job) == *job.payload_json);  // sent as it is

  for (const auto& [text, message] : std::initializer_list<std::pair<const char*, const char*>>{
           {R"({"cents": 1)", "payload_json: not valid JSON at byte 12: unexpected end of text; expected ',' or '}'"},
           {"", "payload_json: not valid JSON at byte 1: unexpected end of text; expected a value"},
           {R"({"a": "\u0000"})", "payload_json: contains the character U+0000, which PostgreSQL's jsonb cannot store"},
       }) {
    job.payload_json = text;
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(oncely::detail::validate_new_job(job), message, ConfigError);
  }
}
