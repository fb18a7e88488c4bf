#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "duration.hpp"
#include "oncely/client.hpp"
#include "oncely/errors.hpp"

namespace oncely::cli {

void add_enqueue(Cli& cli) {
  EnqueueOptions& o = cli.enqueue;
  CLI::App* cmd = cli.app.add_subcommand("enqueue", "enqueue one job and print its id");
  cmd->add_option("KIND", o.kind, "job kind (selects the handler)")->required();
  cmd->add_option("PAYLOAD_JSON", o.payload, "job payload as JSON (default {})");
  cmd->add_option("--queue,-q", o.queue, "queue name")->capture_default_str();
  cmd->add_option("--key,-k", o.key, "idempotency key (default: the job id)");
  cmd->add_option("--run-at", o.run_at, "when to run: a timestamp (2026-12-01T09:00:00Z) or +DURATION (+5m)");
  cmd->add_option("--priority,-p", o.priority, "smaller runs first")->capture_default_str();
  cmd->add_option("--max-attempts", o.max_attempts, "attempts before dead-lettering (default: the queue's)");
  cli.enqueue_cmd = cmd;
}

int run_enqueue(const EnqueueOptions& o, const Globals& globals, Io io) {
  if (o.kind == "-") {
    throw ConfigError("KIND", "bulk enqueue from standard input ('-') is not available in this version");
  }
  NewJob job;
  job.kind = o.kind;
  try {
    job.payload = nlohmann::json::parse(o.payload);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError("PAYLOAD_JSON", std::string("not valid JSON: ") + e.what());
  }
  job.queue = o.queue;
  job.idempotency_key = o.key;
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
  Client client(DatabaseUrl(globals.database_url), globals.schema);
  io.out << client.enqueue(job) << "\n";
  return kExitOk;
}

}  // namespace oncely::cli
