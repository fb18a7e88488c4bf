// The attempt record against a real Postgres: which records of other workers count as
// attempts that never finished.
#include <doctest/doctest.h>

#include <algorithm>

#include <memory>

#include <pqxx/pqxx>

#include "store/store.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;

TEST_SUITE("attempt record") {
  TEST_CASE("attempt record: another worker's record counts only once the backend of its job connection is gone") {
    PgFixture db;
    oncely::detail::Store store{db.schema, false};
    pqxx::connection side_connection{db.url};
    pqxx::nontransaction side(side_connection);
    const std::int64_t worker = store.workers.register_worker(side, "host", 1, {"default"});

    // Worker A's batch transaction rolled back (a failed transaction-only handler): A is alive,
    // its job connection too, and it has not emptied its record yet.
    pqxx::connection alive_job_connection{db.url};
    store.attempts_in_flight.start(side, worker, {11, 12}, alive_job_connection.backendpid(), false);

    // Worker B died: its job connection's backend is gone.
    int dead_pid = 0;
    {
      pqxx::connection dying_job_connection{db.url};
      dead_pid = dying_job_connection.backendpid();
    }
    REQUIRE(wait_until(
        [&] {
          return db.scalar<long>("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(dead_pid)) == 0;
        },
        std::chrono::seconds(10)));
    // It ran job 13 alone in its process (a suspect), and job 14 on another thread beside others.
    store.attempts_in_flight.start(side, worker, {13}, dead_pid, true);
    store.attempts_in_flight.start(side, worker, {14}, dead_pid, false);

    // Worker C claims jobs 11 to 14: B's attempts of 13 and 14 never finished; only the one
    // that ran alone is that job's own crash.
    auto unfinished =
        store.attempts_in_flight.start(side, worker, {11, 12, 13, 14}, side_connection.backendpid(), false).unfinished;
    std::sort(unfinished.begin(), unfinished.end(), [](const auto& a, const auto& b) { return a.job_id < b.job_id; });
    REQUIRE(unfinished.size() == 2);
    CHECK(unfinished[0].job_id == 13);
    CHECK(unfinished[0].alone == 1);
    CHECK(unfinished[1].job_id == 14);
    CHECK(unfinished[1].alone == 0);
  }

}  // TEST_SUITE
