#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>

#include <pqxx/except>

#include "execution/retry_policy.hpp"
#include "oncely/errors.hpp"

using namespace std::chrono_literals;
using oncely::BackoffConfig;
using oncely::detail::classify;
using oncely::detail::FailureClass;
using oncely::detail::next_delay;

namespace {

constexpr int kDraws = 2000;

BackoffConfig exponential(std::chrono::milliseconds base, std::chrono::milliseconds cap, BackoffConfig::Jitter jitter) {
  BackoffConfig backoff;
  backoff.base = base;
  backoff.cap = cap;
  backoff.jitter = jitter;
  return backoff;
}

// min(cap, base * 2^(n-1)) for the small n these tests use.
std::chrono::milliseconds expected_delay(const BackoffConfig& backoff, int n) {
  return std::min(backoff.cap, backoff.base * (std::int64_t{1} << (n - 1)));
}

struct NotAStdException {};

// The smallest and largest of kDraws delays after the n-th failure.
std::pair<std::chrono::milliseconds, std::chrono::milliseconds> draw_range(int n, const BackoffConfig& backoff,
                                                                           std::mt19937_64& rng) {
  auto low = std::chrono::milliseconds::max();
  auto high = std::chrono::milliseconds::min();
  for (int i = 0; i < kDraws; ++i) {
    const auto delay = next_delay(n, backoff, rng);
    low = std::min(low, delay);
    high = std::max(high, delay);
  }
  return {low, high};
}

}  // namespace

namespace app {
struct QuotaExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace app

TEST_CASE("retry_policy: no jitter gives the exponential delay exactly") {
  std::mt19937_64 rng(1);
  const auto backoff = exponential(5s, 10min, BackoffConfig::Jitter::none);
  CHECK(next_delay(1, backoff, rng) == 5s);
  CHECK(next_delay(2, backoff, rng) == 10s);
  CHECK(next_delay(3, backoff, rng) == 20s);
  CHECK(next_delay(7, backoff, rng) == 320s);
  CHECK(next_delay(8, backoff, rng) == 10min);  // 640s capped
  CHECK(next_delay(9, backoff, rng) == 10min);
  CHECK(next_delay(2, exponential(5s, 3s, BackoffConfig::Jitter::none), rng) == 3s);  // cap below base
  CHECK(next_delay(5, exponential(0s, 10min, BackoffConfig::Jitter::none), rng) == 0s);
}

TEST_CASE("retry_policy: full jitter stays within [0, min(cap, base*2^(n-1))]") {
  std::mt19937_64 rng(42);
  const auto backoff = exponential(5s, 10min, BackoffConfig::Jitter::full);
  for (int n = 1; n <= 12; ++n) {
    CAPTURE(n);
    const auto d = expected_delay(backoff, n);
    const auto [low, high] = draw_range(n, backoff, rng);
    CHECK(low >= 0ms);
    CHECK(high <= d);
    // The draws spread over the range rather than sticking to one end.
    CHECK(low < d / 4);
    CHECK(high > d * 3 / 4);
  }
}

TEST_CASE("retry_policy: equal jitter stays within [d/2, d]") {
  std::mt19937_64 rng(7);
  const auto backoff = exponential(5s, 10min, BackoffConfig::Jitter::equal);
  for (int n = 1; n <= 12; ++n) {
    CAPTURE(n);
    const auto d = expected_delay(backoff, n);
    const auto [low, high] = draw_range(n, backoff, rng);
    CHECK(low >= d / 2);
    CHECK(high <= d);
    CHECK(low < d * 5 / 8);
    CHECK(high > d * 7 / 8);
  }
}

TEST_CASE("retry_policy: the cap holds for very many attempts without overflow") {
  std::mt19937_64 rng(3);
  for (const int n : {62, 63, 64, 65, 1000, INT_MAX}) {
    CAPTURE(n);
    CHECK(next_delay(n, exponential(5s, 10min, BackoffConfig::Jitter::none), rng) == 10min);
    CHECK(next_delay(n, exponential(1ms, std::chrono::milliseconds::max(), BackoffConfig::Jitter::none), rng) ==
          (n <= 63 ? std::chrono::milliseconds(std::int64_t{1} << (n - 1)) : std::chrono::milliseconds::max()));
    const auto full = next_delay(n, exponential(5s, 10min, BackoffConfig::Jitter::full), rng);
    CHECK((full >= 0ms && full <= 10min));
    const auto equal = next_delay(n, exponential(5s, 10min, BackoffConfig::Jitter::equal), rng);
    CHECK((equal >= 5min && equal <= 10min));
  }
  const auto huge = std::chrono::milliseconds::max() / 4;
  CHECK(next_delay(3, exponential(huge, std::chrono::milliseconds::max() / 2, BackoffConfig::Jitter::none), rng) ==
        std::chrono::milliseconds::max() / 2);
}

TEST_CASE("retry_policy: a schedule uses its n-th entry and repeats its last") {
  std::mt19937_64 rng(5);
  BackoffConfig backoff;
  backoff.schedule = {5s, 30s, 2min, 10min};
  backoff.jitter = BackoffConfig::Jitter::full;  // unused with a schedule
  CHECK(next_delay(1, backoff, rng) == 5s);
  CHECK(next_delay(2, backoff, rng) == 30s);
  CHECK(next_delay(3, backoff, rng) == 2min);
  CHECK(next_delay(4, backoff, rng) == 10min);
  CHECK(next_delay(5, backoff, rng) == 10min);
  CHECK(next_delay(1000, backoff, rng) == 10min);
}

TEST_CASE("retry_policy: classify maps each exception type to its class") {
  SUBCASE("PermanentError is permanent") {
    const auto failure = classify(std::make_exception_ptr(oncely::PermanentError("payload has no user_id")));
    CHECK(failure.cls == FailureClass::permanent);
    CHECK(failure.is_permanent());
    CHECK(failure.message == "payload has no user_id");
    CHECK(failure.detail == nlohmann::json{{"exception", "oncely::PermanentError"}});
    CHECK_FALSE(failure.retry_after.has_value());
  }
  SUBCASE("RetryAfter is retryable after its delay") {
    const auto failure = classify(std::make_exception_ptr(oncely::RetryAfter(90s, "rate limited")));
    CHECK(failure.cls == FailureClass::retryable);
    CHECK_FALSE(failure.is_permanent());
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

TEST_CASE("retry_policy: decide — retry or dead letter, and under which class, as a table") {
  using oncely::detail::decide;
  using oncely::detail::Decision;
  using oncely::detail::Failure;
  using Action = Decision::Action;
  const BackoffConfig backoff = exponential(5s, 10min, BackoffConfig::Jitter::none);
  struct Row {
    FailureClass failure;
    std::optional<std::chrono::milliseconds> retry_after;
    int attempt;
    int max_attempts;
    Action action;
    FailureClass cls;
    std::chrono::milliseconds delay;
  };
  const Row rows[] = {
      // Retryable classes retry with the backoff's delay until the last attempt...
      {FailureClass::retryable, {}, 1, 3, Action::retry, FailureClass::retryable, 5s},
      {FailureClass::retryable, {}, 2, 3, Action::retry, FailureClass::retryable, 10s},
      {FailureClass::timeout, {}, 2, 3, Action::retry, FailureClass::timeout, 10s},
      {FailureClass::connection, {}, 1, 3, Action::retry, FailureClass::connection, 5s},
      {FailureClass::crashed, {}, 1, 3, Action::retry, FailureClass::crashed, 5s},
      // ... or the failure's own delay (RetryAfter, HTTP Retry-After), even past the cap.
      {FailureClass::retryable, 90min, 1, 3, Action::retry, FailureClass::retryable, 90min},
      // The last attempt: exhausted, unless the way it failed is worth naming.
      {FailureClass::retryable, {}, 3, 3, Action::dead_letter, FailureClass::exhausted, 0s},
      {FailureClass::connection, {}, 3, 3, Action::dead_letter, FailureClass::exhausted, 0s},
      {FailureClass::retryable, 90min, 3, 3, Action::dead_letter, FailureClass::exhausted, 0s},
      {FailureClass::timeout, {}, 3, 3, Action::dead_letter, FailureClass::timeout, 0s},
      {FailureClass::crashed, {}, 3, 3, Action::dead_letter, FailureClass::crashed, 0s},
      {FailureClass::lease_expired, {}, 3, 3, Action::dead_letter, FailureClass::lease_expired, 0s},
      {FailureClass::retryable, {}, 1, 1, Action::dead_letter, FailureClass::exhausted, 0s},
      // An allowance used up before the attempt started (max_attempts lowered, crashes).
      {FailureClass::retryable, {}, 5, 3, Action::dead_letter, FailureClass::exhausted, 0s},
      {FailureClass::crashed, {}, 4, 3, Action::dead_letter, FailureClass::crashed, 0s},
      // Permanent classes go at once, whatever the attempts left.
      {FailureClass::permanent, {}, 1, 25, Action::dead_letter, FailureClass::permanent, 0s},
      {FailureClass::permanent, 1min, 1, 25, Action::dead_letter, FailureClass::permanent, 0s},
      {FailureClass::unknown_kind, {}, 1, 25, Action::dead_letter, FailureClass::unknown_kind, 0s},
      {FailureClass::unreadable, {}, 0, 25, Action::dead_letter, FailureClass::unreadable, 0s},
      {FailureClass::permanent, {}, 25, 25, Action::dead_letter, FailureClass::permanent, 0s},
  };
  std::mt19937_64 rng(7);
  for (const Row& row : rows) {
    CAPTURE(oncely::detail::to_string(row.failure));
    CAPTURE(row.attempt);
    CAPTURE(row.max_attempts);
    Failure failure{row.failure, "boom", nlohmann::json::object(), row.retry_after};
    const Decision d = decide(failure, row.attempt, row.max_attempts, backoff, rng);
    CHECK(d.action == row.action);
    CHECK(oncely::detail::to_string(d.cls) == oncely::detail::to_string(row.cls));
    CHECK(d.delay == row.delay);
    CHECK(d.dead_letter() == (row.action == Action::dead_letter));
  }
}
