// The SQL worker protocol (migration 18) called as a worker in another language calls it:
// plain SQL on its own connection, its own writes in the same transaction as complete_job().
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <sstream>

#include "oncely/config.hpp"
#include "oncely/runtime.hpp"
#include "store/store.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;

namespace {

struct LeasedJob {
  long id;
  long token;
  int attempt;
};

struct Protocol {
  PgFixture db;
  std::string fn(const std::string& name) const { return db.table(name); }

  /// A lease queue `q` (a 30 s lease) with max_attempts and a fixed backoff of `backoff`.
  void lease_queue(const std::string& queue, int max_attempts = 3, const std::string& backoff = "2 seconds") {
    db.exec("INSERT INTO " + db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout) VALUES (" +
            db.conn->quote(queue) + ", 'lease', '30 seconds', " + std::to_string(max_attempts) + ", " +
            db.conn->quote(backoff) + ", '1 hour', 'none', '5 minutes')");
  }

  long enqueue(const std::string& queue, const std::string& kind, const std::optional<std::string>& key = {}) {
    return db.scalar<long>("INSERT INTO " + db.table("jobs") + " (queue, kind, idempotency_key) VALUES (" +
                           db.conn->quote(queue) + ", " + db.conn->quote(kind) + ", " +
                           (key ? db.conn->quote(*key) : std::string("NULL")) + ") RETURNING id");
  }

  std::vector<LeasedJob> lease(const std::string& queue, int max_jobs = 10) {
    std::vector<LeasedJob> jobs;
    for (const auto& row : db.exec("SELECT id, lease_token, attempt FROM " + fn("lease_jobs") + "(" +
                                   db.conn->quote(queue) + ", " + std::to_string(max_jobs) + ") ORDER BY id")) {
      jobs.push_back({row[0].as<long>(), row[1].as<long>(), row[2].as<int>()});
    }
    return jobs;
  }

  /// The caller's own write and complete_job() in one transaction on `conn`: the SQLSTATE
  /// it failed with, "" when it committed.
  std::string complete_with_effect(pqxx::connection& conn, const LeasedJob& job, const std::string& effect) {
    try {
      pqxx::work tx(conn);
      tx.exec("INSERT INTO " + db.table("effects") + " VALUES (" + tx.quote(effect) + ")");
      tx.exec("SELECT " + fn("complete_job") + "(" + std::to_string(job.id) + ", " + std::to_string(job.token) + ")");
      tx.commit();
      return "";
    } catch (const pqxx::sql_error& e) {
      return e.sqlstate();
    }
  }

  /// Starts a Runtime on `config` until it has registered, stops it; returns its log.
  std::string start_and_stop(const oncely::Config& config) {
    std::ostringstream lines;
    auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines));
    {
      oncely::Runtime runtime(config, oncely::RuntimeOptions{.logger = log, .on_event = {}, .handle_signals = false});
      runtime.handle("noop", [](oncely::JobContext&) {});
      RunningRuntime running(runtime);
      REQUIRE(wait_until([&] { return count("workers") == 1; }, std::chrono::seconds(10)));
    }
    return lines.str();
  }

  long count(const std::string& table, const std::string& where = "true") {
    return db.scalar<long>("SELECT count(*) FROM " + db.table(table) + " WHERE " + where);
  }
};

}  // namespace

TEST_SUITE("protocol") {
  TEST_CASE("protocol: a queue without a policy row has the C++ runtime's defaults") {
    Protocol p;
    const oncely::QueueConfig defaults;
    const auto row = p.db.exec(
        "SELECT mode, (extract(epoch FROM lease) * 1000)::bigint, max_attempts, (extract(epoch FROM backoff_base) * "
        "1000)::bigint, "
        "(extract(epoch FROM backoff_cap) * 1000)::bigint, backoff_jitter, backoff_schedule IS NULL, "
        "(extract(epoch FROM job_timeout) * 1000)::bigint FROM " +
        p.fn("queue_policy") + "('nobody set me')")[0];
    CHECK(row[0].as<std::string>() == "transaction");
    CHECK(defaults.mode == oncely::QueueConfig::Mode::transaction);
    CHECK(row[1].as<long>() == defaults.lease.count());
    CHECK(row[2].as<int>() == defaults.max_attempts);
    CHECK(row[3].as<long>() == defaults.backoff.base.count());
    CHECK(row[4].as<long>() == defaults.backoff.cap.count());
    CHECK(row[5].as<std::string>() == "equal");
    CHECK(defaults.backoff.jitter == oncely::BackoffConfig::Jitter::equal);
    CHECK(row[6].as<bool>());
    CHECK(row[7].as<long>() == defaults.job_timeout.count());
  }

  TEST_CASE(
      "protocol: a worker writes its queues' policies at start; a stored row that differs is logged, naming "
      "the keys, and replaced") {
    Protocol p;
    p.db.exec("INSERT INTO " + p.db.table("queue_policies") +
              " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout) VALUES "
              "('mail', 'transaction', '30 s', 2, '5 s', '10 min', 'equal', '5 min')");
    oncely::Config config;
    config.database_url = p.db.url;
    config.schema = p.db.schema;
    config.queues.clear();
    oncely::QueueConfig mail;
    mail.mode = oncely::QueueConfig::Mode::lease;
    mail.lease = std::chrono::seconds(20);
    mail.backoff.schedule = {std::chrono::seconds(1), std::chrono::seconds(30)};
    mail.limits = oncely::QueueLimits{.concurrency = 3,
                                      .key = "/to",
                                      .per_key_concurrency = std::nullopt,
                                      .rate = std::nullopt,
                                      .per_key_rate = std::nullopt};
    config.queues["mail"] = mail;
    config.queues["reports"] = oncely::QueueConfig{};
    const std::string lines = p.start_and_stop(config);
    const auto row = p.db.exec("SELECT mode, lease::text, max_attempts, backoff_schedule::text FROM " +
                               p.db.table("queue_policies") + " WHERE queue = 'mail'")[0];
    CHECK(row[0].as<std::string>() == "lease");
    CHECK(row[1].as<std::string>() == "00:00:20");
    CHECK(row[2].as<int>() == 8);
    CHECK(row[3].as<std::string>() == R"({00:00:01,00:00:30})");
    CHECK(p.count("queue_policies", "queue = 'reports' AND mode = 'transaction'") == 1);
    CHECK(p.count("queue_limits",
                  "queue = 'mail' AND concurrency = 3 AND key = '/to' AND per_key_concurrency IS NULL") == 1);
    CHECK(p.count("queue_limits", "queue = 'reports'") == 0);
    CAPTURE(lines);
    CHECK(lines.find("queue mail: the stored policy differs in mode, lease, max_attempts, backoff.schedule, limits: "
                     "this worker's configuration replaces it") != std::string::npos);
    CHECK(lines.find("queue reports") == std::string::npos);  // it had no row: nothing to say
  }

  TEST_CASE("protocol: a worker whose role may not write policies starts anyway, saying so") {
    Protocol p;
    // A role granted the tables by hand before schema 18, without queue_policies.
    const std::string role = p.db.schema + "_old_worker";
    const std::string schema = "\"" + p.db.schema + "\"";
    p.db.exec("CREATE ROLE \"" + role + "\" LOGIN");
    p.db.exec("GRANT USAGE ON SCHEMA " + schema + " TO \"" + role + "\"");
    p.db.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO \"" + role + "\"");
    p.db.exec("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA " + schema + " TO \"" + role + "\"");
    p.db.exec("REVOKE ALL ON " + p.db.table("queue_policies") + " FROM \"" + role + "\"");
    oncely::Config config;
    config.database_url = p.db.url + (p.db.url.find('?') == std::string::npos ? "?" : "&") + "user=" + role;
    config.schema = p.db.schema;
    const std::string lines = p.start_and_stop(config);
    CAPTURE(lines);
    CHECK(lines.find("cannot write the queues' policies") != std::string::npos);
    CHECK(p.count("queue_policies") == 0);
    p.db.exec("DROP OWNED BY \"" + role + "\"");
    p.db.exec("DROP ROLE \"" + role + "\"");
  }

  TEST_CASE("protocol: oncely queue set changes a policy's keys, checked as the file is; queue show reads it") {
    Protocol p;
    const EnvChanges env{{"DATABASE_URL", p.db.url}, {"ONCELY_SCHEMA", p.db.schema}};
    const auto show = [&] {
      const ProcessResult r = run_process(oncely_cli({"queue", "show", "mail", "--json"}), env);
      REQUIRE(r.exit_code == 0);
      return nlohmann::json::parse(r.out);
    };
    CHECK(show()["stored"] == false);
    CHECK(show()["mode"] == "transaction");
    ProcessResult r =
        run_process(oncely_cli({"queue", "set", "mail", "mode=lease", "lease=20s", "backoff.schedule=1s,30s"}), env);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    nlohmann::json policy = show();
    CHECK(policy["stored"] == true);
    CHECK(policy["mode"] == "lease");
    CHECK(policy["lease"] == "20s");
    CHECK(policy["backoff"]["schedule"] == nlohmann::json::array({"1s", "30s"}));
    CHECK(policy["max_attempts"] == 8);  // kept
    // SQL workers see it.
    CHECK(p.db.scalar<std::string>("SELECT (" + p.fn("queue_policy") + "('mail')).lease::text") == "00:00:20");
    // Bad input: one line naming the key, exit 2, nothing changed.
    for (const auto& [assignment, line] : std::vector<std::pair<std::string, std::string>>{
             {"lease=1s", "oncely: error: lease: must be between 3s and 1h (got 1s)\n"},
             {"max_attempts=0", "oncely: error: max_attempts: must be between 1 and 1000 (got 0)\n"},
             {"speed=9",
              "oncely: error: speed: unknown key: one of mode, lease, max_attempts, job_timeout, backoff.base, "
              "backoff.cap, backoff.jitter, backoff.schedule, limits.concurrency, limits.key, "
              "limits.per_key_concurrency, limits.rate, limits.per_key_rate\n"},
             {"oops", "oncely: error: oops: expected KEY=VALUE\n"}}) {
      CAPTURE(assignment);
      r = run_process(oncely_cli({"queue", "set", "mail", assignment}), env);
      CHECK(r.exit_code == 2);
      CHECK(r.err == line);
    }
    CHECK(show() == policy);
  }

  TEST_CASE("protocol: the policy table refuses a row the configuration file would refuse") {
    Protocol p;
    const std::string insert = "INSERT INTO " + p.db.table("queue_policies") +
                               " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, "
                               "backoff_schedule, job_timeout) VALUES ";
    const auto row = [&](const std::string& values) { return sqlstate_of(*p.db.conn, insert + "(" + values + ")"); };
    CHECK(row("'q', 'lease', '30 s', 8, '5 s', '10 min', 'equal', NULL, '5 min'").empty());
    CHECK(row("'', 'lease', '30 s', 8, '5 s', '10 min', 'equal', NULL, '5 min'") == "23514");
    CHECK(row("'a', 'fast', '30 s', 8, '5 s', '10 min', 'equal', NULL, '5 min'") == "23514");
    CHECK(row("'b', 'lease', '1 s', 8, '5 s', '10 min', 'equal', NULL, '5 min'") == "23514");
    CHECK(row("'c', 'lease', '30 s', 0, '5 s', '10 min', 'equal', NULL, '5 min'") == "23514");
    CHECK(row("'d', 'lease', '30 s', 8, '-5 s', '10 min', 'equal', NULL, '5 min'") == "23514");
    CHECK(row("'e', 'lease', '30 s', 8, '5 s', '10 min', 'some', NULL, '5 min'") == "23514");
    CHECK(row("'f', 'lease', '30 s', 8, '5 s', '10 min', 'equal', ARRAY['1 s', NULL]::interval[], '5 min'") == "23514");
    CHECK(row("'g', 'lease', '30 s', 8, '5 s', '10 min', 'equal', '{}'::interval[], '5 min'") == "23514");
    CHECK(row("'h', 'transaction', '30 s', 8, '5 s', '10 min', 'equal', NULL, '2 days'") == "23514");
    CHECK(row("'i', 'lease', '30 s', 8, '5 s', '10 min', 'equal', NULL, '2 days'").empty());
    CHECK(row("'j', 'lease', '30 s', 8, '5 s', '10 min', 'equal', NULL, NULL") == "23502");
  }

  TEST_CASE("protocol: bad arguments get their SQLSTATE and change nothing") {
    Protocol p;
    p.lease_queue("q");
    const long id = p.enqueue("q", "k");
    pqxx::connection& c = *p.db.conn;
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "(NULL, 5)") == "22004");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', NULL)") == "22004");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', 0)") == "22023");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', -3)") == "22023");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', 1001)") == "22023");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', 5, '1 second')") == "22023");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('q', 5, '2 hours')") == "22023");
    // No policy row: the defaults, a transaction-mode queue.
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("lease_jobs") + "('unknown queue', 5)") == "OC103");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("complete_job") + "(NULL, 1)") == "22004");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("complete_job") + "(" + std::to_string(id) + ", 12345)") == "OC101");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("fail_job") + "(" + std::to_string(id) + ", 12345, 'x')") == "OC101");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("renew_leases") + "(NULL)") == "22004");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("renew_leases") + "(ARRAY[1]::bigint[], '1 second')") == "22023");
    const LeasedJob job = p.lease("q").at(0);
    const std::string held = std::to_string(job.id) + ", " + std::to_string(job.token);
    CHECK(sqlstate_of(c, "SELECT " + p.fn("fail_job") + "(" + held + ", 'x', NULL)") == "22004");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("fail_job") + "(" + held + ", 'x', true, '-1 second')") == "22023");
    CHECK(sqlstate_of(c, "SELECT " + p.fn("fail_job") + "(" + held + ", 'x', true, NULL, '[1]')") == "22023");
    // The job is as the lease left it.
    CHECK(p.db.scalar<long>("SELECT lease_token FROM " + p.db.table("jobs") + " WHERE id = " + std::to_string(id)) ==
          job.token);
    CHECK(p.db.scalar<int>("SELECT attempts FROM " + p.db.table("jobs") + " WHERE id = " + std::to_string(id)) == 1);
  }

  TEST_CASE(
      "protocol: the caller's write and complete_job commit together; a second completion raises OC101 and "
      "its write rolls back") {
    Protocol p;
    p.lease_queue("q");
    p.db.exec("CREATE TABLE " + p.db.table("effects") + " (what text)");
    p.enqueue("q", "charge", "order-1");
    const std::vector<LeasedJob> jobs = p.lease("q");
    REQUIRE(jobs.size() == 1);
    CHECK(jobs[0].attempt == 1);
    pqxx::connection worker{p.db.url};
    CHECK(p.complete_with_effect(worker, jobs[0], "charged once") == "");
    CHECK(p.complete_with_effect(worker, jobs[0], "charged twice") == "OC101");
    CHECK(p.count("effects") == 1);
    CHECK(p.count("jobs") == 0);
    CHECK(p.count("processed_jobs", "idempotency_key = 'order-1'") == 1);
    // The copy enqueued after the key was processed is deleted at the next lease, not run.
    p.enqueue("q", "charge", "order-1");
    CHECK(p.lease("q").empty());
    CHECK(p.count("jobs") == 0);
    CHECK(p.db.scalar<long>("SELECT sum(completed) FROM " + p.db.table("job_stats")) == 1);
    CHECK(p.db.scalar<long>("SELECT sum(deduplicated) FROM " + p.db.table("job_stats")) == 1);
  }

  TEST_CASE("protocol: a frozen worker's completion after its lease was taken raises OC101; the new holder's stands") {
    Protocol p;
    p.lease_queue("q");
    p.db.exec("CREATE TABLE " + p.db.table("effects") + " (what text)");
    p.enqueue("q", "charge", "order-7");
    const LeasedJob frozen = p.lease("q").at(0);
    // Its lease runs out (the database's clock decides: run_at is the expiry).
    p.db.exec("UPDATE " + p.db.table("jobs") + " SET run_at = now() - interval '1 second'");
    const LeasedJob taker = p.lease("q").at(0);
    CHECK(taker.id == frozen.id);
    CHECK(taker.token != frozen.token);
    CHECK(taker.attempt == 2);
    CHECK(p.db.scalar<std::string>("SELECT errors -> 0 ->> 'class' FROM " + p.db.table("jobs")) == "lease_expired");
    pqxx::connection a{p.db.url};
    pqxx::connection b{p.db.url};
    CHECK(p.complete_with_effect(a, frozen, "frozen worker") == "OC101");
    CHECK(p.complete_with_effect(b, taker, "taker") == "");
    CHECK(p.db.scalar<std::string>("SELECT string_agg(what, ',') FROM " + p.db.table("effects")) == "taker");
  }

  TEST_CASE("protocol: complete_jobs (version 20) completes the pairs still held, skips a lost one, counts them") {
    Protocol p;
    p.lease_queue("q");
    for (int i = 0; i < 4; ++i) p.enqueue("q", "ping", "ping-" + std::to_string(i));
    p.enqueue("q", "ping");  // no key: its id is its marker
    const std::vector<LeasedJob> held = p.lease("q");
    REQUIRE(held.size() == 5);
    std::string ids;
    std::string tokens;
    for (const LeasedJob& job : held) {
      ids += (ids.empty() ? "" : ",") + std::to_string(job.id);
      // The first job's lease is not the caller's any more (taken over by another worker).
      tokens += (tokens.empty() ? "" : ",") + std::to_string(&job == &held[0] ? job.token + 1000 : job.token);
    }
    const std::string call = p.fn("complete_jobs") + "('{" + ids + "}'::bigint[], '{" + tokens + "}'::bigint[])";
    CHECK(p.db.scalar<long>("SELECT count(*) FROM " + call) == 4);
    CHECK(p.count("jobs") == 1);
    CHECK(p.db.scalar<long>("SELECT id FROM " + p.db.table("jobs")) == held[0].id);
    CHECK(p.count("processed_jobs") == 4);
    CHECK(p.db.scalar<long>("SELECT sum(completed) FROM " + p.db.table("job_stats")) == 4);
    // Again: nothing is held any more, so nothing is completed twice or counted again.
    CHECK(p.db.scalar<long>("SELECT count(*) FROM " + call) == 0);
    CHECK(p.db.scalar<long>("SELECT sum(completed) FROM " + p.db.table("job_stats")) == 4);
    pqxx::connection c{p.db.url};
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("complete_jobs") + "(NULL, '{1}')") == "22004");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("complete_jobs") + "('{1,2}', '{1}')") == "22023");
    CHECK(sqlstate_of(c, "SELECT * FROM " + p.fn("complete_jobs") +
                             "(array_fill(1::bigint, ARRAY[10001]), array_fill(1::bigint, ARRAY[10001]))") == "22023");
    CHECK(p.db.scalar<long>("SELECT count(*) FROM " + p.fn("complete_jobs") + "('{}', '{}')") == 0);

    // A C++ worker's exec or http job (leased_by set) leaves its token for that worker to
    // count, as complete_job() does, and is not counted as a protocol worker's outcome.
    p.enqueue("q", "exec-job", "exec-1");
    const LeasedJob cpp = p.lease("q").at(0);
    p.db.exec("UPDATE " + p.db.table("jobs") + " SET leased_by = 42 WHERE id = " + std::to_string(cpp.id));
    CHECK(p.db.scalar<long>("SELECT count(*) FROM " + p.fn("complete_jobs") + "(ARRAY[" + std::to_string(cpp.id) +
                            "]::bigint[], ARRAY[" + std::to_string(cpp.token) + "]::bigint[])") == 1);
    CHECK(p.db.scalar<long>("SELECT lease_token FROM " + p.db.table("lease_completions") +
                            " WHERE job_id = " + std::to_string(cpp.id)) == cpp.token);
    CHECK(p.db.scalar<long>("SELECT sum(completed) FROM " + p.db.table("job_stats")) == 4);
  }

  TEST_CASE("protocol: a key processed meanwhile raises OC102 and the write rolls back") {
    Protocol p;
    p.lease_queue("q");
    p.db.exec("CREATE TABLE " + p.db.table("effects") + " (what text)");
    p.enqueue("q", "charge", "order-9");
    const LeasedJob job = p.lease("q").at(0);
    p.db.exec("INSERT INTO " + p.db.table("processed_jobs") + " (kind, idempotency_key, job_id, queue) VALUES " +
              "('charge', 'order-9', 0, 'q')");
    pqxx::connection worker{p.db.url};
    CHECK(p.complete_with_effect(worker, job, "second charge") == "OC102");
    CHECK(p.count("effects") == 0);
    CHECK(p.db.scalar<int>("SELECT " + p.fn("release_jobs") + "(ARRAY[" + std::to_string(job.token) + "]::bigint[])") ==
          1);
    CHECK(p.lease("q").empty());  // deleted as a duplicate
    CHECK(p.count("jobs") == 0);
  }

  TEST_CASE(
      "protocol: a settlement with two attempts of one job (an expired lease, and the lease that took it again) "
      "knows the live one by its token") {
    Protocol p;
    p.lease_queue("q");
    const long id = p.enqueue("q", "charge", "order-21");
    const std::vector<LeasedJob> first = p.lease("q");
    REQUIRE(first.size() == 1);
    p.db.exec("UPDATE " + p.db.table("jobs") +
              " SET run_at = now() - interval '1 second' WHERE id = " + std::to_string(id));
    const std::vector<LeasedJob> again = p.lease("q");
    REQUIRE(again.size() == 1);
    const oncely::detail::Store store(p.db.schema);
    const std::vector<oncely::detail::HeldLease> both{{id, first[0].token}, {id, again[0].token}};
    const std::vector<std::chrono::milliseconds> leases{std::chrono::seconds(30), std::chrono::seconds(30)};
    {  // the renewal: the live lease renewed, the stale one lost (not returned)
      pqxx::work tx(*p.db.conn);
      const oncely::detail::RenewedLeases renewed = store.leases.renew(tx, both, leases);
      CHECK(renewed.renewed == std::vector<std::int64_t>{again[0].token});
      CHECK(renewed.skipped.empty());
      tx.commit();
    }
    {  // its row locked by another transaction: the live lease skipped, still held, not waited for
      pqxx::connection other{p.db.url};
      pqxx::work lock(other);
      lock.exec("SELECT FROM " + p.db.table("jobs") + " WHERE id = " + std::to_string(id) + " FOR UPDATE");
      pqxx::work tx(*p.db.conn);
      tx.exec("SET LOCAL lock_timeout = '5s'");  // a renewal that waited would fail here, not hang
      const oncely::detail::RenewedLeases renewed = store.leases.renew(tx, both, leases);
      CHECK(renewed.renewed.empty());
      CHECK(renewed.skipped == std::vector<std::int64_t>{again[0].token});
      tx.commit();
    }
    pqxx::work tx(*p.db.conn);
    CHECK(store.leases.lock_held(tx, both) == std::vector<std::int64_t>{again[0].token});
    store.leases.unguard(tx);
    CHECK(store.leases.complete(tx, both) == std::vector<std::int64_t>{again[0].token});
    tx.commit();
    CHECK(p.count("jobs") == 0);
  }

  TEST_CASE(
      "protocol: one fenced completion (complete_leases, version 19) for the C++ settlement's batch and "
      "complete_job()") {
    Protocol p;
    p.lease_queue("q");
    const long keyed = p.enqueue("q", "charge", "order-11");
    const long keyless = p.enqueue("q", "charge");
    const long taken_meanwhile = p.enqueue("q", "charge", "order-12");
    const long processed_meanwhile = p.enqueue("q", "charge", "order-13");
    const long by_protocol = p.enqueue("q", "charge");
    const std::vector<LeasedJob> jobs = p.lease("q");
    REQUIRE(jobs.size() == 5);
    const auto token_of = [&](long id) {
      for (const LeasedJob& j : jobs) {
        if (j.id == id) return j.token;
      }
      FAIL("not leased: " << id);
      return 0L;
    };
    // One lease expired and another worker took it; another copy's completion took a key.
    p.db.exec("UPDATE " + p.db.table("jobs") +
              " SET lease_token = lease_token + 1000000 WHERE id = " + std::to_string(taken_meanwhile));
    p.db.exec("INSERT INTO " + p.db.table("processed_jobs") + " (kind, idempotency_key, job_id, queue) VALUES " +
              "('charge', 'order-13', 0, 'q')");
    // The C++ settlement: a batch, in one statement; a pair no longer ours is not completed.
    const oncely::detail::Store store(p.db.schema);
    {
      pqxx::work tx(*p.db.conn);
      std::vector<std::int64_t> done =
          store.leases.complete(tx, {{keyed, token_of(keyed)},
                                     {keyless, token_of(keyless)},
                                     {taken_meanwhile, token_of(taken_meanwhile)},
                                     {processed_meanwhile, token_of(processed_meanwhile)}});
      std::sort(done.begin(), done.end());
      std::vector<std::int64_t> expected{token_of(keyed), token_of(keyless), token_of(processed_meanwhile)};
      std::sort(expected.begin(), expected.end());
      CHECK(done == expected);  // the tokens completed
      tx.commit();
    }
    CHECK(p.count("jobs") == 2);  // taken_meanwhile's holder's, and by_protocol
    // One marker per processed job, a key's or a job's without one; the key processed
    // meanwhile keeps its first marker.
    CHECK(p.count("processed_jobs", "job_id = " + std::to_string(keyed) + " AND idempotency_key = 'order-11'") == 1);
    CHECK(p.count("processed_jobs", "job_id = " + std::to_string(keyless) + " AND idempotency_key IS NULL") == 1);
    CHECK(p.count("processed_jobs", "idempotency_key = 'order-13'") == 1);
    CHECK(p.count("processed_jobs", "job_id = " + std::to_string(processed_meanwhile)) == 0);
    // complete_job(): the same statement for one job, its errors on top; a job without a key
    // leaves its marker as the C++ settlement's do.
    pqxx::connection worker{p.db.url};
    CHECK(sqlstate_of(worker, "SELECT " + p.fn("complete_job") + "(" + std::to_string(taken_meanwhile) + ", " +
                                  std::to_string(token_of(taken_meanwhile)) + ")") == "OC101");
    CHECK(sqlstate_of(worker, "SELECT " + p.fn("complete_job") + "(" + std::to_string(by_protocol) + ", " +
                                  std::to_string(token_of(by_protocol)) + ")") == "");
    CHECK(p.count("processed_jobs", "job_id = " + std::to_string(by_protocol) + " AND idempotency_key IS NULL") == 1);
    CHECK(p.count("jobs") == 1);
  }

  TEST_CASE("protocol: fail_job retries by the stored backoff, then dead-letters as exhausted; permanent at once") {
    Protocol p;
    p.lease_queue("q", 2, "7 seconds");
    const long id = p.enqueue("q", "flaky");
    LeasedJob job = p.lease("q").at(0);
    const auto fail = [&](const LeasedJob& j, const std::string& rest) {
      return p.db.scalar<std::string>("SELECT " + p.fn("fail_job") + "(" + std::to_string(j.id) + ", " +
                                      std::to_string(j.token) + ", " + rest + ")");
    };
    CHECK(fail(job, "'timeout talking to the bank'") == "retry");
    // Backoff 7 s, no jitter, after the first failure: 7 s from the failure.
    const double wait_s = p.db.scalar<double>(
        "SELECT extract(epoch FROM run_at - (errors -> 0 ->> 'at')::timestamptz) FROM " + p.db.table("jobs"));
    CHECK(wait_s == doctest::Approx(7.0).epsilon(0.001));
    CHECK(p.db.scalar<std::string>("SELECT last_error FROM " + p.db.table("jobs")) == "timeout talking to the bank");
    CHECK(p.db.scalar<std::string>("SELECT lease_token IS NULL FROM " + p.db.table("jobs")) == "t");
    p.db.exec("UPDATE " + p.db.table("jobs") + " SET run_at = now()");
    job = p.lease("q").at(0);
    CHECK(job.attempt == 2);
    CHECK(fail(job, "'still down', true, NULL, '{\"status\": 503}'") == "dead");
    CHECK(p.count("jobs") == 0);
    const auto dead = p.db.exec(
        "SELECT error_class, attempts, jsonb_array_length(errors), error_detail ->> 'status', "
        "last_error FROM " +
        p.db.table("dead_letters") + " WHERE job_id = " + std::to_string(id))[0];
    CHECK(dead[0].as<std::string>() == "exhausted");
    CHECK(dead[1].as<int>() == 2);
    CHECK(dead[2].as<int>() == 2);
    CHECK(dead[3].as<std::string>() == "503");
    CHECK(dead[4].as<std::string>() == "still down");

    p.enqueue("q", "bad input");
    job = p.lease("q").at(0);
    CHECK(fail(job, "'no such account', false") == "dead");
    CHECK(p.count("dead_letters", "error_class = 'permanent' AND attempts = 1") == 1);

    // retry_in overrides the backoff (a Retry-After).
    p.enqueue("q", "rate limited");
    job = p.lease("q").at(0);
    CHECK(fail(job, "'429', true, '90 seconds'") == "retry");
    CHECK(p.db.scalar<double>("SELECT extract(epoch FROM run_at - (errors -> 0 ->> 'at')::timestamptz) FROM " +
                              p.db.table("jobs")) == doctest::Approx(90.0).epsilon(0.001));
  }

  TEST_CASE("protocol: renew_leases extends what is held and names what is lost; release_jobs gives back uncharged") {
    Protocol p;
    p.lease_queue("q");
    p.enqueue("q", "a");
    p.enqueue("q", "b");
    const std::vector<LeasedJob> jobs = p.lease("q");
    REQUIRE(jobs.size() == 2);
    const std::string tokens =
        "ARRAY[" + std::to_string(jobs[0].token) + ", " + std::to_string(jobs[1].token) + ", 999999]::bigint[]";
    std::vector<long> lost;
    for (const auto& row : p.db.exec("SELECT * FROM " + p.fn("renew_leases") + "(" + tokens + ", '1 hour')")) {
      lost.push_back(row[0].as<long>());
    }
    CHECK(lost == std::vector<long>{999999});
    CHECK(p.count("jobs", "run_at > now() + interval '59 minutes'") == 2);
    CHECK(p.db.scalar<int>("SELECT " + p.fn("release_jobs") + "(ARRAY[" + std::to_string(jobs[0].token) +
                           "]::bigint[])") == 1);
    CHECK(p.count("jobs", "attempts = 0 AND lease_token IS NULL AND run_at <= now()") == 1);
    lost.clear();
    for (const auto& row : p.db.exec("SELECT * FROM " + p.fn("renew_leases") + "(" + tokens + ")")) {
      lost.push_back(row[0].as<long>());
    }
    CHECK(lost == std::vector<long>{jobs[0].token, 999999});
  }

  TEST_CASE("protocol: a paused queue leases nothing; a lease whose last attempt expired becomes a dead letter") {
    Protocol p;
    p.lease_queue("q", 1);
    p.enqueue("q", "a");
    p.db.exec("INSERT INTO " + p.db.table("queue_pauses") + " (queue, paused_by) VALUES ('q', 'test')");
    CHECK(p.lease("q").empty());
    p.db.exec("DELETE FROM " + p.db.table("queue_pauses"));
    REQUIRE(p.lease("q").size() == 1);
    p.db.exec("UPDATE " + p.db.table("jobs") + " SET run_at = now() - interval '1 second'");
    CHECK(p.lease("q").empty());
    CHECK(p.count("jobs") == 0);
    CHECK(p.count("dead_letters", "error_class = 'lease_expired' AND errors -> 0 ->> 'class' = 'lease_expired'") == 1);
  }

}  // TEST_SUITE
