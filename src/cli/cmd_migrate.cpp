#include <ostream>

#include "cli/app.hpp"
#include "oncely/admin.hpp"

namespace oncely::cli {

void add_migrate(Cli& cli) {
  cli.migrate_cmd = cli.app.add_subcommand("migrate", "create or upgrade the schema (safe to run again)");
}

int run_migrate(const MigrateOptions&, const Globals& globals, Io io) {
  const MigrationResult result = migrate(DatabaseUrl(globals.database_url), globals.schema);
  if (result.applied.empty()) {
    io.out << "schema \"" << globals.schema << "\" is up to date at version " << result.version << "\n";
  } else {
    io.out << "schema \"" << globals.schema << "\" migrated to version " << result.version << " (applied";
    for (const int v : result.applied) io.out << " " << v;
    io.out << ")\n";
  }
  return kExitOk;
}

}  // namespace oncely::cli
