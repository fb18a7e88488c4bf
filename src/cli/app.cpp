#include "cli/app.hpp"

#include <iostream>

#include <pqxx/except>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"

namespace oncely::cli {

std::unique_ptr<Cli> make_app() {
  auto cli = std::make_unique<Cli>();
  CLI::App& app = cli->app;
  app.require_subcommand(1);
  app.fallthrough();  // root options may also follow the subcommand
  app.add_option("--database-url", cli->globals.database_url,
                 "libpq connection string or URL (default: $DATABASE_URL)")
      ->envname("DATABASE_URL");
  app.add_option("--schema", cli->globals.schema, "schema holding oncely's tables (default: $ONCELY_SCHEMA or oncely)")
      ->envname("ONCELY_SCHEMA")
      ->default_str(std::string(kDefaultSchema));
  cli->globals.schema = std::string(kDefaultSchema);
  add_migrate(*cli);
  add_enqueue(*cli);
  // add_worker(*cli);  -- enabled once the built-in handlers are in the library
  return cli;
}

std::optional<int> parse(Cli& cli, int argc, const char* const* argv, Io io) {
  try {
    cli.app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help, --version
      return cli.app.exit(e, io.out, io.err);
    }
    io.err << "oncely: error: " << e.what() << " (see oncely --help)\n";
    return kExitUsage;
  }
}

namespace {

int fail(Io io, const std::string& message, int code = kExitFailure) {
  io.err << "oncely: error: " << message << "\n";
  return code;
}

}  // namespace

int dispatch(Cli& cli, Io io) {
  Globals& globals = cli.globals;
  try {
    validate_schema_name(globals.schema);
    if (globals.database_url.empty()) {
      return fail(io, "no database given: set DATABASE_URL or pass --database-url", kExitUsage);
    }
    if (*cli.migrate_cmd) return run_migrate(cli.migrate, globals, io);
    if (*cli.enqueue_cmd) return run_enqueue(cli.enqueue, globals, io);
    // if (*cli.worker_cmd) run_worker(cli.worker, globals, io);  -- with add_worker above
    return fail(io, "no command given (see oncely --help)", kExitUsage);
  } catch (const ConfigError& e) {
    return fail(io, e.what(), kExitUsage);
  } catch (const Error& e) {
    return fail(io, e.what());
  } catch (const pqxx::failure& e) {
    // Library code wraps database errors itself; this is the backstop. Passwords are
    // scrubbed by the DatabaseUrl that knows them.
    return fail(io, DatabaseUrl(globals.database_url).scrub(e.what()));
  } catch (const std::exception& e) {
    return fail(io, DatabaseUrl(globals.database_url).scrub(e.what()));
  }
}

}  // namespace oncely::cli
