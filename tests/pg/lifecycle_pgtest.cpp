// A worker's life and death as a process: stop signals with the metrics server on. Real
// `oncely worker` processes, real signals.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// `oncely worker` on `db`'s schema with the configuration file `config`.
std::unique_ptr<Process> start_cli_worker(const PgFixture& db, const std::string& config,
                                          const std::vector<std::string>& extra = {},
                                          const std::string& database_url = "") {
  std::vector<std::string> args = {"worker", "--config", config};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(
      oncely_cli(args), EnvChanges{{"DATABASE_URL", database_url.empty() ? db.url : database_url},
                                   {"ONCELY_SCHEMA", db.schema}});
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

// Defect 1: with the metrics server on, a stop signal drains like without it.
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
  CHECK(count_of_jobs(db, "jobs") == 0);                     // ...and committed
  CHECK(count_of_jobs(db, "processed_jobs") == 1);
  CHECK(count_of_jobs(db, "dead_letters") == 0);
  CHECK(count_of_jobs(db, "attempts_in_flight") == 0);
  CHECK(count_of_jobs(db, "workers") == 0);                  // it deregistered
}

}  // namespace

TEST_SUITE("lifecycle") {

TEST_CASE("lifecycle: with --metrics-addr, SIGTERM drains a running exec job and exits 0") {
  check_stop_signal_with_metrics(SIGTERM, "SIGTERM");
}

TEST_CASE("lifecycle: with --metrics-addr, SIGINT drains a running exec job and exits 0") {
  check_stop_signal_with_metrics(SIGINT, "SIGINT");
}

}  // TEST_SUITE
