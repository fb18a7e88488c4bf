#include "oncely/config.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <system_error>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "support/alarm_limits.hpp"
#include "support/config_fields.hpp"
#include "support/cron_config.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/queue_policy.hpp"
#include "support/text.hpp"

namespace oncely {
namespace {

using detail::integer_in;
using detail::kMaxAlarmCount;
using detail::kMaxAlarmPercent;
using detail::kMaxAlarmPerMinute;

using detail::child_path;
using detail::printable;

using std::chrono::milliseconds;
using namespace std::chrono_literals;

// The jobs table holds at most 128 bytes of queue name (schema version 5, store.hpp).
constexpr std::size_t kMaxQueueNameLength = 128;

// The documented ranges (docs/configuration.md, the key table). Each upper bound keeps the value
// inside what the code and the server can hold: statement_timeout is an int of
// milliseconds (24.8 days at most); `now() - dedup_window` must stay a timestamp; a
// condition-variable wait must not overflow the steady clock.
struct DurationRange {
  milliseconds min;
  milliseconds max;
  std::string_view spelled;  // as docs/configuration.md writes it
};
constexpr DurationRange kShutdownGrace{1s, 24h, "between 1s and 24h"};
constexpr DurationRange kDedupWindow{1min, std::chrono::hours(24 * 3650), "between 1m and 3650d"};
constexpr DurationRange kJobTimeout{1s, 24h, "between 1s and 24h"};
// Lease mode holds no transaction, so an attempt may run for days; the lease is renewed
// every lease/3, and below 3s a renewal every second would be most of the mode's cost.
constexpr DurationRange kLeaseJobTimeout{1s, std::chrono::hours(24 * 7), "between 1s and 7d"};
constexpr DurationRange kLease{3s, 1h, "between 3s and 1h"};
constexpr int kMaxLeaseConcurrency = 2000;
constexpr int kMaxLeaseConnections = 16;
constexpr DurationRange kPollInterval{10ms, 1h, "between 10ms and 1h"};
constexpr DurationRange kBackoffDelay{0ms, std::chrono::hours(24 * 30), "between 0ms and 30d"};
constexpr DurationRange kAlarmAge{1s, std::chrono::hours(24 * 30), "between 1s and 30d"};
constexpr int kMaxConcurrency = 256;
constexpr int kMaxBatchSize = 1000;
constexpr int kMaxAttempts = 1000;
constexpr int kMaxLimit = 100000;             // queue_limits_concurrency_range, ..._per_key_concurrency_range
constexpr std::size_t kMaxKeyPointer = 256;   // queue_limits_key_form
constexpr int kMaxRateCount = 10000;          // queue_limits_rate_form: a window row keeps this many starts
constexpr milliseconds kMaxRatePeriod = 24h;  // queue_limits_rate_form
// A rate below this leaves most of an hour between jobs (the limiter's wait is computed in
// nanoseconds); above the maximum the token bucket's count is no longer an exact integer.
constexpr double kMinRate = 0.001;
constexpr double kMaxRate = 1e6;

// A ConfigError's message without its "path: " prefix, printable, to raise it again at another path.
std::string reason(const ConfigError& e) { return printable(e.reason()); }

const nlohmann::json& require_object(const nlohmann::json& value, const std::string& path) {
  if (!value.is_object()) throw ConfigError(path, "must be an object");
  return value;
}

// A duration of any length; Config::validate() checks it against its range.
milliseconds duration_at(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) throw ConfigError(path, "must be a duration string such as \"5s\"");
  try {
    return detail::parse_duration(value.get_ref<const std::string&>());
  } catch (const ConfigError& e) {
    throw ConfigError(path, reason(e));
  }
}

void check_range(milliseconds d, DurationRange range, const std::string& path) {
  if (d < range.min || d > range.max) {
    throw ConfigError(path, "must be " + std::string(range.spelled) + " (got " + detail::format_duration(d) + ")");
  }
}

void check_range(int n, int min, int max, const std::string& path) {
  if (n < min || n > max) {
    throw ConfigError(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " +
                                std::to_string(n) + ")");
  }
}

// Queue names reach SQL parameters, NOTIFY payloads and log lines.
void check_queue_name(const std::string& name, const std::string& path) {
  if (name.empty()) throw ConfigError(path, "queue name must not be empty");
  // The insert trigger's NOTIFY lists queue names separated by commas.
  if (name.find(',') != std::string::npos) throw ConfigError(path, "queue name must not contain ','");
  if (name.size() > kMaxQueueNameLength) {
    throw ConfigError(path, "queue name is longer than " + std::to_string(kMaxQueueNameLength) + " bytes");
  }
  if (detail::has_control_character(name)) throw ConfigError(path, "queue name must not contain control characters");
  // Postgres rejects a text parameter that is not valid UTF-8: every claim would fail.
  if (detail::sanitize_utf8(name) != name) throw ConfigError(path, "queue name must be valid UTF-8");
}

void check_alarms(const AlarmConfig& a, const std::string& path);
QueueLimits parse_limits(const nlohmann::json& object, const std::string& path);

void check_queue(const QueueConfig& queue, const std::string& path) {
  const bool lease = queue.mode == QueueConfig::Mode::lease;
  check_range(queue.concurrency, 1, lease ? kMaxLeaseConcurrency : kMaxConcurrency, child_path(path, "concurrency"));
  check_range(queue.batch_size, 1, kMaxBatchSize, child_path(path, "batch_size"));
  check_range(queue.max_attempts, 1, kMaxAttempts, child_path(path, "max_attempts"));
  const double rate = queue.rate_limit_per_sec;
  if (rate != 0 && !(rate >= kMinRate && rate <= kMaxRate)) {
    throw ConfigError(child_path(path, "rate_limit_per_sec"),
                      "must be 0 (unlimited) or between 0.001 and 1000000 (got " + nlohmann::json(rate).dump() + ")");
  }
  check_range(queue.job_timeout, lease ? kLeaseJobTimeout : kJobTimeout, child_path(path, "job_timeout"));
  if (lease) check_range(queue.lease, kLease, child_path(path, "lease"));
  check_range(queue.connections, 1, kMaxLeaseConnections, child_path(path, "connections"));
  if (queue.connections > queue.concurrency) {
    throw ConfigError(child_path(path, "connections"), "must not exceed the queue's concurrency (" +
                                                           std::to_string(queue.concurrency) +
                                                           "): each connection runs a share of its handlers");
  }
  check_range(queue.poll_interval, kPollInterval, child_path(path, "poll_interval"));
  const std::string backoff = child_path(path, "backoff");
  if (queue.backoff.schedule.empty()) {
    check_range(queue.backoff.base, kBackoffDelay, child_path(backoff, "base"));
    check_range(queue.backoff.cap, kBackoffDelay, child_path(backoff, "cap"));
  }
  for (std::size_t i = 0; i < queue.backoff.schedule.size(); ++i) {
    check_range(queue.backoff.schedule[i], kBackoffDelay,
                child_path(child_path(backoff, "schedule"), std::to_string(i)));
  }
  check_alarms(queue.alarms, path);
  if (queue.limits) {
    // Limits built in code are held to the file's rules, stated once in parse_limits().
    (void)parse_limits(detail::limits_json(*queue.limits), child_path(path, "limits"));
    // A transaction-mode claim cannot record starts: its transaction lasts as long as its jobs.
    for (const auto& [has_rate, named] : {std::pair{queue.limits->rate.has_value(), "rate"},
                                          std::pair{queue.limits->per_key_rate.has_value(), "per_key_rate"}}) {
      if (has_rate && !lease) {
        throw ConfigError(child_path(child_path(path, "limits"), named),
                          R"(applies only to a queue with "mode": "lease")");
      }
    }
  }
}

BackoffConfig::Jitter parse_jitter(const nlohmann::json& value, const std::string& path) {
  if (value == "full") return BackoffConfig::Jitter::full;
  if (value == "equal") return BackoffConfig::Jitter::equal;
  if (value == "none") return BackoffConfig::Jitter::none;
  throw ConfigError(path, R"(must be "full", "equal" or "none" (got )" + value.dump() + ")");
}

StackTraces parse_stack_traces(const nlohmann::json& value, const std::string& path) {
  if (value == "dead_letters") return StackTraces::dead_letters;
  if (value == "all_failures") return StackTraces::all_failures;
  if (value == "off") return StackTraces::off;
  throw ConfigError(path, R"(must be "dead_letters", "all_failures" or "off" (got )" + value.dump() + ")");
}

std::vector<milliseconds> parse_schedule(const nlohmann::json& array, const std::string& path) {
  if (!array.is_array() || array.empty()) throw ConfigError(path, "must be a non-empty array of durations");
  // The queue_policies table holds at most 100 (migration 18).
  if (array.size() > 100) throw ConfigError(path, "must have at most 100 entries");
  std::vector<milliseconds> schedule;
  for (std::size_t i = 0; i < array.size(); ++i) {
    schedule.push_back(duration_at(array[i], path + "/" + std::to_string(i)));
  }
  return schedule;
}

BackoffConfig parse_backoff(const nlohmann::json& object, const std::string& path) {
  BackoffConfig backoff;
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "base")
      backoff.base = duration_at(value, at);
    else if (key == "cap")
      backoff.cap = duration_at(value, at);
    else if (key == "jitter")
      backoff.jitter = parse_jitter(value, at);
    else if (key == "schedule")
      backoff.schedule = parse_schedule(value, at);
    else
      throw ConfigError(at, "unknown key");
  }
  // A schedule replaces base, cap and jitter; ignoring them silently would hide which
  // policy the user meant.
  if (!backoff.schedule.empty() && (object.contains("base") || object.contains("cap") || object.contains("jitter"))) {
    throw ConfigError(child_path(path, "schedule"), "cannot be combined with base, cap or jitter");
  }
  return backoff;
}

// An alarm threshold: null turns it off.
std::optional<long> count_threshold(const nlohmann::json& value, const std::string& path) {
  if (value.is_null()) return std::nullopt;
  return integer_in(value, path, 0, kMaxAlarmCount);
}

std::optional<double> number_threshold(const nlohmann::json& value, const std::string& path, double max) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_number()) throw ConfigError(path, "must be a number or null");
  const double v = value.get<double>();
  if (!(v >= 0 && v <= max)) {
    throw ConfigError(
        path, "must be between 0 and " + std::to_string(static_cast<long long>(max)) + " (got " + value.dump() + ")");
  }
  return v;
}

std::optional<milliseconds> age_threshold(const nlohmann::json& value, const std::string& path) {
  if (value.is_null()) return std::nullopt;
  return duration_at(value, path);
}

AlarmConfig parse_alarms(const nlohmann::json& object, const std::string& path) {
  AlarmConfig a;
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "dead_letters_warning")
      a.dead_letters_warning = count_threshold(value, at);
    else if (key == "dead_letters_critical")
      a.dead_letters_critical = count_threshold(value, at);
    else if (key == "failure_rate_warning")
      a.failure_rate_warning = number_threshold(value, at, kMaxAlarmPercent);
    else if (key == "failure_rate_critical")
      a.failure_rate_critical = number_threshold(value, at, kMaxAlarmPercent);
    else if (key == "failure_rate_min_attempts")
      a.failure_rate_min_attempts = integer_in(value, at, 0, kMaxAlarmCount);
    else if (key == "max_age_warning")
      a.max_age_warning = age_threshold(value, at);
    else if (key == "max_age_critical")
      a.max_age_critical = age_threshold(value, at);
    else if (key == "dead_letter_growth_warning")
      a.dead_letter_growth_warning = number_threshold(value, at, kMaxAlarmPerMinute);
    else if (key == "dead_letter_growth_critical")
      a.dead_letter_growth_critical = number_threshold(value, at, kMaxAlarmPerMinute);
    else
      throw ConfigError(at, "unknown key");
  }
  return a;
}

// A warning above its critical threshold never fires on its own: a typo, most likely.
template <typename T>
void check_order(const std::optional<T>& warning, const std::optional<T>& critical, const std::string& path,
                 const char* name) {
  if (warning && critical && *warning > *critical) {
    throw ConfigError(child_path(path, std::string(name) + "_warning"),
                      "must not be above " + std::string(name) + "_critical");
  }
}

void check_alarms(const AlarmConfig& a, const std::string& path) {
  const std::string at = child_path(path, "alarms");
  check_order(a.dead_letters_warning, a.dead_letters_critical, at, "dead_letters");
  check_order(a.failure_rate_warning, a.failure_rate_critical, at, "failure_rate");
  check_order(a.max_age_warning, a.max_age_critical, at, "max_age");
  check_order(a.dead_letter_growth_warning, a.dead_letter_growth_critical, at, "dead_letter_growth");
  if (a.max_age_warning) check_range(*a.max_age_warning, kAlarmAge, child_path(at, "max_age_warning"));
  if (a.max_age_critical) check_range(*a.max_age_critical, kAlarmAge, child_path(at, "max_age_critical"));
}

// A JSON pointer (RFC 6901): '/' and reference tokens in which '~' is only "~0" or "~1".
bool is_json_pointer(const std::string& text) {
  if (!text.starts_with('/')) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '~' && (i + 1 == text.size() || (text[i + 1] != '0' && text[i + 1] != '1'))) return false;
  }
  return true;
}

// "count/period" ("20/1s", "100/1m"): at most count starts in any period.
StartRate rate_at(const nlohmann::json& value, const std::string& path) {
  const auto wrong = [&] {
    return ConfigError(path, "must be \"count/period\" such as \"20/1s\" (got " + value.dump() + ")");
  };
  if (!value.is_string()) throw wrong();
  const std::string& text = value.get_ref<const std::string&>();
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0) throw wrong();
  StartRate rate;
  const std::string count = text.substr(0, slash);
  if (count.size() > 6 || count.find_first_not_of("0123456789") != std::string::npos) throw wrong();
  rate.count = std::stoi(count);
  if (rate.count < 1 || rate.count > kMaxRateCount) {
    throw ConfigError(
        path, "its count must be between 1 and " + std::to_string(kMaxRateCount) + " (got " + value.dump() + ")");
  }
  try {
    rate.period = detail::parse_duration(std::string_view(text).substr(slash + 1));
  } catch (const ConfigError&) {
    throw wrong();
  }
  if (rate.period < 1ms || rate.period > kMaxRatePeriod) {
    throw ConfigError(path, "its period must be between 1ms and 24h (got " + value.dump() + ")");
  }
  return rate;
}

// The checks are the queue_limits table's, so that what the file accepts the table stores.
QueueLimits parse_limits(const nlohmann::json& object, const std::string& path) {
  QueueLimits limits;
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "concurrency") {
      limits.concurrency = integer_in(value, at, 1, kMaxLimit);
    } else if (key == "per_key_concurrency") {
      limits.per_key_concurrency = integer_in(value, at, 1, kMaxLimit);
    } else if (key == "key") {
      if (!value.is_string()) throw ConfigError(at, "must be a string");
      const std::string key_text = value.get<std::string>();
      if (key_text != "concurrency_key" && !is_json_pointer(key_text)) {
        throw ConfigError(
            at, "must be \"concurrency_key\" or a JSON pointer into the payload such as \"/tenant_id\" (got " +
                    value.dump() + ")");
      }
      if (key_text.size() > kMaxKeyPointer || detail::has_control_character(key_text)) {
        throw ConfigError(at, "must be at most 256 bytes, without control characters");
      }
      limits.key = key_text;
    } else if (key == "rate") {
      limits.rate = rate_at(value, at);
    } else if (key == "per_key_rate") {
      limits.per_key_rate = rate_at(value, at);
    } else {
      throw ConfigError(at, "unknown key: one of concurrency, key, per_key_concurrency, rate, per_key_rate");
    }
  }
  for (const char* per_key : {"per_key_concurrency", "per_key_rate"}) {
    if (object.contains(per_key) && !limits.key) {
      throw ConfigError(child_path(path, per_key), "needs a key: what a job's key is");
    }
  }
  if (!limits.concurrency && !limits.key && !limits.rate)
    throw ConfigError(path, "give concurrency, rate, key or more");
  return limits;
}

QueueConfig parse_queue(const nlohmann::json& object, const std::string& path) {
  QueueConfig queue;
  // The mode first: the ranges of other keys depend on it.
  if (const auto mode = require_object(object, path).find("mode"); mode != object.end()) {
    if (*mode == "transaction")
      queue.mode = QueueConfig::Mode::transaction;
    else if (*mode == "lease")
      queue.mode = QueueConfig::Mode::lease;
    else
      throw ConfigError(child_path(path, "mode"), R"(must be "transaction" or "lease" (got )" + mode->dump() + ")");
  }
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "mode") {
      continue;  // read first, above
    } else if (key == "lease") {
      queue.lease = duration_at(value, at);
    } else if (key == "concurrency") {
      const bool lease = queue.mode == QueueConfig::Mode::lease;
      queue.concurrency = integer_in(value, at, 1, lease ? kMaxLeaseConcurrency : kMaxConcurrency);
    } else if (key == "connections") {
      queue.connections = integer_in(value, at, 1, kMaxLeaseConnections);
    } else if (key == "batch_size") {
      queue.batch_size = integer_in(value, at, 1, kMaxBatchSize);
    } else if (key == "max_attempts") {
      queue.max_attempts = integer_in(value, at, 1, kMaxAttempts);
    } else if (key == "backoff") {
      queue.backoff = parse_backoff(value, at);
    } else if (key == "rate_limit_per_sec") {
      if (!value.is_number()) throw ConfigError(at, "must be a number");
      queue.rate_limit_per_sec = value.get<double>();
    } else if (key == "job_timeout") {
      queue.job_timeout = duration_at(value, at);
    } else if (key == "poll_interval") {
      queue.poll_interval = duration_at(value, at);
    } else if (key == "alarms") {
      queue.alarms = parse_alarms(value, at);
    } else if (key == "limits") {
      queue.limits = parse_limits(value, at);
    } else {
      throw ConfigError(at, "unknown key");
    }
  }
  // A lease on a transaction queue would be silently meaningless.
  if (object.contains("lease") && queue.mode != QueueConfig::Mode::lease) {
    throw ConfigError(child_path(path, "lease"), R"(applies only to a queue with "mode": "lease")");
  }
  if (object.contains("connections") && queue.mode != QueueConfig::Mode::lease) {
    throw ConfigError(child_path(path, "connections"),
                      R"(applies only to a queue with "mode": "lease" (a transaction queue has one connection per )"
                      R"(worker thread: its concurrency))");
  }
  return queue;
}

std::map<std::string, QueueConfig> parse_queues(const nlohmann::json& object, const std::string& path) {
  if (require_object(object, path).empty()) throw ConfigError(path, "at least one queue is required");
  std::map<std::string, QueueConfig> queues;
  for (const auto& [name, value] : object.items()) {
    const std::string at = child_path(path, name);
    QueueConfig queue = parse_queue(value, at);
    check_queue_name(name, at);
    queues.emplace(name, std::move(queue));
  }
  return queues;
}

// Handler declarations are validated by the handler factory, which knows the types;
// here only the shape every type shares.
const nlohmann::json& check_handlers(const nlohmann::json& object, const std::string& path) {
  for (const auto& [kind, value] : require_object(object, path).items()) require_object(value, child_path(path, kind));
  return object;
}

// nlohmann reads any depth (its parser and destructor keep their own stack), but copying
// or dumping a document recurses once per level: 100,000 levels overflow the call stack.
// So a document is measured, with an explicit stack, before any part of it is copied. The
// path named is the top-level member and the one below it (the handler's kind) where the
// nesting goes too deep, e.g. "/handlers/notify".
void check_nesting(const nlohmann::json& document) {
  struct Open {
    const nlohmann::json* value;
    std::size_t depth;  // containers open down to and including this one
    std::string path;   // kept for the two outer levels only
  };
  std::vector<Open> stack{{&document, 1, ""}};
  while (!stack.empty()) {
    Open open = std::move(stack.back());
    stack.pop_back();
    if (open.depth > detail::exact_json::kMaxNesting) {
      throw ConfigError(open.path, "arrays and objects nested more than " +
                                       std::to_string(detail::exact_json::kMaxNesting) + " deep");
    }
    const bool named = open.depth <= 2 && open.value->is_object();
    for (const auto& [key, value] : open.value->items()) {
      if (!value.is_structured()) continue;
      stack.push_back({&value, open.depth + 1, named ? child_path(open.path, key) : open.path});
    }
  }
}

struct FileCloser {
  void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

std::string read_file(const std::string& path) {
  const auto fail = [&](int error) {
    throw ConfigError(path, "cannot read: " + std::generic_category().message(error));
  };
  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) fail(errno);
  std::string text;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) fail(errno);  // e.g. EISDIR: fopen accepts a directory
  return text;
}

// An environment variable that is set to the empty string counts as unset, as it does
// for the CLI's --database-url / --schema options.
const char* non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

Config Config::parse(const nlohmann::json& document) {
  if (!document.is_object()) throw ConfigError("", "the configuration must be a JSON object");
  check_nesting(document);
  Config config;
  for (const auto& [key, value] : document.items()) {
    const std::string at = child_path("", key);
    if (key == "shutdown_grace") {
      config.shutdown_grace = duration_at(value, at);
    } else if (key == "dedup_window") {
      config.dedup_window = duration_at(value, at);
    } else if (key == "queues") {
      config.queues = parse_queues(value, at);
    } else if (key == "handlers") {
      config.handlers = check_handlers(value, at);
    } else if (key == "cron") {
      config.cron = detail::parse_cron_section(value, at);
    } else if (key == "stack_traces") {
      config.stack_traces = parse_stack_traces(value, at);
    } else if (key == "prepared_statements") {
      if (!value.is_boolean()) throw ConfigError(at, "must be true or false");
      config.prepared_statements = value.get<bool>();
    } else {
      throw ConfigError(at, "unknown key");
    }
  }
  config.validate();
  return config;
}

int Config::connections_needed() const {
  int needed = 2;                  // the LISTEN connection and the process's own (heartbeat, maintenance)
  if (!cron.empty()) needed += 1;  // the cron scheduler's
  bool any_lease = false;
  for (const auto& [name, queue] : queues) {
    // A lease queue's handlers hold no connection: its claims and completions share its connections.
    const bool lease = queue.mode == QueueConfig::Mode::lease;
    needed += lease ? queue.connections : 2 * queue.concurrency;
    any_lease = any_lease || lease;
  }
  return needed + (any_lease ? 1 : 0);  // the lease keeper's renewals
}

void Config::validate() const {
  check_range(shutdown_grace, kShutdownGrace, "/shutdown_grace");
  check_range(dedup_window, kDedupWindow, "/dedup_window");
  if (queues.empty()) throw ConfigError("/queues", "at least one queue is required");
  for (const auto& [name, queue] : queues) {
    const std::string path = child_path("/queues", name);
    check_queue_name(name, path);
    check_queue(queue, path);
  }
  detail::validate_cron_section(cron, "/cron");
  if (const int needed = connections_needed(); needed > kMaxConnections) {
    throw ConfigError("/queues", "the queues need " + std::to_string(needed) +
                                     " connections (2 per worker thread, plus 2), more than the limit of " +
                                     std::to_string(kMaxConnections) + ": lower their concurrency");
  }
}

Config Config::load(const std::string& path) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    // parse_error names the line and column; out_of_range.406 (1e400) only the number.
    throw ConfigError(path, "invalid JSON: " + printable(e.what()));
  }
  Config config = parse(document);
  if (const char* url = non_empty_env("DATABASE_URL")) config.database_url = url;
  if (const char* url = non_empty_env("ONCELY_LISTEN_DATABASE_URL")) config.listen_database_url = url;
  if (const char* schema = non_empty_env("ONCELY_SCHEMA")) {
    try {
      validate_schema_name(schema);
    } catch (const ConfigError& e) {
      throw ConfigError("ONCELY_SCHEMA", reason(e));
    }
    config.schema = schema;
  }
  return config;
}

}  // namespace oncely
