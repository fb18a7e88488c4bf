// Lease mode against a real Postgres and real worker processes: no transaction held while
// a job runs, reclaim after a kill, fenced completion after a freeze, one run at a time per
// key, release on SIGTERM, exact sums under kill -9, exec children that die with their worker.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/types.h>

#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "oncely/stats.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// A lease queue "long" of the test worker (lease_increment jobs).
std::string lease_config(const std::string& lease = "3s", int concurrency = 8, const std::string& extra = "") {
  return R"({"queues": {"long": {"mode": "lease", "lease": ")" + lease + R"(", "concurrency": )" +
         std::to_string(concurrency) + R"(, "poll_interval": "100ms")" + extra + "}}}";
}

// The test worker, with an application_name of its own so that its backends can be told
// from every other test's in pg_stat_activity.
std::unique_ptr<Process> start_test_worker(const PgFixture& db, const std::string& config,
                                           const std::string& app = "oncely_lease_test") {
  return std::make_unique<Process>(
      std::vector<std::string>{ONCELY_TEST_WORKER_PATH, config},
      EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}, {"PGAPPNAME", app}});
}

void create_runs(PgFixture& db) {
  db.exec("CREATE TABLE " + db.table("lease_runs") +
          " (id bigserial PRIMARY KEY, job_id bigint, key text, attempt int, pid int,"
          "  started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz)");
}

// One lease_increment job of 1 cent to `account`; returns its id.
long enqueue_lease_job(PgFixture& db, const std::string& key, int sleep_ms, int first_sleep_ms = -1, int account = 1) {
  return db.scalar<long>("INSERT INTO " + db.table("jobs") +
                         " (queue, kind, idempotency_key, payload) VALUES ('long', 'lease_increment', '" + key +
                         "', jsonb_build_object('account', " + std::to_string(account) +
                         ", 'cents', 1, 'record', true, 'sleep_ms', " + std::to_string(sleep_ms) +
                         ", 'first_sleep_ms', " + std::to_string(first_sleep_ms < 0 ? sleep_ms : first_sleep_ms) +
                         ")) RETURNING id");
}

long runs(PgFixture& db, const std::string& where = "true") {
  return db.scalar<long>("SELECT count(*) FROM " + db.table("lease_runs") + " WHERE " + where);
}

// The worker process `pid` has registered, so it takes SIGTERM as a request to drain (a
// process signalled before its Runtime set its signals up would just die of it).
void wait_registered(PgFixture& db, int pid) {
  REQUIRE(wait_until(
      [&] {
        return db.scalar<long>("SELECT count(*) FROM " + db.table("workers") + " WHERE pid = " + std::to_string(pid)) >
               0;
      },
      15s));
}

bool gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';  // a zombie has ended
}

}  // namespace

TEST_SUITE("lease") {
  TEST_CASE("lease: a 30 s job with a 5 s lease holds no transaction: none of its worker's is ever older than 1 s") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    const std::string app = "oncely_lease_" + db.schema;
    const long id = enqueue_lease_job(db, "long-1", 30000);
    auto worker = start_test_worker(db, lease_config("5s"), app);
    REQUIRE(wait_until([&] { return runs(db) == 1; }, 10s));
    const std::string since_claim = db.scalar<std::string>("SELECT run_at::text FROM " + db.table("jobs"));
    long samples = 0;
    long oldest_held_ms = 0;         // a transaction the worker holds open between its statements
    long oldest_ms = 0;              // any transaction of the worker, a slow statement or COMMIT included
    std::string oldest;              // what that one was doing, for the message
    std::set<std::string> expiries;  // run_at: the lease's expiry, moved on by each renewal
    const auto until = std::chrono::steady_clock::now() + 40s;
    while (count_of(db, "jobs") > 0 && std::chrono::steady_clock::now() < until) {
      // Only the worker's own connections (the handler's recorder names itself apart) and
      // only those in a transaction: a CI run once saw the recorder's idle connection with a
      // 5 s old xact_start, which is the handler's and holds nothing.
      const auto sample = db.exec(
          "SELECT coalesce(max(extract(epoch FROM now() - xact_start) * 1000) FILTER (WHERE state LIKE 'idle in "
          "transaction%'), 0)::bigint,"
          "       coalesce(max(extract(epoch FROM now() - xact_start) * 1000), 0)::bigint,"
          "       coalesce(string_agg(state || ': ' || left(query, 80), ' | ') FILTER (WHERE now() - xact_start > "
          "interval '1 second'), '')"
          "  FROM pg_stat_activity WHERE application_name = '" +
          app + "' AND state <> 'idle'");
      oldest_held_ms = std::max(oldest_held_ms, sample[0][0].as<long>());
      if (sample[0][1].as<long>() > oldest_ms) {
        oldest_ms = sample[0][1].as<long>();
        oldest = sample[0][2].as<std::string>();
      }
      const auto expiry = db.exec("SELECT run_at::text FROM " + db.table("jobs"));
      if (!expiry.empty()) expiries.insert(expiry[0][0].as<std::string>());
      ++samples;
      std::this_thread::sleep_for(100ms);
    }
    CHECK(count_of(db, "jobs") == 0);
    CHECK(samples >= 150);  // 30 s sampled every 100 ms (plus the time the queries take on a loaded machine)
    // Never a transaction held open while the job runs (a transaction-mode job would hold one
    // for all 30 s). On a loaded machine a COMMIT waiting for its WAL flush, or a statement,
    // can take longer than a second: that is the server's time, bounded well below the job's.
    CHECK(oldest_held_ms < 1000);
    CHECK_MESSAGE(oldest_ms < 5000, oldest);
    CHECK(expiries.size() >= 10);  // renewed every 5/3 s for 30 s, not claimed once
    CHECK(expiries.count(since_claim) == 1);
    CHECK(runs(db) == 1);  // never taken back while it ran
    CHECK(sum_of_balances(db) == 1);
    CHECK(db.scalar<long>("SELECT job_id FROM " + db.table("processed_jobs")) == id);
    worker->signal(SIGTERM);
    CHECK(worker->wait().exit_code == 0);
  }

  TEST_CASE("lease: stats and jobs list tell a running lease job from a scheduled one") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    enqueue_lease_job(db, "running-1", 60000);
    db.exec("INSERT INTO " + db.table("jobs") +
            " (queue, kind, run_at) VALUES ('long', 'later', now() + interval '1 hour')");
    auto worker = start_test_worker(db, R"({"shutdown_grace": "1s", "queues": {"long": {"mode": "lease", "lease": "30s",
      "poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return runs(db) == 1; }, 10s));
    const auto stats = oncely::collect_stats(oncely::DatabaseUrl(db.url), db.schema, std::string("long"));
    REQUIRE(stats.queues.size() == 1);
    const auto& q = stats.queues.front();
    CHECK(q.depth == 2);
    CHECK(q.in_flight == 1);  // was counted as retrying: its run_at is the lease's expiry, its attempt counted
    CHECK(q.scheduled == 1);
    CHECK(q.retrying == 0);
    CHECK(q.ready == 0);
    const ProcessResult listed = run_process(oncely_cli({"jobs", "list", "--state", "running", "--json"}),
                                             EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    CHECK(listed.exit_code == 0);
    CHECK(listed.out.find("running-1") != std::string::npos);
    CHECK(listed.out.find("later") == std::string::npos);
    worker->signal(SIGTERM);
    worker->wait();
  }

  TEST_CASE("lease: SIGKILL mid-run: the job is taken back once its lease expires, as attempt 2, and applied once") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    const long id = enqueue_lease_job(db, "killed-1", 200, 60000);
    auto first = start_test_worker(db, lease_config("3s"));
    REQUIRE(wait_until([&] { return runs(db) == 1; }, 10s));
    first->signal(SIGKILL);
    first->wait();
    const auto killed = std::chrono::steady_clock::now();
    auto second = start_test_worker(db, lease_config("3s"));
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 15s));
    const auto reclaimed = std::chrono::steady_clock::now() - killed;
    CHECK(reclaimed <= 3s + 4s);  // the lease, the poll and a completion, with room for a loaded machine
    CHECK(runs(db, "attempt = 2") == 1);
    CHECK(runs(db) == 2);
    // Not before the lease ran out: the first run's lease was renewed 1 s before the kill at most.
    CHECK(db.scalar<double>("SELECT extract(epoch FROM (SELECT started_at FROM " + db.table("lease_runs") +
                            " WHERE attempt = 2) - (SELECT started_at FROM " + db.table("lease_runs") +
                            " WHERE attempt = 1))") >= 2.0);
    CHECK(sum_of_balances(db) == 1);
    CHECK(count_of(db, "processed_jobs") == 1);
    CHECK(db.scalar<long>("SELECT job_id FROM " + db.table("processed_jobs")) == id);
    second->signal(SIGTERM);
    CHECK(second->wait().exit_code == 0);
  }

  TEST_CASE("lease: a worker frozen past its lease (SIGSTOP) finds its completion rejected after SIGCONT") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    enqueue_lease_job(db, "frozen-1", 100, 60000);
    auto frozen = start_test_worker(db, lease_config("3s"));
    REQUIRE(wait_until([&] { return runs(db) == 1; }, 10s));
    frozen->signal(SIGSTOP);
    auto other = start_test_worker(db, lease_config("3s"));
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 15s));  // the other one completed it
    CHECK(runs(db, "attempt = 2 AND ended_at IS NOT NULL") == 1);
    other->signal(SIGTERM);
    CHECK(other->wait().exit_code == 0);
    // Thawed, its lease long gone: its watchdog stops the handler, whose outcome is then
    // refused by the fence. SIGTERM at once: the drain waits for that handler to end.
    frozen->signal(SIGCONT);
    frozen->signal(SIGTERM);
    const ProcessResult r = frozen->wait();
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("lease lost") != std::string::npos);
    CHECK(r.err.find("lease stale") != std::string::npos);
    CHECK(sum_of_balances(db) == 1);
    CHECK(count_of(db, "processed_jobs") == 1);
    CHECK(count_of(db, "jobs") == 0);
    CHECK(count_of(db, "dead_letters") == 0);
  }

  TEST_CASE("lease: a held job's row locked by another transaction does not hold up the renewal of the others") {
    // The renewal skips a locked row (it is still the holder's) instead of waiting for it.
    // Waiting, the one statement that renews every lease of the process stopped at that row
    // until its statement_timeout, every tick, and the other leases expired with it; the
    // worker then leased the other job again while its first attempt still ran (an attempt
    // it no longer watched: its leases were kept by job id) and settled both attempts in one
    // batch after the lock: the stale one, matched by job id too, had its effect applied
    // without its completion, and the job was applied twice (a sum of 3).
    PgFixture db;
    create_balances(db);
    create_runs(db);
    const long locked = enqueue_lease_job(db, "locked-a", 8000);
    const long other = enqueue_lease_job(db, "renewed-b", 8000);
    auto worker = start_test_worker(db, lease_config("3s"));
    REQUIRE(wait_until([&] { return runs(db) == 2; }, 10s));
    const long token =
        db.scalar<long>("SELECT lease_token FROM " + db.table("jobs") + " WHERE id = " + std::to_string(other));
    {
      pqxx::connection locker(db.url);
      pqxx::work lock(locker);
      lock.exec("SELECT FROM " + db.table("jobs") + " WHERE id = " + std::to_string(locked) + " FOR UPDATE");
      const double since = db.scalar<double>("SELECT extract(epoch FROM clock_timestamp())");
      // Its lease renewed while the other row is locked: it now ends more than 3 s after the lock.
      CHECK(wait_until(
          [&] {
            return db.scalar<bool>("SELECT coalesce(bool_or(run_at > to_timestamp(" + std::to_string(since) +
                                   ") + interval '3500 ms'), false) FROM " + db.table("jobs") + " WHERE id = " +
                                   std::to_string(other) + " AND lease_token = " + std::to_string(token));
          },
          10s));
      lock.commit();
    }
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 30s));
    CHECK(runs(db, "key = 'renewed-b'") == 1);  // never taken from its worker
    CHECK(sum_of_balances(db) == 2);
    CHECK(count_of(db, "processed_jobs") == 2);
    worker->signal(SIGTERM);
    CHECK(worker->wait().exit_code == 0);
  }

  TEST_CASE("lease: two copies of each key and 4 workers: never two runs of one key at once, one marker each") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    constexpr int kKeys = 6;
    for (int k = 0; k < kKeys; ++k) {
      for (int copy = 0; copy < 2; ++copy) enqueue_lease_job(db, "dup-" + std::to_string(k), 700, -1, k);
    }
    std::vector<std::unique_ptr<Process>> workers;
    for (int i = 0; i < 4; ++i) workers.push_back(start_test_worker(db, lease_config("3s", 4)));
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 30s));
    for (auto& w : workers) {
      wait_registered(db, w->pid());  // the last one started may have found nothing left to do
      w->signal(SIGTERM);
    }
    for (auto& w : workers) CHECK(w->wait().exit_code == 0);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("lease_runs") + " a JOIN " + db.table("lease_runs") +
                          " b ON a.key = b.key AND a.id < b.id AND a.started_at < coalesce(b.ended_at, 'infinity') AND "
                          "b.started_at < coalesce(a.ended_at, 'infinity')") == 0);
    CHECK(count_of(db, "processed_jobs") == kKeys);
    CHECK(sum_of_balances(db) == kKeys);  // the second copy of a processed key is a duplicate
    CHECK(db.scalar<long>("SELECT count(DISTINCT key) FROM " + db.table("lease_runs")) == kKeys);
  }

  // Copies of a key whose job is running sit at the head of the queue: a claim passes over
  // them, and the jobs behind run meanwhile (they waited for the key's job to end before).
  TEST_CASE("lease: copies of a running key at the head of the queue do not hold up the jobs behind them") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    for (int copy = 0; copy < 20; ++copy) enqueue_lease_job(db, "hot", 3000, -1, 1);
    for (int k = 0; k < 8; ++k) enqueue_lease_job(db, "cold-" + std::to_string(k), 100, -1, 2);
    auto worker = start_test_worker(db, lease_config("3s", 4, R"(, "batch_size": 4)"));
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 60s));
    wait_registered(db, worker->pid());
    worker->signal(SIGTERM);
    CHECK(worker->wait().exit_code == 0);
    const std::string runs_table = db.table("lease_runs");
    CHECK(runs(db, "key = 'hot'") == 1);
    CHECK(runs(db, "key LIKE 'cold-%' AND ended_at < (SELECT ended_at FROM " + runs_table + " WHERE key = 'hot')") ==
          8);
    CHECK(sum_of_balances(db) == 1 + 8);
  }

  // "connections": 3 runs three lanes in one process, each claiming and settling on its own
  // connection with a third of the handlers: together they run 12 jobs at once (one lane
  // alone could run 4), with the keys' guarantees of separate workers.
  TEST_CASE("lease: three connections in one worker: their handlers run together, never two runs of one key at once") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    constexpr int kKeys = 30;
    for (int k = 0; k < kKeys; ++k) {
      for (int copy = 0; copy < 3; ++copy) enqueue_lease_job(db, "lane-" + std::to_string(k), 1000, -1, k % 7);
    }
    auto worker = start_test_worker(db, lease_config("3s", 12, R"(, "connections": 3)"));
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 60s));
    wait_registered(db, worker->pid());
    worker->signal(SIGTERM);
    CHECK(worker->wait().exit_code == 0);
    const std::string runs_table = db.table("lease_runs");
    const long most_at_once = db.scalar<long>(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM " + runs_table + " a JOIN " + runs_table +
        " b ON b.started_at <= a.started_at AND coalesce(b.ended_at, 'infinity') > a.started_at GROUP BY a.id) AS s");
    CHECK(most_at_once > 8);    // all three lanes' handlers at once
    CHECK(most_at_once <= 12);  // and never more than the queue's concurrency
    CHECK(db.scalar<long>("SELECT count(*) FROM " + runs_table + " a JOIN " + runs_table +
                          " b ON a.key = b.key AND a.id < b.id AND a.started_at < coalesce(b.ended_at, 'infinity') AND "
                          "b.started_at < coalesce(a.ended_at, 'infinity')") == 0);
    CHECK(count_of(db, "processed_jobs") == kKeys);
    CHECK(sum_of_balances(db) == kKeys);
  }

  TEST_CASE("lease: a job leased again by its own worker while its expired attempt runs is released by SIGTERM") {
    // The worker's attempts in flight are kept by lease token: kept by job id, the second
    // attempt of the job found the first's entry and was not recorded, so SIGTERM neither
    // stopped it nor gave its lease back.
    PgFixture db;
    create_balances(db);
    create_runs(db);
    const long id = enqueue_lease_job(db, "again-1", 60000);
    auto worker = start_test_worker(db, R"({"shutdown_grace": "1s", "queues": {"long": {"mode": "lease", "lease": "30s",
      "concurrency": 4, "poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return runs(db) == 1; }, 15s));
    // Its lease expires (as if the worker had been cut off from the database for 30 s).
    db.exec("UPDATE " + db.table("jobs") +
            " SET run_at = now() - interval '1 second' WHERE id = " + std::to_string(id));
    REQUIRE(wait_until([&] { return runs(db, "attempt = 2") == 1; }, 15s));
    worker->signal(SIGTERM);
    const ProcessResult r = worker->wait();
    CHECK(r.exit_code == 0);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                          " WHERE lease_token IS NULL AND leased_by IS NULL AND run_at <= now()") == 1);
    CHECK(sum_of_balances(db) == 0);
  }

  TEST_CASE("lease: SIGTERM with 20 jobs running past the grace: released uncharged, ready at once, exit 0") {
    PgFixture db;
    create_balances(db);
    create_runs(db);
    for (int i = 0; i < 20; ++i) enqueue_lease_job(db, "term-" + std::to_string(i), 60000);
    auto worker = start_test_worker(db, R"({"shutdown_grace": "1s", "queues": {"long": {"mode": "lease", "lease": "30s",
      "concurrency": 20, "poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return runs(db) == 20; }, 15s));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                          " WHERE attempts = 1 AND lease_token IS NOT NULL") == 20);
    const auto asked = std::chrono::steady_clock::now();
    worker->signal(SIGTERM);
    const ProcessResult r = worker->wait();
    CHECK(std::chrono::steady_clock::now() - asked < 10s);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("released 20 lease job(s)") != std::string::npos);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                          " WHERE attempts = 0 AND lease_token IS NULL AND leased_by IS NULL AND run_at <= now()") ==
          20);
    CHECK(sum_of_balances(db) == 0);
    CHECK(count_of(db, "dead_letters") == 0);
  }

  TEST_CASE("lease: an sql handler on a lease queue under kill -9 at random moments: every sum exact") {
    PgFixture db;
    create_balances(db);
    TempDir dir;
    const std::string balances = db.table("balances");
    nlohmann::json document = nlohmann::json::parse(R"({"queues": {"default": {"mode": "lease", "lease": "3s",
      "concurrency": 50, "batch_size": 100, "poll_interval": "100ms"}}})");
    document["handlers"]["increment"] = {
        {"type", "sql"},
        {"statement", "INSERT INTO " + balances +
                          " (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = " + balances +
                          ".cents + EXCLUDED.cents"},
        {"params", {"/account", "/cents"}}};
    const std::string config = dir.write("worker.json", document.dump(), 0644);
    constexpr int kJobs = 3000;
    enqueue_increments(db, kJobs);
    const auto start = [&] {
      return std::make_unique<Process>(oncely_cli({"worker", "--config", config}),
                                       EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    };
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> moment(50, 400);
    int kills = 0;
    for (int i = 0; i < 5 && count_of(db, "jobs") > 0; ++i) {
      auto worker = start();
      const long before = sum_of_balances(db);
      REQUIRE(!worker->exited());
      // Killed while it works: once it has applied something since it started.
      wait_until([&] { return sum_of_balances(db) > before || count_of(db, "jobs") == 0; }, 20s);
      std::this_thread::sleep_for(std::chrono::milliseconds(moment(rng)));
      worker->signal(SIGKILL);
      worker->wait();
      ++kills;
      CHECK(sum_of_balances(db) == count_of(db, "processed_jobs"));  // effects and markers together, always
    }
    auto last = start();
    REQUIRE(wait_until([&] { return count_of(db, "jobs") == 0; }, 60s));
    wait_registered(db, last->pid());  // the killed ones may have finished everything already
    last->signal(SIGTERM);
    CHECK(last->wait().exit_code == 0);
    CHECK(kills >= 1);
    CHECK(sum_of_balances(db) == kJobs);
    CHECK(count_of(db, "processed_jobs") == kJobs);
    CHECK(count_of(db, "dead_letters") == 0);
  }

  TEST_CASE("lease: an exec child is gone within 2 s of its worker's SIGKILL") {
    PgFixture db;
    TempDir dir;
    const std::string pid_file = dir.file("child.pid");
    const std::string config = dir.write("worker.json",
                                         R"({"queues": {"default": {"mode": "lease", "lease": "3s",
      "poll_interval": "100ms"}}, "handlers": {"sleeper": {"type": "exec",
      "command": ["/bin/sh", "-c", "echo $$ > )" +
                                             pid_file + R"(; exec sleep 60"]}}})",
                                         0644);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('sleeper')");
    Process worker(oncely_cli({"worker", "--config", config}),
                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    REQUIRE(wait_until([&] { return !dir.read("child.pid").empty() && dir.read("child.pid").back() == '\n'; }, 10s));
    const int child = std::stoi(dir.read("child.pid"));
    REQUIRE(!gone(child));
    worker.signal(SIGKILL);
    worker.wait();
    CHECK(wait_until([&] { return gone(child); }, 2s));
  }

  TEST_CASE("lease: an effect that fails only at COMMIT does not hold up the others: they complete, it fails alone") {
    PgFixture db;
    db.exec("CREATE TABLE " + db.table("refs") + " (id int PRIMARY KEY); INSERT INTO " + db.table("refs") +
            " VALUES (1)");
    db.exec("CREATE TABLE " + db.table("child") + " (ref int REFERENCES " + db.table("refs") +
            " DEFERRABLE INITIALLY DEFERRED)");
    TempDir dir;
    nlohmann::json document = nlohmann::json::parse(R"({"queues": {"default": {"mode": "lease", "lease": "3s",
      "max_attempts": 2, "backoff": {"schedule": ["0ms"]}, "poll_interval": "100ms"}}})");
    document["handlers"]["link"] = {
        {"type", "sql"}, {"statement", "INSERT INTO " + db.table("child") + " VALUES ($1)"}, {"params", {"/ref"}}};
    const std::string config = dir.write("worker.json", document.dump(), 0644);
    // One job whose row breaks the deferred foreign key at COMMIT, among 20 that do not.
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, payload) SELECT 'link', jsonb_build_object('ref', CASE WHEN i = 10 "
            "THEN 999 ELSE 1 END) FROM generate_series(1, 21) AS i");
    Process worker(oncely_cli({"worker", "--config", config}),
                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    CHECK(wait_until([&] { return count_of(db, "jobs") == 0; }, 20s));
    worker.signal(SIGTERM);
    const ProcessResult r = worker.wait();
    CHECK(r.exit_code == 0);
    CHECK(count_of(db, "child") == 20);
    CHECK(count_of(db, "processed_jobs") == 20);
    CHECK(db.scalar<std::string>("SELECT error_class || ' ' || attempts FROM " + db.table("dead_letters")) ==
          "exhausted 2");
    CHECK(db.scalar<std::string>("SELECT last_error FROM " + db.table("dead_letters")).find("its completion failed") !=
          std::string::npos);
  }

}  // TEST_SUITE

// The reported crawl: 6,000 jobs in one INSERT, two copies of each of 3,000 keys, on a lease
// queue at its default poll interval. A claim that took its full share of rows but leased
// fewer (a copy deleted as a duplicate, or passed over for the copy beside it) was taken
// for the end of the queue, and the next claim waited for the poll interval: about five
// jobs a second. The copies side by side, and the copies after all the originals.
TEST_CASE("lease: 6,000 jobs with two copies of each key drain on one worker at the default poll interval") {
  for (const std::string key : {"(i / 2)", "(i % 3000)"}) {
    CAPTURE(key);
    PgFixture db;
    TempDir dir;
    db.exec("CREATE TABLE " + db.table("touched") + " (k text NOT NULL)");
    nlohmann::json document =
        nlohmann::json::parse(R"({"queues": {"default": {"mode": "lease", "lease": "3s", "concurrency": 8}}})");
    document["handlers"]["touch"] = {
        {"type", "sql"}, {"statement", "INSERT INTO " + db.table("touched") + " (k) VALUES ($1)"}, {"params", {"/k"}}};
    const std::string config = dir.write("worker.json", document.dump(), 0644);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, idempotency_key, payload) SELECT 'touch', 'key-' || " + key +
            ", jsonb_build_object('k', 'key-' || " + key + ") FROM generate_series(2, 6001) AS i");
    Process worker(oncely_cli({"worker", "--config", config}),
                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    const bool drained = wait_until([&] { return count_of(db, "jobs") == 0; }, 30s);
    CHECK_MESSAGE(drained, count_of(db, "jobs"), " jobs left after 30 s");
    worker.signal(SIGTERM);
    CHECK(worker.wait().exit_code == 0);
    CHECK(count_of(db, "touched") == (drained ? 3000 : count_of(db, "processed_jobs")));
    CHECK(db.scalar<long>("SELECT count(DISTINCT k) FROM " + db.table("touched")) == count_of(db, "touched"));
    CHECK(count_of(db, "dead_letters") == 0);
  }
}
