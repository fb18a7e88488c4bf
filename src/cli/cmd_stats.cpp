#include <cstdio>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "oncely/errors.hpp"
#include "oncely/stats.hpp"
#include "support/duration.hpp"
#include "support/text.hpp"

namespace oncely::cli {
namespace {

nlohmann::json rates_json(const OutcomeRates& r) {
  return {{"completed", r.completed},
          {"retried", r.retried},
          {"dead_lettered", r.dead_lettered},
          {"deduplicated", r.deduplicated},
          {"crashed", r.crashed}};
}

nlohmann::json optional_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }
nlohmann::json optional_json(const std::optional<long>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, v == static_cast<long long>(v) ? "%.0f" : "%.1f", v);
  return buffer;
}

std::string three(double a, double b, double c) { return number(a) + " / " + number(b) + " / " + number(c); }

std::string age(double seconds) {
  return detail::format_duration(std::chrono::milliseconds(static_cast<long long>(seconds)) * 1000);
}

}  // namespace

void add_stats(Cli& cli) {
  CLI::App* cmd =
      cli.app.add_subcommand("stats", "queue depth, ages, outcome rates, failure rate, dead letters, workers");
  cmd->add_flag("--json", cli.stats.json, "print JSON");
  cmd->add_option("--queue,-q", cli.stats.queue, "only this queue");
  cli.stats_cmd = cmd;
}

int run_stats(const StatsOptions& options, const Globals& globals, Io io) {
  const Stats stats = collect_stats(DatabaseUrl(globals.database_url), globals.schema, options.queue);
  if (options.json) {
    nlohmann::json out = {{"queues", nlohmann::json::array()}, {"workers", nlohmann::json::array()}};
    for (const QueueStats& q : stats.queues) {
      out["queues"].push_back({{"queue", q.queue},
                               {"depth", q.depth},
                               {"ready", q.ready},
                               {"scheduled", q.scheduled},
                               {"waiting", q.waiting},
                               {"retrying", q.retrying},
                               {"in_flight", q.in_flight},
                               {"oldest_ready_age_s", optional_json(q.oldest_ready_age_s)},
                               {"per_minute",
                                {{"1m", rates_json(q.per_minute_1m)},
                                 {"5m", rates_json(q.per_minute_5m)},
                                 {"15m", rates_json(q.per_minute_15m)}}},
                               {"attempts_5m", q.attempts_5m},
                               {"failure_rate_5m", optional_json(q.failure_rate_5m)},
                               {"mean_run_ms_5m", optional_json(q.mean_run_ms_5m)},
                               {"dead_letters", q.dead_letters},
                               {"dead_letters_per_minute_15m", q.dead_letters_per_minute_15m},
                               {"paused", q.paused},
                               {"paused_for_s", optional_json(q.paused_for_s)},
                               {"pause_reason", q.pause_reason ? nlohmann::json(*q.pause_reason) : nlohmann::json()},
                               {"running_under_limits", optional_json(q.running_under_limits)},
                               {"held_by_limit", optional_json(q.held_by_limit)},
                               {"keys_at_limit", optional_json(q.keys_at_limit)}});
    }
    for (const WorkerInfo& w : stats.workers) {
      out["workers"].push_back({{"id", w.id},
                                {"host", w.host},
                                {"pid", w.pid},
                                {"queues", w.queues},
                                {"started_at", w.started_at},
                                {"heartbeat_age_s", w.heartbeat_age_s},
                                {"jobs_in_flight", w.jobs_in_flight}});
    }
    io.out << out.dump(2) << "\n";
    return kExitOk;
  }
  if (stats.queues.empty()) io.out << "no queues: no jobs, no recent outcomes, no dead letters, no workers\n";
  for (const QueueStats& q : stats.queues) {
    io.out << "queue " << q.queue;
    if (q.paused) {
      io.out << " PAUSED" << (q.paused_for_s ? " for " + age(*q.paused_for_s) : "")
             << (q.pause_reason ? ": " + detail::printable(*q.pause_reason) : "");
    }
    io.out << "\n"
           << "  jobs          " << q.depth << " (ready " << q.ready << ", scheduled " << q.scheduled << ", retrying "
           << q.retrying << ", in flight " << q.in_flight
           << (q.waiting > 0 ? ", waiting for parents " + std::to_string(q.waiting) : std::string()) << ")";
    if (q.oldest_ready_age_s) io.out << "; oldest ready has waited " << age(*q.oldest_ready_age_s);
    io.out << "\n";
    if (q.held_by_limit) io.out << "  limits        " << held_by_limits_line(q) << "\n";
    io.out << "  per minute    over 1m / 5m / 15m\n"
           << "    completed     "
           << three(q.per_minute_1m.completed, q.per_minute_5m.completed, q.per_minute_15m.completed) << "\n"
           << "    retried       " << three(q.per_minute_1m.retried, q.per_minute_5m.retried, q.per_minute_15m.retried)
           << "\n"
           << "    dead-lettered "
           << three(q.per_minute_1m.dead_lettered, q.per_minute_5m.dead_lettered, q.per_minute_15m.dead_lettered)
           << "\n"
           << "    deduplicated  "
           << three(q.per_minute_1m.deduplicated, q.per_minute_5m.deduplicated, q.per_minute_15m.deduplicated) << "\n"
           << "    crashed       " << three(q.per_minute_1m.crashed, q.per_minute_5m.crashed, q.per_minute_15m.crashed)
           << "\n"
           << "  failure rate  ";
    if (q.failure_rate_5m) {
      io.out << number(*q.failure_rate_5m * 100) << " % of " << q.attempts_5m << " attempts (5m)";
    } else {
      io.out << "- (no attempts in 5m)";
    }
    if (q.mean_run_ms_5m) io.out << "; mean run " << number(*q.mean_run_ms_5m) << " ms";
    io.out << "\n  dead letters  " << q.dead_letters << " (growing " << number(q.dead_letters_per_minute_15m)
           << "/min over 15m)\n";
  }
  io.out << "workers " << stats.workers.size() << "\n";
  for (const WorkerInfo& w : stats.workers) {
    std::string queues;
    for (const auto& name : w.queues) queues += (queues.empty() ? "" : ",") + name;
    io.out << "  #" << w.id << " " << w.host << " pid " << w.pid << " queues " << queues << "; heartbeat "
           << age(w.heartbeat_age_s) << " ago; " << w.jobs_in_flight << " in flight; since " << w.started_at << "\n";
  }
  return kExitOk;
}

}  // namespace oncely::cli
