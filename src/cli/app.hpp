#pragma once
// The oncely command line: option structs, setup and run functions per command.
// main() only parses and dispatches; tests build the same app and parse argument vectors.

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace oncely::cli {

/// Where a command writes: tests pass string streams.
struct Io {
  std::ostream& out;
  std::ostream& err;
};

/// Options every command shares (root options, inherited by subcommands).
struct Globals {
  std::string database_url;  // --database-url / DATABASE_URL
  std::string schema;        // --schema / ONCELY_SCHEMA
};

struct MigrateOptions {};

struct EnqueueOptions {
  std::string kind;
  std::string payload = "{}";
  std::string queue = "default";
  std::optional<std::string> key;
  std::optional<std::string> run_at;
  int priority = 0;
  std::optional<int> max_attempts;
};

struct WorkerOptions {
  std::string config_path;
};

struct Cli {
  CLI::App app{"oncely: effectively-once background jobs on PostgreSQL", "oncely"};
  Globals globals;
  MigrateOptions migrate;
  EnqueueOptions enqueue;
  WorkerOptions worker;
  CLI::App* migrate_cmd = nullptr;
  CLI::App* enqueue_cmd = nullptr;
  CLI::App* worker_cmd = nullptr;
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
int run_migrate(const MigrateOptions& options, const Globals& globals, Io io);
int run_enqueue(const EnqueueOptions& options, const Globals& globals, Io io);
/// Runs until SIGTERM/SIGINT, then ends the process (std::quick_exit) with the exit code.
[[noreturn]] void run_worker(const WorkerOptions& options, const Globals& globals, Io io);

/// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

}  // namespace oncely::cli
