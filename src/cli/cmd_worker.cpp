#include <cstdlib>
#include <cstring>
#include <iostream>

#include <spdlog/spdlog.h>

#include "cli/app.hpp"
#include "cli/log_format.hpp"
#include "oncely/builtin_handlers.hpp"
#include "oncely/config.hpp"
#include "oncely/runtime.hpp"
#include "support/open_file_limit.hpp"

namespace oncely::cli {

void add_worker(Cli& cli) {
  CLI::App* cmd = cli.app.add_subcommand("worker", "run workers for the configured queues until SIGTERM/SIGINT");
  cmd->add_option("--config,-c", cli.worker.config_path, "worker configuration file (JSON)")->required();
  cmd->add_option("--metrics-addr", cli.worker.metrics_address,
                  "serve Prometheus /metrics, /healthz and /readyz on HOST:PORT (default: off)");
  cli.worker_cmd = cmd;
}

void run_worker(const WorkerOptions& options, const Globals& globals, Io io) {
  // Before anything here can start a thread (libcurl's initialisation, a logger, the
  // runtime): every thread inherits this mask, so SIGTERM/SIGINT reach only the runtime's
  // signal thread instead of ending the process from some other thread.
  block_stop_signals();
  // Everything that can be wrong with the file is found here, before any job is touched.
  Config config = Config::load(options.config_path);
  config.database_url = globals.database_url;
  config.schema = globals.schema;
  // The flag and ONCELY_PREPARED_STATEMENTS=0 can only turn them off.
  config.prepared_statements = config.prepared_statements && globals.prepared_statements;
  auto log = detail::make_cli_logger(detail::parse_log_format(globals.log_format));
  // Descriptors are what reconnects and exec jobs run out of first (open_file_limit.hpp).
  const detail::OpenFileLimit files = detail::raise_open_file_limit();
  if (files.error != 0) {
    log->warn("could not raise the open-file limit from {}: {}", files.before, std::strerror(files.error));
  } else if (files.after != files.before) {
    log->info("open-file limit raised from {} to {} (the hard limit; exec jobs get {})", files.before, files.after,
              files.before);
  }
  Runtime runtime(config, RuntimeOptions{log, nullptr, true, options.metrics_address});
  // Still before any job is touched: run() has not started.
  if (add_builtin_handlers(runtime, config, log).empty()) {
    log->warn(
        "the configuration declares no handlers: every job these queues receive will be dead-lettered "
        "as unknown_kind");
  }
  const int code = runtime.run();
  log->flush();
  io.out.flush();
  io.err.flush();
  // A drain that timed out leaves handler threads running; they must not outlive static
  // destructors, and their transactions roll back when the process exits.
  std::quick_exit(code);
}

}  // namespace oncely::cli
