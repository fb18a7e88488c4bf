// A job's output (execution/job_output): what may be kept, what is refused and why, and what
// a completed attempt's record says (completion_record), as tables.
#include <doctest/doctest.h>

#include <string>

#include "execution/attempt.hpp"
#include "execution/job_output.hpp"
#include "oncely/errors.hpp"

using oncely::detail::checked_output;

TEST_CASE("job output: JSON of at most 64 KiB is kept as given") {
  const std::string at_limit = "\"" + std::string(oncely::detail::kMaxOutputBytes - 2, 'x') + "\"";
  for (const std::string& text : {std::string(R"({"charge": "ch_1", "cents": 12345678901234567.89})"),
                                  std::string("[1, 2, 3]"), std::string("\"d\xc3\xa9j\xc3\xa0\""), std::string("0"),
                                  std::string("null"), std::string(R"("\\u0000")"), at_limit}) {
    CAPTURE(text.substr(0, 60));
    CHECK(checked_output(text) == text);
  }
}

TEST_CASE("job output: what cannot be kept is a permanent failure saying why") {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"\"" + std::string(oncely::detail::kMaxOutputBytes - 1, 'x') + "\"",
       "output is 65537 bytes of JSON, over the limit of 65536 (64 KiB)"},
      {"{\"a\": ", "output is not JSON"},
      {"ok", "output is not JSON"},
      {"", "output is not JSON"},
      {R"({"a": "x\u0000y"})", "output holds a \\u0000 character, which Postgres jsonb cannot store"},
      {R"(["\\\u0000"])", "output holds a \\u0000 character, which Postgres jsonb cannot store"},
      {"[1e400]", "output number 1e400 is out of range for a double"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text.substr(0, 60));
    try {
      (void)checked_output(c.text);
      FAIL("kept");
    } catch (const oncely::PermanentError& e) {
      CHECK(std::string(e.what()) == c.message);
    }
  }
}

TEST_CASE("job output: a completed attempt's record takes the attempt's trace, else the job's") {
  oncely::detail::ClaimedJob job;
  job.trace_context = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  oncely::detail::HandlerRun run;
  run.run_time = std::chrono::microseconds(1500);
  run.output = "{\"ok\": true}";
  auto record = oncely::detail::completion_record(job, 2, run);
  CHECK(record.attempt == 2);
  CHECK(record.run_time_us == 1500);
  CHECK(record.output == "{\"ok\": true}");
  CHECK(record.trace_id == "0af7651916cd43dd8448eb211c80319c");
  run.traceparent = "00-11111111111111111111111111111111-2222222222222222-01";
  CHECK(oncely::detail::completion_record(job, 2, run).trace_id == "11111111111111111111111111111111");
  job.trace_context.reset();
  run.traceparent.reset();
  CHECK_FALSE(oncely::detail::completion_record(job, 1, run).trace_id.has_value());
}
