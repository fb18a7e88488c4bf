// Pausing a queue: every worker stops claiming from it within a second (NOTIFY, or the
// watcher's poll when the notification never comes), a worker started while it is paused
// claims nothing, running jobs finish, enqueue goes on; resume lets them all run. And
// `oncely queue list`, which shows each queue's pause beside its policy.
#include <doctest/doctest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/queues.hpp"
#include "oncely/stats.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

oncely::test::EnvChanges env_of(const PgFixture& db) {
  return {{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
}

long claims_after(PgFixture& db, const std::string& db_time_sql) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs") + " WHERE processed_at > " + db_time_sql);
}

// Enqueues one increment job a 20 ms apart for `span` (producers go on while paused).
void keep_enqueueing(PgFixture& db, std::chrono::milliseconds span) {
  const auto until = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < until) {
    db.exec("SELECT " + db.schema + ".enqueue('increment', jsonb_build_object('account', 1, 'cents', 1))");
    std::this_thread::sleep_for(20ms);  // the producer's pace, not a wait for a condition
  }
}

// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_SUITE("queue_pause") {
  TEST_CASE("queue_pause: two workers stop claiming within 1 s, a new one claims nothing, resume runs everything") {
    PgFixture db;
    create_balances(db);
    // The pools' own poll is long: only the pause watcher can make them notice.
    const std::string config = R"({"queues": {"default": {"concurrency": 2, "poll_interval": "5s"}}})";
    WorkerProcess a(db, config);
    WorkerProcess b(db, config);
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 2; }, 10s));
    enqueue_increments(db, 100);
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 10s));

    const ProcessResult paused =
        run_process(oncely_cli({"queue", "pause", "default", "--reason", "incident 42"}), env_of(db));
    CAPTURE(paused.err);
    REQUIRE(paused.exit_code == 0);
    CHECK(paused.out.find("queue default paused") != std::string::npos);
    const std::string paused_at =
        "(SELECT paused_at FROM " + db.table("queue_pauses") + " WHERE queue = 'default') + interval '1 second'";

    keep_enqueueing(db, 1500ms);  // claims may happen in the first second, none after it
    CHECK(claims_after(db, paused_at) == 0);
    const long waiting = count_of(db, "jobs");
    CHECK(waiting >= 20);

    // A worker started now reads the pause before its pools start.
    WorkerProcess c(db, config);
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 3; }, 10s));
    keep_enqueueing(db, 1000ms);
    CHECK(claims_after(db, paused_at) == 0);
    CHECK(count_of(db, "jobs") > waiting);

    const ProcessResult listed = run_process(oncely_cli({"queue", "list"}), env_of(db));
    CAPTURE(listed.out);
    CHECK(listed.out.find("paused") != std::string::npos);
    CHECK(listed.out.find("incident 42") != std::string::npos);
    CHECK(listed.out.find("jobs,workers") != std::string::npos);

    const oncely::Stats stats = oncely::collect_stats(oncely::DatabaseUrl(db.url), db.schema);
    REQUIRE(stats.queues.size() == 1);
    CHECK(stats.queues[0].paused);
    CHECK(stats.queues[0].pause_reason == std::optional<std::string>("incident 42"));
    oncely::CheckThresholds t;
    t.paused_warning_s = 0.5;
    bool warned = false;
    for (const auto& f : oncely::check(stats, t)) warned |= f.message.find("has been paused for") != std::string::npos;
    CHECK(warned);

    const ProcessResult resumed = run_process(oncely_cli({"queue", "resume", "default"}), env_of(db));
    CHECK(resumed.exit_code == 0);
    // Woken by the resume, not by their 5 s poll.
    CHECK(wait_until([&] { return count_of(db, "jobs") == 0; }, 3s));
  }

  TEST_CASE("queue_pause: without its NOTIFY a pause still holds within a second (the watcher's poll)") {
    PgFixture db;
    create_balances(db);
    WorkerProcess worker(db, R"({"queues": {"default": {"poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 1; }, 10s));

    db.exec("ALTER TABLE " + db.table("queue_pauses") + " DISABLE TRIGGER queue_pauses_notify");
    db.exec("INSERT INTO " + db.table("queue_pauses") + " (queue, paused_by) VALUES ('default', 'test')");
    const std::string paused_at =
        "(SELECT paused_at FROM " + db.table("queue_pauses") + " WHERE queue = 'default') + interval '1 second'";
    keep_enqueueing(db, 1500ms);
    CHECK(claims_after(db, paused_at) == 0);
    CHECK(count_of(db, "jobs") > 0);

    db.exec("DELETE FROM " + db.table("queue_pauses"));
    CHECK(wait_until([&] { return count_of(db, "jobs") == 0; }, 3s));
  }

  TEST_CASE(
      "queue_pause: a running job finishes; pausing twice keeps the first pause; resume of an active queue says so") {
    PgFixture db;
    create_balances(db);
    WorkerProcess worker(db, R"({"queues": {"default": {"poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return count_of(db, "workers") == 1; }, 10s));
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, payload) VALUES ('slow_increment', '{\"account\": 7, \"cents\": 5, \"sleep_ms\": 1500}')");
    REQUIRE(wait_until(
        [&] {
          return count_of(db, "attempts_in_flight") > 0 &&
                 db.scalar<long>("SELECT count(*) FROM " + db.table("attempts_in_flight") + " WHERE job_ids <> '{}'") ==
                     1;
        },
        10s));
    const oncely::DatabaseUrl url(db.url);
    const auto first = oncely::pause_queue(url, db.schema, "default", std::string("deploy"));
    CHECK(first.newly);
    const auto second = oncely::pause_queue(url, db.schema, "default", std::string("other"));
    CHECK_FALSE(second.newly);
    CHECK(second.pause.reason == std::optional<std::string>("deploy"));
    CHECK(second.pause.paused_at == first.pause.paused_at);
    // The job claimed before the pause commits.
    CHECK(wait_until([&] { return sum_of_balances(db) == 5; }, 10s));
    CHECK(oncely::resume_queue(url, db.schema, "default").has_value());
    CHECK_FALSE(oncely::resume_queue(url, db.schema, "default").has_value());
    const ProcessResult r = run_process(oncely_cli({"queue", "resume", "default"}), env_of(db));
    CHECK(r.out.find("was not paused") != std::string::npos);
  }

  TEST_CASE("queue_list: each queue's mode and policy, the defaults marked, a queue known only from its policy row") {
    PgFixture db;
    const auto env = env_of(db);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, queue) VALUES ('k', 'default'), ('k', 'mail')");
    const oncely::DatabaseUrl url(db.url);
    oncely::set_queue_policy(url, db.schema, "mail", {{"mode", "lease"}, {"lease", "30s"}});
    oncely::set_queue_policy(url, db.schema, "reports", {{"max_attempts", "1"}, {"backoff.schedule", "1s,30s"}});
    oncely::pause_queue(url, db.schema, "mail", std::string("smtp down"));

    const std::vector<oncely::QueueInfo> queues = oncely::list_queues(url, db.schema);
    REQUIRE(queues.size() == 3);
    CHECK(queues[0].queue == "default");
    CHECK_FALSE(queues[0].policy_stored);
    CHECK(queues[0].policy.max_attempts == oncely::QueueConfig{}.max_attempts);
    CHECK(queues[1].queue == "mail");
    CHECK(queues[1].policy_stored);
    CHECK(queues[1].policy.mode == oncely::QueueConfig::Mode::lease);
    CHECK(queues[1].policy.lease == std::chrono::seconds(30));
    CHECK(queues[2].queue == "reports");
    CHECK(queues[2].policy_stored);
    CHECK_FALSE(queues[2].has_jobs);

    const ProcessResult text = run_process(oncely_cli({"queue", "list"}), env);
    CAPTURE(text.out);
    CAPTURE(text.err);
    REQUIRE(text.exit_code == 0);
    const std::vector<std::string> lines = lines_of(text.out);
    REQUIRE(lines.size() == 4);
    const std::string& header = lines[0];
    CHECK(header.starts_with("QUEUE"));
    // Every column starts where its header does: the rows are aligned.
    const std::size_t mode_at = header.find("MODE");
    const std::size_t known_at = header.find("KNOWN FROM");
    const std::size_t policy_at = header.find("POLICY");
    const std::size_t reason_at = header.find("REASON");
    REQUIRE(mode_at < known_at);
    REQUIRE(known_at < policy_at);
    REQUIRE(policy_at < reason_at);
    const auto column = [&](const std::string& line, std::size_t at, std::size_t next) {
      const std::string c = line.substr(at, next - at);
      return c.substr(0, c.find_last_not_of(' ') + 1);
    };
    CHECK(lines[1].starts_with("default "));
    CHECK(column(lines[1], mode_at, header.find("SINCE")) == "transaction");
    CHECK(column(lines[1], known_at, policy_at) == "jobs");
    CHECK(column(lines[1], policy_at, reason_at) == "defaults");
    CHECK(lines[2].starts_with("mail "));
    CHECK(column(lines[2], mode_at, header.find("SINCE")) == "lease");
    CHECK(column(lines[2], known_at, policy_at) == "jobs,policy");
    CHECK(column(lines[2], policy_at, reason_at) == "lease 30s, 8 attempts, backoff 5s..10m equal jitter, timeout 5m");
    CHECK(lines[2].substr(reason_at) == "smtp down");
    CHECK(lines[3].starts_with("reports "));
    CHECK(column(lines[3], mode_at, header.find("SINCE")) == "transaction");
    CHECK(column(lines[3], known_at, policy_at) == "policy");
    CHECK(column(lines[3], policy_at, reason_at) == "1 attempt, backoff schedule 1s,30s, timeout 5m");

    // --json: each queue's policy as `queue show --json` prints it, and policy_stored.
    const ProcessResult json = run_process(oncely_cli({"queue", "list", "--json"}), env);
    CAPTURE(json.out);
    REQUIRE(json.exit_code == 0);
    const nlohmann::json listed = nlohmann::json::parse(json.out);
    REQUIRE(listed.size() == 3);
    for (const auto& q : listed) {
      const std::string name = q["queue"].get<std::string>();
      CAPTURE(name);
      for (const char* key :
           {"queue", "paused", "pause", "has_jobs", "configured", "served", "policy", "policy_stored"}) {
        CHECK(q.contains(key));
      }
      const ProcessResult shown = run_process(oncely_cli({"queue", "show", name, "--json"}), env);
      REQUIRE(shown.exit_code == 0);
      CHECK(q["policy"] == nlohmann::json::parse(shown.out));
      CHECK(q["policy_stored"] == (name != "default"));
    }
    CHECK(listed[0]["policy"]["mode"] == "transaction");
    CHECK(listed[0]["policy"]["stored"] == false);
    CHECK(listed[1]["policy"]["lease"] == "30s");
    CHECK(listed[2]["policy"]["backoff"]["schedule"] == nlohmann::json::array({"1s", "30s"}));
    CHECK(listed[2]["has_jobs"] == false);
  }

}  // TEST_SUITE
