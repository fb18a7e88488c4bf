#pragma once
// The oncely command line: option structs, setup and run functions per command.
// main() only parses and dispatches; tests build the same app and parse argument vectors.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "oncely/stats.hpp"

namespace oncely::cli {

/// Where a command writes: tests pass string streams.
struct Io {
  std::ostream& out;
  std::ostream& err;
};

/// Options every command shares (root options, inherited by subcommands).
struct Globals {
  std::string database_url;             // --database-url / DATABASE_URL
  std::string schema;                   // --schema / ONCELY_SCHEMA
  std::string log_format = "text";      // --log-format / ONCELY_LOG_FORMAT: text | json
  bool no_prepared_statements = false;  // --no-prepared-statements
  /// Named prepared statements, for every command: off with --no-prepared-statements or
  /// ONCELY_PREPARED_STATEMENTS=0 (a transaction-mode pooler); set by dispatch().
  bool prepared_statements = true;
};

struct MigrateOptions {
  bool roles = false;  // also create the schema's least-privilege roles and converge their grants
};

struct EnqueueOptions {
  std::string kind;
  std::string payload = "{}";
  std::string queue = "default";
  std::optional<std::string> key;
  std::optional<std::string> run_at;
  int priority = 0;
  std::optional<int> max_attempts;
  std::optional<std::string> traceparent;  // --traceparent: the producer's W3C trace context
  int batch_size = 5000;                   // KIND "-" (bulk from stdin): jobs per transaction
  std::optional<std::string> unique_key;   // --unique-key
  std::string on_conflict = "skip";        // --on-conflict skip|replace|error
  std::vector<std::int64_t> depends_on;    // --depends-on ID,ID...
  std::optional<std::int64_t> batch;       // --batch ID
};

struct StatsOptions {
  bool json = false;
  std::optional<std::string> queue;
};

/// `oncely check`'s options. Each one not given keeps the library's default
/// (oncely::CheckThresholds), which --help shows: no default is written here.
struct CheckOptions {
  std::optional<std::string> queue;
  std::optional<std::string> config_path;  // --config FILE: each queue judged by its own "alarms"
  std::optional<long> dead_letters_warning;
  std::optional<long> dead_letters_critical;
  std::optional<double> failure_rate_warning_pct;
  std::optional<double> failure_rate_critical_pct;
  std::optional<long> failure_rate_min_attempts;
  std::optional<std::string> max_age_warning;  // a duration, e.g. 5m
  std::optional<std::string> max_age_critical;
  std::optional<double> growth_warning;
  std::optional<double> growth_critical;
  std::optional<std::string> paused_warning;  // a duration, e.g. 1h
};

/// `oncely dlq list|show|replay|purge`: the filters are shared by every subcommand.
enum class DlqAction { none, list, show, replay, purge };

struct DlqOptions {
  DlqAction action = DlqAction::none;      // the subcommand given
  std::vector<std::int64_t> ids;           // --id, repeatable: dead-letter ids
  std::vector<std::int64_t> job_ids;       // --job-id, repeatable: the failed (or replayed) job's id
  std::optional<std::string> queue;        // --queue
  std::optional<std::string> kind;         // --kind
  std::optional<std::string> error_class;  // --class
  std::optional<std::string> error;        // --error: case-insensitive substring of last_error
  std::optional<std::string> older_than;   // --older-than DURATION (by failed_at)
  std::optional<std::string> newer_than;   // --newer-than DURATION
  bool all = false;                        // --all: no filter, on purpose
  bool include_replayed = false;           // list, show: --include-replayed
  bool json = false;                       // list: --json
  std::optional<std::string> group_by;     // list: --group-by error|class|kind|queue
  long limit = 50;                         // list, show, and the rows --dry-run shows; 0: all
  std::optional<std::string> to_queue;     // replay: --to-queue
  bool dry_run = false;                    // replay, purge: --dry-run
};

/// `oncely queue pause|resume|list`.
enum class QueueAction { none, pause, resume, list, set, show };

struct QueueOptions {
  QueueAction action = QueueAction::none;
  std::string queue;                     // pause, resume, set, show: QUEUE
  std::vector<std::string> assignments;  // set: KEY=VALUE ...
  std::optional<std::string> reason;     // pause: --reason
  std::string config_path;               // list: --config, its queues are listed too
  bool json = false;                     // list, show: --json
};

/// `oncely jobs list|show|cancel`: the filters are shared.
enum class JobsAction { none, list, show, cancel };

struct JobsOptions {
  JobsAction action = JobsAction::none;
  std::vector<std::int64_t> ids;          // cancel: --id, repeatable
  std::optional<std::string> queue;       // --queue
  std::optional<std::string> kind;        // --kind
  std::optional<std::string> state;       // --state ready|scheduled|retrying|running|waiting
  std::optional<std::int64_t> batch;      // --batch ID
  std::optional<std::string> error;       // --error TEXT
  std::optional<std::string> older_than;  // --older-than DURATION (by created_at)
  long limit = 50;                        // list: --limit
  std::optional<std::int64_t> after;      // list: --after ID
  std::optional<std::int64_t> before;     // list --state completed: --before ID
  std::optional<std::string> key;         // list --state completed, show: --key KEY
  std::optional<std::string> group_by;    // list: --group-by error
  bool json = false;                      // --json
  std::optional<std::int64_t> show_id;    // show: ID or --id ID
  bool all = false;                       // cancel: --all
  bool dry_run = false;                   // cancel: --dry-run
};

/// `oncely alert-rules --config FILE`: Prometheus rules from the queues' alarms.
struct AlertRulesOptions {
  std::string config_path;
  std::optional<std::string> runbook_base;  // default: AlertRuleOptions's
  std::optional<std::string> for_duration;
};

struct WorkerOptions {
  std::string config_path;
  std::string metrics_address;  // --metrics-addr HOST:PORT; empty: off
};

/// `oncely cron list`.
struct CronOptions {
  std::string config_path;  // --config: that file's entries; empty: every entry in the database
  bool json = false;
};

/// `oncely batches open|close|list|show`.
enum class BatchesAction { none, open, close, list, show };
struct BatchesOptions {
  BatchesAction action = BatchesAction::none;
  std::optional<std::string> on_success, on_failure, on_finish;  // open: job descriptions (JSON)
  std::int64_t id = 0;                                           // close, show: ID
  bool unfinished = false;                                       // list: --unfinished
  int limit = 50;                                                // list: --limit
  std::optional<std::int64_t> before;                            // list: --before ID
  bool json = false;                                             // list, show: --json
};

/// `oncely web`: the operator console.
struct WebOptions {
  std::string address = "127.0.0.1:9470";  // --addr HOST:PORT
  bool read_only = false;                  // --read-only: everyone is a viewer
  std::optional<std::string> login_file;   // --login-file: "ROLE NAME TOKEN" lines, mode 0600
  bool viewer_payloads = false;            // --viewer-payloads
  std::string statement_timeout = "5s";    // --statement-timeout DURATION
  std::string refresh = "5s";              // --refresh DURATION (0: off)
};

struct Cli {
  CLI::App app{"oncely: effectively-once background jobs on PostgreSQL", "oncely"};
  Globals globals;
  MigrateOptions migrate;
  EnqueueOptions enqueue;
  WorkerOptions worker;
  StatsOptions stats;
  CheckOptions check;
  AlertRulesOptions alert_rules;
  CLI::App* alert_rules_cmd = nullptr;
  CLI::App* stats_cmd = nullptr;
  CLI::App* check_cmd = nullptr;
  CLI::App* migrate_cmd = nullptr;
  CLI::App* enqueue_cmd = nullptr;
  CLI::App* worker_cmd = nullptr;
  DlqOptions dlq;
  CLI::App* dlq_cmd = nullptr;
  CronOptions cron;
  CLI::App* cron_cmd = nullptr;
  QueueOptions queue;
  CLI::App* queue_cmd = nullptr;
  JobsOptions jobs;
  CLI::App* jobs_cmd = nullptr;
  WebOptions web;
  CLI::App* web_cmd = nullptr;
  BatchesOptions batches;
  CLI::App* batches_cmd = nullptr;
};

/// Builds the app with every command and option bound to the structs above.
std::unique_ptr<Cli> make_app();

/// Parses argv; on a usage error prints one line and returns its exit code.
std::optional<int> parse(Cli& cli, int argc, const char* const* argv, Io io);

/// Runs the parsed command; maps every error to one line on io.err and an exit code.
int dispatch(Cli& cli, Io io);

void add_migrate(Cli& cli);
void add_enqueue(Cli& cli);
void add_worker(Cli& cli);
void add_stats(Cli& cli);
void add_check(Cli& cli);
int run_stats(const StatsOptions& options, const Globals& globals, Io io);
/// The library's thresholds with the options given put over them. ConfigError for a
/// duration that is not one (named by its option).
CheckThresholds check_thresholds(const CheckOptions& options, CheckThresholds base = {});
/// Exit codes follow the Nagios plugin convention: 0 ok, 1 warning, 2 critical, 3 unknown.
int run_check(const CheckOptions& options, const Globals& globals, Io io);
void add_alert_rules(Cli& cli);
/// Needs no database: prints the rules for the file's queues.
int run_alert_rules(const AlertRulesOptions& options, Io io);
int run_migrate(const MigrateOptions& options, const Globals& globals, Io io);
int run_enqueue(const EnqueueOptions& options, const Globals& globals, Io io);
void add_dlq(Cli& cli);
void add_cron(Cli& cli);
int run_cron(const CronOptions& options, const Globals& globals, Io io);
void add_batches(Cli& cli);
int run_batches(const BatchesOptions& options, const Globals& globals, Io io);
int run_dlq(const DlqOptions& options, const Globals& globals, Io io);
void add_queue(Cli& cli);
int run_queue(const QueueOptions& options, const Globals& globals, Io io);
void add_jobs(Cli& cli);
int run_jobs(const JobsOptions& options, const Globals& globals, Io io);
void add_web(Cli& cli);
/// Serves the console until SIGTERM/SIGINT; prints "oncely web: listening on http://HOST:PORT"
/// on io.out once it listens. ConfigError for options that cannot be served safely.
int run_web(const WebOptions& options, const Globals& globals, Io io);
/// "HOST:PORT" or "[V6]:PORT" -> host and port; ConfigError otherwise.
std::pair<std::string, int> parse_web_address(const std::string& address);
/// Runs until SIGTERM/SIGINT, then ends the process (std::quick_exit) with the exit code.
[[noreturn]] void run_worker(const WorkerOptions& options, const Globals& globals, Io io);

/// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

}  // namespace oncely::cli
