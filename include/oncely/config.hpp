#pragma once
// Worker configuration: the JSON file `oncely worker --config` reads (docs/configuration.md), parsed strictly into
// value types. The runtime gets a validated Config and never sees JSON (except handler declarations, which the handler
// factory validates).

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace oncely {

/// How long to wait before the next attempt after the n-th failed one (n >= 1):
/// exponential min(cap, base * 2^(n-1)) with jitter, or an explicit schedule.
struct BackoffConfig {
  enum class Jitter { full, equal, none };
  std::chrono::milliseconds base{std::chrono::seconds(5)};  ///< first delay before jitter
  std::chrono::milliseconds cap{std::chrono::minutes(10)};  ///< no delay exceeds this
  Jitter jitter = Jitter::equal;                            ///< full: [0, d]; equal: [d/2, d]; none: d
  /// When not empty: the n-th failure waits schedule[n-1], repeating the last entry;
  /// base, cap and jitter are then unused.
  std::vector<std::chrono::milliseconds> schedule{};
};

/// One queue's alarm thresholds: what `oncely check --config` judges the queue by and
/// what `oncely alert-rules` writes into Prometheus rules. Defaults are the usual
/// starting points (a dead-letter queue of 5/10, 1 %/5 % of attempts failing, a job
/// waiting 5/30 minutes, one new dead letter a minute); a threshold that is not set
/// (null in the file) is not checked.
struct AlarmConfig {
  std::optional<long> dead_letters_warning = 5;  ///< dead letters not replayed, above this
  std::optional<long> dead_letters_critical = 10;
  std::optional<double> failure_rate_warning = 1;  ///< percent of attempts failing over 5 minutes
  std::optional<double> failure_rate_critical = 5;
  long failure_rate_min_attempts = 10;  ///< fewer attempts in 5 minutes: the rate is not judged
  std::optional<std::chrono::milliseconds> max_age_warning{std::chrono::minutes(5)};  ///< oldest ready job's wait
  std::optional<std::chrono::milliseconds> max_age_critical{std::chrono::minutes(30)};
  std::optional<double> dead_letter_growth_warning = 1;  ///< new dead letters per minute (15-minute average)
  std::optional<double> dead_letter_growth_critical{};
};

/// A limit on starts, "count/period" ("20/1s"): at most `count` jobs start in any `period`,
/// counted at their claims, on the database's clock.
struct StartRate {
  int count = 0;                       ///< 1..10000
  std::chrono::milliseconds period{};  ///< 1ms..24h
};

/// Limits that hold for all the workers of a queue together, enforced by the database at the
/// claim (the queue_limits table; docs/configuration.md, "Limits across workers").
struct QueueLimits {
  std::optional<int> concurrency;          ///< jobs of the queue running at once; 1..100000
  std::optional<std::string> key;          ///< a job's key: "concurrency_key" or a JSON pointer into its payload
  std::optional<int> per_key_concurrency;  ///< jobs of one key running at once; 1..100000; needs a key
  std::optional<StartRate> rate;           ///< starts of the queue's jobs (lease queues)
  std::optional<StartRate> per_key_rate;   ///< starts of one key's jobs; needs a key (lease queues)
};

/// One queue's pool and limits. Defaults are what a queue gets when the file omits them.
struct QueueConfig {
  /// transaction: each handler runs inside its batch's claim transaction (exactly-once
  /// database effects through tx(); an attempt at most 24h). lease: the claim commits a
  /// fenced lease at once and nothing is held open while the handler runs (long jobs; many
  /// concurrent jobs on few connections); database effects through on_complete().
  enum class Mode { transaction, lease };
  Mode mode = Mode::transaction;
  /// Lease mode: how long a claim (and each renewal, every lease/3) holds the job; when a
  /// worker stops renewing, the job is claimable again this long after the last renewal. 3s..1h
  std::chrono::milliseconds lease{std::chrono::seconds(30)};
  /// Lease mode: the queue's connections for claims and completions, each with its own
  /// control thread and share of `concurrency`. One is plenty for long jobs; more run short
  /// lease jobs faster (their claims and completions in parallel). 1..16, at most concurrency
  int connections = 1;
  // Defaults from bench/scaling.sh: 4 threads × 500 jobs per transaction was the fastest
  // cell on 2 cores (8 and 16 threads only contend); the claim shrinks for slow handlers
  // and for handlers that need savepoints, so a large batch costs nothing there.
  int concurrency = 4;            ///< worker threads, each with its own two connections; 1..256
                                  ///< lease mode: jobs running at once (handler threads), 1..2000
  int batch_size = 500;           ///< most jobs claimed and committed per transaction; 1..1000
                                  ///< lease mode: most jobs leased per claim
  int max_attempts = 8;           ///< attempts before "exhausted"; jobs.max_attempts overrides; 1..1000
  BackoffConfig backoff{};        ///< delay between attempts; each duration 0..30d
  double rate_limit_per_sec = 0;  ///< job starts per second in this process; 0 = unlimited, else 0.001..1e6
  std::chrono::milliseconds job_timeout{std::chrono::minutes(5)};  ///< one attempt's limit; 1s..24h (lease mode: ..7d)
  std::chrono::milliseconds poll_interval{std::chrono::seconds(1)};  ///< fallback when no NOTIFY; 10ms..1h
  AlarmConfig alarms{};                                              ///< thresholds for check --config and alert-rules
  std::optional<QueueLimits> limits{};  ///< for every worker of the queue together; none: no such limit
};

/// Which failures of a C++ handler record the stack of the exception that escaped it
/// (dead_letters.error_detail.stack and the attempt's errors[] entry).
enum class StackTraces {
  dead_letters,  ///< the failure that dead-letters a job (the default)
  all_failures,  ///< every failed attempt, retries too
  off,           ///< none, and nothing captured at a throw
};

/// A periodic job (the file's "cron" object, docs/configuration.md): one job per slot of
/// `schedule` in `time_zone`, however many workers carry the entry.
struct CronEntry {
  /// What to enqueue for slots missed while no worker ran: none of them, the newest one,
  /// or each of them (the newest kCatchUpMaxSlots within kCatchUpWindow).
  enum class CatchUp { none, latest, all };
  std::string schedule;           ///< five fields, @hourly ... @yearly, or @every <duration>
  std::string time_zone = "UTC";  ///< a name of the system's tz database
  std::string kind;               ///< required
  std::string queue = "default";
  nlohmann::json payload = nlohmann::json::object();
  int priority = 0;                 ///< -32768..32767
  std::optional<int> max_attempts;  ///< 1..1000; unset: the queue's
  CatchUp catch_up = CatchUp::latest;

  static constexpr int kCatchUpMaxSlots = 100;
  static constexpr std::chrono::hours kCatchUpWindow{24};
};

struct Config {
  std::chrono::milliseconds shutdown_grace{std::chrono::seconds(30)};  ///< drain limit on SIGTERM; 1s..24h
  std::chrono::milliseconds dedup_window{std::chrono::hours(24 * 7)};  ///< markers kept this long; 1m..3650d
  /// Queues this worker serves; a file without "queues" gets {"default": {}}.
  std::map<std::string, QueueConfig> queues{{"default", QueueConfig{}}};
  /// Handler declarations by kind (the file's "handlers"), kept as JSON for the handler factory.
  nlohmann::json handlers = nlohmann::json::object();
  /// Job connections use named prepared statements. Turn off behind a transaction-mode
  /// pooler that cannot carry them across transactions (PgBouncer before 1.21, such as
  /// Debian 12's 1.18).
  bool prepared_statements = true;
  /// "stack_traces": "dead_letters" | "all_failures" | "off". Per process: the last
  /// Runtime to start sets it.
  StackTraces stack_traces = StackTraces::dead_letters;
  std::string database_url;  ///< from DATABASE_URL when loaded
  /// The LISTEN connection's URL when it must differ (a direct, session-mode connection
  /// while the job path goes through a pooler); empty: database_url. From
  /// ONCELY_LISTEN_DATABASE_URL when loaded.
  std::string listen_database_url;
  std::string schema = "oncely";  ///< from ONCELY_SCHEMA when loaded
  /// Periodic jobs by name (the file's "cron"); the name is part of each job's key.
  std::map<std::string, CronEntry> cron;

  /// The most connections one process may need (connections_needed()): more than any
  /// server in front of a job queue allows.
  static constexpr int kMaxConnections = 1000;

  /// Parses a configuration document. Throws ConfigError naming the JSON path of the first
  /// problem ("/queues/bulk/backof: unknown key") for unknown keys, wrong types, bad
  /// durations and out-of-range values (see validate()). Does not read the environment.
  static Config parse(const nlohmann::json& document);

  /// Throws ConfigError naming the JSON path of the first value outside its documented
  /// range ("/queues/bulk/job_timeout: must be between 1s and 24h (got 30d)"), a queue name
  /// that is empty, too long or holds ',' or control characters, or queues needing more
  /// than kMaxConnections. parse() calls it; Runtime::run() calls it for a Config built in code.
  void validate() const;

  /// Connections one process opens for this configuration: two per worker thread (the
  /// batch's and the attempt record's), one to LISTEN and one of its own.
  [[nodiscard]] int connections_needed() const;

  /// Reads and parses `path`, then takes database_url from DATABASE_URL and schema from
  /// ONCELY_SCHEMA (when set). Throws ConfigError for an unreadable file or invalid JSON.
  static Config load(const std::string& path);
};

}  // namespace oncely
