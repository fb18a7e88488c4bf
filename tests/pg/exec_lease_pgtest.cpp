// A full claim of exec jobs on a lease queue, started at once by a real `oncely worker`: the
// process starting 1,000 children must go on renewing its leases while it does.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

// "job_id attempt" per line, as the jobs append them when they start.
std::map<long, std::vector<int>> starts_in(const std::string& text) {
  std::map<long, std::vector<int>> starts;
  std::istringstream lines(text);
  long id = 0;
  int attempt = 0;
  while (lines >> id >> attempt) starts[id].push_back(attempt);
  return starts;
}

std::size_t count_of_text(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("lease") {
  // Each job outlives its 3 s lease (sleep 4), so every one needs renewals while the other
  // 999 are being started; a process that stalls while it starts children (fork copying the
  // page tables of a process of 1,000 threads) renews nothing for seconds and loses them.
  // About 2,000 processes at the peak, and 4 descriptors per running job in the worker (the
  // CLI raises its soft open-file limit to the hard one).
  TEST_CASE("lease: 1,000 exec jobs started at once (sleep 4, lease 3s, concurrency 1000) lose no lease") {
    constexpr int kJobs = 1000;
    PgFixture db;
    TempDir dir;
    const std::string starts_file = dir.file("starts");
    const std::string log_file = dir.file("worker.log");
    nlohmann::json config = nlohmann::json::parse(R"({"shutdown_grace": "1s", "queues": {"default": {"mode": "lease",
      "lease": "3s", "concurrency": 1000, "batch_size": 1000, "poll_interval": "100ms"}}})");
    config["handlers"]["sleeper"] = {
        {"type", "exec"},
        {"env", {{"STARTS", starts_file}}},
        {"command", {"/bin/sh", "-c", R"(echo "$ONCELY_JOB_ID $ONCELY_ATTEMPT" >> "$STARTS"; exec sleep 4)"}}};
    const std::string config_file = dir.write("worker.json", config.dump(), 0644);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind) SELECT 'sleeper' FROM generate_series(1, " +
            std::to_string(kJobs) + ")");

    // The log goes to a file: a worker that loses leases writes more than a pipe holds.
    std::vector<std::string> argv = {"/bin/sh", "-c", "log=$1; shift; exec \"$@\" >\"$log\" 2>&1", "sh", log_file};
    for (const std::string& arg : oncely_cli({"worker", "--config", config_file})) argv.push_back(arg);
    const auto launched = std::chrono::steady_clock::now();
    Process worker(argv, EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});

    // The closest any lease came to running out in the database (run_at of a held job is
    // its expiry): a renewal every lease/3 keeps it near 2 s; a stalled worker's goes below 0.
    std::optional<double> least_margin_s;
    std::optional<double> all_started_s;
    int most_attempts = 0;
    const bool all_done = wait_until(
        [&] {
          const auto row = db.exec(
              "SELECT extract(epoch FROM min(run_at) FILTER (WHERE lease_token IS NOT NULL) - "
              "clock_timestamp())::float8, coalesce(max(attempts), 0), count(*) FROM " +
              db.table("jobs"))[0];
          if (!row[0].is_null()) least_margin_s = std::min(least_margin_s.value_or(1e9), row[0].as<double>());
          most_attempts = std::max(most_attempts, row[1].as<int>());
          if (!all_started_s && starts_in(dir.read("starts")).size() == static_cast<std::size_t>(kJobs)) {
            all_started_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - launched).count();
          }
          return row[2].as<long>() == 0;
        },
        180s);
    const double done_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - launched).count();
    worker.signal(SIGTERM);
    CHECK(worker.wait().exit_code == 0);

    const std::string log = dir.read("worker.log");
    const auto starts = starts_in(dir.read("starts"));
    const long attempts_after_the_first = std::count_if(
        starts.begin(), starts.end(), [](const auto& s) { return s.second.size() != 1 || s.second.front() != 1; });
    MESSAGE("1,000 exec jobs: all started " << all_started_s.value_or(-1) << " s after the worker's launch, all done "
                                            << done_s << " s after it; the least lease margin seen in the database "
                                            << least_margin_s.value_or(-1)
                                            << " s (of 3 s); 'lease lost' lines: " << count_of_text(log, "lease lost"));
    CHECK(all_done);
    CHECK(count_of_text(log, "lease lost") == 0);
    CHECK(count_of_text(log, "lease expired") == 0);
    CHECK(count_of_text(log, "lease stale") == 0);
    CHECK(most_attempts == 1);
    CHECK(starts.size() == static_cast<std::size_t>(kJobs));
    CHECK(attempts_after_the_first == 0);
    CHECK(count_of(db, "processed_jobs") == kJobs);
    CHECK(count_of(db, "dead_letters") == 0);
    REQUIRE(least_margin_s.has_value());
    CHECK(*least_margin_s > 0);
  }

}  // TEST_SUITE
