#include "cli/app.hpp"

#include <iostream>
#include <set>
#include <string_view>

#include <pqxx/except>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "oncely/stats.hpp"
#include "support/pooler.hpp"
#include "support/text.hpp"

namespace oncely::cli {

std::unique_ptr<Cli> make_app() {
  auto cli = std::make_unique<Cli>();
  CLI::App& app = cli->app;
  app.require_subcommand(1);
  // ONCELY_VERSION is the project's version, defined for every target by CMakeLists.txt.
  app.set_version_flag("--version", "oncely " ONCELY_VERSION, "print the version and exit");
  app.fallthrough();  // root options may also follow the subcommand
  app.add_option("--database-url", cli->globals.database_url, "libpq connection string or URL (default: $DATABASE_URL)")
      ->envname("DATABASE_URL");
  app.add_option("--schema", cli->globals.schema, "schema holding oncely's tables (default: $ONCELY_SCHEMA or oncely)")
      ->envname("ONCELY_SCHEMA")
      ->default_str(std::string(kDefaultSchema));
  cli->globals.schema = std::string(kDefaultSchema);
  app.add_option("--log-format", cli->globals.log_format,
                 "log lines as text or json (default: $ONCELY_LOG_FORMAT or text)")
      ->envname("ONCELY_LOG_FORMAT");
  app.add_flag("--no-prepared-statements", cli->globals.no_prepared_statements,
               "no named prepared statements, for a transaction-mode pooler such as PgBouncer (default: "
               "$ONCELY_PREPARED_STATEMENTS=0 or the worker file's prepared_statements)");
  add_migrate(*cli);
  add_enqueue(*cli);
  add_dlq(*cli);
  add_queue(*cli);
  add_jobs(*cli);
  add_stats(*cli);
  add_check(*cli);
  add_alert_rules(*cli);
  add_worker(*cli);
  add_cron(*cli);
  add_batches(*cli);
  add_web(*cli);
  return cli;
}

namespace {

// `check` speaks the Nagios plugin convention, where 2 means CRITICAL: its usage errors
// are UNKNOWN (3) so that a typo in a monitor's command line never pages anyone.
int usage_exit_code(const Cli& cli) {
  return cli.check_cmd != nullptr && cli.check_cmd->parsed() ? static_cast<int>(CheckStatus::unknown) : kExitUsage;
}

}  // namespace

namespace {

// The long names of the options that take a comma-separated list ("--depends-on 1,2"), in
// every command.
void collect_list_options(const CLI::App& app, std::set<std::string>& names) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_delimiter() == ',') {
      for (const std::string& name : option->get_lnames()) names.insert("--" + name);
    }
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    collect_list_options(*sub, names);
  }
}

// CLI11 drops the empty items of a list ("--depends-on 1,,2" is 1 and 2): a script that
// writes "$A,$B" with B empty would lose B without a word. An empty item is refused instead.
std::optional<std::string> empty_list_item(const Cli& cli, int argc, const char* const* argv) {
  std::set<std::string> lists;
  collect_list_options(cli.app, lists);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    const std::size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    if (!lists.contains(name)) continue;
    std::string_view value;
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    if (value.find(",,") != std::string_view::npos || value.starts_with(',') || value.ends_with(',')) {
      return name + ": an empty item in \"" + std::string(value) + "\" (give the values separated by single commas)";
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> parse(Cli& cli, int argc, const char* const* argv, Io io) {
  if (const auto refusal = empty_list_item(cli, argc, argv)) {
    io.err << "oncely: error: " << detail::printable(*refusal) << "\n";
    return kExitUsage;
  }
  try {
    cli.app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help, --version
      return cli.app.exit(e, io.out, io.err);
    }
    io.err << "oncely: error: " << detail::printable(e.what()) << " (see oncely --help)\n";
    return usage_exit_code(cli);
  }
}

namespace {

// One line, whatever the message quotes of the input: control characters (a newline, a
// terminal escape) are shown escaped, never sent to the terminal.
int fail(Io io, const std::string& message, int code = kExitFailure) {
  io.err << "oncely: error: " << detail::printable(message) << "\n";
  return code;
}

}  // namespace

int dispatch(Cli& cli, Io io) {
  Globals& globals = cli.globals;
  try {
    if (*cli.alert_rules_cmd) return run_alert_rules(cli.alert_rules, io);  // reads only its file
    validate_schema_name(globals.schema);
    globals.prepared_statements = !globals.no_prepared_statements && detail::prepared_statements_allowed(true);
    if (globals.database_url.empty()) {
      return fail(io, "no database given: set DATABASE_URL or pass --database-url", usage_exit_code(cli));
    }
    if (*cli.migrate_cmd) return run_migrate(cli.migrate, globals, io);
    if (*cli.enqueue_cmd) return run_enqueue(cli.enqueue, globals, io);
    if (*cli.dlq_cmd) return run_dlq(cli.dlq, globals, io);
    if (*cli.queue_cmd) return run_queue(cli.queue, globals, io);
    if (*cli.jobs_cmd) return run_jobs(cli.jobs, globals, io);
    if (*cli.stats_cmd) return run_stats(cli.stats, globals, io);
    if (*cli.check_cmd) return run_check(cli.check, globals, io);
    if (*cli.cron_cmd) return run_cron(cli.cron, globals, io);
    if (*cli.batches_cmd) return run_batches(cli.batches, globals, io);
    if (*cli.web_cmd) return run_web(cli.web, globals, io);
    if (*cli.worker_cmd) run_worker(cli.worker, globals, io);
    return fail(io, "no command given (see oncely --help)", kExitUsage);
  } catch (const ConfigError& e) {
    return fail(io, e.what(), usage_exit_code(cli));
  } catch (const Error& e) {
    return fail(io, e.what());
  } catch (const pqxx::sql_error& e) {
    // Every library path wraps its errors; a named statement a pooler lost gets the hint.
    return fail(io, detail::with_pooler_hint(DatabaseUrl(globals.database_url).scrub(e.what())));
  } catch (const pqxx::failure& e) {
    // Library code wraps database errors itself; this is the backstop. Passwords are
    // scrubbed by the DatabaseUrl that knows them.
    return fail(io, DatabaseUrl(globals.database_url).scrub(e.what()));
  } catch (const std::exception& e) {
    return fail(io, DatabaseUrl(globals.database_url).scrub(e.what()));
  }
}

}  // namespace oncely::cli
