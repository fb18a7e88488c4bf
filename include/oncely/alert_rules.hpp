#pragma once
// Prometheus alerting rules from a worker configuration: each queue's alarms
// (QueueConfig::alarms) as rules over oncely's metrics, what `oncely alert-rules` prints.

#include <string>

#include "oncely/config.hpp"

namespace oncely {

struct AlertRuleOptions {
  /// Where the runbooks are: each rule's `runbook` annotation is this with the section's
  /// anchor appended ("#runbook-a-queue-is-failing").
  std::string runbook_base = "docs/operations.md";
  /// How long a condition must hold before its alert fires (the rules' `for`).
  std::string for_duration = "5m";
};

/// One rule group "oncely", in YAML (Prometheus 2 rule file format): per queue and
/// threshold set, a warning and a critical rule (label `severity`) for dead letters, the
/// failure rate, the oldest ready job's age and dead-letter growth, plus one rule for
/// workers that crash. Queue names are escaped for PromQL and YAML.
std::string prometheus_alert_rules(const Config& config, const AlertRuleOptions& options = {});

}  // namespace oncely
