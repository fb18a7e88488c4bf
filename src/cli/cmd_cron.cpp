// `oncely cron list [--config FILE] [--json]`: each cron entry, its newest enqueued slot and
// its next one, by the database's clock.

#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/table.hpp"
#include "oncely/cron.hpp"

namespace oncely::cli {
namespace {

nlohmann::json optional_json(const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

void add_cron(Cli& cli) {
  CLI::App* cmd = cli.app.add_subcommand("cron", "periodic jobs: list the entries and their slots");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "each entry, the newest slot it enqueued and the next one");
  list->add_option("--config,-c", cli.cron.config_path,
                   "worker configuration file (JSON): list its entries (default: every entry a worker has carried)");
  list->add_flag("--json", cli.cron.json, "print JSON");
  cli.cron_cmd = cmd;
}

int run_cron(const CronOptions& options, const Globals& globals, Io io) {
  std::optional<Config> config;
  if (!options.config_path.empty()) config = Config::load(options.config_path);
  const auto entries = list_cron(DatabaseUrl(globals.database_url), globals.schema, config ? &config->cron : nullptr);
  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
      out.push_back({{"name", e.name},
                     {"schedule", e.schedule},
                     {"time_zone", e.time_zone},
                     {"catch_up", optional_json(e.catch_up)},
                     {"in_config", e.in_config},
                     {"seen", e.seen},
                     {"last_enqueued_slot", optional_json(e.last_enqueued_slot)},
                     {"next_slot", optional_json(e.next_slot)}});
    }
    io.out << out.dump(2) << "\n";
    return kExitOk;
  }
  if (entries.empty()) {
    io.out << (config ? "no cron entries in the configuration\n" : "no cron entries: no worker has carried one\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : entries) {
    rows.push_back({cell(e.name, 40), cell(e.schedule, 40), cell(e.time_zone, 32), e.catch_up.value_or("-"),
                    e.last_enqueued_slot.value_or(e.seen ? "-" : "- (not started)"), e.next_slot.value_or("-")});
  }
  print_table(io.out, {"NAME", "SCHEDULE", "TIME ZONE", "CATCH UP", "LAST ENQUEUED", "NEXT"}, rows);
  return kExitOk;
}

}  // namespace oncely::cli
