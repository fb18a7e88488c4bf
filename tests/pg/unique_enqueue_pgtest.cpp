// Unique enqueue: at most one live job per (kind, unique_key), by a partial unique index.
// skip returns the live job's id, replace updates a waiting one and reports a running one
// without blocking, error refuses; a producer that rolls back leaves the key free; and under
// contention with workers completing the jobs every call comes back with an id.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <pqxx/pqxx>

#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

EnvChanges env_of(const PgFixture& db) { return {{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}}; }

oncely::NewJob unique_job(const std::string& key, oncely::OnConflict on_conflict, const std::string& payload = "{}") {
  oncely::NewJob job;
  job.kind = "mail";
  job.payload_json = payload;
  job.unique_key = key;
  job.on_conflict = on_conflict;
  return job;
}

}  // namespace

TEST_SUITE("unique_enqueue") {
  TEST_CASE("unique_enqueue: skip returns the live job, replace updates it, error refuses; a done job frees the key") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    const auto first = client.enqueue_with_outcome(unique_job("user-1", oncely::OnConflict::skip, R"({"v": 1})"));
    CHECK(first.outcome == oncely::EnqueueOutcome::inserted);
    const auto again = client.enqueue_with_outcome(unique_job("user-1", oncely::OnConflict::skip, R"({"v": 2})"));
    CHECK(again.id == first.id);
    CHECK(again.outcome == oncely::EnqueueOutcome::existing);
    CHECK(db.scalar<std::string>("SELECT payload::text FROM " + db.table("jobs")) == R"({"v": 1})");

    const auto replaced = client.enqueue_with_outcome(unique_job("user-1", oncely::OnConflict::replace, R"({"v": 3})"));
    CHECK(replaced.id == first.id);
    CHECK(replaced.outcome == oncely::EnqueueOutcome::replaced);
    CHECK(db.scalar<std::string>("SELECT payload::text FROM " + db.table("jobs")) == R"({"v": 3})");

    CHECK_THROWS_WITH_AS(client.enqueue(unique_job("user-1", oncely::OnConflict::error)),
                         doctest::Contains("is live with unique key 'user-1'"), oncely::DatabaseError);
    // Another kind, or another key, is another job.
    auto other_kind = unique_job("user-1", oncely::OnConflict::skip);
    other_kind.kind = "sms";
    CHECK(client.enqueue(other_kind) != first.id);
    CHECK(client.enqueue(unique_job("user-2", oncely::OnConflict::skip)) != first.id);

    // Once the job has left the table (completed), the key is free again.
    db.exec("DELETE FROM " + db.table("jobs") + " WHERE id = " + std::to_string(first.id));
    const auto later = client.enqueue_with_outcome(unique_job("user-1", oncely::OnConflict::skip));
    CHECK(later.outcome == oncely::EnqueueOutcome::inserted);
    CHECK(later.id > first.id);

    // The SQL function, with named arguments; a repeated idempotency_key still inserts.
    const auto sql = "SELECT " + db.schema + ".enqueue('mail', unique_key => 'user-1', on_conflict => 'skip')";
    CHECK(db.scalar<std::int64_t>(sql) == later.id);
    const auto plain = "SELECT " + db.schema + ".enqueue('mail', idempotency_key => 'k')";
    CHECK(db.scalar<std::int64_t>(plain) != db.scalar<std::int64_t>(plain));
    CHECK_THROWS_WITH(db.exec("SELECT " + db.schema + ".enqueue('mail', unique_key => 'x', on_conflict => 'merge')"),
                      doctest::Contains("on_conflict must be skip, replace or error, not 'merge'"));

    // The CLI: the id on stdout, what it found on stderr.
    const ProcessResult r =
        run_process(oncely_cli({"enqueue", "mail", "--unique-key", "user-1", "--on-conflict", "skip"}), env_of(db));
    CHECK(r.exit_code == 0);
    CHECK(r.out == std::to_string(later.id) + "\n");
    CHECK(r.err.find("is live already") != std::string::npos);
    // NDJSON lines.
    const ProcessResult bulk = run_process(
        oncely_cli({"enqueue", "-"}), env_of(db),
        "{\"kind\": \"mail\", \"unique_key\": \"user-9\"}\n{\"kind\": \"mail\", \"unique_key\": \"user-9\"}\n"
        "{\"kind\": \"mail\", \"unique_key\": \"user-1\", \"on_conflict\": \"replace\", \"payload\": {\"v\": 9}}\n");
    CAPTURE(bulk.err);
    CHECK(bulk.exit_code == 0);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE unique_key = 'user-9'") == 1);
    // The mail job: an sms job of key user-1 is live too (in whichever order a scan finds them).
    CHECK(db.scalar<std::string>("SELECT payload::text FROM " + db.table("jobs") +
                                 " WHERE kind = 'mail' AND unique_key = 'user-1'") == R"({"v": 9})");
    // enqueue_batch (COPY) cannot do it, and says so.
    CHECK_THROWS_WITH_AS(client.enqueue_batch({unique_job("user-3", oncely::OnConflict::skip)}),
                         doctest::Contains("jobs[0].unique_key"), oncely::ConfigError);
  }

  TEST_CASE("unique_enqueue: replace reports a running job as running without waiting for it, and changes nothing") {
    PgFixture db;
    create_balances(db);
    WorkerProcess worker(db, R"({"queues": {"default": {"poll_interval": "100ms"}}})");
    const auto id =
        db.scalar<std::int64_t>("SELECT " + db.schema +
                                ".enqueue('slow_increment', '{\"account\": 1, \"cents\": 1, \"sleep_ms\": 3000}', "
                                "unique_key => 'acct-1')");
    REQUIRE(wait_until(
        [&] {
          return db.scalar<long>("SELECT count(*) FROM " + db.table("attempts_in_flight") + " WHERE " +
                                 std::to_string(id) + " = ANY (job_ids)") == 1;
        },
        10s));
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    auto job = unique_job("acct-1", oncely::OnConflict::replace, R"({"account": 1, "cents": 100, "sleep_ms": 0})");
    job.kind = "slow_increment";
    const auto started = std::chrono::steady_clock::now();
    const auto r = client.enqueue_with_outcome(job);
    CHECK(std::chrono::steady_clock::now() - started < 1s);
    CHECK(r.id == id);
    CHECK(r.outcome == oncely::EnqueueOutcome::running);
    CHECK(wait_until([&] { return sum_of_balances(db) == 1; }, 10s));  // the job ran as it was

    // A lease-mode job whose lease is live is running too (no row lock to wait for).
    const auto leased = db.scalar<std::int64_t>("SELECT " + db.schema +
                                                ".enqueue('export', unique_key => 'e', "
                                                "run_at => now() + interval '1 hour')");
    db.exec("UPDATE " + db.table("jobs") +
            " SET lease_token = 1, leased_by = 1, attempts = 1 WHERE id = " + std::to_string(leased));
    auto lease_job = unique_job("e", oncely::OnConflict::replace, R"({"new": true})");
    lease_job.kind = "export";
    const auto lr = client.enqueue_with_outcome(lease_job);
    CHECK(lr.outcome == oncely::EnqueueOutcome::running);
    CHECK(db.scalar<std::string>("SELECT payload::text FROM " + db.table("jobs") +
                                 " WHERE id = " + std::to_string(leased)) == "{}");
  }

  TEST_CASE("unique_enqueue: the first inserter rolls back, the second (waiting on it) still inserts") {
    PgFixture db;
    pqxx::connection first(db.url);
    pqxx::work tx(first);
    oncely::Client in_tx(oncely::DatabaseUrl(db.url), db.schema);
    const auto rolled_back = in_tx.enqueue_with_outcome(tx, unique_job("k", oncely::OnConflict::skip));
    CHECK(rolled_back.outcome == oncely::EnqueueOutcome::inserted);

    std::atomic<std::int64_t> second_id{0};
    std::thread second([&] {
      oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
      second_id = client.enqueue(unique_job("k", oncely::OnConflict::skip));
    });
    // The second waits on the first's uncommitted index entry.
    const bool waiting = wait_until(
        [&] {
          return db.scalar<long>(
                     "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE "
                     "'%enqueue_unique%'") == 1;
        },
        10s);
    CHECK(waiting);
    tx.abort();
    second.join();
    CHECK(second_id.load() > 0);
    CHECK(second_id.load() != rolled_back.id);
    CHECK(db.scalar<std::int64_t>("SELECT id FROM " + db.table("jobs") + " WHERE unique_key = 'k'") ==
          second_id.load());
  }

  TEST_CASE(
      "unique_enqueue: 4 producers x 1,000 calls over 10 keys while 10 workers run 2 ms jobs: an id every time, "
      "never two live jobs of a key") {
    PgFixture db;
    create_balances(db);
    WorkerProcess worker(db,
                         R"({"queues": {"default": {"concurrency": 10, "batch_size": 1, "poll_interval": "50ms"}}})");
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 1; }, 10s));

    std::atomic<bool> done{false};
    std::atomic<long> most_live{0};
    std::thread monitor([&] {
      pqxx::connection conn(db.url);
      while (!done) {
        pqxx::work tx(conn);
        const long n = tx.exec("SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM " + db.table("jobs") +
                               " WHERE unique_key IS NOT NULL GROUP BY kind, unique_key) AS per_key")[0][0]
                           .as<long>();
        tx.commit();
        if (n > most_live) most_live = n;
      }
    });
    std::atomic<long> ids{0};
    std::atomic<long> failures{0};
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p) {
      producers.emplace_back([&, p] {
        oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
        for (int i = 0; i < 1000; ++i) {
          oncely::NewJob job;
          job.kind = "slow_increment";
          job.payload = {{"account", i % 10}, {"cents", 1}, {"sleep_ms", 2}};
          job.unique_key = "acct-" + std::to_string(i % 10);
          job.on_conflict = (i + p) % 2 == 0 ? oncely::OnConflict::skip : oncely::OnConflict::replace;
          try {
            if (client.enqueue(job) > 0) ++ids;
          } catch (const std::exception& e) {
            ++failures;
            MESSAGE(e.what());
          }
        }
      });
    }
    for (auto& t : producers) t.join();
    done = true;
    monitor.join();
    CHECK(failures.load() == 0);
    CHECK(ids.load() == 4000);
    CHECK(most_live.load() <= 1);
    CHECK(wait_until([&] { return count_of(db, "jobs") == 0; }, 20s));
    CHECK(sum_of_balances(db) > 10);  // keys were freed and taken again while workers ran
  }

}  // TEST_SUITE
