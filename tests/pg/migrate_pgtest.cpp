#include <doctest/doctest.h>

#include <set>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;

namespace {

// Every relation, function and type in a namespace, by name and kind.
std::set<std::string> objects_in(pqxx::connection& conn, const std::string& ns) {
  pqxx::work tx{conn};
  std::set<std::string> out;
  const auto rows = tx.exec_params(R"sql(
      SELECT 'rel:' || c.relkind::text || ':' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
      UNION ALL SELECT 'proc:' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
      UNION ALL SELECT 'type:' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1
      UNION ALL SELECT 'trigger:' || tg.tgname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT tg.tgisinternal)sql",
                                   ns);
  for (const auto& row : rows) out.insert(row[0].as<std::string>());
  return out;
}

void drop_schema(pqxx::connection& conn, const std::string& schema) {
  pqxx::nontransaction tx{conn};
  tx.exec("SET client_min_messages = warning");
  tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
}

}  // namespace

TEST_SUITE("migrate") {
  TEST_CASE("migrate: a second run applies nothing and changes nothing") {
    PgFixture db;
    const auto before = objects_in(*db.conn, db.schema);
    const oncely::MigrationResult again = oncely::migrate(oncely::DatabaseUrl(db.url), db.schema);
    CHECK(again.applied.empty());
    CHECK(again.version == oncely::latest_schema_version());
    CHECK(objects_in(*db.conn, db.schema) == before);
    CHECK(db.scalar<int>("SELECT count(*) FROM " + db.table("schema_migrations")) == oncely::latest_schema_version());
  }

  TEST_CASE("migrate: every object is in the configured schema and none in public") {
    pqxx::connection conn{test_database_url()};
    const std::string schema = unique_schema_name();
    const auto public_before = objects_in(conn, "public");
    const oncely::MigrationResult first = oncely::migrate(oncely::DatabaseUrl(test_database_url()), schema);
    CHECK(first.applied.size() == static_cast<std::size_t>(oncely::latest_schema_version()));
    const auto ours = objects_in(conn, schema);
    drop_schema(conn, schema);
    CHECK(objects_in(conn, "public") == public_before);
    for (const char* expected :
         {"rel:r:jobs", "rel:r:processed_jobs", "rel:r:dead_letters", "rel:r:schema_migrations", "rel:i:jobs_claim_idx",
          "rel:S:jobs_id_seq", "proc:enqueue", "proc:on_jobs_inserted", "trigger:jobs_inserted"}) {
      CAPTURE(expected);
      CHECK(ours.contains(expected));
    }
  }

  TEST_CASE("migrate: four processes at once leave exactly one set of objects") {
    pqxx::connection conn{test_database_url()};
    const std::string schema = unique_schema_name();
    std::vector<std::unique_ptr<Process>> runs;
    for (int i = 0; i < 4; ++i) {
      runs.push_back(std::make_unique<Process>(oncely_cli({"migrate", "--schema", schema}),
                                               EnvChanges{{"DATABASE_URL", test_database_url()}}));
    }
    int applied_by = 0;
    for (auto& run : runs) {
      const ProcessResult r = run->wait();
      CAPTURE(r.err);
      CHECK(r.exit_code == 0);
      CHECK(r.err.empty());
      if (r.out.find("migrated to version") != std::string::npos) ++applied_by;
    }
    CHECK(applied_by == 1);  // the others waited for the lock, then found nothing to do
    pqxx::work tx{conn};
    CHECK(tx.exec_params1("SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'jobs'", schema)[0]
              .as<int>() == 1);
    CHECK(tx.exec("SELECT count(*), count(DISTINCT version) FROM " + tx.quote_name(schema) + ".schema_migrations")[0][0]
              .as<int>() == oncely::latest_schema_version());
    tx.commit();
    drop_schema(conn, schema);
  }

  TEST_CASE("migrate: a database whose schema is newer than the binary is refused") {
    PgFixture db;
    db.exec("INSERT INTO " + db.table("schema_migrations") + " (version, name) VALUES (9999, 'from_the_future')");
    CHECK_THROWS_WITH_AS(oncely::migrate(oncely::DatabaseUrl(db.url), db.schema),
                         doctest::Contains("newer than this oncely binary"), oncely::DatabaseError);
    const ProcessResult r =
        run_process(oncely_cli({"migrate", "--schema", db.schema}), EnvChanges{{"DATABASE_URL", db.url}});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("version 9999, newer than this oncely binary") != std::string::npos);
  }

}  // TEST_SUITE
