// Behind PgBouncer 1.18 in transaction mode (a local one each test starts, in front of the
// test database): workers with a pool smaller than their threads, the CLI's switch for
// prepared statements and its hint, the LISTEN and attempt-record connections, and the one
// exporter of the database gauges.
#include <doctest/doctest.h>

#include <signal.h>

#include <string>

#include "support/http_attack.hpp"
#include "support/pg_fixture.hpp"
#include "support/pgbouncer.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// A worker process through `bouncer`: the job path pooled, prepared statements off (the
// variable), and the LISTEN URL (with the attempt records) direct unless `direct` is empty.
std::unique_ptr<Process> pooled_worker(const PgFixture& db, const PgBouncer& bouncer, const std::string& config,
                                       const std::string& direct) {
  EnvChanges env{{"DATABASE_URL", bouncer.url}, {"ONCELY_SCHEMA", db.schema}, {"ONCELY_PREPARED_STATEMENTS", "0"}};
  env["ONCELY_LISTEN_DATABASE_URL"] = direct.empty() ? std::nullopt : std::optional<std::string>(direct);
  return std::make_unique<Process>(std::vector<std::string>{ONCELY_TEST_WORKER_PATH, config}, env);
}

// `oncely worker` with --metrics-addr on `port`, on `url` (its own env as pooled_worker's).
std::unique_ptr<Process> metrics_worker(const PgFixture& db, const TempDir& dir, const std::string& url, int port,
                                        const std::string& direct) {
  const std::string config = dir.write("worker.json", R"({"queues": {"default": {"concurrency": 1}}})", 0644);
  EnvChanges env{{"DATABASE_URL", url}, {"ONCELY_SCHEMA", db.schema}};
  if (!direct.empty()) {
    env["ONCELY_LISTEN_DATABASE_URL"] = direct;
    env["ONCELY_PREPARED_STATEMENTS"] = "0";
  }
  return std::make_unique<Process>(
      oncely_cli({"worker", "--config", config, "--metrics-addr", "127.0.0.1:" + std::to_string(port)}), env);
}

// Whether the worker on `port` exports the database gauges now.
bool exports_gauges(int port) {
  const auto answer = get_with_deadline(port, "/metrics", 2000ms);
  return answer && answer->status == 200 && answer->body.find("oncely_queue_depth{") != std::string::npos;
}

bool answers(int port) {
  const auto answer = get_with_deadline(port, "/healthz", 1000ms);
  return answer && answer->status == 200;
}

std::string stop(Process& p) {
  p.signal(SIGTERM);
  return p.wait().err;
}

// Two metrics workers on `url`: exactly one exports the gauges, over several heartbeats;
// kill -9 it and the other takes over within the lease (15 s) and a heartbeat (5 s).
void check_one_exporter(PgFixture& db, const std::string& url, const std::string& direct) {
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, run_at) VALUES ('later', now() + interval '1 day')");
  TempDir dir_a, dir_b;
  const int port_a = free_local_port();
  const int port_b = free_local_port();
  auto a = metrics_worker(db, dir_a, url, port_a, direct);
  auto b = metrics_worker(db, dir_b, url, port_b, direct);
  REQUIRE(wait_until([&] { return answers(port_a) && answers(port_b); }, 20s));
  REQUIRE(wait_until([&] { return exports_gauges(port_a) || exports_gauges(port_b); }, 20s));
  // Both have beaten a few times (every 5 s): still exactly one of them.
  const auto until = std::chrono::steady_clock::now() + 11s;
  int both = 0, none = 0;
  while (std::chrono::steady_clock::now() < until) {
    const bool ea = exports_gauges(port_a);
    const bool eb = exports_gauges(port_b);
    both += ea && eb;
    none += !ea && !eb;
    std::this_thread::sleep_for(200ms);
  }
  CHECK_MESSAGE(both == 0, "both workers exported the database gauges in " << both << " samples");
  CHECK(none == 0);
  const bool a_exports = exports_gauges(port_a);
  Process& exporter = a_exports ? *a : *b;
  Process& other = a_exports ? *b : *a;
  const int other_port = a_exports ? port_b : port_a;
  exporter.signal(SIGKILL);
  exporter.wait();
  const auto killed = std::chrono::steady_clock::now();
  CHECK(wait_until([&] { return exports_gauges(other_port); }, 25s));
  MESSAGE("takeover after kill -9: "
          << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count()
          << " ms");
  stop(other);
}

}  // namespace

TEST_SUITE("pooler") {
  TEST_CASE("pooler: a pool smaller than a worker's threads: every job completes, once, without a deadlock") {
    if (!pgbouncer_available()) return;
    PgFixture db;
    create_balances(db);
    PgBouncer bouncer(2);
    // 4 threads on a pool of 2; small batches: hundreds of batches, each of which used to
    // hold a server connection while its attempt record waited for another one.
    enqueue_increments(db, 3000);
    auto worker = pooled_worker(db, bouncer, R"({"queues": {"default": {"concurrency": 4, "batch_size": 5,
      "poll_interval": "100ms"}}})",
                                direct_database_url());
    const bool done = wait_until([&] { return count_of(db, "jobs") == 0; }, 90s);
    const std::string err = stop(*worker);
    CHECK_MESSAGE(done, count_of(db, "jobs") << " jobs left; worker log: " << err);
    CHECK(sum_of_balances(db) == 3000);
    CHECK(count_of(db, "processed_jobs") == 3000);
    CHECK(count_of(db, "dead_letters") == 0);
    CHECK_MESSAGE(err.find("connection pooler") == std::string::npos, err);  // nothing to warn about
  }

  TEST_CASE("pooler: without a direct URL the worker says the LISTEN and the attempt records go through the pool") {
    if (!pgbouncer_available()) return;
    PgFixture db;
    create_balances(db);
    PgBouncer bouncer(8);
    enqueue_increments(db, 50);
    auto worker =
        pooled_worker(db, bouncer, R"({"queues": {"default": {"concurrency": 2, "poll_interval": "100ms"}}})", "");
    const bool done = wait_until([&] { return count_of(db, "jobs") == 0; }, 30s);
    const std::string err = stop(*worker);
    CHECK(done);
    CHECK(sum_of_balances(db) == 50);
    // Named: the pool as PgBouncer knows it (user@host:port/database).
    const std::string pool = "pool postgres@127.0.0.1:" + std::to_string(bouncer.port());
    CHECK_MESSAGE(err.find("the LISTEN connection goes through a connection pooler (" + pool) != std::string::npos,
                  err);
    CHECK_MESSAGE(err.find("the attempt records go through a connection pooler (" + pool) != std::string::npos, err);
    // Nothing was LISTENed through it: no server connection of the pool listens.
    pqxx::connection c(bouncer.url);
    pqxx::nontransaction tx(c);
    CHECK(tx.exec1("SELECT count(*) FROM pg_listening_channels()")[0].as<long>() == 0);
  }

  TEST_CASE("pooler: a side statement that waits for the pool is reported, naming the pool") {
    if (!pgbouncer_available()) return;
    PgFixture db;
    create_balances(db);
    PgBouncer bouncer(1);
    enqueue_increments(db, 20, "slow_increment", 8000);
    // One server connection, two threads: one thread's batch holds it for the job's 8 s, and
    // the other's attempt record (through the pool, no direct URL) waits for it.
    auto worker = pooled_worker(db, bouncer, R"({"shutdown_grace": "1s", "queues": {"default": {"concurrency": 2,
      "batch_size": 1, "job_timeout": "60s"}}})",
                                "");
    // The batch holding the pool's server connection, idle in its transaction past the
    // warning's 5 s while its record waits (the warning is checked every 250 ms). Its last
    // statement asked for the server's backend pid, for the record.
    const bool stuck = wait_until(
        [&] {
          return db.scalar<long>(
                     "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
                     "AND now() - state_change > interval '6 seconds' AND query = 'SELECT pg_backend_pid()'") > 0;
        },
        30s);
    const std::string err = stop(*worker);
    CHECK(stuck);
    CHECK_MESSAGE(err.find("an attempt record statement has waited") != std::string::npos, err);
    CHECK_MESSAGE(err.find("pool postgres@127.0.0.1:" + std::to_string(bouncer.port())) != std::string::npos, err);
  }

  TEST_CASE("pooler: oncely enqueue twice through the pool: the switch, and the hint without it") {
    if (!pgbouncer_available()) return;
    PgFixture db;
    PgBouncer bouncer(1);  // one server connection: the second call gets the first one's
    const EnvChanges env{
        {"DATABASE_URL", bouncer.url}, {"ONCELY_SCHEMA", db.schema}, {"ONCELY_PREPARED_STATEMENTS", std::nullopt}};
    for (int i = 0; i < 3; ++i) {
      const ProcessResult r = run_process(oncely_cli({"--no-prepared-statements", "enqueue", "a"}), env);
      CHECK_MESSAGE(r.exit_code == 0, r.err);
    }
    EnvChanges off = env;
    off["ONCELY_PREPARED_STATEMENTS"] = "0";
    for (int i = 0; i < 2; ++i) {
      const ProcessResult r = run_process(oncely_cli({"enqueue", "b"}), off);
      CHECK_MESSAGE(r.exit_code == 0, r.err);
      const ProcessResult bulk =
          run_process(oncely_cli({"enqueue", "-", "--batch-size", "1"}), off, "{\"kind\": \"c\"}\n{\"kind\": \"c\"}\n");
      CHECK_MESSAGE(bulk.exit_code == 0, bulk.err);
    }
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 9);

    // Prepared statements on: the second call meets the first one's statement, and says what to do.
    ProcessResult last;
    for (int i = 0; i < 2; ++i) last = run_process(oncely_cli({"enqueue", "d"}), env);
    CHECK(last.exit_code == 1);
    CHECK_MESSAGE(last.err.find("behind a transaction-mode pooler set prepared_statements: false") != std::string::npos,
                  last.err);
    const ProcessResult bad =
        run_process(oncely_cli({"enqueue", "e"}), EnvChanges{{"DATABASE_URL", bouncer.url},
                                                             {"ONCELY_SCHEMA", db.schema},
                                                             {"ONCELY_PREPARED_STATEMENTS", "maybe"}});
    CHECK(bad.exit_code == 2);
    CHECK_MESSAGE(bad.err.find("ONCELY_PREPARED_STATEMENTS: must be 0") != std::string::npos, bad.err);
  }

  TEST_CASE(
      "pooler: two workers export the database gauges one at a time; kill -9 the exporter and the other takes over") {
    PgFixture db;
    check_one_exporter(db, db.url, "");
  }

  TEST_CASE("pooler: through the pool too, one exporter of the database gauges at a time, and the takeover") {
    if (!pgbouncer_available()) return;
    PgFixture db;
    PgBouncer bouncer(1);  // every heartbeat on the same server connection: a session lock would be everyone's
    check_one_exporter(db, bouncer.url, direct_database_url());
    // No session lock left on the pool's server connection.
    pqxx::connection c(bouncer.url);
    pqxx::nontransaction tx(c);
    CHECK(tx.exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")[0]
              .as<long>() == 0);
  }

}  // TEST_SUITE
