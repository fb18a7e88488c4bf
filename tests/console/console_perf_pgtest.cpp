// The console's pages with many rows: the dead letters' error pattern is stored (migration
// 13) and the grouping, the pattern filter and its pages read it instead of folding every
// row's error at query time; the stored pattern is what the old per-row expression gave,
// for rows the migration found and for every path that writes a dead letter; the overview's
// numbers are one shared snapshot per refresh interval.

#include <doctest/doctest.h>

#include <httplib.h>

#include <regex>
#include <thread>

#include <pqxx/pqxx>

#include "api/embedded_migrations.hpp"
#include "oncely/admin.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "oncely/jobs.hpp"
#include "store/dead_letters.hpp"
#include "store/store.hpp"
#include "support/captured_log.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"
#include "support/schema.hpp"
#include "web/console.hpp"

using namespace oncely;
using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// The pattern as every grouping computed it per row before version 13, written out here on
// purpose: the stored column must give the same groups the old code did.
constexpr const char* kOldPattern = "coalesce(regexp_replace(last_error, '[0-9]+', '#', 'g'), '(none)')";

/// Errors that exercise the folding: several runs of digits, none, no error at all, digits
/// that are not ASCII (not folded), markup, and one far longer than a btree entry may be.
std::vector<std::optional<std::string>> sample_errors() {
  std::string long_error = "upstream said: ";
  for (int i = 0; long_error.size() < 12000; ++i)
    long_error += std::to_string(i * 7919 % 10007) + "x" + char('a' + i % 26);
  return {"connection to 10.0.0.7:5432 refused after 3 tries",
          "timeout",
          std::nullopt,
          "",
          "amount \xd9\xa3\xd9\xa4 (Arabic-Indic digits) and 42",
          "<img src=x onerror=alert(1)> 007",
          "HTTP 503 from crm #12345",
          long_error};
}

/// Mismatches between the stored pattern and the old expression over `table` (0: none).
long mismatches(PgFixture& db) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") + " WHERE error_pattern IS DISTINCT FROM " +
                         kOldPattern);
}

/// Receives the NOTICEs of a connection: auto_explain's plans, at level notice.
struct Notices : pqxx::errorhandler {
  explicit Notices(pqxx::connection_base& c) : pqxx::errorhandler(c) {}
  bool operator()(const char message[]) noexcept override {
    text += message;
    return true;
  }
  std::string text;
};

/// The plans of every statement run on `conn` from now on come back as notices (verbose:
/// with each node's output expressions, so a per-row regexp_replace shows).
void explain_everything(pqxx::connection& conn) {
  pqxx::nontransaction tx{conn};
  tx.exec("LOAD 'auto_explain'");
  tx.exec("SET auto_explain.log_min_duration = 0");
  tx.exec("SET auto_explain.log_level = notice");
  tx.exec("SET auto_explain.log_verbose = on");
  tx.exec("SET client_min_messages = notice");
}

/// Brings in the plan of the last statement run with parameters: its unnamed portal, and
/// with it auto_explain's notice, goes only when the next statement comes.
void flush_plans(pqxx::transaction_base& tx) { tx.exec("SELECT 1"); }

/// 20,000 dead letters in 4 frequent patterns and one rare one (20 rows).
void fill(PgFixture& db) {
  db.exec("INSERT INTO " + db.table("dead_letters") +
          " (job_id, queue, kind, payload, priority, attempts, last_error, error_class, created_at, failed_at)"
          " SELECT i, (ARRAY['payments', 'mail'])[1 + i % 2], 'charge', '{}', 0, 3,"
          "        CASE WHEN i % 1000 = 0 THEN 'rare failure ' || i"
          "             ELSE (ARRAY['connection to db:' || i % 50 || ' refused', 'HTTP 503 from crm #' || i,"
          "                         'timeout after ' || i || ' ms', 'card ' || i || ' declined'])[1 + i % 4] END,"
          "        'exhausted', now() - interval '1 day', now() - i * interval '1 second'"
          "   FROM generate_series(1, 20000) AS i");
  db.exec("ANALYZE " + db.table("dead_letters"));
}

}  // namespace

TEST_SUITE("console_perf") {
  TEST_CASE_FIXTURE(PgFixture, "console perf: the grouping by error reads the stored pattern, no regexp per row") {
    fill(*this);
    pqxx::connection explained{url};
    Notices notices(explained);
    explain_everything(explained);
    pqxx::work tx{explained};
    const DeadLetterGroups groups = group_dead_letters(tx, schema, DeadLetterFilter{}, DeadLetterGrouping::error, 50);
    REQUIRE(groups.groups.size() == 5);
    CHECK(groups.groups.back().key == "rare failure #");
    CHECK(groups.groups.back().count == 20);
    flush_plans(tx);
    CAPTURE(notices.text);
    REQUIRE(notices.text.find("Group Key") != std::string::npos);  // the plan came back
    CHECK(notices.text.find("error_pattern") != std::string::npos);
    CHECK(notices.text.find("regexp_replace") == std::string::npos);
  }

  TEST_CASE_FIXTURE(PgFixture, "console perf: a pattern's group, count and pages are read through the pattern index") {
    fill(*this);
    pqxx::connection explained{url};
    Notices notices(explained);
    explain_everything(explained);
    pqxx::work tx{explained};
    DeadLetterFilter rare;
    rare.error_pattern = "rare failure #";
    const DeadLetterGroups groups = group_dead_letters(tx, schema, rare, DeadLetterGrouping::error, 50);
    REQUIRE(groups.groups.size() == 1);
    CHECK(groups.groups[0].count == 20);
    DeadLetterPageOptions options;
    options.limit = 15;
    const DeadLetterPage first = page_dead_letters(tx, schema, rare, options);
    REQUIRE(first.dead_letters.size() == 15);
    REQUIRE(first.next);
    options.after = first.next;
    const DeadLetterPage second = page_dead_letters(tx, schema, rare, options);
    CHECK(second.dead_letters.size() == 5);
    CHECK_FALSE(second.next);
    flush_plans(tx);
    CAPTURE(notices.text);
    // Every one of those statements found its rows by the index, none by folding each row.
    const std::regex plan_start("Query Text: \\s*(WITH selected|SELECT d\\.id)");
    const long plans = std::distance(std::sregex_iterator(notices.text.begin(), notices.text.end(), plan_start),
                                     std::sregex_iterator());
    const std::regex by_index("dead_letters_error_pattern_idx");
    const long by_index_count =
        std::distance(std::sregex_iterator(notices.text.begin(), notices.text.end(), by_index), std::sregex_iterator());
    CHECK(plans >= 3);
    CHECK(by_index_count >= 3);
    CHECK(notices.text.find("regexp_replace") == std::string::npos);
  }

  TEST_CASE("console perf: migration 13 stores for existing dead letters the pattern the old grouping computed") {
    // A schema at version 12 with dead letters in it, then `oncely migrate`.
    PgFixture db;  // for its connection; the schema under test is made here
    const std::string schema = unique_schema_name();
    {
      pqxx::work tx{*db.conn};
      tx.exec("CREATE SCHEMA " + tx.quote_name(schema));
      const detail::Store store(schema);
      store.schema_migrations.create(tx);
      for (const auto& m : detail::embedded_migrations()) {
        if (m.version > 12) break;
        tx.exec(detail::render_sql(m.sql, schema));
        store.schema_migrations.record(tx, m.version, m.name);
      }
      for (const auto& e : sample_errors()) {
        tx.exec_params("INSERT INTO " + tx.quote_name(schema) +
                           ".dead_letters (job_id, queue, kind, payload, priority, attempts, last_error, error_class,"
                           " created_at) VALUES (1, 'q', 'k', '{}', 0, 1, $1, 'exhausted', now())",
                       e);
      }
      tx.commit();
    }
    const MigrationResult migrated = migrate(DatabaseUrl(db.url), schema);
    CHECK(migrated.applied.size() == static_cast<std::size_t>(latest_schema_version() - 12));
    const std::string table = db.conn->quote_name(schema) + ".dead_letters";
    CHECK(db.scalar<long>("SELECT count(*) FROM " + table) == static_cast<long>(sample_errors().size()));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + table + " WHERE error_pattern IS DISTINCT FROM " + kOldPattern) ==
          0);
    CHECK(db.scalar<std::string>("SELECT error_pattern FROM " + table + " WHERE last_error LIKE 'connection%'") ==
          "connection to #.#.#.#:# refused after # tries");
    CHECK(db.scalar<std::string>("SELECT error_pattern FROM " + table + " WHERE last_error IS NULL") == "(none)");
    db.exec("DROP SCHEMA " + db.conn->quote_name(schema) + " CASCADE");
  }

  TEST_CASE_FIXTURE(PgFixture,
                    "console perf: every path that writes a dead letter stores the old expression's pattern") {
    // The dead-letter move (a handler's permanent failure), with errors of every shape.
    EventRecorder events;
    std::vector<std::string> errors;
    for (const auto& e : sample_errors()) {
      if (e && !e->empty()) errors.push_back(*e);
    }
    for (std::size_t i = 0; i < errors.size(); ++i) {
      exec("INSERT INTO " + table("jobs") + " (kind, payload) VALUES ('fail', jsonb_build_object('i', " +
           std::to_string(i) + "))");
    }
    const auto run_until_dead = [&](std::size_t n) {
      Runtime runtime(config_for(*this, QueueConfig{}), quiet_options(events));
      runtime.handle(
          "fail", [&](JobContext& job) { throw PermanentError(errors.at(job.payload().at("i").get<std::size_t>())); });
      RunningRuntime running(runtime);
      REQUIRE(events.wait_for(JobEvent::Outcome::dead_lettered, n, 30s));
    };
    run_until_dead(errors.size());
    REQUIRE(scalar<long>("SELECT count(*) FROM " + table("dead_letters")) == static_cast<long>(errors.size()));
    // The very long error was moved too: the index holds its hash, not the text.
    CHECK(scalar<long>("SELECT count(*) FROM " + table("dead_letters") + " WHERE octet_length(last_error) > 10000") >=
          1);

    // A replay (the dead letter is marked, its pattern stays) whose job fails again: a second move.
    DeadLetterFilter connection;
    connection.error_pattern = "connection to #.#.#.#:# refused after # tries";
    const ReplayResult replayed = replay_dead_letters(DatabaseUrl(url), schema, connection);
    REQUIRE(replayed.replayed.size() == 1);
    run_until_dead(errors.size() + 1);

    // A cancel moves a job too ("cancelled by <who>").
    exec("INSERT INTO " + table("jobs") +
         " (kind, queue, run_at) VALUES ('other', 'later', now() + interval '1 hour')");
    JobFilter later;
    later.queue = "later";
    REQUIRE(cancel_jobs(DatabaseUrl(url), schema, later).cancelled.size() == 1);

    // A row inserted by hand (as bench/console.sh and a DBA's script do).
    exec("INSERT INTO " + table("dead_letters") +
         " (job_id, queue, kind, payload, priority, attempts, last_error, "
         "error_class, created_at) VALUES (1, 'q', 'k', '{}', 0, 1, 'by hand 12', 'exhausted', now())");

    CHECK(scalar<long>("SELECT count(*) FROM " + table("dead_letters")) == static_cast<long>(errors.size()) + 3);
    CHECK(mismatches(*this) == 0);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("dead_letters") +
                       " WHERE error_pattern = 'connection to #.#.#.#:# refused after # tries'") == 2);
    // The CLI's grouping (the same library call as the console's) agrees.
    DeadLetterFilter everything;
    everything.include_replayed = true;
    const DeadLetterGroups groups =
        group_dead_letters(DatabaseUrl(url), schema, everything, DeadLetterGrouping::error, 0);
    long in_groups = 0;
    for (const auto& g : groups.groups) {
      CHECK(scalar<long>("SELECT count(*) FROM " + table("dead_letters") + " WHERE " + kOldPattern + " = " +
                         conn->quote(g.key)) == g.count);
      in_groups += g.count;
    }
    CHECK(in_groups == static_cast<long>(errors.size()) + 3);
  }

  TEST_CASE_FIXTURE(PgFixture, "console perf: the jobs' grouping folds errors as dead_letters.error_pattern does") {
    // The column's generation expression and the one the jobs' grouping uses deparse alike.
    exec("CREATE TABLE " + table("probe") + " (last_error text, p text GENERATED ALWAYS AS (" +
         detail::error_pattern_sql("last_error") + ") STORED)");
    const std::string deparsed =
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
        "    ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = $1::regclass AND a.attname = $2";
    pqxx::work tx{*conn};
    const auto column = tx.exec_params1(deparsed, table("dead_letters"), "error_pattern")[0].as<std::string>();
    const auto probe = tx.exec_params1(deparsed, table("probe"), "p")[0].as<std::string>();
    CHECK(column == probe);
    CHECK(column.find("regexp_replace(last_error") != std::string::npos);
  }

  TEST_CASE_FIXTURE(PgFixture, "console perf: the overview's numbers are one shared count per refresh interval") {
    exec("INSERT INTO " + table("jobs") + " (kind, queue) SELECT 'k', 'snap' FROM generate_series(1, 3)");
    web::ConsoleOptions o;
    o.url = DatabaseUrl(url);
    o.schema = schema;
    o.host = "127.0.0.1";
    o.port = 0;
    o.refresh_seconds = 3;
    CapturedLog log{spdlog::level::info};
    o.log = log.logger;
    web::Console console(std::move(o));
    std::thread serving([&] { console.run(); });
    httplib::Client client("127.0.0.1", console.port());
    REQUIRE(wait_until([&] { return static_cast<bool>(client.Get("/assets/app.css")); }, 5s));
    const std::regex depth_of_snap(R"re(>snap</a></td><td class="n">(\d+)</td>)re");
    const auto depth = [&]() -> long {
      const auto r = client.Get("/");
      REQUIRE(r);
      REQUIRE(r->status == 200);
      REQUIRE(r->body.find("data-live=\"counted\"") != std::string::npos);
      std::smatch m;
      REQUIRE(std::regex_search(r->body, m, depth_of_snap));
      return std::stol(m[1]);
    };
    CHECK(depth() == 3);
    const auto counted = std::chrono::steady_clock::now();
    exec("INSERT INTO " + table("jobs") + " (kind, queue) SELECT 'k', 'snap' FROM generate_series(1, 4)");
    // Within the interval a request gets the snapshot (no count of its own)...
    REQUIRE(std::chrono::steady_clock::now() - counted < 2500ms);
    CHECK(depth() == 3);
    CHECK(depth() == 3);
    // ...and after it the next request counts anew.
    CHECK(wait_until([&] { return depth() == 7; }, 10s));
    console.stop();
    serving.join();
  }

}  // TEST_SUITE
