// Handler-side completion: an exec handler on a lease queue completes its job itself, with
// psql, in one transaction with its own write (complete_job() and the token the worker
// passed it). A real `oncely worker` then counts a completion, even when the handler exits
// non-zero afterwards: no retry, no dead letter, no lost lease.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

TEST_SUITE("lease") {
  TEST_CASE("lease: an exec handler that completes its job with psql beside its write, then exits 3: completed once") {
    constexpr int kJobs = 20;
    PgFixture db;
    TempDir dir;
    const std::string log_file = dir.file("worker.log");
    db.exec("CREATE TABLE " + db.table("effects") + " (job_id bigint NOT NULL, attempt int NOT NULL)");
    nlohmann::json config = nlohmann::json::parse(R"({"shutdown_grace": "1s", "queues": {"default": {"mode": "lease",
      "lease": "5s", "concurrency": 4, "poll_interval": "100ms"}}})");
    const std::string script = "psql \"$APP_URL\" -X -q -v ON_ERROR_STOP=1 -c \"BEGIN; INSERT INTO " +
                               db.table("effects") + " VALUES ($ONCELY_JOB_ID, $ONCELY_ATTEMPT); SELECT " +
                               db.table("complete_job") +
                               "($ONCELY_JOB_ID, $ONCELY_LEASE_TOKEN); COMMIT;\" >/dev/null && exit 3";
    config["handlers"]["charge"] = {
        {"type", "exec"}, {"env", {{"APP_URL", db.url}}}, {"command", {"/bin/sh", "-c", script}}};
    const std::string config_file = dir.write("worker.json", config.dump(), 0644);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, idempotency_key) SELECT 'charge', 'order-' || i " +
            "FROM generate_series(1, " + std::to_string(kJobs) + ") AS i");

    std::vector<std::string> argv = {"/bin/sh", "-c", "log=$1; shift; exec \"$@\" >\"$log\" 2>&1", "sh", log_file};
    for (const std::string& arg : oncely_cli({"worker", "--config", config_file})) argv.push_back(arg);
    Process worker(argv, EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    const bool drained = wait_until([&] { return count_of(db, "jobs") == 0; }, 60s);
    // The worker counts what it settled: every job, as completed.
    const bool counted = wait_until(
        [&] { return db.scalar<long>("SELECT coalesce(sum(completed), 0) FROM " + db.table("job_stats")) == kJobs; },
        10s);
    worker.signal(SIGTERM);
    CHECK(worker.wait().exit_code == 0);
    const std::string log = dir.read("worker.log");
    CAPTURE(log);
    CHECK(drained);
    CHECK(counted);
    CHECK(count_of(db, "effects") == kJobs);
    CHECK(db.scalar<long>("SELECT count(DISTINCT job_id) FROM " + db.table("effects")) == kJobs);
    CHECK(db.scalar<long>("SELECT max(attempt) FROM " + db.table("effects")) == 1);
    CHECK(count_of(db, "processed_jobs") == kJobs);
    CHECK(count_of(db, "dead_letters") == 0);
    CHECK(count_of(db, "lease_completions") == 0);  // each read by its worker
    CHECK(db.scalar<long>("SELECT coalesce(sum(retried), 0) FROM " + db.table("job_stats")) == 0);
    CHECK(log.find("lease lost") == std::string::npos);
    CHECK(log.find("lease stale") == std::string::npos);
  }

}  // TEST_SUITE
