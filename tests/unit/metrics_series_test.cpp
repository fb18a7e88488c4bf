// The metrics a failure-rate alert divides by exist before the first outcome: every queue
// x kind counter at 0, and oncely_job_attempts_total counting every outcome of a handler.
// Before, a queue failing every job had no completed_total series, so the documented
// ratio failed / (failed + completed) was empty and its alert could never fire.
#include <doctest/doctest.h>

#include <string>

#include "process/metrics.hpp"

using oncely::JobEvent;

namespace {

bool has(const std::string& body, const std::string& line) { return body.find(line + "\n") != std::string::npos; }

JobEvent event(JobEvent::Outcome outcome) {
  JobEvent e;
  e.queue = "payments";
  e.kind = "charge";
  e.outcome = outcome;
  return e;
}

}  // namespace

TEST_CASE("metrics: every configured queue x kind is exported at 0 before any outcome") {
  oncely::detail::Metrics metrics;
  metrics.declare({"payments", "mail"}, {"charge", "send"});
  const std::string body = metrics.render();
  INFO(body);
  for (const char* queue : {"payments", "mail"}) {
    for (const char* kind : {"charge", "send"}) {
      const std::string labels = std::string("{kind=\"") + kind + "\",queue=\"" + queue + "\"} 0";
      for (const char* family : {"oncely_jobs_completed_total", "oncely_jobs_failed_total", "oncely_jobs_retried_total",
                                 "oncely_jobs_dead_lettered_total", "oncely_jobs_deduplicated_total",
                                 "oncely_jobs_crashed_total", "oncely_job_attempts_total"}) {
        CHECK(has(body, family + labels));
      }
    }
    CHECK(has(body, std::string("oncely_jobs_in_flight{queue=\"") + queue + "\"} 0"));
  }
}

TEST_CASE("metrics: attempts_total counts completions and failures, so a queue failing everything is at 100 %") {
  oncely::detail::Metrics metrics;
  metrics.declare({"payments"}, {"charge"});
  metrics.observe(event(JobEvent::Outcome::retried));
  metrics.observe(event(JobEvent::Outcome::dead_lettered));
  metrics.observe(event(JobEvent::Outcome::deduplicated));  // never ran: no attempt
  const std::string body = metrics.render();
  INFO(body);
  CHECK(has(body, R"(oncely_job_attempts_total{kind="charge",queue="payments"} 2)"));
  CHECK(has(body, R"(oncely_jobs_failed_total{kind="charge",queue="payments"} 2)"));
  CHECK(has(body, R"(oncely_jobs_completed_total{kind="charge",queue="payments"} 0)"));
  metrics.observe(event(JobEvent::Outcome::completed));
  CHECK(has(metrics.render(), R"(oncely_job_attempts_total{kind="charge",queue="payments"} 3)"));
}
