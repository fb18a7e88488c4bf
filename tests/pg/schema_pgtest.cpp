#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include <pqxx/pqxx>

#include "support/pg_fixture.hpp"
#include "support/schema.hpp"

using namespace oncely::test;

TEST_SUITE("schema") {
  TEST_CASE("schema: a bare INSERT of a kind is a complete job with the documented defaults") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('k')");
    const pqxx::row job = db.exec(
        "SELECT queue, kind, payload::text, idempotency_key IS NULL, priority, run_at <= now(), attempts, "
        "max_attempts IS NULL, last_error IS NULL, errors::text, created_at <= now(), id > 0 FROM " +
        db.table("jobs"))[0];
    CHECK(job[0].as<std::string>() == "default");
    CHECK(job[1].as<std::string>() == "k");
    CHECK(job[2].as<std::string>() == "{}");
    CHECK(job[3].as<bool>());
    CHECK(job[4].as<int>() == 0);
    CHECK(job[5].as<bool>());
    CHECK(job[6].as<int>() == 0);
    CHECK(job[7].as<bool>());
    CHECK(job[8].as<bool>());
    CHECK(job[9].as<std::string>() == "[]");
    CHECK(job[10].as<bool>());
    CHECK(job[11].as<bool>());
  }

  TEST_CASE("schema: enqueue() returns the new job's id") {
    PgFixture db;
    const auto id = db.scalar<long>("SELECT " + db.table("enqueue") + "('charge', '{\"cents\": 100}')");
    CHECK(db.scalar<std::string>("SELECT kind || ' ' || payload::text || ' ' || queue FROM " + db.table("jobs") +
                                 " WHERE id = " + std::to_string(id)) == "charge {\"cents\": 100} default");
    SUBCASE("every argument, with a bare integer priority") {
      const auto id2 = db.scalar<long>("SELECT " + db.table("enqueue") +
                                       "('charge', '{}', 'critical', 'pay-1', now() + interval '1 hour', 5, 3)");
      CHECK(id2 > id);
      CHECK(db.scalar<std::string>(
                "SELECT concat_ws(' ', queue, idempotency_key, priority, max_attempts, run_at > now() + interval '59 "
                "minutes') FROM " +
                db.table("jobs") + " WHERE id = " + std::to_string(id2)) == "critical pay-1 5 3 t");
    }
  }

  TEST_CASE("schema: CHECK constraints reject impossible jobs") {
    PgFixture db;
    for (const char* values :
         {"(kind) VALUES ('')", "(kind, queue) VALUES ('k', '')", "(kind, attempts) VALUES ('k', -1)",
          "(kind, max_attempts) VALUES ('k', 0)", "(kind, idempotency_key) VALUES ('k', '')", "(queue) VALUES ('q')",
          "(kind, errors) VALUES ('k', '{}')"}) {
      CAPTURE(values);
      CHECK_THROWS_AS(db.exec("INSERT INTO " + db.table("jobs") + " " + values), pqxx::sql_error);
    }
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  }

  namespace {

  // Collects notifications on one channel.
  struct Collector : pqxx::notification_receiver {
    using pqxx::notification_receiver::notification_receiver;
    std::vector<std::string> payloads;
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
  };

  // Waits (bounded) until a notification with payload `sentinel` arrives. Notifications are
  // delivered in commit order, so everything sent before the sentinel has arrived by then.
  bool wait_for_sentinel(pqxx::connection& listener, Collector& collector, const std::string& sentinel) {
    return wait_until(
        [&] {
          listener.await_notification(0, 50000);
          return std::find(collector.payloads.begin(), collector.payloads.end(), sentinel) != collector.payloads.end();
        },
        std::chrono::seconds(5));
  }

  }  // namespace

  TEST_CASE("schema: one INSERT statement of 1,000 rows sends exactly one notification") {
    PgFixture db;
    pqxx::connection listener{db.url};
    Collector collector(listener, oncely::detail::jobs_channel(db.schema));
    const std::string channel = pqxx::work(*db.conn).quote(oncely::detail::jobs_channel(db.schema));
    const auto notify_sentinel = [&] { db.exec("SELECT pg_notify(" + channel + ", 'sentinel')"); };

    db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'k' FROM generate_series(1, 1000)");
    notify_sentinel();
    REQUIRE(wait_for_sentinel(listener, collector, "sentinel"));
    CHECK(collector.payloads == std::vector<std::string>{"default", "sentinel"});

    SUBCASE("the payload names every queue that received a ready job") {
      collector.payloads.clear();
      db.exec("INSERT INTO " + db.table("jobs") +
              " (kind, queue) SELECT 'k', q FROM unnest(ARRAY['b', 'a', 'b', 'c']) AS q");
      notify_sentinel();
      REQUIRE(wait_for_sentinel(listener, collector, "sentinel"));
      REQUIRE(collector.payloads.size() == 2);
      // In no particular order (the trigger's DISTINCT may hash): seen as "a,c,b" under load.
      std::vector<std::string> queues;
      std::stringstream list(collector.payloads[0]);
      for (std::string q; std::getline(list, q, ',');) queues.push_back(q);
      std::sort(queues.begin(), queues.end());
      CHECK(queues == std::vector<std::string>{"a", "b", "c"});
      CHECK(collector.payloads[1] == "sentinel");
    }
    SUBCASE("jobs scheduled for later wake nobody") {
      collector.payloads.clear();
      db.exec("INSERT INTO " + db.table("jobs") + " (kind, run_at) VALUES ('k', now() + interval '1 hour')");
      notify_sentinel();
      REQUIRE(wait_for_sentinel(listener, collector, "sentinel"));
      CHECK(collector.payloads == std::vector<std::string>{"sentinel"});
    }
  }

}  // TEST_SUITE
