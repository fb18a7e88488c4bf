// The operator's view of jobs: list with filters and keyset paging, show, group by error;
// cancel (dry run first, pending/scheduled/retrying, a job a worker's batch holds left
// alone, a live lease cancelled), and cancel racing the worker that claims the same job.
#include <doctest/doctest.h>

#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "oncely/dead_letters.hpp"
#include "oncely/jobs.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

EnvChanges env_of(const PgFixture& db) { return {{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}}; }

std::int64_t insert_job(PgFixture& db, const std::string& values_sql) {
  return db.scalar<std::int64_t>("INSERT INTO " + db.table("jobs") + " (kind, queue, payload, run_at) VALUES (" +
                                 values_sql + ") RETURNING id");
}

// A job that failed once and waits for its retry, as a retry leaves it.
std::int64_t retrying_job(PgFixture& db, const std::string& error) {
  const auto id = insert_job(db, "'mail', 'default', '{}', now() + interval '1 hour'");
  db.exec("UPDATE " + db.table("jobs") + " SET attempts = 1, last_error = '" + error +
          "', errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', '" + error +
          "', 'class', 'retryable')) WHERE id = " + std::to_string(id));
  return id;
}

std::set<std::int64_t> ids_of(const oncely::JobPage& page) {
  std::set<std::int64_t> ids;
  for (const auto& j : page.jobs) ids.insert(j.id);
  return ids;
}

}  // namespace

TEST_SUITE("job_control") {
  TEST_CASE("job_control: list filters by state, queue, kind, error and age, pages by id, shows the exact payload") {
    PgFixture db;
    const oncely::DatabaseUrl url(db.url);
    const auto ready = insert_job(db, "'mail', 'default', '{\"cents\": 12345678901234567.89}', now()");
    const auto scheduled = insert_job(db, "'mail', 'default', '{}', now() + interval '1 hour'");
    const auto retrying = retrying_job(db, "smtp 451 try later");
    const auto other = insert_job(db, "'export', 'bulk', '{}', now()");
    // A lease-mode job whose lease is live, as a lease claim leaves it.
    const auto leased = insert_job(db, "'export', 'bulk', '{}', now()");
    db.exec("UPDATE " + db.table("jobs") +
            " SET lease_token = 77, leased_by = 3, attempts = 1, run_at = now() + "
            "interval '30 seconds' WHERE id = " +
            std::to_string(leased));

    const auto state = [&](oncely::JobState s) {
      oncely::JobFilter f;
      f.state = s;
      return ids_of(oncely::list_jobs(url, db.schema, f));
    };
    CHECK(state(oncely::JobState::ready) == std::set<std::int64_t>{ready, other});
    CHECK(state(oncely::JobState::scheduled) == std::set<std::int64_t>{scheduled});
    CHECK(state(oncely::JobState::retrying) == std::set<std::int64_t>{retrying});
    CHECK(state(oncely::JobState::running) == std::set<std::int64_t>{leased});

    oncely::JobFilter f;
    f.queue = "bulk";
    CHECK(ids_of(oncely::list_jobs(url, db.schema, f)) == std::set<std::int64_t>{other, leased});
    f = {};
    f.kind = "mail";
    f.error_text = "SMTP 451";
    CHECK(ids_of(oncely::list_jobs(url, db.schema, f)) == std::set<std::int64_t>{retrying});
    f = {};
    f.older_than = 1h;
    CHECK(oncely::list_jobs(url, db.schema, f).jobs.empty());

    // Keyset paging: two at a time, every job once, in id order.
    std::vector<std::int64_t> seen;
    std::optional<std::int64_t> after;
    for (int page = 0; page < 10; ++page) {
      const oncely::JobPage p = oncely::list_jobs(url, db.schema, {}, 2, after);
      for (const auto& j : p.jobs) seen.push_back(j.id);
      if (!p.next_after) break;
      after = p.next_after;
    }
    CHECK(seen == std::vector<std::int64_t>{ready, scheduled, retrying, other, leased});

    const auto shown = oncely::show_job(url, db.schema, ready);
    REQUIRE(shown);
    CHECK(shown->payload_text == R"({"cents": 12345678901234567.89})");
    const auto lease = oncely::show_job(url, db.schema, leased);
    REQUIRE(lease);
    CHECK(lease->lease_token == std::optional<std::int64_t>(77));
    CHECK(lease->lease_live);
    const auto history = oncely::show_job(url, db.schema, retrying);
    REQUIRE(history);
    CHECK(nlohmann::json::parse(history->errors_text).at(0).at("error") == "smtp 451 try later");
    CHECK_FALSE(oncely::show_job(url, db.schema, 999999).has_value());

    const ProcessResult cli_show =
        run_process(oncely_cli({"jobs", "show", std::to_string(ready), "--json"}), env_of(db));
    CAPTURE(cli_show.err);
    CHECK(cli_show.out.find(R"("payload": {"cents":12345678901234567.89})") != std::string::npos);
    const ProcessResult cli_list = run_process(oncely_cli({"jobs", "list", "--state", "retrying"}), env_of(db));
    CHECK(cli_list.out.find("smtp 451 try later") != std::string::npos);
    const ProcessResult bad = run_process(oncely_cli({"jobs", "list", "--state", "done"}), env_of(db));
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--state: unknown state 'done'") != std::string::npos);
  }

  TEST_CASE("job_control: group by error counts errors that differ only in numbers together") {
    PgFixture db;
    for (int i = 0; i < 3; ++i) retrying_job(db, "timeout after " + std::to_string(100 + i) + " ms");
    retrying_job(db, "refused");
    oncely::JobFilter f;
    f.state = oncely::JobState::retrying;
    const auto groups = oncely::group_jobs_by_error(oncely::DatabaseUrl(db.url), db.schema, f);
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].error == "timeout after # ms");
    CHECK(groups[0].count == 3);
  }

  TEST_CASE("job_control: cancel, dry run first: pending, scheduled and retrying jobs go to dead_letters, replayable") {
    PgFixture db;
    const auto ready = insert_job(db, "'mail', 'default', '{\"to\": 1}', now()");
    const auto scheduled = insert_job(db, "'mail', 'default', '{}', now() + interval '1 hour'");
    const auto retrying = retrying_job(db, "smtp 451");
    const auto untouched = insert_job(db, "'export', 'default', '{}', now()");

    const ProcessResult refused = run_process(oncely_cli({"jobs", "cancel"}), env_of(db));
    CHECK(refused.exit_code == 2);
    CHECK(refused.err.find("refusing to cancel every job") != std::string::npos);

    const ProcessResult dry = run_process(oncely_cli({"jobs", "cancel", "--kind", "mail", "--dry-run"}), env_of(db));
    CAPTURE(dry.err);
    CHECK(dry.exit_code == 0);
    CHECK(dry.out.find("would cancel 3 jobs") != std::string::npos);
    CHECK(count_of(db, "jobs") == 4);
    CHECK(count_of(db, "dead_letters") == 0);

    const ProcessResult done = run_process(oncely_cli({"jobs", "cancel", "--kind", "mail"}), env_of(db));
    CAPTURE(done.err);
    CHECK(done.exit_code == 0);
    CHECK(done.out.find("cancelled 3 jobs") != std::string::npos);
    CHECK(db.scalar<std::string>("SELECT string_agg(id::text, ',' ORDER BY id) FROM " + db.table("jobs")) ==
          std::to_string(untouched));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") +
                          " WHERE error_class = 'cancelled' AND "
                          "job_id IN (" +
                          std::to_string(ready) + "," + std::to_string(scheduled) + "," + std::to_string(retrying) +
                          ")") == 3);
    // The retrying job's history goes with it; dlq finds it by job id.
    const ProcessResult dl = run_process(oncely_cli({"dlq", "show", "--job-id", std::to_string(retrying)}), env_of(db));
    CHECK(dl.out.find("smtp 451") != std::string::npos);
    // Replayable as any dead letter: the payload comes back exactly.
    oncely::DeadLetterFilter cancelled;
    cancelled.error_class = "cancelled";
    const auto replayed = oncely::replay_dead_letters(oncely::DatabaseUrl(db.url), db.schema, cancelled);
    CHECK(replayed.replayed.size() == 3);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE payload = '{\"to\": 1}'") == 1);
  }

  TEST_CASE("job_control: a cancelled job's dead letter keeps its trace context, and so does its replay") {
    // migrations/0008_trace_context.sql: copied into dead_letters, and from there into a
    // replayed job. The cancel moves a job as the dead-letter move does (kDeadLetterJob).
    PgFixture db;
    const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const auto id = db.scalar<std::int64_t>("INSERT INTO " + db.table("jobs") +
                                            " (kind, trace_context) VALUES ('mail', '" + parent + "') RETURNING id");
    oncely::JobFilter f;
    f.ids = {id};
    const oncely::CancelResult r = oncely::cancel_jobs(oncely::DatabaseUrl(db.url), db.schema, f);
    REQUIRE(r.cancelled.size() == 1);
    CHECK(db.scalar<std::string>("SELECT coalesce(trace_context, '(null)') FROM " + db.table("dead_letters") +
                                 " WHERE job_id = " + std::to_string(id)) == parent);

    oncely::DeadLetterFilter cancelled;
    cancelled.error_class = "cancelled";
    REQUIRE(oncely::replay_dead_letters(oncely::DatabaseUrl(db.url), db.schema, cancelled).replayed.size() == 1);
    CHECK(db.scalar<std::string>("SELECT coalesce(trace_context, '(null)') FROM " + db.table("jobs")) == parent);
  }

  TEST_CASE("job_control: a job a worker's batch holds is left alone (exit 1, counted); a live lease is cancelled") {
    PgFixture db;
    create_balances(db);
    WorkerProcess worker(db, R"({"queues": {"default": {"poll_interval": "100ms"}}})");
    const auto slow =
        insert_job(db, "'slow_increment', 'default', '{\"account\": 1, \"cents\": 1, \"sleep_ms\": 2000}', now()");
    REQUIRE(wait_until(
        [&] {
          return db.scalar<long>("SELECT count(*) FROM " + db.table("attempts_in_flight") + " WHERE " +
                                 std::to_string(slow) + " = ANY (job_ids)") == 1;
        },
        10s));
    const auto leased = insert_job(db, "'export', 'other', '{}', now()");
    db.exec("UPDATE " + db.table("jobs") +
            " SET lease_token = 5, leased_by = 1, attempts = 1, run_at = now() + "
            "interval '1 minute' WHERE id = " +
            std::to_string(leased));

    const ProcessResult dry = run_process(oncely_cli({"jobs", "cancel", "--all", "--dry-run"}), env_of(db));
    CHECK(dry.exit_code == 1);
    CHECK(dry.out.find("would cancel 1 job: " + std::to_string(leased)) != std::string::npos);
    CHECK(dry.out.find("would leave 1 job running") != std::string::npos);

    const ProcessResult r = run_process(oncely_cli({"jobs", "cancel", "--all"}), env_of(db));
    CAPTURE(r.out);
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("1 job running in a worker's batch, left to finish: " + std::to_string(slow)) !=
          std::string::npos);
    CHECK(r.out.find("cancelled 1 job: " + std::to_string(leased)) != std::string::npos);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") +
                          " WHERE job_id = " + std::to_string(leased)) == 1);
    // The running job finishes as if nothing happened.
    CHECK(wait_until([&] { return sum_of_balances(db) == 1; }, 10s));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") +
                          " WHERE job_id = " + std::to_string(slow)) == 0);
  }

  TEST_CASE(
      "job_control: cancel racing the worker that claims the same jobs: each job completes or is cancelled, once") {
    PgFixture db;
    create_balances(db);
    WorkerProcess a(db, R"({"queues": {"default": {"concurrency": 2, "batch_size": 5, "poll_interval": "50ms"}}})");
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 1; }, 10s));
    const oncely::DatabaseUrl url(db.url);
    long cancelled = 0;
    long reported_running = 0;
    for (int round = 0; round < 20; ++round) {
      // 2 ms jobs, each its own account, so that a completion is visible by itself.
      db.exec("INSERT INTO " + db.table("jobs") +
              " (kind, payload) SELECT 'slow_increment', jsonb_build_object('account', " +
              std::to_string(round * 1000) + " + i, 'cents', 1, 'sleep_ms', 2) FROM generate_series(1, 50) AS i");
      // A different moment of the race each round, up to 20 ms (a worker behind a pooler of
      // 3 connections may take that long to claim at all).
      std::this_thread::sleep_for(std::chrono::milliseconds((round % 5) * 5));
      oncely::JobFilter f;
      f.kind = "slow_increment";
      const oncely::CancelResult r = oncely::cancel_jobs(url, db.schema, f);
      cancelled += static_cast<long>(r.cancelled.size());
      reported_running += static_cast<long>(r.running.size());
    }
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 20s));
    const long completed = count_of(db, "balances");
    CAPTURE(cancelled);
    CAPTURE(completed);
    CAPTURE(reported_running);
    CHECK(cancelled > 0);
    CHECK(completed > 0);
    CHECK(cancelled + completed == 1000);
    CHECK(count_of(db, "dead_letters") == cancelled);
    // Never both: no cancelled job's account was incremented.
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") + " d JOIN " + db.table("balances") +
                          " b ON b.account = (d.payload->>'account')::int") == 0);
    CHECK(db.scalar<long>("SELECT coalesce(max(cents), 0) FROM " + db.table("balances")) == 1);
  }

}  // TEST_SUITE
