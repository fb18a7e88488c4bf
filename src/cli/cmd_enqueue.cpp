#include <unistd.h>

#include <cstdint>
#include <limits>
#include <ostream>

#include "api/bulk_enqueue.hpp"
#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/job_rules.hpp"
#include "support/telemetry.hpp"

namespace oncely::cli {
namespace {

// The jobs table's smallint priority and the library's int attempts (validate_new_job and
// a bulk line's fields draw the same lines).
constexpr IntegerRule kPriority{"a priority", std::numeric_limits<std::int16_t>::min(),
                                std::numeric_limits<std::int16_t>::max()};
constexpr IntegerRule kMaxAttempts{"a number of attempts", 1, std::numeric_limits<std::int32_t>::max()};

}  // namespace

void add_enqueue(Cli& cli) {
  EnqueueOptions& o = cli.enqueue;
  CLI::App* cmd = cli.app.add_subcommand(
      "enqueue", "enqueue one job and print its id; KIND '-' reads newline-delimited JSON jobs from stdin in bulk");
  cmd->footer(
      "Bulk: each line of stdin is one job, "
      R"({"kind": "...", "payload": {...}, "queue": "...", "key": "...", "run_at": "...", "priority": N, )"
      R"("max_attempts": N, "unique_key": "...", "on_conflict": "skip|replace|error", "traceparent": "00-...", )"
      R"("depends_on": [ID, ...], "batch_id": ID}; only kind is required ("idempotency_key" may stand for "key"), blank lines )"
      "are skipped, and --queue/--priority/--max-attempts/--run-at/--traceparent/--depends-on/--batch give the "
      "defaults. Jobs are committed "
      "--batch-size at a time (COPY; prepared INSERTs for batches under 8, one autocommit INSERT per job "
      "for 1), and sooner whenever stdin has nothing more ready, so `tail -f log | oncely enqueue -` "
      "enqueues each job as it arrives; a bad line stops the load, keeping earlier batches.");
  cmd->add_option("KIND", o.kind, "job kind (selects the handler), or - to read jobs from stdin")->required();
  cmd->add_option("PAYLOAD_JSON", o.payload, "job payload as JSON (default {})");
  cmd->add_option("--queue,-q", o.queue, "queue name")->capture_default_str();
  cmd->add_option("--key,-k", o.key, "idempotency key (default: the job id)");
  cmd->add_option("--unique-key", o.unique_key,
                  "at most one live job per kind and unique key: a second enqueue does what --on-conflict says");
  cmd->add_option("--on-conflict", o.on_conflict,
                  "with --unique-key (or a line's unique_key): skip (print the live job's id), replace (a waiting "
                  "job takes this payload and run time; a running one is left alone, exit 1) or error (exit 1)")
      ->capture_default_str();
  cmd->add_option("--run-at", o.run_at, "when to run: a timestamp (2026-12-01T09:00:00Z) or +DURATION (+5m)");
  cmd->add_option("--priority,-p", o.priority, "smaller runs first")
      ->capture_default_str()
      ->transform(integer(kPriority));
  cmd->add_option("--max-attempts", o.max_attempts, "attempts before dead-lettering (default: the queue's)")
      ->transform(integer(kMaxAttempts));
  cmd->add_option("--traceparent", o.traceparent,
                  "the producer's W3C trace context (00-<trace id>-<span id>-<flags>); handlers run in a child span "
                  "(with -: for lines without \"traceparent\")")
      ->type_name("TRACEPARENT");
  cmd->add_option("--depends-on", o.depends_on,
                  "parent job ids (comma-separated): the job waits until each has completed, and is dead-lettered "
                  "(dependency_failed) if one is")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->transform(integer(kJobId));
  cmd->add_option("--batch", o.batch, "the open batch (oncely batches open) the job is a member of")
      ->transform(integer(kBatchId));
  cmd->add_option("--batch-size", o.batch_size,
                  "with -: at most this many jobs per transaction (1: one autocommit INSERT per job)")
      ->capture_default_str()
      ->transform(integer({"a number of jobs per transaction", 1, 1000000}));
  cli.enqueue_cmd = cmd;
}

namespace {

/// --queue, --priority, --max-attempts and --run-at, as a job (kind and payload aside).
NewJob job_from_options(const EnqueueOptions& o) {
  NewJob job;
  job.queue = o.queue;
  if (o.run_at && o.run_at->starts_with('+')) {
    try {
      job.delay = detail::parse_duration(o.run_at->substr(1));
    } catch (const ConfigError& e) {
      throw ConfigError("--run-at", e.what());
    }
  } else {
    job.run_at = o.run_at;
  }
  job.priority = o.priority;
  job.max_attempts = o.max_attempts;
  job.traceparent = o.traceparent;
  job.depends_on = o.depends_on;
  job.batch_id = o.batch;
  return job;
}

/// `oncely enqueue -`: newline-delimited JSON jobs from stdin, loaded with COPY.
int run_bulk_enqueue(const EnqueueOptions& o, const Globals& globals, Io io) {
  if (o.payload != "{}") {
    throw ConfigError("PAYLOAD_JSON", "cannot be given with '-': each line of stdin carries its own payload");
  }
  if (o.key) throw ConfigError("--key", "cannot be used with '-': a key names one job; put \"key\" on each line");
  if (o.unique_key) {
    throw ConfigError("--unique-key", "cannot be used with '-': put \"unique_key\" on each line");
  }
  if (o.batch_size < 1) throw ConfigError("--batch-size", "must be at least 1");
  NewJob defaults = job_from_options(o);
  defaults.on_conflict = detail::parse_on_conflict(o.on_conflict, "--on-conflict");
  NewJob probe = defaults;  // the defaults must make a valid job on their own
  probe.kind = "-";
  detail::validate_new_job(probe);

  const DatabaseUrl url(globals.database_url);
  auto conn = detail::connect(url);
  const detail::BulkEnqueueResult result =
      detail::bulk_enqueue(*conn, url, globals.schema, STDIN_FILENO, defaults, static_cast<std::size_t>(o.batch_size),
                           "stdin", globals.prepared_statements);
  io.out << "enqueued " << result.enqueued << (result.enqueued == 1 ? " job" : " jobs") << "\n";
  return kExitOk;
}

}  // namespace

// How long `oncely enqueue` waits, at most, for its send span to reach the collector.
constexpr auto kSpanFlushBound = std::chrono::seconds(5);

int run_enqueue(const EnqueueOptions& o, const Globals& globals, Io io) {
  if (o.kind == "-") return run_bulk_enqueue(o, globals, io);
  NewJob job = job_from_options(o);
  job.kind = o.kind;
  // Sent as the text it is (Client's payload_json): every number keeps its digits.
  try {
    detail::exact_json::validate(o.payload);
  } catch (const detail::exact_json::SyntaxError& e) {
    throw ConfigError("PAYLOAD_JSON", detail::exact_json::describe(e));
  }
  job.payload_json = o.payload;
  job.idempotency_key = o.key;
  job.unique_key = o.unique_key;
  job.on_conflict = detail::parse_on_conflict(o.on_conflict, "--on-conflict");
  if (o.on_conflict != "skip" && !o.unique_key) throw ConfigError("--on-conflict", "needs --unique-key");
  Client client(DatabaseUrl(globals.database_url), globals.schema, ClientOptions{globals.prepared_statements});
  // The send span and metrics (docs/opentelemetry.md) before the process exits, a failed
  // enqueue's too: a few seconds at most.
  struct FlushAtExit {
    ~FlushAtExit() { detail::flush_telemetry(std::chrono::steady_clock::now() + kSpanFlushBound); }
  } const flush_at_exit;
  try {
    const Enqueued done = client.enqueue_with_outcome(job);
    io.out << done.id << "\n";
    // The id alone on stdout, as always; what a unique enqueue found goes to stderr.
    if (done.outcome == EnqueueOutcome::existing) {
      io.err << "oncely: job " << done.id << " with this unique key is live already: nothing enqueued\n";
    } else if (done.outcome == EnqueueOutcome::replaced) {
      io.err << "oncely: job " << done.id << " with this unique key was waiting: replaced\n";
    } else if (done.outcome == EnqueueOutcome::running) {
      io.err << "oncely: job " << done.id << " with this unique key is running: not replaced\n";
      return kExitFailure;
    }
  } catch (const ConfigError& e) {
    if (e.path() != "run_at") throw;
    throw ConfigError("--run-at", std::string(e.what()).substr(std::string("run_at: ").size()));
  }
  return kExitOk;
}

}  // namespace oncely::cli
