// Periodic jobs against a real server and real worker processes: one job per slot however
// many workers carry the entry, a worker killed in the middle of a slot's statement, catch_up
// after downtime, `oncely cron list`, and a bad entry stopping the worker.
#include <doctest/doctest.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// The workers serve "default"; the cron jobs go to "cron_out", which nobody claims, so
// every row the scheduler inserted stays to be counted.
std::string cron_config(const std::string& schedule, const std::string& catch_up) {
  return nlohmann::json{{"queues", {{"default", {{"concurrency", 1}}}}},
                        {"cron",
                         {{"tick",
                           {{"schedule", schedule},
                            {"kind", "tick"},
                            {"queue", "cron_out"},
                            {"catch_up", catch_up},
                            {"payload", {{"from", "cron"}}}}}}}}
      .dump();
}

long cron_jobs(PgFixture& db) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE queue = 'cron_out'");
}

struct SlotCheck {
  long jobs = 0;
  long distinct_keys = 0;
  long distinct_slots = 0;
  long keys_matching_slots = 0;  // key = cron:tick:<run_at as ISO 8601 UTC>
  long span_ms = 0;              // newest slot - oldest slot
};

SlotCheck check_slots(PgFixture& db) {
  const auto r = db.exec(
      "SELECT count(*), count(DISTINCT idempotency_key), count(DISTINCT run_at), "
      "       count(*) FILTER (WHERE idempotency_key = 'cron:tick:' || "
      "         to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || "
      "         CASE WHEN date_trunc('second', run_at) = run_at THEN '' "
      "              ELSE to_char(run_at AT TIME ZONE 'UTC', '.MS') END || 'Z'), "
      "       coalesce(extract(epoch FROM max(run_at) - min(run_at)) * 1000, 0)::bigint "
      "  FROM " +
      db.table("jobs") + " WHERE queue = 'cron_out'");
  return {r[0][0].as<long>(), r[0][1].as<long>(), r[0][2].as<long>(), r[0][3].as<long>(), r[0][4].as<long>()};
}

void stop(WorkerProcess& worker) {
  worker.process->signal(SIGTERM);
  CHECK(worker.process->wait().exit_code == 0);
}

}  // namespace

TEST_CASE("cron: three workers carrying the same entry enqueue exactly one job per slot over 100+ slots") {
  PgFixture db;
  const std::string config = cron_config("@every 200ms", "all");
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<WorkerProcess>(db, config));
  REQUIRE(wait_until([&] { return cron_jobs(db) >= 110; }, 90s));
  for (auto& w : workers) stop(*w);
  const SlotCheck c = check_slots(db);
  CAPTURE(c.jobs);
  CHECK(c.jobs >= 110);
  CHECK(c.distinct_keys == c.jobs);  // one row per slot, not copies
  CHECK(c.distinct_slots == c.jobs);
  CHECK(c.keys_matching_slots == c.jobs);
  CHECK(c.span_ms == (c.jobs - 1) * 200);  // no slot missing in between
  CHECK(db.scalar<std::string>("SELECT payload::text FROM " + db.table("jobs") + " WHERE queue = 'cron_out' LIMIT 1") ==
        R"({"from": "cron"})");
}

TEST_CASE("cron: a worker killed while its slot's statement is in flight leaves no gap and no duplicate") {
  // The test holds the entry's row lock, so the worker's advancing statement waits after
  // the slots were computed; the worker is SIGKILLed there. Its server session then either
  // ends before the statement (terminated: nothing is written) or finishes it on its own
  // (autocommit: the row moves and the jobs are in). A second worker takes over either way.
  for (const bool terminate_session : {true, false}) {
    CAPTURE(terminate_session);
    PgFixture db;
    const std::string config = cron_config("@every 200ms", "all");
    auto first = std::make_unique<WorkerProcess>(db, config);
    REQUIRE(wait_until([&] { return cron_jobs(db) >= 5; }, 30s));

    pqxx::connection locker(db.url);
    pqxx::work hold(locker);
    hold.exec("SELECT 1 FROM " + db.table("cron_slots") + " WHERE name = 'tick' FOR UPDATE");
    long waiting_pid = 0;
    REQUIRE(wait_until(
        [&] {
          const auto r = db.exec(
              "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%cron_slots%' "
              "AND query LIKE '%" +
              db.schema + "%' AND pid <> pg_backend_pid()");
          if (r.empty()) return false;
          waiting_pid = r[0][0].as<long>();
          return true;
        },
        10s));
    first->process->signal(SIGKILL);
    CHECK(first->process->wait().exit_code == 128 + SIGKILL);
    if (terminate_session) db.exec("SELECT pg_terminate_backend(" + std::to_string(waiting_pid) + ")");
    hold.commit();
    // The killed worker's session is gone (or done) before the next one starts.
    REQUIRE(wait_until(
        [&] {
          return db.scalar<long>("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(waiting_pid)) ==
                 0;
        },
        10s));
    const long before = cron_jobs(db);
    auto second = std::make_unique<WorkerProcess>(db, config);
    REQUIRE(wait_until([&] { return cron_jobs(db) >= before + 10; }, 30s));
    stop(*second);
    const SlotCheck c = check_slots(db);
    CAPTURE(c.jobs);
    CHECK(c.distinct_keys == c.jobs);
    CHECK(c.distinct_slots == c.jobs);
    CHECK(c.span_ms == (c.jobs - 1) * 200);  // the slots of the killed statement are there, once
  }
}

TEST_CASE("cron: catch_up none, latest and all after downtime") {
  // An hourly entry at a minute five minutes before the database's now, whose row says the
  // last worker stopped three hours ago: three slots were missed, the newest five minutes
  // late (not on time).
  struct Case {
    const char* catch_up;
    long expected;
  };
  for (const Case& c : {Case{"none", 0}, Case{"latest", 1}, Case{"all", 3}}) {
    CAPTURE(c.catch_up);
    PgFixture db;
    const int minute = db.scalar<int>("SELECT ((extract(minute FROM now() AT TIME ZONE 'UTC')::int + 55) % 60)");
    const std::string schedule = std::to_string(minute) + " * * * *";
    const auto newest = db.scalar<std::string>("SELECT (date_trunc('minute', now()) - interval '5 minutes')::text");
    db.exec("INSERT INTO " + db.table("cron_slots") + " (name, fingerprint, covered_until) VALUES ('tick', '" +
            schedule + " UTC', date_trunc('minute', now()) - interval '3 hours' + interval '30 seconds')");
    const auto started = db.scalar<std::string>("SELECT now()::text");
    WorkerProcess worker(db, cron_config(schedule, c.catch_up));
    // The first turn moves the row, whatever it enqueues.
    REQUIRE(wait_until(
        [&] {
          return db.scalar<bool>("SELECT covered_until > '" + started + "' FROM " + db.table("cron_slots") +
                                 " WHERE name = 'tick'");
        },
        20s));
    stop(worker);
    CHECK(cron_jobs(db) == c.expected);
    if (c.expected > 0) {
      CHECK(db.scalar<bool>("SELECT max(run_at) = '" + newest + "' FROM " + db.table("jobs") +
                            " WHERE queue = 'cron_out'"));
    }
  }
}

TEST_CASE("cron: a new entry starts at now; oncely cron list shows its last and next slots") {
  PgFixture db;
  TempDir dir;
  const std::string config = dir.write("worker.json", cron_config("@every 1s", "latest"), 0644);
  const auto started = db.scalar<std::string>("SELECT now()::text");
  WorkerProcess worker(db, cron_config("@every 1s", "latest"));
  REQUIRE(wait_until([&] { return cron_jobs(db) >= 2; }, 20s));
  stop(worker);
  // Nothing from before the entry was first seen.
  CHECK(db.scalar<bool>("SELECT min(run_at) > '" + started + "' FROM " + db.table("jobs")));
  const std::string last = db.scalar<std::string>("SELECT max(idempotency_key) FROM " + db.table("jobs"));
  const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
  for (const bool with_config : {true, false}) {
    CAPTURE(with_config);
    std::vector<std::string> args{"cron", "list", "--json"};
    if (with_config) args.insert(args.end(), {"--config", config});
    const ProcessResult r = run_process(oncely_cli(args), env);
    REQUIRE(r.exit_code == 0);
    const auto listed = nlohmann::json::parse(r.out);
    REQUIRE(listed.size() == 1);
    CHECK(listed[0]["name"] == "tick");
    CHECK(listed[0]["schedule"] == "@every 1s");
    CHECK(listed[0]["time_zone"] == "UTC");
    CHECK(listed[0]["in_config"] == with_config);
    CHECK("cron:tick:" + listed[0]["last_enqueued_slot"].get<std::string>() == last);
    CHECK(listed[0]["next_slot"].get<std::string>() > listed[0]["last_enqueued_slot"].get<std::string>());
  }
  const ProcessResult table = run_process(oncely_cli({"cron", "list", "--config", config}), env);
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("NAME") == 0);
  CHECK(table.out.find("tick") != std::string::npos);
  CHECK(table.out.find(last.substr(std::string("cron:tick:").size())) != std::string::npos);
}

TEST_CASE("cron: a bad schedule or time zone stops the worker with one line naming the path") {
  PgFixture db;
  TempDir dir;
  const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
  const std::string bad_schedule = dir.write("a.json", cron_config("0 25 * * *", "latest"), 0644);
  ProcessResult r = run_process(oncely_cli({"worker", "--config", bad_schedule}), env);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "oncely: error: /cron/tick/schedule: hour field \"25\": 25 is out of range 0-23\n");
  auto doc = nlohmann::json::parse(cron_config("@daily", "latest"));
  doc["cron"]["tick"]["time_zone"] = "Mars/Olympus";
  const std::string bad_zone = dir.write("b.json", doc.dump(), 0644);
  r = run_process(oncely_cli({"worker", "--config", bad_zone}), env);
  CHECK(r.exit_code == 2);
  CHECK(r.err ==
        "oncely: error: /cron/tick/time_zone: unknown time zone \"Mars/Olympus\" (not in the system's tz database)\n");
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("cron_slots")) == 0);
}
