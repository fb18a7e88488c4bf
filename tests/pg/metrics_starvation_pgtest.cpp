// The metrics endpoint under attack: a real `oncely worker` with
// --metrics-addr running exec jobs while hostile clients hold connections to it. Jobs must
// keep completing on their first attempt (max_attempts 1: an attempt lost to EMFILE is a
// dead letter) and /healthz must answer within 1 s throughout.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstring>
#include <fstream>
#include <string>

#include "support/http_attack.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kProbeDeadline = 1000ms;

// `oncely worker` serving metrics on 127.0.0.1:`port`, with its open-file limit set when
// `soft` > 0 (hard = soft: the worker cannot raise it). Handlers: noop (/bin/true) and
// limit, which writes the program's soft open-file limit to $DIR/limit.
std::unique_ptr<Process> start_worker(const PgFixture& db, const TempDir& dir, int port, int soft = 0, int hard = 0) {
  const std::string config = dir.write("worker.json", R"({"queues": {"default": {"poll_interval": "100ms",
      "max_attempts": 1}}, "handlers": {"noop": {"type": "exec", "command": ["/bin/true"]},
      "limit": {"type": "exec", "command": ["/bin/sh", "-c", "ulimit -n > \"$DIR/limit\""],
                "env": {"DIR": ")" + dir.path().string() + R"("}}}})",
                                       0644);
  std::vector<std::string> argv;
  if (soft > 0) {
    argv = {"/usr/bin/prlimit", "--nofile=" + std::to_string(soft) + ":" + std::to_string(hard > 0 ? hard : soft), "--"};
  }
  for (std::string& a : oncely_cli({"worker", "--config", config, "--metrics-addr", "127.0.0.1:" + std::to_string(port)})) {
    argv.push_back(std::move(a));
  }
  return std::make_unique<Process>(argv, EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
}

// The soft "Max open files" of /proc/PID/limits.
long soft_open_files(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Max open files", 0) == 0) return std::stol(line.substr(std::strlen("Max open files")));
  }
  return -1;
}

bool healthy(int port) {
  const auto answer = get_with_deadline(port, "/healthz", kProbeDeadline);
  return answer && answer->status == 200;
}

void enqueue_noops(PgFixture& db, int count) {
  db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'noop' FROM generate_series(1, " +
          std::to_string(count) + ")");
}

long count_of(PgFixture& db, const std::string& table) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table));
}

// Probes /healthz back to back until `count` jobs are done (completed or dead-lettered)
// and the attack has lasted at least `at_least` (beyond the endpoint's 2 s header
// deadline, so that its connections have turned over); each probe must answer 200 within
// 1 s. Returns the number of probes (0: the jobs did not finish within 60 s).
int probe_until_done(PgFixture& db, int port, long count, Clock::time_point attack_started,
                     Clock::duration at_least) {
  int probes = 0;
  int slow = 0;
  std::string last_slow;  // how the last failed probe ended: at the deadline, or cut short (evicted?)
  const bool done = wait_until(
      [&] {
        const auto asked = Clock::now();
        const auto answer = get_with_deadline(port, "/healthz", kProbeDeadline);
        ++probes;
        if (!answer || answer->status != 200) {
          ++slow;
          last_slow = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked).count()) +
                      " ms, " + (answer ? "status " + std::to_string(answer->status) : std::string("no answer"));
        }
        return Clock::now() - attack_started >= at_least &&
               count_of(db, "processed_jobs") + count_of(db, "dead_letters") >= count;
      },
      60s);
  CHECK_MESSAGE(slow == 0, slow << " of " << probes << " /healthz probes got no 200 within 1 s (the last: " << last_slow << ")");
  return done ? probes : 0;
}

ProcessResult stop_worker(Process& worker) {
  worker.signal(SIGTERM);
  const bool exited = wait_until([&] { return worker.exited(); }, 20s);
  CHECK_MESSAGE(exited, "the worker did not exit within 20 s of SIGTERM");
  if (!exited) worker.signal(SIGKILL);
  return worker.wait();
}

}  // namespace

TEST_SUITE("metrics_starvation") {

TEST_CASE("metrics_starvation: 64 slow-loris connections leave /healthz answering within 1 s and jobs running") {
  PgFixture db;
  TempDir dir;
  const int port = free_local_port();
  auto worker = start_worker(db, dir, port);
  REQUIRE(wait_until([&] { return healthy(port); }, 20s));

  ConnectionFlood flood(port, 64, ConnectionFlood::Mode::slow_loris);
  const auto attack_started = Clock::now();
  REQUIRE(wait_until([&] { return flood.open_now() == 64; }, 10s));
  enqueue_noops(db, 100);
  CHECK(probe_until_done(db, port, 100, attack_started, 5s) > 0);
  CHECK(count_of(db, "processed_jobs") == 100);
  CHECK(count_of(db, "dead_letters") == 0);
  // The slow connections were cut off and came back, again and again.
  CHECK(flood.connected_total() > 64);

  const ProcessResult r = stop_worker(*worker);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("metrics_starvation: 2,000 idle connections at 1024 open files take no descriptor from exec jobs or the heartbeat") {
  PgFixture db;
  TempDir dir;
  const int port = free_local_port();
  auto worker = start_worker(db, dir, port, 1024);
  REQUIRE(wait_until([&] { return healthy(port); }, 20s));

  ConnectionFlood flood(port, 2000, ConnectionFlood::Mode::idle);
  const auto attack_started = Clock::now();
  // More connections than the worker has descriptors: without a cap they would hold all.
  REQUIRE(wait_until([&] { return flood.connected_total() >= 1100; }, 20s));
  enqueue_noops(db, 200);
  CHECK(probe_until_done(db, port, 200, attack_started, 3s) > 0);
  CHECK(count_of(db, "processed_jobs") == 200);
  const long dead = count_of(db, "dead_letters");
  CHECK_MESSAGE(dead == 0, dead << " dead letter(s), e.g. "
                                << (dead > 0 ? db.scalar<std::string>("SELECT last_error FROM " +
                                                                        db.table("dead_letters") + " LIMIT 1")
                                             : std::string()));

  // The heartbeat reconnects: its connection (the worker's first, opened for its
  // preflight and kept) is ended, and a later heartbeat must still reach the database.
  const std::string heartbeat_backend =
      "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE '%" + db.schema +
      "%' ORDER BY backend_start LIMIT 1";
  REQUIRE(wait_until([&] { return !db.exec(heartbeat_backend).empty(); }, 20s));
  const std::string ended_at = db.scalar<std::string>(
      "SELECT now()::text FROM (SELECT pg_terminate_backend(pid) FROM (" + heartbeat_backend + ") h) t");
  CHECK(wait_until(
      [&] {
        return db.scalar<bool>("SELECT coalesce(max(heartbeat_at) > '" + ended_at + "'::timestamptz, false) FROM " +
                               db.table("workers"));
      },
      30s));
  CHECK(healthy(port));

  const ProcessResult r = stop_worker(*worker);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("metrics_starvation: the worker raises its soft open-file limit to the hard one; exec jobs get the old one") {
  PgFixture db;
  TempDir dir;
  const int port = free_local_port();
  auto worker = start_worker(db, dir, port, 256, 4096);
  REQUIRE(wait_until([&] { return healthy(port); }, 20s));
  CHECK(soft_open_files(worker->pid()) == 4096);  // the worker's own, as the kernel says
  db.exec("SELECT " + db.table("enqueue") + "('limit', '{}')");
  REQUIRE(wait_until([&] { return !dir.read("limit").empty(); }, 20s));
  CHECK(dir.read("limit") == "256\n");

  const ProcessResult r = stop_worker(*worker);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(r.err.find("open-file limit raised from 256 to 4096") != std::string::npos, r.err);
}

}  // TEST_SUITE
