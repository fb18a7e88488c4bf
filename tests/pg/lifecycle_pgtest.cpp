// A worker's life and death as a process: stop signals with the metrics server on, the
// exec handler's children when the worker drains, times out, dies or finishes a job, and
// shutdown through a network partition. Real `oncely worker` processes, real signals.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include <libpq-fe.h>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/tcp_proxy.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// Gone: no such process, or a zombie (exited; reaping it is its parent's business).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// The pids a job's script wrote to `dir` (one file each: child, member, escaped), once all
// are there.
std::vector<pid_t> read_pids(const TempDir& dir, const std::vector<std::string>& names) {
  std::vector<pid_t> pids;
  for (const std::string& name : names) {
    const std::string text = dir.read(name);
    if (text.empty() || text.back() != '\n') return {};
    pids.push_back(static_cast<pid_t>(std::stol(text)));
  }
  return pids;
}

bool all_gone(const std::vector<pid_t>& pids) {
  for (const pid_t pid : pids) {
    if (!process_gone(pid)) return false;
  }
  return true;
}

// `oncely worker` on `db`'s schema with the configuration file `config`.
std::unique_ptr<Process> start_cli_worker(const PgFixture& db, const std::string& config,
                                          const std::vector<std::string>& extra = {},
                                          const std::string& database_url = "") {
  std::vector<std::string> args = {"worker", "--config", config};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(
      oncely_cli(args),
      EnvChanges{{"DATABASE_URL", database_url.empty() ? db.url : database_url}, {"ONCELY_SCHEMA", db.schema}});
}

// Waits up to `bound` for `p` to exit and collects it; a process still running then is
// killed (and the test fails).
ProcessResult finish(Process& p, std::chrono::milliseconds bound) {
  const bool exited = wait_until([&] { return p.exited(); }, bound);
  CHECK_MESSAGE(exited, "the worker did not exit within " << bound.count() << " ms");
  if (!exited) p.signal(SIGKILL);
  return p.wait();
}

long count_of_jobs(PgFixture& db, const std::string& table) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table));
}

// A script that records its pid in $DIR/child.<job id>, sleeps `seconds`, then writes
// $DIR/done.<job id>.
std::string sleeper_script(const TempDir& dir, int seconds) {
  return dir.write("sleeper.sh", "#!/bin/sh\necho $$ > \"$DIR/child.$ONCELY_JOB_ID\"\nsleep " +
                                     std::to_string(seconds) + "\necho done > \"$DIR/done.$ONCELY_JOB_ID\"\n");
}

// A worker configuration with one exec handler `kind` running `script` (with DIR set).
std::string exec_config(const TempDir& dir, const std::string& kind, const std::string& script,
                        const std::string& grace, const std::string& handler_extra = "") {
  return dir.write("worker.json",
                   R"({"shutdown_grace": ")" + grace +
                       R"(", "queues": {"default": {"poll_interval": "100ms", "backoff": {"schedule": ["10ms"]}}},
                         "handlers": {")" +
                       kind + R"(": {"type": "exec", "command": [")" + script + R"("], "env": {"DIR": ")" +
                       dir.path().string() + "\"}" + handler_extra + "}}}",
                   0644);
}

long enqueue(PgFixture& db, const std::string& kind) {
  return db.scalar<long>("SELECT " + db.table("enqueue") + "('" + kind + "', '{}')");
}

// With the metrics server on, a stop signal drains like without it.
void check_stop_signal_with_metrics(int signal, const std::string& name) {
  PgFixture db;
  TempDir dir;
  const std::string config = exec_config(dir, "export", sleeper_script(dir, 4), "20s");
  const long id = enqueue(db, "export");
  auto worker = start_cli_worker(db, config, {"--metrics-addr", "127.0.0.1:0"});
  REQUIRE(wait_until([&] { return !dir.read("child." + std::to_string(id)).empty(); }, 20s));
  worker->signal(signal);
  const ProcessResult r = finish(*worker, 20s);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(r.err.find("received " + name + ", draining") != std::string::npos, r.err);
  CHECK(dir.read("done." + std::to_string(id)) == "done\n");  // the running job finished...
  CHECK(count_of_jobs(db, "jobs") == 0);                      // ...and committed
  CHECK(count_of_jobs(db, "processed_jobs") == 1);
  CHECK(count_of_jobs(db, "dead_letters") == 0);
  CHECK(count_of_jobs(db, "attempts_in_flight") == 0);
  CHECK(count_of_jobs(db, "workers") == 0);  // it deregistered
}

// A job's processes, for the exec hygiene tests: the script records its own pid (child),
// a member of its process group (member) and a process that left for a session of its own
// (escaped), then, by $MODE, sleeps 40 s (long) or exits 0 leaving both behind (exit0). A
// later attempt exits 0 at once.
constexpr const char* kFamilyScript = R"(#!/bin/bash
if [ -s "$DIR/child" ]; then echo "again $ONCELY_ATTEMPT" > "$DIR/again"; exit 0; fi
sleep 1000 &
echo $! > "$DIR/member"
setsid sh -c 'echo $$ > "$DIR/escaped"; exec sleep 1000' &
while [ ! -s "$DIR/escaped" ]; do sleep 0.01; done
echo $$ > "$DIR/child"
if [ "$MODE" = long ]; then sleep 40; fi
exit 0
)";

const std::vector<std::string> kFamily = {"child", "member", "escaped"};

// Kills what a failing test left running, so that a failure costs no stray processes.
struct KillAtEnd {
  std::vector<pid_t> pids;
  ~KillAtEnd() {
    for (const pid_t pid : pids) {
      if (!process_gone(pid)) ::kill(pid, SIGKILL);
    }
  }
};

// The family's pids once all three are written.
std::vector<pid_t> wait_for_family(const TempDir& dir, KillAtEnd& cleanup) {
  std::vector<pid_t> pids;
  REQUIRE(wait_until([&] { return !(pids = read_pids(dir, kFamily)).empty(); }, 20s));
  cleanup.pids = pids;
  return pids;
}

std::string family_config(const TempDir& dir, const std::string& mode, const std::string& grace,
                          const std::string& handler_extra = "", int max_attempts = 1) {
  const std::string script = dir.write("family.sh", kFamilyScript);
  return dir.write("worker.json",
                   R"({"shutdown_grace": ")" + grace +
                       R"(", "queues": {"default": {"poll_interval": "100ms", "backoff": {"schedule": ["10ms"]},
                         "max_attempts": )" +
                       std::to_string(max_attempts) + R"(}},
                         "handlers": {"family": {"type": "exec", "command": [")" +
                       script + R"("], "env": {"DIR": ")" + dir.path().string() + R"(", "MODE": ")" + mode + "\"}" +
                       handler_extra + "}}}",
                   0644);
}

// The URL `url` with its host and port replaced by 127.0.0.1:`port` (query parameters
// and key=value pairs given later win over earlier ones in libpq).
std::string url_through(const std::string& url, int port) {
  const std::string override =
      "host=127.0.0.1" + std::string(url.find("://") != std::string::npos ? "&" : " ") + "port=" + std::to_string(port);
  if (url.find("://") == std::string::npos) return url + " " + override;
  return url + (url.find('?') == std::string::npos ? "?" : "&") + override;
}

// host and port of a libpq connection string (defaults: localhost, 5432).
std::pair<std::string, int> host_and_port(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  REQUIRE(options != nullptr);
  std::string host = "127.0.0.1";
  int port = 5432;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    if (std::string(o->keyword) == "host" || std::string(o->keyword) == "hostaddr") host = o->val;
    if (std::string(o->keyword) == "port") port = std::stoi(o->val);
  }
  PQconninfoFree(options);
  if (host == "localhost") host = "127.0.0.1";
  return {host, port};
}

}  // namespace

TEST_SUITE("lifecycle") {
  TEST_CASE("lifecycle: with --metrics-addr, SIGTERM drains a running exec job and exits 0") {
    check_stop_signal_with_metrics(SIGTERM, "SIGTERM");
  }

  TEST_CASE("lifecycle: with --metrics-addr, SIGINT drains a running exec job and exits 0") {
    check_stop_signal_with_metrics(SIGINT, "SIGINT");
  }

  TEST_CASE(
      "lifecycle: SIGTERM with an exec job longer than the grace: the job's processes are gone before the worker "
      "exits") {
    PgFixture db;
    TempDir dir;
    KillAtEnd cleanup;
    const long id = enqueue(db, "family");
    auto worker = start_cli_worker(db, family_config(dir, "long", "2s", "", 3));
    const std::vector<pid_t> family = wait_for_family(dir, cleanup);
    worker->signal(SIGTERM);
    const auto signalled = Clock::now();
    const ProcessResult r = finish(*worker, 20s);
    const auto took = Clock::now() - signalled;
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    // The grace, then SIGTERM to the job and SIGKILL 2 s later (bash waits for its sleep).
    CHECK(took < 8s);
    CHECK(all_gone(family));  // at once: nothing of the job outlived its worker
    // The job was left to roll back, its attempt not charged; the next worker runs it
    // again (as attempt 1 again), and only then.
    CHECK(dir.read("again").empty());
    auto again = start_cli_worker(db, family_config(dir, "long", "2s", "", 3));
    REQUIRE(wait_until([&] { return count_of_jobs(db, "jobs") == 0; }, 20s));
    again->signal(SIGTERM);
    CHECK(finish(*again, 20s).exit_code == 0);
    CHECK(dir.read("again") == "again 1\n");
    CHECK(count_of_jobs(db, "processed_jobs") == 1);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs") +
                          " WHERE job_id = " + std::to_string(id)) == 1);
  }

  TEST_CASE("lifecycle: an exec job over its timeout leaves no process behind, not even one in a session of its own") {
    PgFixture db;
    TempDir dir;
    KillAtEnd cleanup;
    enqueue(db, "family");
    auto worker = start_cli_worker(db, family_config(dir, "long", "10s", R"(, "timeout": "2s")"));
    const std::vector<pid_t> family = wait_for_family(dir, cleanup);
    REQUIRE(wait_until([&] { return count_of_jobs(db, "dead_letters") == 1; }, 20s));
    CHECK(db.scalar<std::string>("SELECT error_class FROM " + db.table("dead_letters")) == "timeout");
    CHECK(wait_until([&] { return all_gone(family); }, 5s));
    worker->signal(SIGTERM);
    CHECK(finish(*worker, 20s).exit_code == 0);
  }

  TEST_CASE("lifecycle: SIGKILL of the worker: its exec job's processes die with it") {
    PgFixture db;
    TempDir dir;
    KillAtEnd cleanup;
    enqueue(db, "family");
    auto worker = start_cli_worker(db, family_config(dir, "long", "10s"));
    const std::vector<pid_t> family = wait_for_family(dir, cleanup);
    worker->signal(SIGKILL);
    CHECK(finish(*worker, 5s).exit_code == 128 + SIGKILL);
    // SIGTERM at once, SIGKILL 2 s later.
    CHECK(wait_until([&] { return all_gone(family); }, 8s));
  }

  TEST_CASE("lifecycle: an exec job that exits 0 leaving processes behind: they are killed when the job ends") {
    PgFixture db;
    TempDir dir;
    KillAtEnd cleanup;
    enqueue(db, "family");
    auto worker = start_cli_worker(db, family_config(dir, "exit0", "10s"));
    const std::vector<pid_t> family = wait_for_family(dir, cleanup);
    REQUIRE(wait_until([&] { return count_of_jobs(db, "jobs") == 0; }, 20s));
    CHECK(count_of_jobs(db, "processed_jobs") == 1);          // the job itself succeeded
    CHECK(wait_until([&] { return all_gone(family); }, 5s));  // while the worker still runs
    CHECK_FALSE(worker->exited());
    worker->signal(SIGTERM);
    CHECK(finish(*worker, 20s).exit_code == 0);
  }

  // A partition (the proxy stops forwarding; sockets stay open) does not hold a
  // worker's shutdown beyond its grace, and nothing is lost.
  TEST_CASE("lifecycle: SIGTERM during a network partition: the worker exits within its grace and a few seconds") {
    PgFixture db;
    create_balances(db);
    constexpr int kJobs = 40;
    enqueue_increments(db, kJobs, "slow_increment", 300);
    const auto [host, port] = host_and_port(db.url);
    TcpProxy proxy(host, port);
    const std::string config =
        R"({"shutdown_grace": "3s", "queues": {"default": {"concurrency": 2, "batch_size": 5, "poll_interval": "100ms"}}})";
    auto worker = std::make_unique<Process>(
        std::vector<std::string>{ONCELY_TEST_WORKER_PATH, config},
        EnvChanges{{"DATABASE_URL", url_through(db.url, proxy.port())}, {"ONCELY_SCHEMA", db.schema}});
    REQUIRE(wait_until([&] { return sum_of_balances(db) >= 4; }, 20s));  // jobs are running
    proxy.freeze();
    worker->signal(SIGTERM);
    const auto signalled = Clock::now();
    const ProcessResult r = finish(*worker, 30s);
    const auto took = Clock::now() - signalled;
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    MESSAGE("exited " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms after SIGTERM");
    // The grace, then at most 1 s for the listener and the heartbeat and 3 s to unregister
    // (here each connection is stuck); the old code waited in libpq for ever.
    CHECK(took < 3s + 7s);
    CHECK(sum_of_balances(db) < kJobs);  // the partition cut it short

    // The partition ends: the server sees the connections close and rolls their transactions
    // back. Another worker finishes the queue, each job exactly once.
    proxy.unfreeze();
    WorkerProcess after(db, R"({"queues": {"default": {"concurrency": 2, "poll_interval": "100ms"}}})");
    REQUIRE(wait_until([&] { return count_of_jobs(db, "jobs") == 0; }, 60s));
    after.process->signal(SIGTERM);
    CHECK(finish(*after.process, 20s).exit_code == 0);
    CHECK(sum_of_balances(db) == kJobs);
    CHECK(count_of_jobs(db, "processed_jobs") == kJobs);
    CHECK(count_of_jobs(db, "dead_letters") == 0);
  }

}  // TEST_SUITE
