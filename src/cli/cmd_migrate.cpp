#include <ostream>

#include "cli/app.hpp"
#include "oncely/admin.hpp"

namespace oncely::cli {

void add_migrate(Cli& cli) {
  cli.migrate_cmd = cli.app.add_subcommand("migrate", "create or upgrade the schema (safe to run again)");
  cli.migrate_cmd->add_flag("--roles", cli.migrate.roles,
                            "also create the NOLOGIN roles <schema>_producer, _worker, _operator and _viewer "
                            "and grant each exactly its privileges (needs CREATEROLE)");
}

int run_migrate(const MigrateOptions& options, const Globals& globals, Io io) {
  const DatabaseUrl url(globals.database_url);
  const MigrationResult result = migrate(url, globals.schema);
  if (result.applied.empty()) {
    io.out << "schema \"" << globals.schema << "\" is up to date at version " << result.version << "\n";
  } else {
    io.out << "schema \"" << globals.schema << "\" migrated to version " << result.version << " (applied";
    for (const int v : result.applied) io.out << " " << v;
    io.out << ")\n";
  }
  if (options.roles) {
    const RolesResult roles = migrate_roles(url, globals.schema);
    const SchemaRoles names = schema_roles(globals.schema);
    io.out << "roles " << names.producer << ", " << names.worker << ", " << names.operator_ << ", " << names.viewer
           << ": ";
    if (roles.created.empty()) {
      io.out << "privileges applied (all existed)\n";
    } else {
      io.out << "created";
      for (const auto& name : roles.created) io.out << " " << name;
      io.out << "; privileges applied\n";
    }
  }
  return kExitOk;
}

}  // namespace oncely::cli
