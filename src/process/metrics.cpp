#include "process/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "oncely/errors.hpp"
#include "support/telemetry.hpp"

namespace oncely::detail {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Seconds: 100 µs .. 5 min, for handlers and for waiting in the queue alike.
const Histogram::BucketBoundaries kSecondsBuckets = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                     0.5,    1,      5,     10,    30,   60,   300};

}  // namespace

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : completed(counter(r, "oncely_jobs_completed_total", "Jobs whose handler succeeded and committed")),
        failed(counter(r, "oncely_jobs_failed_total", "Failed attempts (retried or dead-lettered)")),
        retried(counter(r, "oncely_jobs_retried_total", "Failed attempts that will run again")),
        dead_lettered(counter(r, "oncely_jobs_dead_lettered_total", "Jobs moved to dead_letters")),
        deduplicated(counter(r, "oncely_jobs_deduplicated_total", "Duplicate jobs skipped without running")),
        crashed(counter(r, "oncely_jobs_crashed_total", "Attempts found unfinished because their worker died")),
        lease_stale(
            counter(r, "oncely_lease_stale_total",
                    "Lease-mode attempts that finished after their lease was lost: their outcome changed nothing")),
        attempts(counter(r, "oncely_job_attempts_total",
                         "Attempts that ended in an outcome: completed, retried or dead-lettered")),
        run_seconds(prometheus::BuildHistogram().Name("oncely_job_run_seconds").Help("Handler run time").Register(r)),
        wait_seconds(prometheus::BuildHistogram()
                         .Name("oncely_job_wait_seconds")
                         .Help("Time from created_at to the start of the attempt")
                         .Register(r)),
        claim_seconds(prometheus::BuildHistogram()
                          .Name("oncely_claim_seconds")
                          .Help("Time of each claim statement (long: dead index entries at the queue's head)")
                          .Register(r)),
        in_flight(gauge(r, "oncely_jobs_in_flight", "Handlers running in this process")),
        depth(gauge(r, "oncely_queue_depth", "Jobs in the queue (database)")),
        oldest_ready(gauge(r, "oncely_queue_oldest_ready_seconds", "Wait of the oldest ready job (database)")),
        dead_letters(gauge(r, "oncely_dead_letters", "Dead letters not yet replayed (database)")),
        held_by_limit(gauge(r, "oncely_jobs_held_by_limit",
                            "Ready jobs a queue's limits across workers keep waiting now (database)")),
        dropped_connections(counter(r, "oncely_metrics_connections_dropped_total",
                                    "Connections to this endpoint closed unanswered, by reason")),
        otel_spans(counter(r, "oncely_otel_spans_total",
                           "OpenTelemetry spans by what became of them: exported, or dropped (queue_full, "
                           "export_failed)")),
        otel_failed_exports(
            counter(r, "oncely_otel_failed_exports_total", "OTLP exports (POSTs) that failed, their spans dropped")) {}

  static Family<Counter>& counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r);
  }
  static Family<Gauge>& gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r);
  }

  Family<Counter>& completed;
  Family<Counter>& failed;
  Family<Counter>& retried;
  Family<Counter>& dead_lettered;
  Family<Counter>& deduplicated;
  Family<Counter>& crashed;
  Family<Counter>& lease_stale;
  Family<Counter>& attempts;
  Family<Histogram>& run_seconds;
  Family<Histogram>& wait_seconds;
  Family<Histogram>& claim_seconds;
  Family<Gauge>& in_flight;
  Family<Gauge>& depth;
  Family<Gauge>& oldest_ready;
  Family<Gauge>& dead_letters;
  Family<Gauge>& held_by_limit;
  Family<Counter>& dropped_connections;
  Family<Counter>& otel_spans;
  Family<Counter>& otel_failed_exports;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()), families_(std::make_unique<Families>(*registry_)) {}
Metrics::~Metrics() = default;

void Metrics::declare(const std::vector<std::string>& queues, const std::vector<std::string>& kinds) {
  Families& f = *families_;
  for (const std::string& queue : queues) {
    f.in_flight.Add({{"queue", queue}});
    for (const std::string& kind : kinds) {
      const prometheus::Labels labels{{"queue", queue}, {"kind", kind}};
      for (Family<Counter>* family :
           {&f.completed, &f.failed, &f.retried, &f.dead_lettered, &f.deduplicated, &f.crashed, &f.attempts}) {
        family->Add(labels);  // created at 0
      }
    }
  }
}

void Metrics::observe(const JobEvent& e) {
  const prometheus::Labels labels{{"queue", e.queue}, {"kind", e.kind}};
  Families& f = *families_;
  switch (e.outcome) {
    case JobEvent::Outcome::completed:
      f.completed.Add(labels).Increment();
      f.attempts.Add(labels).Increment();
      f.run_seconds.Add(labels, kSecondsBuckets).Observe(std::chrono::duration<double>(e.run_time).count());
      f.wait_seconds.Add(labels, kSecondsBuckets).Observe(std::chrono::duration<double>(e.wait).count());
      break;
    case JobEvent::Outcome::retried:
      f.retried.Add(labels).Increment();
      f.failed.Add(labels).Increment();
      f.attempts.Add(labels).Increment();
      break;
    case JobEvent::Outcome::dead_lettered:
      f.dead_lettered.Add(labels).Increment();
      f.failed.Add(labels).Increment();
      f.attempts.Add(labels).Increment();
      break;
    case JobEvent::Outcome::deduplicated: f.deduplicated.Add(labels).Increment(); break;
    case JobEvent::Outcome::crashed: f.crashed.Add(labels).Increment(); break;
    case JobEvent::Outcome::lease_stale: f.lease_stale.Add(labels).Increment(); break;
  }
}

void Metrics::observe_claim(const std::string& queue, std::chrono::steady_clock::duration took) {
  families_->claim_seconds.Add({{"queue", queue}}, kSecondsBuckets)
      .Observe(std::chrono::duration<double>(took).count());
}

void Metrics::set_in_flight(const std::string& queue, int jobs) {
  families_->in_flight.Add({{"queue", queue}}).Set(jobs);
}

void Metrics::set_queue_stats(const Stats& stats) {
  std::lock_guard lock(exported_mutex_);
  for (const QueueStats& q : stats.queues) {
    exported_queues_.insert(q.queue);
    const prometheus::Labels labels{{"queue", q.queue}};
    families_->depth.Add(labels).Set(static_cast<double>(q.depth));
    families_->oldest_ready.Add(labels).Set(q.oldest_ready_age_s.value_or(0));
    families_->dead_letters.Add(labels).Set(static_cast<double>(q.dead_letters));
    // A queue without limits has no series (a 0 would say it had some).
    if (q.held_by_limit) families_->held_by_limit.Add(labels).Set(static_cast<double>(*q.held_by_limit));
  }
}

void Metrics::clear_queue_stats() {
  std::lock_guard lock(exported_mutex_);
  for (const std::string& queue : exported_queues_) {
    const prometheus::Labels labels{{"queue", queue}};
    for (Family<Gauge>* family :
         {&families_->depth, &families_->oldest_ready, &families_->dead_letters, &families_->held_by_limit}) {
      family->Remove(&family->Add(labels));
    }
  }
  exported_queues_.clear();
}

void Metrics::count_dropped_connection(const std::string& reason) {
  families_->dropped_connections.Add({{"reason", reason}}).Increment();
}

std::string Metrics::render() const {
  if (const Tracer* tracer = process_tracer()) sync_export_counts(tracer->counts());
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void Metrics::sync_export_counts(const ExportCounts& now) const {
  // The exporter counts on its own thread; the families catch up at each scrape.
  std::lock_guard lock(exported_mutex_);
  Families& f = *families_;
  const auto add = [](Counter& c, std::uint64_t total, std::uint64_t& seen) {
    if (total > seen) c.Increment(static_cast<double>(total - seen));
    seen = total;
  };
  add(f.otel_spans.Add({{"result", "exported"}}), now.exported, export_seen_.exported);
  add(f.otel_spans.Add({{"result", "queue_full"}}), now.dropped_queue_full, export_seen_.dropped_queue_full);
  add(f.otel_spans.Add({{"result", "export_failed"}}), now.dropped_export_failed, export_seen_.dropped_export_failed);
  add(f.otel_failed_exports.Add({}), now.failed_exports, export_seen_.failed_exports);
}

}  // namespace oncely::detail
