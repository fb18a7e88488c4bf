// A producer's INSERT cannot forge a job's state (schema version 6): an
// id it chose with OVERRIDING SYSTEM VALUE made the next legitimate enqueue fail on
// jobs_pkey, and attempts, errors, last_error, created_at and an infinite run_at were
// taken as given.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <pqxx/pqxx>

#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;

namespace {

/// The SQLSTATE and first message line of `sql` run in its own transaction, or "ok".
std::string outcome_of(pqxx::connection& conn, const std::string& sql) {
  try {
    pqxx::work tx(conn);
    tx.exec(sql);
    tx.commit();
  } catch (const pqxx::sql_error& e) {
    const std::string what = e.what();
    return e.sqlstate() + " " + what.substr(0, what.find('\n'));
  }
  return "ok";
}

std::string insert_into(const PgFixture& db, const std::string& rest) {
  return "INSERT INTO " + db.table("jobs") + " " + rest;
}

oncely::NewJob job(const std::string& kind) {
  oncely::NewJob j;
  j.kind = kind;
  return j;
}

}  // namespace

TEST_CASE("forged state: an id beyond the sequence is refused, so the next enqueue does not collide with it") {
  PgFixture db;
  oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
  const std::int64_t first = client.enqueue(job("legit"));
  const std::string next = std::to_string(first + 1);
  CHECK(outcome_of(*db.conn, insert_into(db, "(id, kind) OVERRIDING SYSTEM VALUE VALUES (" + next + ", 'forged')")) ==
        "23514 ERROR:  job id " + next +
            " (kind 'forged') was not handed out by the jobs sequence: ids are set by oncely only");
  CHECK(client.enqueue(job("legit")) == first + 1);  // was: duplicate key value violates "jobs_pkey"
  // An id the sequence handed out already may be given (dlq replay takes nextval() first).
  CHECK(outcome_of(*db.conn,
                   insert_into(db, "(id, kind) OVERRIDING SYSTEM VALUE SELECT nextval(pg_get_serial_sequence('" +
                                       db.table("jobs") + "', 'id')), 'replayed'")) == "ok");
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE kind = 'forged'") == 0);
}

TEST_CASE("forged state: attempts, errors, last_error and created_at belong to oncely, in any INSERT and COPY") {
  PgFixture db;
  const std::string history = "23514 ERROR:  job ";
  for (const std::string& values : {std::string("(kind, attempts) VALUES ('k', 3)"),
                                    std::string(R"((kind, errors) VALUES ('k', '[{"error": "fake"}]'))"),
                                    std::string("(kind, last_error) VALUES ('k', 'fake')")}) {
    CAPTURE(values);
    const std::string outcome = outcome_of(*db.conn, insert_into(db, values));
    CHECK(outcome.starts_with(history));
    CHECK(outcome.ends_with("(kind 'k') has attempts already: attempts, errors and last_error are set by oncely only"));
  }
  CHECK(outcome_of(*db.conn, insert_into(db, "(kind, created_at) VALUES ('k', now() - interval '1 year')"))
            .ends_with("(kind 'k') was not created now: created_at is set by oncely only"));
  // One forged row among many fails the whole statement, COPY too.
  CHECK(outcome_of(*db.conn, insert_into(db, "(kind, attempts) VALUES ('a', 0), ('b', 0), ('c', 7)"))
            .starts_with(history));
  {
    pqxx::work tx(*db.conn);
    pqxx::stream_to copy(tx, db.schema + ".jobs", std::vector<std::string>{"kind", "attempts"});
    copy << std::make_tuple(std::string("a"), 0) << std::make_tuple(std::string("b"), 2);
    CHECK_THROWS_WITH_AS(copy.complete(), doctest::Contains("has attempts already"), pqxx::check_violation);
  }
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
  // What a producer may say is still taken.
  CHECK(outcome_of(*db.conn, insert_into(db,
                                         "(queue, kind, payload, idempotency_key, priority, run_at, max_attempts) "
                                         "VALUES ('q', 'k', '{\"a\": 1}', 'key', -5, now() + interval '1 day', 3)")) ==
        "ok");
}

TEST_CASE("forged state: a new job has no lease: lease_token and leased_by belong to oncely") {
  PgFixture db;
  for (const std::string& values :
       {std::string("(kind, lease_token) VALUES ('k', 1)"), std::string("(kind, leased_by) VALUES ('k', 1)")}) {
    CAPTURE(values);
    CHECK(outcome_of(*db.conn, insert_into(db, values))
              .ends_with("(kind 'k') has a lease already: lease_token and leased_by are set by oncely only"));
  }
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0);
}

TEST_CASE("forged state: run_at is a time of the years 1970 to 9999, never infinity") {
  PgFixture db;
  const std::string refused =
      "23514 ERROR:  new row for relation \"jobs\" violates check constraint \"jobs_run_at_in_range\"";
  for (const char* run_at : {"infinity", "-infinity", "10000-01-01 00:00:00+00", "1969-12-31 23:59:59+00"}) {
    CAPTURE(run_at);
    CHECK(outcome_of(*db.conn, insert_into(db, "(kind, run_at) VALUES ('k', '" + std::string(run_at) + "')")) ==
          refused);
  }
  for (const char* run_at : {"1970-01-01 00:00:00+00", "9999-12-31 23:59:59+00"}) {
    CAPTURE(run_at);
    CHECK(outcome_of(*db.conn, insert_into(db, "(kind, run_at) VALUES ('k', '" + std::string(run_at) + "')")) == "ok");
  }
  // The client names the field, as for a run_at that is no timestamp (the CLI: exit 2).
  oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
  oncely::NewJob never = job("k");
  never.run_at = "infinity";
  CHECK_THROWS_WITH_AS(client.enqueue(never), "run_at: must be a time between 1970-01-01 and 9999-12-31 (UTC)",
                       oncely::ConfigError);
}

TEST_CASE("forged state: a producer role with INSERT only enqueues as before and cannot forge either") {
  PgFixture db;
  const std::string role = db.schema + "_producer";
  db.exec("CREATE ROLE \"" + role + "\" NOLOGIN");
  db.exec("GRANT USAGE ON SCHEMA \"" + db.schema + "\" TO \"" + role + "\"");
  db.exec("GRANT INSERT ON " + db.table("jobs") + " TO \"" + role + "\"");  // no privilege on the sequence
  const auto as_producer = [&](const std::string& sql) {
    return outcome_of(*db.conn, "SET LOCAL ROLE \"" + role + "\"; " + sql);
  };
  CHECK(as_producer(insert_into(db, "(kind) VALUES ('k')")) == "ok");
  CHECK(as_producer(insert_into(db, "(id, kind) OVERRIDING SYSTEM VALUE VALUES (99, 'k')"))
            .find("was not handed out by the jobs sequence") != std::string::npos);
  CHECK(as_producer(insert_into(db, "(kind, attempts) VALUES ('k', 1)")).find("has attempts already") !=
        std::string::npos);
  db.exec("DROP OWNED BY \"" + role + "\"");
  db.exec("DROP ROLE \"" + role + "\"");
}
