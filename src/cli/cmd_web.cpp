// `oncely web [--addr 127.0.0.1:9470] [--read-only] [--login-file FILE] ...`: the operator
// console (src/web), until SIGTERM or SIGINT.

#include <atomic>
#include <cstring>
#include <ostream>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "cli/log_format.hpp"
#include "oncely/errors.hpp"
#include "process/stop_signals.hpp"
#include "support/duration.hpp"
#include "support/open_file_limit.hpp"
#include "web/console.hpp"

namespace oncely::cli {

void add_web(Cli& cli) {
  CLI::App* cmd = cli.app.add_subcommand("web", "serve the operator console (a web page) until stopped");
  WebOptions& o = cli.web;
  cmd->add_option("--addr", o.address, "address to listen on, HOST:PORT (port 0: any free one)")->capture_default_str();
  cmd->add_flag("--read-only", o.read_only, "everyone is a viewer: no buttons, every change refused");
  cmd->add_option("--login-file", o.login_file,
                  "logins, one \"ROLE NAME TOKEN\" line each (ROLE operator or viewer); mode 0600");
  cmd->add_flag("--viewer-payloads", o.viewer_payloads,
                "viewers see payloads too (when the database role may read them)");
  cmd->add_option("--statement-timeout", o.statement_timeout, "statement_timeout of each request's queries")
      ->capture_default_str();
  cmd->add_option("--refresh", o.refresh, "how often pages refresh their numbers (0: never)")->capture_default_str();
  cli.web_cmd = cmd;
}

std::pair<std::string, int> parse_web_address(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw ConfigError("--addr", "expected HOST:PORT, got '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  if (host.find(':') != std::string::npos && !(host.starts_with('[') && host.ends_with(']'))) {
    throw ConfigError("--addr", "an IPv6 address goes in brackets: [::1]:9470");
  }
  const std::string port_text = address.substr(colon + 1);
  if (const auto refusal = integer_refusal(port_text, kPort)) throw ConfigError("--addr", *refusal);
  return {host, static_cast<int>(integer_value(port_text))};
}

int run_web(const WebOptions& options, const Globals& globals, Io io) {
  web::ConsoleOptions c;
  c.url = DatabaseUrl(globals.database_url);
  c.schema = globals.schema;
  std::tie(c.host, c.port) = parse_web_address(options.address);
  c.read_only = options.read_only;
  c.viewer_payloads = options.viewer_payloads;
  c.statement_timeout = detail::parse_duration(options.statement_timeout);
  const auto refresh = detail::parse_duration(options.refresh);
  c.refresh_seconds = static_cast<int>((refresh.count() + 999) / 1000);
  c.credentials = web::load_credentials(options.login_file);
  web::validate(c);  // before anything listens: a refusal is one line and exit 2
  c.log = detail::make_cli_logger(detail::parse_log_format(globals.log_format));
  // As a worker does (open_file_limit.hpp): nothing here uses select(), and the console's
  // HTTP server sizes its connection table and the reserve its pages' database sessions
  // need from this limit, read when it starts listening.
  const detail::OpenFileLimit files = detail::raise_open_file_limit();
  if (files.error != 0) {
    c.log->warn("could not raise the open-file limit from {}: {}", files.before, std::strerror(files.error));
  } else if (files.after != files.before) {
    c.log->info("open-file limit raised from {} to {} (the hard limit)", files.before, files.after);
  }
  // The stop signals are blocked before the console starts its threads.
  std::atomic<web::Console*> running{nullptr};
  std::atomic<bool> stop_requested{false};
  detail::StopSignalWatcher signals([&](int) {
    stop_requested = true;
    if (web::Console* serving = running.load()) serving->stop();
  });
  web::Console console(c);
  const std::string host = c.host;
  c.log->info("console listening addr={}:{} logins={} read_only={}", host, console.port(), c.credentials.size(),
              c.read_only);
  io.out << "oncely web: listening on http://" << host << ":" << console.port() << "\n" << std::flush;
  running = &console;
  if (!stop_requested) console.run();  // a signal before this line: nothing to serve
  running = nullptr;
  c.log->info("console stopped");
  return kExitOk;
}

}  // namespace oncely::cli
