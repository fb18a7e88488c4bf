// A C++ handler's exception leaves the stack where it was thrown in its dead letter
// (error_detail.stack and the last errors[] entry), symbolised with function, file and line;
// `throw;` keeps the first throw's stack; an exception caught inside the handler is not
// the one reported; the stack_traces setting chooses dead letters, every failure or none.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

// Named, out-of-line handlers: the stack must name them.
[[gnu::noinline]] void fails_with_runtime_error(oncely::JobContext&) { throw std::runtime_error("disk on fire"); }

[[gnu::noinline]] void fails_with_vector_at(oncely::JobContext& job) {
  std::vector<int> items(static_cast<std::size_t>(job.payload().value("n", 2)));
  (void)items.at(5);
}

// Not a tail call (work follows it): a call that ends a function may become a jump that
// leaves no frame of the function to name (GCC does so in the ASan build).
[[gnu::noinline]] void fails_with_json_at(oncely::JobContext& job) {
  [[maybe_unused]] const std::string value = job.payload().at("no_such_field").dump();
}

[[gnu::noinline]] void fails_with_permanent_error(oncely::JobContext&) {
  throw oncely::PermanentError("the account is closed");
}

[[gnu::noinline]] void first_thrower() { throw std::runtime_error("the first one"); }
[[gnu::noinline]] void inner_thrower() { throw std::logic_error("caught inside"); }

// Catches the first exception, throws and catches another, then rethrows the first.
[[gnu::noinline]] void rethrows(oncely::JobContext&) {
  try {
    first_thrower();
  } catch (const std::runtime_error&) {
    try {
      inner_thrower();
    } catch (const std::logic_error&) {
    }
    throw;
  }
}

// An exception caught inside the handler, then another that escapes it.
[[gnu::noinline]] void escaping_thrower() { throw std::runtime_error("the one that escapes"); }
[[gnu::noinline]] void catches_then_fails(oncely::JobContext&) {
  try {
    inner_thrower();
  } catch (const std::logic_error&) {
  }
  escaping_thrower();
}

[[gnu::noinline]] void recurse(int depth) {
  if (depth == 0) throw std::runtime_error("bottom");
  recurse(depth - 1);
  asm volatile("" ::: "memory");  // no tail call: each level keeps its frame
}
[[gnu::noinline]] void fails_deep(oncely::JobContext&) { recurse(200); }

[[gnu::noinline]] void runs_bad_sql(oncely::JobContext& job) {
  job.tx().exec("SELECT * FROM no_such_table");
  asm volatile("" ::: "memory");
}

struct DeadLetterStack {
  nlohmann::json detail_stack;
  nlohmann::json last_entry;
};

// Runs `handler` for one job of `kind` (max_attempts 1) until it is dead-lettered.
DeadLetterStack dead_letter_of(const std::string& kind, const oncely::Handler& handler,
                               oncely::StackTraces mode = oncely::StackTraces::dead_letters) {
  PgFixture db;
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('" + kind + "', 1)");
  EventRecorder events;
  oncely::Config config = config_for(db, {});
  config.stack_traces = mode;
  oncely::Runtime runtime(config, quiet_options(events));
  runtime.handle(kind, handler);
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
  running.stop();
  const std::string dl = db.table("dead_letters");
  return {
      nlohmann::json::parse(db.scalar<std::string>("SELECT coalesce(error_detail->'stack', 'null')::text FROM " + dl)),
      nlohmann::json::parse(db.scalar<std::string>("SELECT (errors->-1)::text FROM " + dl))};
}

std::string joined(const nlohmann::json& stack) {
  std::string text;
  for (const auto& line : stack) text += line.get<std::string>() + "\n";
  return text;
}

// The dead letter's stack names `function` with a file and line of this file, the errors[]
// entry holds the same stack, and nothing above the handler (the executor) is shown.
void check_names(const DeadLetterStack& got, const std::string& function) {
  REQUIRE(got.detail_stack.is_array());
  const std::string text = joined(got.detail_stack);
  INFO(text);
  CHECK(text.find(function) != std::string::npos);
  CHECK(text.find("stack_trace_pgtest.cpp:") != std::string::npos);
  CHECK(text.find("Executor") == std::string::npos);
  CHECK(text.find("invoke_handler") == std::string::npos);
  CHECK(got.last_entry.value("stack", nlohmann::json()) == got.detail_stack);
}

}  // namespace

TEST_CASE("stack trace: a std::runtime_error leaves a stack naming the handler in the dead letter") {
  check_names(dead_letter_of("runtime_error", fails_with_runtime_error), "fails_with_runtime_error");
}

TEST_CASE("stack trace: std::vector::at's out_of_range (thrown inside libstdc++) names the handler") {
  check_names(dead_letter_of("vector_at", fails_with_vector_at), "fails_with_vector_at");
}

TEST_CASE("stack trace: nlohmann::json::at's out_of_range names the handler") {
  check_names(dead_letter_of("json_at", fails_with_json_at), "fails_with_json_at");
}

TEST_CASE("stack trace: an oncely::PermanentError names the handler") {
  check_names(dead_letter_of("permanent", fails_with_permanent_error), "fails_with_permanent_error");
}

TEST_CASE("stack trace: `throw;` keeps the stack of the first throw, not of one caught meanwhile") {
  const DeadLetterStack got = dead_letter_of("rethrows", rethrows);
  check_names(got, "first_thrower");
  CHECK(joined(got.detail_stack).find("inner_thrower") == std::string::npos);
}

TEST_CASE("stack trace: an exception caught inside the handler does not replace the one that escapes") {
  const DeadLetterStack got = dead_letter_of("catches", catches_then_fails);
  check_names(got, "escaping_thrower");
  CHECK(joined(got.detail_stack).find("inner_thrower") == std::string::npos);
}

TEST_CASE("stack trace: at most 64 frames, the innermost, and a line saying there were more") {
  const DeadLetterStack got = dead_letter_of("deep", fails_deep);
  REQUIRE(got.detail_stack.is_array());
  CHECK(got.detail_stack.size() == 65);
  CHECK(got.detail_stack.front().get<std::string>().find("recurse") != std::string::npos);
  CHECK(got.detail_stack.back().get<std::string>().find("deeper frames not shown") != std::string::npos);
}

TEST_CASE("stack trace: \"off\" records none") {
  const DeadLetterStack got = dead_letter_of("off", fails_with_runtime_error, oncely::StackTraces::off);
  CHECK(got.detail_stack.is_null());
  CHECK_FALSE(got.last_entry.contains("stack"));
}

TEST_CASE("stack trace: a retry records a stack under all_failures only") {
  for (const auto mode : {oncely::StackTraces::dead_letters, oncely::StackTraces::all_failures}) {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('flaky', 2)");
    EventRecorder events;
    oncely::QueueConfig queue;
    queue.backoff.schedule = {std::chrono::milliseconds(1h)};
    oncely::Config config = config_for(db, queue);
    config.stack_traces = mode;
    oncely::Runtime runtime(config, quiet_options(events));
    runtime.handle("flaky", fails_with_runtime_error);
    RunningRuntime running(runtime);
    REQUIRE(events.wait_for(Outcome::retried, 1, 15s));
    running.stop();
    const auto entry =
        nlohmann::json::parse(db.scalar<std::string>("SELECT (errors->0)::text FROM " + db.table("jobs")));
    if (mode == oncely::StackTraces::all_failures) {
      REQUIRE(entry.contains("stack"));
      CHECK(joined(entry["stack"]).find("fails_with_runtime_error") != std::string::npos);
    } else {
      CHECK_FALSE(entry.contains("stack"));
    }
  }
}

TEST_CASE(
    "stack trace: a handler's SQL error through plain exec() (its batch rolled back, the failure recorded afresh) "
    "keeps its stack") {
  PgFixture db;
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, max_attempts) VALUES ('classified', 1)");
  EventRecorder events;
  oncely::Runtime runtime(config_for(db, {}), quiet_options(events));
  runtime.handle("classified", runs_bad_sql);
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
  running.stop();
  const auto stack =
      nlohmann::json::parse(db.scalar<std::string>("SELECT error_detail->'stack' FROM " + db.table("dead_letters")));
  INFO(stack.dump(1));
  CHECK(joined(stack).find("runs_bad_sql(oncely::JobContext&) at ") != std::string::npos);
  CHECK(joined(stack).find("pqxx::transaction_base::exec") != std::string::npos);
}
