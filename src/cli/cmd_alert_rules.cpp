// `oncely alert-rules --config FILE`: the queues' alarms as Prometheus alerting rules, on
// stdout, for a rule file. Reads only the configuration: no database.

#include <ostream>

#include "cli/app.hpp"
#include "oncely/alert_rules.hpp"
#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"

namespace oncely::cli {

void add_alert_rules(Cli& cli) {
  AlertRulesOptions& o = cli.alert_rules;
  const AlertRuleOptions d;
  CLI::App* cmd = cli.app.add_subcommand(
      "alert-rules", "print Prometheus alerting rules with each queue's alarm thresholds (no database needed)");
  cmd->add_option("--config", o.config_path, "the worker configuration whose queues' \"alarms\" to use")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--runbook-base", o.runbook_base,
                  "each rule's runbook annotation is this plus a section anchor (default: " + d.runbook_base + ")")
      ->type_name("URL");
  cmd->add_option("--for", o.for_duration,
                  "how long a condition must hold before its alert fires (default: " + d.for_duration + ")")
      ->type_name("DURATION");
  cli.alert_rules_cmd = cmd;
}

int run_alert_rules(const AlertRulesOptions& o, Io io) {
  const Config config = Config::load(o.config_path);
  AlertRuleOptions options;
  if (o.runbook_base) options.runbook_base = *o.runbook_base;
  if (o.for_duration) {
    try {
      (void)detail::parse_duration(*o.for_duration);  // Prometheus reads the same forms (5m, 30s, 1h)
    } catch (const ConfigError& e) {
      throw ConfigError("--for", e.what());
    }
    options.for_duration = *o.for_duration;
  }
  io.out << prometheus_alert_rules(config, options);
  return kExitOk;
}

}  // namespace oncely::cli
