// Dependencies and batches (migration 24): a child released, and a batch's callbacks
// enqueued, in the transaction that settles the parent or the last member; exactly once
// whatever the order of concurrent transactions.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pqxx/pqxx>

#include "oncely/batches.hpp"
#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "oncely/stats.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/pgbouncer.hpp"
#include "support/process.hpp"
#include "support/runtime_helpers.hpp"
#include "support/schema.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

EnvChanges env_of(const PgFixture& db) { return {{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}}; }

struct Leased {
  long id;
  long token;
};

/// A schema with a lease queue "default", driven through the SQL protocol.
struct Deps {
  PgFixture db;

  Deps() {
    db.exec("INSERT INTO " + db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout)"
            " VALUES ('default', 'lease', '30 seconds', 1, '1 second', '1 hour', 'none', '5 minutes')");
  }

  std::string fn(const std::string& name) const { return db.table(name); }

  long enqueue(const std::string& kind, const std::string& parents = "NULL", const std::string& batch = "NULL") {
    return db.scalar<long>("SELECT " + fn("enqueue") + "(" + db.conn->quote(kind) + ", depends_on => " + parents +
                           "::bigint[], batch_id => " + batch + "::bigint)");
  }

  /// The kinds lease_jobs() hands out now (each then released back).
  std::vector<Leased> lease(int max = 100) {
    std::vector<Leased> out;
    for (const auto& r : db.exec("SELECT id, lease_token FROM " + fn("lease_jobs") + "('default', " +
                                 std::to_string(max) + ") ORDER BY id")) {
      out.push_back({r[0].as<long>(), r[1].as<long>()});
    }
    return out;
  }

  std::vector<long> ids(const std::vector<Leased>& leased) {
    std::vector<long> out;
    for (const auto& l : leased) out.push_back(l.id);
    return out;
  }

  void complete(const Leased& job) {
    db.exec("SELECT " + fn("complete_job") + "(" + std::to_string(job.id) + ", " + std::to_string(job.token) + ")");
  }

  void fail(const Leased& job) {
    db.exec("SELECT " + fn("fail_job") + "(" + std::to_string(job.id) + ", " + std::to_string(job.token) +
            ", 'boom', false)");
  }

  std::optional<int> parents_left(long id) {
    const auto r = db.exec("SELECT parents_left FROM " + db.table("jobs") + " WHERE id = " + std::to_string(id));
    if (r.empty() || r[0][0].is_null()) return std::nullopt;
    return r[0][0].as<int>();
  }

  std::string dead_class(long job_id) {
    const auto r = db.exec("SELECT error_class FROM " + db.table("dead_letters") +
                           " WHERE job_id = " + std::to_string(job_id) + " ORDER BY id DESC LIMIT 1");
    return r.empty() ? "" : r[0][0].as<std::string>();
  }

  long count(const std::string& table, const std::string& where = "true") {
    return db.scalar<long>("SELECT count(*) FROM " + db.table(table) + " WHERE " + where);
  }
};

/// Whether a backend of `application_name` waits on a lock now.
bool waits_on_lock(PgFixture& db, const std::string& application_name) {
  return db.scalar<bool>("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = " +
                         db.conn->quote(application_name) + " AND wait_event_type = 'Lock')");
}

std::unique_ptr<pqxx::connection> connect_as(const PgFixture& db, const std::string& application_name) {
  auto conn = std::make_unique<pqxx::connection>(db.url);
  pqxx::nontransaction(*conn).exec("SET application_name = " + conn->quote(application_name));
  return conn;
}

}  // namespace

TEST_SUITE("dependencies") {
  TEST_CASE(
      "dependencies: a diamond A -> B, C -> D runs in order: D waits, unclaimed, until its last parent completes") {
    Deps t;
    const long a = t.enqueue("a");
    const long b = t.enqueue("b", "ARRAY[" + std::to_string(a) + "]");
    const long c = t.enqueue("c", "ARRAY[" + std::to_string(a) + "]");
    const long d = t.enqueue("d", "ARRAY[" + std::to_string(b) + ", " + std::to_string(c) + "]");
    CHECK(t.parents_left(d) == 2);
    // Waiting, not scheduled, in the queue's numbers.
    const oncely::Stats stats = oncely::collect_stats(oncely::DatabaseUrl(t.db.url), t.db.schema, "default");
    REQUIRE(stats.queues.size() == 1);
    CHECK(stats.queues[0].waiting == 3);
    CHECK(stats.queues[0].scheduled == 0);
    CHECK(stats.queues[0].ready == 1);
    CHECK(t.db.scalar<std::string>("SELECT depends_on::text FROM " + t.db.table("jobs") + " WHERE id = " +
                                   std::to_string(d)) == "{" + std::to_string(b) + "," + std::to_string(c) + "}");

    auto leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{a});
    // A's completion rolled back releases nothing.
    {
      pqxx::work tx(*t.db.conn);
      tx.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased[0].id) + ", " +
              std::to_string(leased[0].token) + ")");
      CHECK(tx.exec("SELECT count(*) FROM " + t.db.table("jobs") + " WHERE parents_left IS NULL AND id <> " +
                    std::to_string(a))[0][0]
                .as<long>() == 2);  // released inside the transaction...
      tx.abort();                   // ...and not at all once it rolls back
    }
    CHECK(t.parents_left(b) == 1);
    CHECK(t.lease().empty());  // A's lease is still live; B and C wait
    t.db.exec("SELECT " + t.fn("release_jobs") + "(ARRAY[" + std::to_string(leased[0].token) + "])");
    leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{a});
    t.complete(leased[0]);

    leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{b, c});
    t.complete(leased[0]);
    CHECK(t.parents_left(d) == 1);
    CHECK(t.lease().empty());
    t.complete(leased[1]);
    CHECK_FALSE(t.parents_left(d).has_value());
    leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{d});
    t.complete(leased[0]);
    CHECK(t.count("jobs") == 0);
    CHECK(t.count("job_parents") == 0);
    CHECK(t.count("processed_jobs") == 4);
  }

  TEST_CASE("dependencies: the release wakes the workers of the child's queue (a NOTIFY on <schema>.jobs)") {
    Deps t;
    const long parent = t.enqueue("parent");
    t.db.exec("INSERT INTO " + t.db.table("jobs") + " (queue, kind, depends_on) VALUES ('reports', 'child', ARRAY[" +
              std::to_string(parent) + "]::bigint[])");
    pqxx::connection listener(direct_database_url());  // a session of its own, past any pooler
    struct Collector : pqxx::notification_receiver {
      using pqxx::notification_receiver::notification_receiver;
      std::vector<std::string> payloads;
      void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    } collector(listener, oncely::detail::jobs_channel(t.db.schema));
    const auto leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{parent});
    t.complete(leased[0]);
    CHECK(wait_until(
        [&] {
          listener.await_notification(0, 50000);
          return std::find(collector.payloads.begin(), collector.payloads.end(), "reports") != collector.payloads.end();
        },
        5s));
  }

  TEST_CASE(
      "dependencies: a parent that completed counts as done; a job that never was, a later one, NULL are refused") {
    Deps t;
    const long a = t.enqueue("a");
    t.complete(t.lease().at(0));
    const long b = t.enqueue("b", "ARRAY[" + std::to_string(a) + "]");
    CHECK_FALSE(t.parents_left(b).has_value());  // ready at once
    CHECK(t.db.scalar<bool>("SELECT run_at <= now() FROM " + t.db.table("jobs") + " WHERE id = " + std::to_string(b)));

    CHECK(sqlstate_of(*t.db.conn, "SELECT " + t.fn("enqueue") + "('x', depends_on => ARRAY[999999]::bigint[])") ==
          "23503");
    // A later job (an id reserved with nextval() first, as a bulk enqueue does): no cycle can be built.
    const long reserved =
        t.db.scalar<long>("SELECT nextval(pg_get_serial_sequence(" + t.db.conn->quote(t.db.table("jobs")) + ", 'id'))");
    const long later = t.enqueue("later");
    CHECK(sqlstate_of(*t.db.conn,
                      "INSERT INTO " + t.db.table("jobs") + " (id, kind, depends_on) OVERRIDING SYSTEM VALUE VALUES (" +
                          std::to_string(reserved) + ", 'x', ARRAY[" + std::to_string(later) + "])") == "22023");
    CHECK(sqlstate_of(*t.db.conn, "SELECT " + t.fn("enqueue") + "('x', depends_on => ARRAY[NULL]::bigint[])") ==
          "22004");
    CHECK(sqlstate_of(*t.db.conn, "SELECT " + t.fn("enqueue") + "('x', unique_key => 'u', depends_on => ARRAY[" +
                                      std::to_string(a) + "]::bigint[])") == "22023");
    // The C++ client says which field.
    oncely::Client client(oncely::DatabaseUrl(t.db.url), t.db.schema);
    oncely::NewJob job{.kind = "x"};
    job.depends_on = {999999};
    CHECK_THROWS_WITH_AS(client.enqueue(job), "depends_on: job 999999 does not exist", oncely::ConfigError);
    job.depends_on = {a, b};
    const long c = client.enqueue(job);
    CHECK(t.parents_left(c) == 1);  // a completed, b queued
  }

  TEST_CASE("dependencies: a dead-lettered parent takes every waiting descendant with it; replays run them in order") {
    Deps t;
    const long a = t.enqueue("a");
    const long b = t.enqueue("b", "ARRAY[" + std::to_string(a) + "]");
    const long c = t.enqueue("c", "ARRAY[" + std::to_string(b) + "]");
    const long other = t.enqueue("other");
    const long d = t.enqueue("d", "ARRAY[" + std::to_string(c) + ", " + std::to_string(other) + "]");
    auto leased = t.lease();
    REQUIRE(t.ids(leased) == std::vector<long>{a, other});
    t.fail(leased[0]);  // max_attempts 1: dead at once
    CHECK(t.dead_class(a) == "permanent");
    CHECK(t.dead_class(b) == "dependency_failed");
    CHECK(t.dead_class(c) == "dependency_failed");
    CHECK(t.dead_class(d) == "dependency_failed");
    CHECK(t.db.scalar<std::string>("SELECT last_error FROM " + t.db.table("dead_letters") +
                                   " WHERE job_id = " + std::to_string(c)) ==
          "job " + std::to_string(b) + ", which this job depends on, did not complete");
    CHECK(t.count("jobs") == 1);  // other, leased
    // d's edge from other stays until other settles, which then finds no d to release.
    CHECK(t.count("job_parents") == 1);
    t.complete(leased[1]);
    CHECK(t.count("job_parents") == 0);

    // A child enqueued now, of a parent that is dead: dead at once.
    const long late = t.enqueue("late", "ARRAY[" + std::to_string(a) + "]");
    CHECK(t.dead_class(late) == "dependency_failed");

    // Replay the parent, then its dependency_failed children (in one statement, in dead-letter
    // order): each waits for the replay of its parent, and they run in order.
    const std::string dl = t.db.table("dead_letters");
    CHECK(run_process(oncely_cli({"dlq", "replay", "--job-id", std::to_string(a)}), env_of(t.db)).exit_code == 0);
    CHECK(run_process(oncely_cli({"dlq", "replay", "--class", "dependency_failed"}), env_of(t.db)).exit_code == 0);
    const auto replay_of = [&](long job) {
      return t.db.scalar<long>("SELECT replayed_job_id FROM " + dl + " WHERE job_id = " + std::to_string(job));
    };
    const long a2 = replay_of(a), b2 = replay_of(b), c2 = replay_of(c), d2 = replay_of(d), late2 = replay_of(late);
    // A child naming a parent and its replay waits for the replay once.
    const long both = t.enqueue("both", "ARRAY[" + std::to_string(a) + ", " + std::to_string(a2) + "]");
    CHECK(t.parents_left(both) == 1);
    CHECK(t.parents_left(b2) == 1);
    CHECK(t.parents_left(c2) == 1);
    CHECK(t.parents_left(d2) == 1);  // other completed: only c's replay is left
    CHECK(t.parents_left(late2) == 1);
    CHECK(t.db.scalar<std::string>("SELECT depends_on::text FROM " + t.db.table("jobs") +
                                   " WHERE id = " + std::to_string(b2)) == "{" + std::to_string(a2) + "}");
    const std::vector<std::vector<long>> waves{{a2}, {b2, late2, both}, {c2}, {d2}};
    for (const auto& wave : waves) {
      leased = t.lease();
      CHECK(t.ids(leased) == wave);
      for (const auto& job : leased) t.complete(job);
    }
    CHECK(t.count("jobs") == 0);
  }

  TEST_CASE("dependencies: a child enqueued while its parent completes is released, whichever commits first") {
    Deps t;
    // 1. The completion deletes the parent first; the producer, naming it, waits for that
    //    transaction, then finds the parent gone: completed, the child ready at once.
    {
      const long parent = t.enqueue("parent");
      const Leased leased = t.lease().at(0);
      auto worker = connect_as(t.db, "deps_worker");
      pqxx::work completing(*worker);
      completing.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased.id) + ", " +
                      std::to_string(leased.token) + ")");
      std::optional<long> child;
      std::thread producer([&] {
        auto conn = connect_as(t.db, "deps_producer");
        pqxx::work tx(*conn);
        child = tx.exec("SELECT " + t.fn("enqueue") + "('child', depends_on => ARRAY[" + std::to_string(parent) +
                        "]::bigint[])")[0][0]
                    .as<long>();
        tx.commit();
      });
      CHECK(wait_until([&] { return waits_on_lock(t.db, "deps_producer"); }, 10s));
      completing.commit();
      producer.join();
      REQUIRE(child.has_value());
      CHECK_FALSE(t.parents_left(*child).has_value());
      CHECK(t.ids(t.lease()) == std::vector<long>{*child});
      t.db.exec("DELETE FROM " + t.db.table("jobs"));
    }
    // 2. The producer names the parent first (uncommitted); the completion waits for it, and
    //    then releases the child it could not see before.
    {
      const long parent = t.enqueue("parent");
      const Leased leased = t.lease().at(0);
      auto producer_conn = connect_as(t.db, "deps_producer");
      pqxx::work producing(*producer_conn);
      const long child = producing
                             .exec("SELECT " + t.fn("enqueue") + "('child', depends_on => ARRAY[" +
                                   std::to_string(parent) + "]::bigint[])")[0][0]
                             .as<long>();
      std::thread worker([&] {
        auto conn = connect_as(t.db, "deps_worker");
        pqxx::work tx(*conn);
        tx.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased.id) + ", " +
                std::to_string(leased.token) + ")");
        tx.commit();
      });
      CHECK(wait_until([&] { return waits_on_lock(t.db, "deps_worker"); }, 10s));
      producing.commit();
      worker.join();
      CHECK_FALSE(t.parents_left(child).has_value());
      CHECK(t.ids(t.lease()) == std::vector<long>{child});
    }
  }

  TEST_CASE("dependencies: a running transaction-mode parent does not hold its child's producer back") {
    PgFixture db;
    EventRecorder events;
    std::mutex mutex;
    std::condition_variable cv;
    bool running = false;
    bool finish = false;
    oncely::QueueConfig queue;
    queue.concurrency = 1;
    oncely::Runtime runtime(config_for(db, queue), errors_only_options(events));
    runtime.handle("parent", [&](oncely::JobContext&) {
      std::unique_lock lock(mutex);
      running = true;
      cv.notify_all();
      cv.wait_for(lock, 20s, [&] { return finish; });
    });
    runtime.handle("child", [](oncely::JobContext&) {});
    RunningRuntime run(runtime);
    const long parent = db.scalar<long>("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('parent') RETURNING id");
    {
      std::unique_lock lock(mutex);
      REQUIRE(cv.wait_for(lock, 10s, [&] { return running; }));
    }
    // The parent's row is locked by its claim for as long as its handler runs; the child's
    // enqueue takes a KEY SHARE lock on it, which that claim's lock does not conflict with.
    const auto started = std::chrono::steady_clock::now();
    CHECK(sqlstate_of(*db.conn, "SET LOCAL lock_timeout = '3s'; INSERT INTO " + db.table("jobs") +
                                    " (kind, depends_on) VALUES ('child', ARRAY[" + std::to_string(parent) + "])") ==
          "");
    CHECK(std::chrono::steady_clock::now() - started < 2s);
    {
      std::lock_guard lock(mutex);
      finish = true;
      cv.notify_all();
    }
    CHECK(events.wait_for(oncely::JobEvent::Outcome::completed, 2, 10s));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  }

  TEST_CASE("batches: the callbacks are enqueued once, when the batch is closed and its last member settles") {
    Deps t;
    oncely::Client client(oncely::DatabaseUrl(t.db.url), t.db.schema);
    const long batch =
        client.open_batch({.on_success = nlohmann::json{{"kind", "report"}, {"payload", {{"to", "ops"}}}},
                           .on_failure = nlohmann::json{{"kind", "alarm"}, {"queue", "alarms"}, {"priority", -1}},
                           .on_finish = nlohmann::json{{"kind", "cleanup"}, {"key", "cleanup-once"}}});
    for (int i = 0; i < 3; ++i) {
      oncely::NewJob member{.kind = "member"};
      member.batch_id = batch;
      client.enqueue(member);
    }
    auto leased = t.lease();
    REQUIRE(leased.size() == 3);
    t.complete(leased[0]);
    t.fail(leased[1]);  // dead: the batch fails
    t.complete(leased[2]);
    auto status = oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, batch);
    REQUIRE(status);
    CHECK(status->state() == "open");  // every member settled, but more may join
    CHECK(status->completed == 2);
    CHECK(status->dead == 1);
    CHECK(t.count("jobs") == 0);
    client.close_batch(batch);
    status = oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, batch);
    CHECK(status->state() == "finished");
    REQUIRE(status->callback_job_ids.size() == 2);
    const auto callbacks = t.db.exec("SELECT kind, queue, priority, payload::text, idempotency_key FROM " +
                                     t.db.table("jobs") + " ORDER BY id");
    REQUIRE(callbacks.size() == 2);
    CHECK(callbacks[0][0].as<std::string>() == "alarm");
    CHECK(callbacks[0][1].as<std::string>() == "alarms");
    CHECK(callbacks[0][2].as<int>() == -1);
    CHECK(callbacks[0][3].as<std::string>() ==
          "{\"dead\": 1, \"batch_id\": " + std::to_string(batch) + ", \"completed\": 2}");
    CHECK(callbacks[0][4].as<std::string>() == "oncely-batch-" + std::to_string(batch) + "-on_failure");
    CHECK(callbacks[1][0].as<std::string>() == "cleanup");
    CHECK(callbacks[1][4].as<std::string>() == "cleanup-once");
    // Closed: no member may join; closing again does nothing.
    oncely::NewJob late{.kind = "member"};
    late.batch_id = batch;
    CHECK_THROWS_WITH_AS(client.enqueue(late), doctest::Contains("is closed"), oncely::ConfigError);
    client.close_batch(batch);
    CHECK(t.count("jobs") == 2);
    CHECK_THROWS_AS(client.close_batch(999999), oncely::ConfigError);
    CHECK_THROWS_AS(client.open_batch({.on_success = nlohmann::json{{"payload", {}}}}), oncely::ConfigError);
    // What the jobs table would refuse when the callback is enqueued, in the last member's
    // transaction, is refused when the batch is opened.
    for (const auto& bad :
         {nlohmann::json{{"kind", std::string(256, 'k')}},
          nlohmann::json{{"kind", "k"}, {"queue", std::string(129, 'q')}}, nlohmann::json{{"kind", "k"}, {"key", ""}},
          nlohmann::json{{"kind", "k"}, {"key", std::string(1025, 'x')}},
          nlohmann::json{{"kind", "k"}, {"priority", 1.5}}}) {
      CAPTURE(bad.dump());
      CHECK_THROWS_AS(client.open_batch({.on_finish = bad}), oncely::ConfigError);
    }

    // A batch closed empty finishes at once; one closed before its members settle, at the last.
    // An integer written as 5.0 (Python's json.dumps of a float) is an integer.
    const long empty = client.open_batch(
        {.on_finish = nlohmann::json::parse(R"({"kind": "done", "priority": 5.0, "max_attempts": 3.0})")});
    client.close_batch(empty);
    CHECK(oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, empty)->state() == "finished");
    CHECK(t.db.scalar<std::string>("SELECT priority || ' ' || max_attempts FROM " + t.db.table("jobs") +
                                   " WHERE kind = 'done'") == "5 3");
    t.db.exec("DELETE FROM " + t.db.table("jobs"));
    const long early = client.open_batch({.on_success = nlohmann::json{{"kind", "done"}}});
    oncely::NewJob member{.kind = "member"};
    member.batch_id = early;
    client.enqueue(member);
    client.close_batch(early);
    CHECK(oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, early)->state() == "closed");
    leased = t.lease();
    REQUIRE(leased.size() == 1);
    t.complete(leased[0]);
    CHECK(oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, early)->state() == "finished");
    CHECK(t.count("jobs", "kind = 'done'") == 1);
    // settle_dependents() called again for settled members (any role may) changes nothing.
    t.db.exec("SELECT " + t.fn("settle_dependents") + "(ARRAY[" + std::to_string(leased[0].id) + "], 'completed')");
    CHECK(oncely::find_batch(oncely::DatabaseUrl(t.db.url), t.db.schema, early)->completed == 1);
    CHECK(t.count("jobs", "kind = 'done'") == 1);
  }

  TEST_CASE("batches: the last two members completing at the same instant on two connections: one callback") {
    Deps t;
    const long batch = t.db.scalar<long>("SELECT " + t.fn("open_batch") + "(on_finish => '{\"kind\": \"after\"}')");
    t.enqueue("member", "NULL", std::to_string(batch));
    t.enqueue("member", "NULL", std::to_string(batch));
    t.db.exec("SELECT " + t.fn("close_batch") + "(" + std::to_string(batch) + ")");
    const auto leased = t.lease();
    REQUIRE(leased.size() == 2);
    auto first_conn = connect_as(t.db, "member_1");
    pqxx::work first(*first_conn);
    first.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased[0].id) + ", " +
               std::to_string(leased[0].token) + ")");
    // The second waits for the first's lock on the batch's counters: it then counts both.
    std::thread second([&] {
      auto conn = connect_as(t.db, "member_2");
      pqxx::work tx(*conn);
      tx.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased[1].id) + ", " +
              std::to_string(leased[1].token) + ")");
      tx.commit();
    });
    CHECK(wait_until([&] { return waits_on_lock(t.db, "member_2"); }, 10s));
    CHECK(t.count("jobs", "kind = 'after'") == 0);
    first.commit();
    second.join();
    CHECK(t.count("jobs", "kind = 'after'") == 1);
    CHECK(t.db.scalar<std::string>("SELECT completed || '/' || (completed + dead) FROM " + t.db.table("batches")) ==
          "2/2");
  }

  TEST_CASE("batches: a producer's open transaction holds no completion back; close_batch() waits for it") {
    Deps t;
    const long batch = t.db.scalar<long>("SELECT " + t.fn("open_batch") + "(on_finish => '{\"kind\": \"after\"}')");
    t.enqueue("member", "NULL", std::to_string(batch));
    const auto leased = t.lease();
    REQUIRE(leased.size() == 1);
    // A producer adds a member and keeps its transaction open.
    auto producer = connect_as(t.db, "producer");
    pqxx::work adding(*producer);
    adding.exec("SELECT " + t.fn("enqueue") + "('member', batch_id => " + std::to_string(batch) + ")");
    // A worker completes the first member meanwhile: at once (it waited for the producer's
    // commit when the producer counted the member on the batch's row).
    std::thread worker([&] {
      auto conn = connect_as(t.db, "worker");
      pqxx::work tx(*conn);
      tx.exec("SELECT " + t.fn("complete_job") + "(" + std::to_string(leased[0].id) + ", " +
              std::to_string(leased[0].token) + ")");
      tx.commit();
    });
    const bool completed = wait_until([&] { return t.count("jobs", "id = " + std::to_string(leased[0].id)) == 0; }, 5s);
    if (!completed) adding.abort();  // let the worker finish, so that the test can end
    worker.join();
    REQUIRE(completed);
    // Closing waits for the producer, and then counts its member.
    std::thread closer([&] {
      auto conn = connect_as(t.db, "closer");
      pqxx::work tx(*conn);
      tx.exec("SELECT " + t.fn("close_batch") + "(" + std::to_string(batch) + ")");
      tx.commit();
    });
    CHECK(wait_until([&] { return waits_on_lock(t.db, "closer"); }, 10s));
    adding.commit();
    closer.join();
    CHECK(t.count("jobs", "kind = 'after'") == 0);  // the producer's member is still to run
    const auto second = t.lease();
    REQUIRE(second.size() == 1);
    t.complete(second[0]);
    CHECK(t.count("jobs", "kind = 'after'") == 1);
    CHECK(t.db.scalar<std::string>("SELECT completed || ' ' || dead FROM " + t.db.table("batches")) == "2 0");
  }

  TEST_CASE("dependencies and batches: what the database refuses, and a snapshot that cannot tell") {
    Deps t;
    const std::string jobs = t.db.table("jobs");
    const long parent = t.enqueue("parent");
    // A unique job may be replaced by enqueue_unique(), run_at and all: it may not wait.
    CHECK(sqlstate_of(*t.db.conn, "INSERT INTO " + jobs + " (kind, unique_key, depends_on) VALUES ('c', 'u1', ARRAY[" +
                                      std::to_string(parent) + "]::bigint[])") == "22023");
    const long batch = t.db.scalar<long>("SELECT " + t.fn("open_batch") + "()");
    CHECK(sqlstate_of(*t.db.conn, "INSERT INTO " + jobs + " (kind, unique_key, batch_id) VALUES ('c', 'u1', " +
                                      std::to_string(batch) + ")") == "22023");
    CHECK(sqlstate_of(*t.db.conn, "SELECT " + t.fn("settle_dependents") + "(ARRAY[1]::bigint[], NULL)") == "22023");
    CHECK(sqlstate_of(*t.db.conn, "SELECT " + t.fn("open_batch") + R"((on_finish => '{"kind": "a\nb"}'))") == "22023");
    // `oncely batches open` sends the description as written: a payload's number keeps its digits.
    const ProcessResult opened = run_process(
        oncely_cli({"batches", "open", "--on-finish", R"({"kind": "c", "payload": {"n": 12345678901234567.89}})"}),
        env_of(t.db));
    REQUIRE(opened.exit_code == 0);
    CHECK(t.db.scalar<std::string>("SELECT on_finish -> 'payload' ->> 'n' FROM " + t.db.table("batches") +
                                   " WHERE id = " + opened.out.substr(0, opened.out.find('\n'))) ==
          "12345678901234567.89");
    // A REPEATABLE READ producer whose snapshot began before its parent was enqueued cannot
    // tell that parent from a completed one: refused, not run early.
    auto old_snapshot = connect_as(t.db, "repeatable_read");
    pqxx::nontransaction rr(*old_snapshot);
    rr.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
    rr.exec("SELECT count(*) FROM " + jobs);
    const long later = t.enqueue("later");
    try {
      rr.exec("INSERT INTO " + jobs + " (kind, depends_on) VALUES ('child', ARRAY[" + std::to_string(later) +
              "]::bigint[])");
      FAIL("a REPEATABLE READ child of a parent its snapshot cannot see was accepted");
    } catch (const pqxx::sql_error& e) {
      CHECK(std::string(e.sqlstate()) == "0A000");
      CHECK(std::string(e.what()).find("READ COMMITTED") != std::string::npos);
    }
    rr.exec("ROLLBACK");
    // One it sees queued is fine.
    rr.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
    rr.exec("INSERT INTO " + jobs + " (kind, depends_on) VALUES ('child', ARRAY[" + std::to_string(later) +
            "]::bigint[])");
    rr.exec("COMMIT");
    CHECK(t.count("jobs", "kind = 'child' AND parents_left = 1") == 1);
  }

  TEST_CASE("batches and dependencies: cancelling a parent cancels its descendants and counts them dead") {
    Deps t;
    const long batch = t.db.scalar<long>("SELECT " + t.fn("open_batch") + "(on_failure => '{\"kind\": \"failed\"}')");
    const long a = t.enqueue("a");
    const long b = t.enqueue("b", "ARRAY[" + std::to_string(a) + "]", std::to_string(batch));
    const long c = t.enqueue("c", "ARRAY[" + std::to_string(b) + "]", std::to_string(batch));
    t.db.exec("SELECT " + t.fn("close_batch") + "(" + std::to_string(batch) + ")");
    const ProcessResult dry =
        run_process(oncely_cli({"jobs", "cancel", "--id", std::to_string(a), "--dry-run"}), env_of(t.db));
    CHECK(dry.exit_code == 0);
    CHECK(dry.out.find("2 waiting descendants") != std::string::npos);
    const ProcessResult cancelled =
        run_process(oncely_cli({"jobs", "cancel", "--id", std::to_string(a)}), env_of(t.db));
    CAPTURE(cancelled.err);
    CHECK(cancelled.exit_code == 0);
    CHECK(t.dead_class(a) == "cancelled");
    CHECK(t.dead_class(b) == "cancelled");
    CHECK(t.dead_class(c) == "cancelled");
    CHECK(t.db.scalar<std::string>("SELECT dead || '/' || (completed + dead) FROM " + t.db.table("batches")) == "2/2");
    CHECK(t.count("jobs", "kind = 'failed'") == 1);
  }
}
