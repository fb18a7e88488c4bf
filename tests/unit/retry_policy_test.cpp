#include <doctest/doctest.h>

#include <optional>
#include <stdexcept>

#include <pqxx/except>

#include "execution/retry_policy.hpp"
#include "oncely/errors.hpp"

using namespace std::chrono_literals;
using oncely::detail::classify;
using oncely::detail::FailureClass;

namespace {

struct NotAStdException {};

}  // namespace

namespace app {
struct QuotaExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace app

// The delay formula and the retry-or-dead rule are the schema's (backoff_delay() and
// failure_outcome(), migration 19): their table tests are in tests/pg/retry_decision_pgtest.cpp.

TEST_CASE("retry_policy: classify maps each exception type to its class") {
  SUBCASE("PermanentError is permanent") {
    const auto failure = classify(std::make_exception_ptr(oncely::PermanentError("payload has no user_id")));
    CHECK(failure.cls == FailureClass::permanent);
    CHECK(failure.message == "payload has no user_id");
    CHECK(failure.detail == nlohmann::json{{"exception", "oncely::PermanentError"}});
    CHECK_FALSE(failure.retry_after.has_value());
  }
  SUBCASE("RetryAfter is retryable after its delay") {
    const auto failure = classify(std::make_exception_ptr(oncely::RetryAfter(90s, "rate limited")));
    CHECK(failure.cls == FailureClass::retryable);
    CHECK(failure.message == "rate limited");
    REQUIRE(failure.retry_after.has_value());
    CHECK(*failure.retry_after == 90s);
  }
  SUBCASE("a broken connection") {
    const auto failure =
        classify(std::make_exception_ptr(pqxx::broken_connection("server closed the connection unexpectedly\n")));
    CHECK(failure.cls == FailureClass::connection);
    CHECK(failure.message == "server closed the connection unexpectedly");
    CHECK(failure.detail.at("exception") == "pqxx::broken_connection");
  }
  SUBCASE("a canceled statement (SQLSTATE 57014) is a timeout") {
    const auto failure = classify(std::make_exception_ptr(
        pqxx::sql_error("ERROR:  canceling statement due to statement timeout\n", "SELECT pg_sleep(60)", "57014")));
    CHECK(failure.cls == FailureClass::timeout);
    CHECK(failure.message == "statement exceeded the job timeout: ERROR: canceling statement due to statement timeout");
    CHECK(failure.detail == nlohmann::json{{"exception", "pqxx::sql_error"}, {"sqlstate", "57014"}});
  }
  SUBCASE("another SQL error is retryable with its SQLSTATE") {
    const auto failure = classify(std::make_exception_ptr(pqxx::unique_violation(
        "ERROR:  duplicate key value violates unique constraint \"t_pkey\"\nDETAIL:  Key (id)=(1) already exists.\n",
        "INSERT INTO t VALUES (1)", "23505")));
    CHECK(failure.cls == FailureClass::retryable);
    CHECK(failure.message ==
          "ERROR: duplicate key value violates unique constraint \"t_pkey\" DETAIL: Key (id)=(1) already exists.");
    CHECK(failure.detail == nlohmann::json{{"exception", "pqxx::unique_violation"}, {"sqlstate", "23505"}});
  }
  SUBCASE("a handler's COMMIT refused by the commit guard (SQLSTATE OC001) is permanent") {
    const auto failure = classify(std::make_exception_ptr(pqxx::sql_error(
        "ERROR:  a job's transaction was committed by its handler: only oncely may commit it\n", "COMMIT", "OC001")));
    CHECK(failure.cls == FailureClass::permanent);
    CHECK(failure.detail.at("sqlstate") == "OC001");
  }
  SUBCASE("any other std::exception is retryable with its demangled type") {
    const auto failure = classify(std::make_exception_ptr(app::QuotaExceeded("  quota\r\n exceeded  ")));
    CHECK(failure.cls == FailureClass::retryable);
    CHECK(failure.message == "quota exceeded");
    CHECK(failure.detail == nlohmann::json{{"exception", "app::QuotaExceeded"}});
  }
  SUBCASE("an empty message falls back to the type") {
    const auto failure = classify(std::make_exception_ptr(std::runtime_error("")));
    CHECK(failure.message == "std::runtime_error");
  }
  SUBCASE("anything else is an unknown exception") {
    for (const auto& error :
         {std::make_exception_ptr(42), std::make_exception_ptr(NotAStdException{}), std::exception_ptr{}}) {
      const auto failure = classify(error);
      CHECK(failure.cls == FailureClass::retryable);
      CHECK(failure.message == "unknown exception");
      CHECK(failure.detail == nlohmann::json::object());
    }
  }
}

TEST_CASE("retry_policy: to_string names every failure class") {
  using oncely::detail::to_string;
  CHECK(to_string(FailureClass::retryable) == "retryable");
  CHECK(to_string(FailureClass::permanent) == "permanent");
  CHECK(to_string(FailureClass::timeout) == "timeout");
  CHECK(to_string(FailureClass::connection) == "connection");
  CHECK(to_string(FailureClass::unknown_kind) == "unknown_kind");
  CHECK(to_string(FailureClass::exhausted) == "exhausted");
  CHECK(to_string(FailureClass::crashed) == "crashed");
  CHECK(to_string(FailureClass::lease_expired) == "lease_expired");
  CHECK(to_string(FailureClass::unreadable) == "unreadable");
}

TEST_CASE("retry_policy: a claim that fails alone on a row's data or a limit dead-letters it; nothing else does") {
  struct Row {
    const char* sqlstate;
    bool unclaimable;
  };
  for (const Row& row : {Row{"54000", true},   // index row size exceeds the btree maximum
                         Row{"22003", true},   // numeric value out of range
                         Row{"22P02", true},   // invalid text representation
                         Row{"57014", false},  // statement timeout
                         Row{"40P01", false},  // deadlock
                         Row{"53200", false},  // out of memory
                         Row{"55P03", false},  // lock not available
                         Row{"08006", false},  // connection failure
                         Row{"XX000", false},  // internal error
                         Row{"", false}}) {
    CAPTURE(row.sqlstate);
    CHECK(oncely::detail::is_unclaimable_row(row.sqlstate) == row.unclaimable);
  }
}

TEST_CASE("retry_policy: the schema's failure_outcome() read as a Decision, as a table") {
  using oncely::detail::Decision;
  using oncely::detail::decision_of;
  using Action = Decision::Action;
  struct Row {
    FailureClass failed;
    const char* outcome;  // failure_outcome()'s answer
    std::chrono::milliseconds delay;
    Action action;
    FailureClass cls;
    std::chrono::milliseconds expected_delay;
  };
  const Row rows[] = {
      // A retry keeps the attempt's own class (errors[].class) and the schema's delay.
      {FailureClass::retryable, "retry", 5s, Action::retry, FailureClass::retryable, 5s},
      {FailureClass::timeout, "retry", 90min, Action::retry, FailureClass::timeout, 90min},
      {FailureClass::connection, "retry", 0s, Action::retry, FailureClass::connection, 0s},
      // A dead letter is of the class the schema names, with no delay.
      {FailureClass::retryable, "exhausted", 0s, Action::dead_letter, FailureClass::exhausted, 0s},
      {FailureClass::timeout, "timeout", 0s, Action::dead_letter, FailureClass::timeout, 0s},
      {FailureClass::crashed, "crashed", 0s, Action::dead_letter, FailureClass::crashed, 0s},
      {FailureClass::lease_expired, "lease_expired", 0s, Action::dead_letter, FailureClass::lease_expired, 0s},
      {FailureClass::permanent, "permanent", 0s, Action::dead_letter, FailureClass::permanent, 0s},
      {FailureClass::unknown_kind, "unknown_kind", 0s, Action::dead_letter, FailureClass::unknown_kind, 0s},
      {FailureClass::unreadable, "unreadable", 0s, Action::dead_letter, FailureClass::unreadable, 0s},
  };
  for (const Row& row : rows) {
    CAPTURE(std::string(row.outcome));
    const Decision d = decision_of(row.failed, row.outcome, row.delay);
    CHECK(d.action == row.action);
    CHECK(oncely::detail::to_string(d.cls) == oncely::detail::to_string(row.cls));
    CHECK(d.delay == row.expected_delay);
    CHECK(d.dead_letter() == (row.action == Action::dead_letter));
  }
  // An outcome this binary cannot name (a newer schema's) is an error, not a guess.
  CHECK_THROWS_AS((void)decision_of(FailureClass::retryable, "abandoned", 0s), std::runtime_error);
}

TEST_CASE("retry_policy: failure_class_named reads back every name to_string gives, and nothing else") {
  using oncely::detail::failure_class_named;
  using oncely::detail::to_string;
  for (const FailureClass c : {FailureClass::retryable, FailureClass::permanent, FailureClass::timeout,
                               FailureClass::connection, FailureClass::unknown_kind, FailureClass::exhausted,
                               FailureClass::crashed, FailureClass::unreadable, FailureClass::lease_expired}) {
    CAPTURE(to_string(c));
    REQUIRE(failure_class_named(to_string(c)).has_value());
    CHECK(*failure_class_named(to_string(c)) == c);
  }
  CHECK_FALSE(failure_class_named("retry").has_value());
  CHECK_FALSE(failure_class_named("").has_value());
  CHECK_FALSE(failure_class_named("Exhausted").has_value());
}
