#include <doctest/doctest.h>

#include <string>

#include "api/bulk_enqueue.hpp"
#include "oncely/errors.hpp"

using namespace std::chrono_literals;
using oncely::ConfigError;
using oncely::NewJob;
using oncely::detail::is_blank_line;
using oncely::detail::parse_job_line;

namespace {

/// The message parse_job_line throws for `line` ("" when it does not throw).
std::string error_of(const std::string& line, const NewJob& defaults = NewJob{}) {
  try {
    (void)parse_job_line(line, defaults);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bulk: a line with only a kind takes the defaults") {
  const NewJob job = parse_job_line(R"({"kind": "send_email"})");
  CHECK(job.kind == "send_email");
  CHECK(job.payload_json == "{}");
  CHECK(job.queue == "default");
  CHECK_FALSE(job.idempotency_key);
  CHECK_FALSE(job.run_at);
  CHECK(job.delay == 0ms);
  CHECK(job.priority == 0);
  CHECK_FALSE(job.max_attempts);
}

TEST_CASE("bulk: every field is read") {
  const NewJob job = parse_job_line(
      R"({"kind": "charge", "payload": {"amount": 250, "note": "h\u00e9"}, "queue": "critical", "key": "pay-7",)"
      R"( "run_at": "2030-01-02T03:04:05Z", "priority": -5, "max_attempts": 3})");
  CHECK(job.kind == "charge");
  CHECK(job.payload_json == R"({"amount":250,"note":"h\u00e9"})");
  CHECK(job.queue == "critical");
  CHECK(job.idempotency_key == "pay-7");
  CHECK(job.run_at == "2030-01-02T03:04:05Z");
  CHECK(job.priority == -5);
  CHECK(job.max_attempts == 3);
}

TEST_CASE("bulk: idempotency_key is an alias of key, and null means absent") {
  CHECK(parse_job_line(R"({"kind": "k", "idempotency_key": "x"})").idempotency_key == "x");
  const NewJob nulls = parse_job_line(
      R"({"kind": "k", "payload": null, "queue": null, "key": null, "run_at": null, "priority": null, "max_attempts": null})");
  CHECK(nulls.payload_json == "{}");
  CHECK(nulls.queue == "default");
  CHECK_FALSE(nulls.idempotency_key);
  CHECK_FALSE(nulls.run_at);
  CHECK_FALSE(nulls.max_attempts);
}

TEST_CASE("bulk: run_at \"+DURATION\" is a delay from the database's now()") {
  const NewJob job = parse_job_line(R"({"kind": "k", "run_at": "+1h30m"})");
  CHECK_FALSE(job.run_at);
  CHECK(job.delay == 90min);
}

TEST_CASE("bulk: the command line's options are defaults that a line overrides") {
  NewJob defaults;
  defaults.queue = "bulk";
  defaults.priority = 7;
  defaults.max_attempts = 2;
  defaults.delay = 5min;
  defaults.idempotency_key = "never-a-default";
  const NewJob plain = parse_job_line(R"({"kind": "k"})", defaults);
  CHECK(plain.queue == "bulk");
  CHECK(plain.priority == 7);
  CHECK(plain.max_attempts == 2);
  CHECK(plain.delay == 5min);
  CHECK_FALSE(plain.idempotency_key);
  const NewJob own = parse_job_line(R"({"kind": "k", "queue": "q", "priority": 1, "run_at": "2030-01-01"})", defaults);
  CHECK(own.queue == "q");
  CHECK(own.priority == 1);
  CHECK(own.run_at == "2030-01-01");
  CHECK(own.delay == 0ms);  // an absolute run_at replaces a default delay
}

TEST_CASE("bulk: bad lines are refused with the reason, naming the field") {
  struct Case {
    const char* line;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({not json)", "not valid JSON at column "},
           Case{R"({"kind": "k"} trailing)", "not valid JSON"},
           Case{R"([1, 2])", "expected a JSON object, got array"},
           Case{R"("kind")", "expected a JSON object, got string"},
           Case{R"({})", "kind: missing"},
           Case{R"({"payload": {}})", "kind: missing"},
           Case{R"({"kind": null})", "kind: missing"},
           Case{R"({"kind": ""})", "kind: must not be empty"},
           Case{R"({"kind": 5})", "kind: must be a string, got number"},
           Case{R"({"kind": "k", "queue": ""})", "queue: must not be empty"},
           Case{R"({"kind": "k", "queue": ["a"]})", "queue: must be a string, got array"},
           Case{R"({"kind": "k", "key": ""})", "key: must not be empty"},
           Case{R"({"kind": "k", "key": 42})", "key: must be a string, got number"},
           Case{R"({"kind": "k", "key": "a", "idempotency_key": "b"})", "give either key or idempotency_key, not both"},
           Case{R"({"kind": "k", "priority": 32768})", "priority: must be between -32768 and 32767"},
           Case{R"({"kind": "k", "priority": -32769})", "priority: must be between -32768 and 32767"},
           Case{R"({"kind": "k", "priority": 18446744073709551615})", "priority: must be between"},
           Case{R"({"kind": "k", "priority": 1.5})", "priority: must be an integer, got a fraction"},
           Case{R"({"kind": "k", "priority": "1"})", "priority: must be an integer, got string"},
           Case{R"({"kind": "k", "max_attempts": 0})", "max_attempts: must be between 1 and 2147483647"},
           Case{R"({"kind": "k", "max_attempts": 2147483648})", "max_attempts: must be between 1 and"},
           Case{R"({"kind": "k", "run_at": ""})", "run_at: must not be empty"},
           Case{R"({"kind": "k", "run_at": 1700000000})", "run_at: must be a string, got number"},
           Case{R"({"kind": "k", "run_at": "+5 sex"})", "run_at: bad duration '5 sex'"},
           Case{R"({"kind": "k", "colour": "red"})", "unknown field 'colour'"},
           Case{R"({"kind": "k\u0000"})", "kind: must not contain NUL characters"},
           Case{R"({"kind": "k", "payload": {"a": ["\u0000"]}})", "payload: contains the character U+0000"},
       }) {
    const std::string line = c.line;
    CAPTURE(line);
    const std::string error = error_of(c.line);
    CAPTURE(error);
    CHECK(error.find(c.message) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("bulk: a payload may be any JSON value, and an escaped backslash-u0000 text is fine") {
  CHECK(parse_job_line(R"({"kind": "k", "payload": [1, "two"]})").payload_json == R"([1,"two"])");
  CHECK(parse_job_line(R"({"kind": "k", "payload": {"path": "C:\\u0000"}})").payload_json == R"({"path":"C:\\u0000"})");
}

TEST_CASE("bulk: blank lines are recognised") {
  CHECK(is_blank_line(""));
  CHECK(is_blank_line("   \t \r"));
  CHECK_FALSE(is_blank_line(" {} "));
}

TEST_CASE("bulk: validate_jobs names the job by its index") {
  std::vector<NewJob> jobs(3);
  jobs[0].kind = "a";
  jobs[1].kind = "b";
  jobs[2].kind = "c";
  jobs[2].priority = 1 << 20;
  try {
    oncely::detail::validate_jobs(jobs);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "jobs[2].priority: must be between -32768 and 32767");
    CHECK(e.path() == "jobs[2].priority");
  }
  jobs[2].priority = 0;
  CHECK_NOTHROW(oncely::detail::validate_jobs(jobs));
}
