// `oncely check`: the numbers of `stats` judged against thresholds, for a monitoring system.
// The thresholds' defaults are the library's (CheckThresholds); --help shows them from there.

#include <cstdio>
#include <map>
#include <ostream>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "oncely/errors.hpp"
#include "support/alarm_limits.hpp"
#include "support/duration.hpp"
#include "support/text.hpp"

namespace oncely::cli {
namespace {

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

/// " (default: ...)" for a help line; a threshold not set is not checked.
template <typename T, typename Show>
std::string default_of(const std::optional<T>& value, Show show) {
  return " (default: " + (value ? show(*value) : std::string("not checked")) + ")";
}

std::string count(long v) { return std::to_string(v); }
std::string percent(double fraction) { return number(fraction * 100); }
std::string duration(double seconds) {
  return detail::format_duration(std::chrono::milliseconds(static_cast<long long>(seconds * 1000)));
}

// The ranges of the worker file's "alarms" (alarm_limits.hpp).
constexpr IntegerRule kDeadLetters{"a number of dead letters", 0, detail::kMaxAlarmCount};
constexpr IntegerRule kAttempts{"a number of attempts", 0, detail::kMaxAlarmCount};
constexpr DecimalRule kPercent{"a percentage", 0, detail::kMaxAlarmPercent};
constexpr DecimalRule kPerMinute{"dead letters per minute", 0, detail::kMaxAlarmPerMinute};

}  // namespace

void add_check(Cli& cli) {
  CheckOptions& o = cli.check;
  const CheckThresholds d;
  CLI::App* cmd =
      cli.app.add_subcommand("check", "exit 0/1/2 (ok/warning/critical), 3 when it cannot tell; one line per finding");
  cmd->add_option("--queue,-q", o.queue, "only this queue");
  cmd->add_option("--config", o.config_path,
                  "a worker configuration: each queue is judged by its own \"alarms\" (defaults for the rest); "
                  "the threshold options below override them")
      ->type_name("FILE");
  cmd->add_option("--dead-letters-warning", o.dead_letters_warning,
                  "dead letters (not replayed) above this: warning" + default_of(d.dead_letters_warning, count))
      ->transform(integer(kDeadLetters));
  cmd->add_option("--dead-letters-critical", o.dead_letters_critical,
                  "... above this: critical" + default_of(d.dead_letters_critical, count))
      ->transform(integer(kDeadLetters));
  cmd->add_option("--failure-rate-warning", o.failure_rate_warning_pct,
                  "failed attempts in the last 5 minutes above this percentage: warning" +
                      default_of(d.failure_rate_warning, percent))
      ->transform(decimal(kPercent));
  cmd->add_option("--failure-rate-critical", o.failure_rate_critical_pct,
                  "... above this percentage: critical" + default_of(d.failure_rate_critical, percent))
      ->transform(decimal(kPercent));
  cmd->add_option("--failure-rate-min-attempts", o.failure_rate_min_attempts,
                  "judge the failure rate only with at least this many attempts in 5 minutes" +
                      default_of(std::optional<long>(d.failure_rate_min_attempts), count))
      ->transform(integer(kAttempts));
  cmd->add_option("--max-age-warning", o.max_age_warning,
                  "oldest ready job waiting longer than this: warning" + default_of(d.max_age_warning_s, duration))
      ->type_name("DURATION");
  cmd->add_option("--max-age-critical", o.max_age_critical,
                  "... longer than this: critical" + default_of(d.max_age_critical_s, duration))
      ->type_name("DURATION");
  cmd->add_option("--dead-letter-growth-warning", o.growth_warning,
                  "new dead letters per minute (15-minute average) above this: warning" +
                      default_of(d.dead_letter_growth_warning, number))
      ->transform(decimal(kPerMinute));
  cmd->add_option("--dead-letter-growth-critical", o.growth_critical,
                  "... above this: critical" + default_of(d.dead_letter_growth_critical, number))
      ->transform(decimal(kPerMinute));
  cmd->add_option(
         "--paused-warning", o.paused_warning,
         "a queue paused (oncely queue pause) for longer than this: warning" + default_of(d.paused_warning_s, duration))
      ->type_name("DURATION");
  cli.check_cmd = cmd;
}

CheckThresholds check_thresholds(const CheckOptions& o, CheckThresholds t) {
  const auto put = [](auto& threshold, const auto& option) {
    if (option) threshold = *option;
  };
  put(t.dead_letters_warning, o.dead_letters_warning);
  put(t.dead_letters_critical, o.dead_letters_critical);
  if (o.failure_rate_warning_pct) t.failure_rate_warning = *o.failure_rate_warning_pct / 100;
  if (o.failure_rate_critical_pct) t.failure_rate_critical = *o.failure_rate_critical_pct / 100;
  put(t.failure_rate_min_attempts, o.failure_rate_min_attempts);
  const auto seconds = [](const std::string& text, const char* option) {
    try {
      return static_cast<double>(detail::parse_duration(text).count()) / 1000.0;
    } catch (const ConfigError& e) {
      throw ConfigError(option, e.what());
    }
  };
  if (o.max_age_warning) t.max_age_warning_s = seconds(*o.max_age_warning, "--max-age-warning");
  if (o.max_age_critical) t.max_age_critical_s = seconds(*o.max_age_critical, "--max-age-critical");
  if (o.paused_warning) t.paused_warning_s = seconds(*o.paused_warning, "--paused-warning");
  put(t.dead_letter_growth_warning, o.growth_warning);
  put(t.dead_letter_growth_critical, o.growth_critical);
  return t;
}

int run_check(const CheckOptions& o, const Globals& globals, Io io) {
  // Per queue with --config: the file's alarms (the defaults for a queue it does not
  // name), the options over them. Both are read before the database, so a bad file or
  // option is a usage error (UNKNOWN), never a finding.
  std::map<std::string, CheckThresholds> per_queue;
  CheckThresholds others = check_thresholds(o);
  if (o.config_path) {
    const Config config = Config::load(*o.config_path);
    for (const auto& [name, queue] : config.queues) per_queue[name] = check_thresholds(o, thresholds_of(queue.alarms));
    others = check_thresholds(o, thresholds_of(AlarmConfig{}));
  }
  Stats stats;
  try {
    stats = collect_stats(DatabaseUrl(globals.database_url), globals.schema, o.queue);
  } catch (const Error& e) {
    io.out << "UNKNOWN: " << detail::printable(e.what()) << "\n";
    return static_cast<int>(CheckStatus::unknown);
  }
  const auto findings = check_per_queue(stats, [&](const std::string& queue) {
    const auto it = per_queue.find(queue);
    return it == per_queue.end() ? others : it->second;
  });
  if (findings.empty()) {
    io.out << "OK: " << stats.queues.size() << " queue(s), " << stats.workers.size() << " worker(s), no findings\n";
    return static_cast<int>(CheckStatus::ok);
  }
  for (const CheckFinding& f : findings) io.out << f.message << "\n";
  return static_cast<int>(findings.front().status);
}

}  // namespace oncely::cli
