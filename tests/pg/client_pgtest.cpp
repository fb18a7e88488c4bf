#include <doctest/doctest.h>

#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;

TEST_SUITE("client") {
  TEST_CASE("client: enqueue returns ids in order and stores the job as given") {
    oncely::ClientOptions options;
    SUBCASE("through a prepared statement") {}
    SUBCASE("through unnamed statements (a transaction-mode pooler)") { options.prepared_statements = false; }
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema, options);
    const auto first = client.enqueue({.kind = "update_balance", .payload = {{"user_id", 1}, {"cents", 250}}});
    const auto second = client.enqueue({.kind = "update_balance", .idempotency_key = "pay-2"});
    CHECK(second > first);
    CHECK(db.scalar<std::string>("SELECT payload->>'cents' FROM " + db.table("jobs") +
                                 " WHERE id = " + std::to_string(first)) == "250");
    CHECK(db.scalar<std::string>("SELECT idempotency_key FROM " + db.table("jobs") +
                                 " WHERE id = " + std::to_string(second)) == "pay-2");
    // The connection is reopened (and its statements prepared again) after it was lost.
    CHECK(db.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND "
                  "pid <> pg_backend_pid() AND backend_type = 'client backend' AND query LIKE '%INSERT INTO%" +
                  db.schema + "%jobs%'")
              .size() == 1);
    try {
      client.enqueue({.kind = "after_a_lost_connection"});
    } catch (const oncely::DatabaseError& e) {
      CHECK(std::string(e.what()).find("outcome unknown") != std::string::npos);
    }
    CHECK(client.enqueue({.kind = "after_a_lost_connection"}) > second);
  }

  TEST_CASE("client: a transactional enqueue exists if and only if the caller commits") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    pqxx::connection app{db.url};
    {
      pqxx::work tx{app};
      client.enqueue(tx, {.kind = "rolled_back"});
      tx.abort();
    }
    {
      pqxx::work tx{app};
      client.enqueue(tx, {.kind = "committed"});
      tx.commit();
    }
    CHECK(db.scalar<std::string>("SELECT string_agg(kind, ',') FROM " + db.table("jobs")) == "committed");
  }

  TEST_CASE("client: invalid jobs are refused before reaching the database") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    CHECK_THROWS_AS(client.enqueue({.kind = ""}), oncely::ConfigError);
    CHECK_THROWS_AS(client.enqueue({.kind = "k", .priority = 1 << 20}), oncely::ConfigError);
    CHECK_THROWS_AS(client.enqueue({.kind = "k", .max_attempts = 0}), oncely::ConfigError);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  }

}  // TEST_SUITE
