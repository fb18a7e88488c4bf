// The pure parts of queue and job control: check's paused-queue finding, the names of job
// states and conflict modes, and the command lines of queue, jobs and unique enqueue.
#include <doctest/doctest.h>

#include <cstdlib>

#include "cli/app.hpp"
#include "oncely/errors.hpp"
#include "oncely/jobs.hpp"
#include "oncely/stats.hpp"
#include "store/job_control.hpp"
#include "support/parsed_cli.hpp"

TEST_CASE(
    "queue_control: check warns about a queue paused longer than the threshold (1 h by default), with its reason") {
  oncely::Stats stats;
  oncely::QueueStats q;
  q.queue = "webhooks";
  q.paused = true;
  q.paused_for_s = 3599;
  q.pause_reason = "incident 42";
  stats.queues = {q};
  CHECK(oncely::check(stats, {}).empty());
  stats.queues[0].paused_for_s = 7200;
  const auto findings = oncely::check(stats, {});
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].status == oncely::CheckStatus::warning);
  CHECK(findings[0].message == "WARNING: queue webhooks has been paused for 2h (> 1h): incident 42");
  oncely::CheckThresholds off;
  off.paused_warning_s.reset();
  CHECK(oncely::check(stats, off).empty());
}

TEST_CASE("queue_control: job states and conflict modes by name; anything else is one clear error") {
  for (const auto s :
       {oncely::JobState::ready, oncely::JobState::scheduled, oncely::JobState::retrying, oncely::JobState::running}) {
    CHECK(oncely::parse_job_state(oncely::to_string(s)) == s);
  }
  CHECK_THROWS_WITH_AS(oncely::parse_job_state("done"),
                       "state: unknown state 'done' (expected ready, scheduled, retrying, running or waiting)",
                       oncely::ConfigError);
  CHECK(oncely::detail::parse_on_conflict("replace", "on_conflict") == oncely::OnConflict::replace);
  CHECK_THROWS_WITH_AS(oncely::detail::parse_on_conflict("merge", "--on-conflict"),
                       "--on-conflict: must be skip, replace or error, not 'merge'", oncely::ConfigError);
}

TEST_CASE("queue_control: the command lines of queue, jobs and unique enqueue bind their options") {
  unsetenv("DATABASE_URL");
  {
    oncely::test::ParsedCli p({"queue", "pause", "webhooks", "--reason", "incident"});
    REQUIRE_FALSE(p.exit);
    CHECK(p.cli->queue.action == oncely::cli::QueueAction::pause);
    CHECK(p.cli->queue.queue == "webhooks");
    CHECK(p.cli->queue.reason == std::optional<std::string>("incident"));
  }
  {
    oncely::test::ParsedCli p({"jobs", "list", "--queue", "q", "--state", "retrying", "--error", "503", "--older-than",
                               "1h", "--limit", "10", "--after", "42", "--json"});
    REQUIRE_FALSE(p.exit);
    const auto& o = p.cli->jobs;
    CHECK(o.action == oncely::cli::JobsAction::list);
    CHECK(o.state == std::optional<std::string>("retrying"));
    CHECK(o.after == std::optional<std::int64_t>(42));
    CHECK(o.limit == 10);
  }
  {
    oncely::test::ParsedCli p({"jobs", "cancel", "--id", "3,4", "--id", "9", "--dry-run"});
    REQUIRE_FALSE(p.exit);
    CHECK(p.cli->jobs.ids == std::vector<std::int64_t>{3, 4, 9});
    CHECK(p.cli->jobs.dry_run);
  }
  {
    // Refused before connecting: nothing listens at this address.
    oncely::test::ParsedCli p({"jobs", "cancel", "--database-url", "postgresql://x@127.0.0.1:1/none"});
    REQUIRE_FALSE(p.exit);
    CHECK(p.dispatch() == oncely::cli::kExitUsage);
    CHECK(p.err.str() == "oncely: error: refusing to cancel every job: give --id or a filter, or --all\n");
  }
  {
    oncely::test::ParsedCli p(
        {"enqueue", "mail", "--on-conflict", "replace", "--database-url", "postgresql://x@127.0.0.1:1/none"});
    REQUIRE_FALSE(p.exit);
    CHECK(p.dispatch() == oncely::cli::kExitUsage);
    CHECK(p.err.str() == "oncely: error: --on-conflict: needs --unique-key\n");
  }
}
