// The retry decision's one owner (migration 19): backoff_delay(), the delay before the next
// attempt, and failure_outcome(), retry or dead letter of which class, as tables; and the
// C++ runtime's question (RetryDecisions::decide) and the SQL worker protocol's retry_delay()
// answered by them.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

#include <pqxx/pqxx>

#include "oncely/config.hpp"
#include "store/store.hpp"
#include "support/pg_fixture.hpp"

using namespace std::chrono_literals;
using oncely::test::PgFixture;

namespace {

/// `sql` as an SQL literal, or NULL.
std::string literal(PgFixture& db, const std::optional<std::string>& sql) {
  return sql ? db.conn->quote(*sql) : std::string("NULL");
}

}  // namespace

TEST_SUITE("retry_decision") {
  TEST_CASE("retry_decision: backoff_delay() as a table: parameters, failures and the draw give the delay") {
    PgFixture db;
    struct Row {
      const char* base;
      const char* cap;
      const char* jitter;
      std::optional<std::string> schedule;
      int failures;
      double unit_random;
      double expected_ms;
    };
    const Row rows[] = {
        // No jitter: base * 2^(n-1), capped.
        {"5 seconds", "10 minutes", "none", {}, 1, 0.5, 5'000},
        {"5 seconds", "10 minutes", "none", {}, 2, 0.5, 10'000},
        {"5 seconds", "10 minutes", "none", {}, 3, 0.5, 20'000},
        {"5 seconds", "10 minutes", "none", {}, 7, 0.5, 320'000},
        {"5 seconds", "10 minutes", "none", {}, 8, 0.5, 600'000},  // 640 s capped
        {"5 seconds", "10 minutes", "none", {}, 9, 0.5, 600'000},
        {"5 seconds", "3 seconds", "none", {}, 2, 0.5, 3'000},  // a cap below the base
        {"0", "10 minutes", "none", {}, 5, 0.5, 0},
        {"250 milliseconds", "1 hour", "none", {}, 1, 0.5, 250},
        // Fewer than one failure counts as one.
        {"5 seconds", "10 minutes", "none", {}, 0, 0.5, 5'000},
        {"5 seconds", "10 minutes", "none", {}, -3, 0.5, 5'000},
        // Very many failures: the cap, without overflow (max_attempts goes up to 1000).
        {"5 seconds", "10 minutes", "none", {}, 63, 0.5, 600'000},
        {"5 seconds", "10 minutes", "none", {}, 1000, 0.5, 600'000},
        {"5 seconds", "10 minutes", "none", {}, 2147483647, 0.5, 600'000},
        {"30 days", "30 days", "none", {}, 1000, 0.5, 2'592'000'000},
        // Full jitter: the draw scales [0, d].
        {"5 seconds", "10 minutes", "full", {}, 3, 0.0, 0},
        {"5 seconds", "10 minutes", "full", {}, 3, 0.25, 5'000},
        {"5 seconds", "10 minutes", "full", {}, 3, 0.5, 10'000},
        {"5 seconds", "10 minutes", "full", {}, 9, 0.5, 300'000},
        // Equal jitter: d/2 plus the draw of d/2.
        {"5 seconds", "10 minutes", "equal", {}, 3, 0.0, 10'000},
        {"5 seconds", "10 minutes", "equal", {}, 3, 0.5, 15'000},
        {"5 seconds", "10 minutes", "equal", {}, 3, 0.75, 17'500},
        {"5 seconds", "10 minutes", "equal", {}, 1000, 0.0, 300'000},
        // A schedule: its n-th entry, the last repeating; no jitter, base or cap.
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 1, 0.5, 5'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 2, 0.5, 30'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 3, 0.5, 120'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 4, 0.5, 600'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 5, 0.5, 600'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 1000, 0.5, 600'000},
        {"5 seconds", "10 minutes", "full", "{5s,30s,2min,10min}", 0, 0.5, 5'000},
        {"5 seconds", "10 minutes", "none", "{250ms}", 7, 0.5, 250},
        // An empty schedule is none.
        {"5 seconds", "10 minutes", "none", "{}", 2, 0.5, 10'000},
    };
    for (const Row& row : rows) {
      CAPTURE(row.base);
      CAPTURE(row.cap);
      CAPTURE(row.jitter);
      CAPTURE(row.schedule.value_or("NULL"));
      CAPTURE(row.failures);
      CAPTURE(row.unit_random);
      const auto ms = db.scalar<double>(
          "SELECT extract(epoch FROM " + db.table("backoff_delay") + "(" + db.conn->quote(row.base) + "::interval, " +
          db.conn->quote(row.cap) + "::interval, " + db.conn->quote(row.jitter) + ", " + literal(db, row.schedule) +
          "::interval[], " + std::to_string(row.failures) + ", " + std::to_string(row.unit_random) + ")) * 1000");
      CHECK(ms == doctest::Approx(row.expected_ms).epsilon(1e-9));
    }
    // Without a draw given, random()'s: within the jitter's range.
    CHECK(db.scalar<bool>("SELECT bool_and(d BETWEEN interval '10 seconds' AND interval '20 seconds') FROM (SELECT " +
                          db.table("backoff_delay") +
                          "('5 seconds', '10 minutes', 'equal', NULL, 3) AS d FROM generate_series(1, 200)) s"));
    CHECK(db.scalar<bool>("SELECT count(DISTINCT d) > 1 FROM (SELECT " + db.table("backoff_delay") +
                          "('5 seconds', '10 minutes', 'full', NULL, 3) AS d FROM generate_series(1, 20)) s"));
  }

  TEST_CASE(
      "retry_decision: failure_outcome() as a table: a failure's class and attempts give retry or the dead class") {
    PgFixture db;
    struct Row {
      const char* failure_class;
      int attempt;
      int max_attempts;
      const char* outcome;
    };
    const Row rows[] = {
        // Retryable classes retry until the last attempt...
        {"retryable", 1, 3, "retry"},
        {"retryable", 2, 3, "retry"},
        {"timeout", 2, 3, "retry"},
        {"connection", 1, 3, "retry"},
        {"crashed", 1, 3, "retry"},
        {"lease_expired", 2, 3, "retry"},
        // ... the last: exhausted, unless the way it failed is worth naming.
        {"retryable", 3, 3, "exhausted"},
        {"connection", 3, 3, "exhausted"},
        {"timeout", 3, 3, "timeout"},
        {"crashed", 3, 3, "crashed"},
        {"lease_expired", 3, 3, "lease_expired"},
        {"retryable", 1, 1, "exhausted"},
        // An allowance used up before the attempt started (max_attempts lowered, crashes).
        {"retryable", 5, 3, "exhausted"},
        {"crashed", 4, 3, "crashed"},
        // Permanent classes go at once, whatever the attempts left.
        {"permanent", 1, 25, "permanent"},
        {"unknown_kind", 1, 25, "unknown_kind"},
        {"unreadable", 0, 1, "unreadable"},
        {"permanent", 25, 25, "permanent"},
    };
    for (const Row& row : rows) {
      CAPTURE(row.failure_class);
      CAPTURE(row.attempt);
      CAPTURE(row.max_attempts);
      CHECK(db.scalar<std::string>("SELECT " + db.table("failure_outcome") + "(" + db.conn->quote(row.failure_class) +
                                   ", " + std::to_string(row.attempt) + ", " + std::to_string(row.max_attempts) +
                                   ")") == row.outcome);
    }
    CHECK(db.exec("SELECT " + db.table("failure_outcome") + "(NULL, 1, 3)").at(0).at(0).is_null());
  }

  TEST_CASE("retry_decision: the C++ runtime's question is answered by the same functions") {
    PgFixture db;
    const oncely::detail::Store store(db.schema);
    pqxx::work tx(*db.conn);
    oncely::BackoffConfig exponential;
    exponential.base = 5s;
    exponential.cap = 10min;
    exponential.jitter = oncely::BackoffConfig::Jitter::none;
    oncely::BackoffConfig schedule;
    schedule.schedule = {250ms, 2s};
    struct Row {
      const char* failure_class;
      int attempt;
      int max_attempts;
      std::optional<std::chrono::milliseconds> retry_after;
      const oncely::BackoffConfig& backoff;
      const char* outcome;
      std::chrono::milliseconds delay;
    };
    const Row rows[] = {
        {"retryable", 1, 3, {}, exponential, "retry", 5s},
        {"timeout", 2, 3, {}, exponential, "retry", 10s},
        {"retryable", 1, 3, {}, schedule, "retry", 250ms},
        {"retryable", 2, 3, {}, schedule, "retry", 2s},
        {"retryable", 9, 10, {}, schedule, "retry", 2s},
        // The failure's own delay (RetryAfter, HTTP Retry-After), even past the cap.
        {"retryable", 1, 3, 90min, exponential, "retry", 90min},
        {"retryable", 1, 3, 0ms, exponential, "retry", 0ms},
        {"retryable", 3, 3, 90min, exponential, "exhausted", 0ms},
        {"timeout", 3, 3, {}, exponential, "timeout", 0ms},
        {"permanent", 1, 3, 1min, exponential, "permanent", 0ms},
        {"unreadable", 0, 1, {}, exponential, "unreadable", 0ms},
    };
    for (const Row& row : rows) {
      CAPTURE(row.failure_class);
      CAPTURE(row.attempt);
      const oncely::detail::RetryAnswer answer = store.retry_decisions.decide(tx, {.failure_class = row.failure_class,
                                                                                   .attempt = row.attempt,
                                                                                   .max_attempts = row.max_attempts,
                                                                                   .retry_after = row.retry_after,
                                                                                   .backoff = row.backoff});
      CHECK(answer.outcome == row.outcome);
      CHECK(answer.delay == row.delay);
    }
    // Jitter is the schema's draw: within [d/2, d] for equal jitter, to the millisecond.
    oncely::BackoffConfig equal = exponential;
    equal.jitter = oncely::BackoffConfig::Jitter::equal;
    for (int i = 0; i < 50; ++i) {
      const auto answer = store.retry_decisions.decide(tx, {.failure_class = "retryable",
                                                            .attempt = 3,
                                                            .max_attempts = 8,
                                                            .retry_after = std::nullopt,
                                                            .backoff = equal});
      CHECK(answer.outcome == "retry");
      CHECK((answer.delay >= 10s && answer.delay <= 20s));
    }
  }

  TEST_CASE("retry_decision: the SQL worker protocol's retry_delay() is backoff_delay() with the policy's parameters") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, backoff_schedule,"
            " job_timeout) VALUES ('fixed', 'lease', '30 seconds', 5, '2 seconds', '1 minute', 'none', NULL, "
            "'5 minutes'), ('stepped', 'lease', '30 seconds', 5, '5 seconds', '10 minutes', 'full', "
            "'{1s,3s}', '5 minutes')");
    for (const int n : {1, 2, 5, 6, 40}) {
      CAPTURE(n);
      const std::string failures = std::to_string(n);
      CHECK(db.scalar<bool>("SELECT " + db.table("retry_delay") + "(" + db.table("queue_policy") + "('fixed'), " +
                            failures + ") = " + db.table("backoff_delay") + "('2 seconds', '1 minute', 'none', NULL, " +
                            failures + ")"));
      CHECK(db.scalar<bool>("SELECT " + db.table("retry_delay") + "(" + db.table("queue_policy") + "('stepped'), " +
                            failures + ") = " + db.table("backoff_delay") +
                            "('5 seconds', '10 minutes', 'full', '{1s,3s}', " + failures + ")"));
    }
  }
}  // TEST_SUITE
