#pragma once
// What the starvation tests of the HTTP endpoints share (metrics_starvation_pgtest.cpp,
// console_starvation_pgtest.cpp): a real `oncely worker` running exec jobs and a real
// `oncely web`, each under an open-file limit when asked, and a record of probes that must
// each be answered 200 within a deadline while ConnectionFlood (http_attack.hpp) attacks.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "support/http_attack.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

namespace oncely::test {

/// The oncely binary with `args`, under prlimit's open-file limit `soft`:`hard` when
/// `soft` > 0 (hard = soft when not given: the program cannot raise it).
inline std::vector<std::string> oncely_with_open_files(std::vector<std::string> args, int soft = 0, int hard = 0) {
  std::vector<std::string> argv;
  if (soft > 0) {
    argv = {"/usr/bin/prlimit", "--nofile=" + std::to_string(soft) + ":" + std::to_string(hard > 0 ? hard : soft),
            "--"};
  }
  for (std::string& a : oncely_cli(std::move(args))) argv.push_back(std::move(a));
  return argv;
}

/// `oncely worker` on `db`'s schema, serving metrics on 127.0.0.1:`metrics_port` when
/// given. Handlers: noop (/bin/true) and limit, which writes the program's soft open-file
/// limit to `dir`/limit. Queue default polls every 100 ms; max_attempts 1, so an attempt
/// lost (to EMFILE, say) is a dead letter.
inline std::unique_ptr<Process> start_exec_worker(const PgFixture& db, const TempDir& dir,
                                                  std::optional<int> metrics_port, int soft = 0, int hard = 0) {
  const std::string config = dir.write("worker.json", R"({"queues": {"default": {"poll_interval": "100ms",
      "max_attempts": 1}}, "handlers": {"noop": {"type": "exec", "command": ["/bin/true"]},
      "limit": {"type": "exec", "command": ["/bin/sh", "-c", "ulimit -n > \"$DIR/limit\""],
                "env": {"DIR": ")" + dir.path().string() + R"("}}}})",
                                       0644);
  std::vector<std::string> args = {"worker", "--config", config};
  if (metrics_port) args.insert(args.end(), {"--metrics-addr", "127.0.0.1:" + std::to_string(*metrics_port)});
  return std::make_unique<Process>(oncely_with_open_files(std::move(args), soft, hard),
                                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
}

/// `oncely web` on `db`'s schema at 127.0.0.1:`port` (no login: loopback).
inline std::unique_ptr<Process> start_console(const PgFixture& db, int port, int soft = 0) {
  return std::make_unique<Process>(oncely_with_open_files({"web", "--addr", "127.0.0.1:" + std::to_string(port)}, soft),
                                   EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
}

inline void enqueue_noops(PgFixture& db, int count) {
  db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'noop' FROM generate_series(1, " + std::to_string(count) +
          ")");
}

/// Probes of one path, each to be answered 200 within `deadline`; a failed one is
/// recorded with how it ended (at the deadline, or cut short: evicted?), to tell the two
/// apart when one fails.
class Probes {
 public:
  Probes(int port, std::string path, std::chrono::milliseconds deadline)
      : port_(port), path_(std::move(path)), deadline_(deadline) {}

  /// One probe; whether it was answered 200 in time.
  bool probe() {
    const auto asked = std::chrono::steady_clock::now();
    const auto answer = get_with_deadline(port_, path_, deadline_);
    ++count_;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked);
    if (answer && answer->status == 200) {
      slowest_answered_ = std::max(slowest_answered_, took);
      return true;
    }
    ++failed_;
    last_failure_ = std::to_string(took.count()) + " ms, " +
                    (answer ? "status " + std::to_string(answer->status) : std::string("no answer"));
    return false;
  }

  [[nodiscard]] int count() const { return count_; }
  [[nodiscard]] int failed() const { return failed_; }
  /// The longest a probe answered 200 took.
  [[nodiscard]] std::chrono::milliseconds slowest_answered() const { return slowest_answered_; }
  /// "2 of 257 /healthz probes got no 200 within 1000 ms (the last: 1000 ms, no answer;
  /// the slowest 200: 266 ms)"
  [[nodiscard]] std::string failures() const {
    return std::to_string(failed_) + " of " + std::to_string(count_) + " " + path_ + " probes got no 200 within " +
           std::to_string(deadline_.count()) + " ms (the last: " + last_failure_ +
           "; the slowest 200: " + std::to_string(slowest_answered_.count()) + " ms)";
  }

 private:
  int port_;
  std::string path_;
  std::chrono::milliseconds deadline_;
  int count_ = 0;
  int failed_ = 0;
  std::chrono::milliseconds slowest_answered_{0};
  std::string last_failure_;
};

/// Probes back to back until `count` jobs are done (completed or dead-lettered) and the
/// attack has lasted at least `at_least` (beyond the endpoint's 2 s request deadline, so
/// that its connections have turned over); every probe must pass. Returns the number of
/// probes (0: the jobs did not finish within 60 s).
inline int probe_until_done(Probes& probes, PgFixture& db, long count,
                            std::chrono::steady_clock::time_point attack_started,
                            std::chrono::steady_clock::duration at_least) {
  const bool done = wait_until(
      [&] {
        probes.probe();
        return std::chrono::steady_clock::now() - attack_started >= at_least &&
               count_of(db, "processed_jobs") + count_of(db, "dead_letters") >= count;
      },
      std::chrono::seconds(60));
  CHECK_MESSAGE(probes.failed() == 0, probes.failures());
  return done ? probes.count() : 0;
}

/// The jobs' outcome after probe_until_done: every one completed, no dead letter.
inline void check_all_completed(PgFixture& db, long count) {
  CHECK(count_of(db, "processed_jobs") == count);
  const long dead = count_of(db, "dead_letters");
  CHECK_MESSAGE(dead == 0, dead << " dead letter(s), e.g. "
                                << (dead > 0 ? db.scalar<std::string>("SELECT last_error FROM " +
                                                                      db.table("dead_letters") + " LIMIT 1")
                                             : std::string()));
}

/// SIGTERM, then its result once it exited (SIGKILL after 20 s, failing the test).
inline ProcessResult stop_process(Process& process) {
  process.signal(SIGTERM);
  const bool exited = wait_until([&] { return process.exited(); }, std::chrono::seconds(20));
  CHECK_MESSAGE(exited, "the process did not exit within 20 s of SIGTERM");
  if (!exited) process.signal(SIGKILL);
  return process.wait();
}

}  // namespace oncely::test
