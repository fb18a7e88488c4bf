#include <doctest/doctest.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "process/maintenance.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

TEST_SUITE("maintenance") {
  TEST_CASE("maintenance: markers older than the dedup window are pruned in batches, newer ones kept") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("processed_jobs") +
            " (kind, idempotency_key, job_id, queue, processed_at) SELECT 'k', 'old-' || i, i, 'default', "
            "now() - interval '8 days' FROM generate_series(1, 12001) AS i");
    db.exec("INSERT INTO " + db.table("processed_jobs") +
            " (kind, idempotency_key, job_id, queue, processed_at) SELECT 'k', 'new-' || i, 100000 + i, 'default', "
            "now() - interval '6 days' FROM generate_series(1, 10) AS i");
    const oncely::detail::Store store(db.schema);
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    const oncely::detail::Maintenance maintenance(store, std::chrono::hours(24 * 7), log);
    pqxx::connection conn{db.url};
    const auto pass = maintenance.run_once(conn);
    CHECK(pass.elected);
    CHECK(pass.markers_pruned == 12001);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 10);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs") +
                          " WHERE idempotency_key LIKE 'old-%'") == 0);
  }

  TEST_CASE("maintenance: a key's rate window goes once its last start is a period old; busy keys' stay") {
    PgFixture db;
    db.exec("SELECT " + db.table("set_queue_limits") +
            "('q', NULL, '/tenant', NULL, per_key_rate_count => 5, per_key_rate_period => '1 minute')");
    db.exec("INSERT INTO " + db.table("key_rate_windows") +
            " (queue, key, starts) VALUES"
            " ('q', 'idle', ARRAY[now() - interval '3 minutes', now() - interval '2 minutes']),"
            " ('q', 'busy', ARRAY[now() - interval '2 minutes', now() - interval '10 seconds'])");
    const oncely::detail::Store store(db.schema);
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    pqxx::connection conn{db.url};
    CHECK(oncely::detail::Maintenance(store, 24h, log).run_once(conn).elected);
    CHECK(db.scalar<std::string>("SELECT string_agg(key, ',') FROM " + db.table("key_rate_windows")) == "busy");
  }

  TEST_CASE("maintenance: one process at a time: a pass skips while another holds the lock") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("processed_jobs") +
            " (kind, idempotency_key, job_id, queue, processed_at) VALUES ('k', 'old', 1, 'default', now() - interval "
            "'30 days')");
    const oncely::detail::Store store(db.schema);
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    const oncely::detail::Maintenance maintenance(store, std::chrono::hours(24), log);
    pqxx::connection holder{db.url};
    pqxx::work holding(holder);
    REQUIRE(store.locks.try_maintenance(holding));
    pqxx::connection conn{db.url};
    CHECK_FALSE(maintenance.run_once(conn).elected);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 1);
    holding.abort();
    CHECK(maintenance.run_once(conn).elected);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 0);
  }

  TEST_CASE("maintenance: stale worker registrations go; live ones and records of unfinished attempts stay") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('k')");
    const long job = db.scalar<long>("SELECT id FROM " + db.table("jobs"));
    db.exec("INSERT INTO " + db.table("workers") +
            " (host, pid, queues, heartbeat_at) VALUES "
            "('dead', 1, '{default}', now() - interval '5 minutes'), ('alive', 2, '{default}', now())");
    db.exec("INSERT INTO " + db.table("attempts_in_flight") + " (worker_id, job_ids) SELECT id, '{}' FROM " +
            db.table("workers"));
    // The dead worker's unfinished attempt on a job that still exists must survive: it counts.
    db.exec("INSERT INTO " + db.table("attempts_in_flight") + " (worker_id, job_ids) SELECT id, ARRAY[" +
            std::to_string(job) + "]::bigint[] FROM " + db.table("workers") + " WHERE host = 'dead'");
    const oncely::detail::Store store(db.schema);
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    pqxx::connection conn{db.url};
    CHECK(oncely::detail::Maintenance(store, 24h, log).run_once(conn).elected);
    CHECK(db.scalar<std::string>("SELECT string_agg(host, ',') FROM " + db.table("workers")) == "alive");
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("attempts_in_flight")) == 2);  // alive's + the record
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("attempts_in_flight") + " WHERE job_ids <> '{}'") == 1);
  }

  TEST_CASE("maintenance: a live worker taken for dead keeps recording attempts and registers again") {
    PgFixture db;
    const oncely::detail::Store store(db.schema);
    pqxx::connection conn{db.url};
    std::int64_t worker = 0;
    {
      pqxx::work tx(conn);
      worker = store.workers.register_worker(tx, "slow-host", 42, {"default"});
      tx.exec("UPDATE " + db.table("workers") + " SET heartbeat_at = now() - interval '5 minutes'");
      tx.commit();
    }
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    CHECK(oncely::detail::Maintenance(store, 24h, log).run_once(conn).elected);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("workers")) == 0);
    std::int64_t record = 0;
    {  // the worker was only slow: its next batch and heartbeat put everything back
      pqxx::nontransaction tx(conn);
      record = store.attempts_in_flight.start(tx, worker, {7, 8}, conn.backendpid(), false).id;
      store.workers.heartbeat(tx, worker, 2, "slow-host", 42, {"default"});
    }
    CHECK(db.scalar<std::string>("SELECT job_ids::text FROM " + db.table("attempts_in_flight") +
                                 " WHERE id = " + std::to_string(record)) == "{7,8}");
    CHECK(db.scalar<std::string>("SELECT host || ' ' || jobs_in_flight FROM " + db.table("workers") +
                                 " WHERE id = " + std::to_string(worker)) == "slow-host 2");
  }

}  // TEST_SUITE
