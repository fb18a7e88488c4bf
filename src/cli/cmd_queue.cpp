// `oncely queue pause|resume|list|set|show`: stop a queue's claims during an incident, start
// them again, see every queue with its pause and policy, and set or show a queue's policy.
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/table.hpp"
#include "oncely/config.hpp"
#include "oncely/queues.hpp"
#include "oncely/stats.hpp"
#include "support/duration.hpp"
#include "support/queue_policy.hpp"

namespace oncely::cli {
namespace {

using Json = nlohmann::ordered_json;

/// "2026-12-01 15:02:11 (12m 4s ago)".
std::string since(const QueuePause& p) {
  std::string at = p.paused_at.substr(0, 19);
  if (at.size() > 10 && at[10] == 'T') at[10] = ' ';
  return at + " (" + detail::format_duration(std::chrono::milliseconds(static_cast<long long>(p.paused_for_s)) * 1000) +
         " ago)";
}

Json pause_json(const std::optional<QueuePause>& p) {
  if (!p) return Json();
  return {{"paused_at", p->paused_at},
          {"paused_for_s", p->paused_for_s},
          {"reason", p->reason ? Json(*p->reason) : Json()},
          {"paused_by", p->paused_by}};
}

/// "concurrency 20, key /tenant_id, per key 1": the limits that are set, from their file form
/// (detail::limits_json).
std::string limits_summary(const nlohmann::json& limits) {
  std::string text;
  const auto add = [&](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
  if (limits.contains("concurrency")) add("concurrency " + std::to_string(limits["concurrency"].get<int>()));
  if (limits.contains("key")) add("key " + cell(limits["key"].get<std::string>(), 64));
  if (limits.contains("per_key_concurrency"))
    add("per key " + std::to_string(limits["per_key_concurrency"].get<int>()));
  if (limits.contains("rate")) add("rate " + limits["rate"].get<std::string>());
  if (limits.contains("per_key_rate")) add("per key rate " + limits["per_key_rate"].get<std::string>());
  return text;
}

/// A policy on one line of `queue list`, e.g. "lease 30s, 8 attempts, backoff 5s..10m equal
/// jitter, timeout 5m"; "defaults" for a queue without a row (`queue show` prints them). The
/// mode has its own column; a transaction queue's lease is not used, so not shown.
std::string policy_summary(const QueueConfig& policy, bool stored) {
  if (!stored) return "defaults";
  std::string text;
  if (policy.mode == QueueConfig::Mode::lease) text += "lease " + detail::format_duration(policy.lease) + ", ";
  text += std::to_string(policy.max_attempts) + (policy.max_attempts == 1 ? " attempt" : " attempts");
  const BackoffConfig& b = policy.backoff;
  if (b.schedule.empty()) {
    const std::string_view jitter = detail::jitter_name(b.jitter);
    text += ", backoff " + detail::format_duration(b.base) + ".." + detail::format_duration(b.cap) + " " +
            (jitter == "none" ? "no" : std::string(jitter)) + " jitter";
  } else {
    text += ", backoff schedule ";
    for (std::size_t i = 0; i < b.schedule.size(); ++i) {
      text += (i == 0 ? "" : ",") + detail::format_duration(b.schedule[i]);
    }
  }
  text += ", timeout " + detail::format_duration(policy.job_timeout);
  if (policy.limits) text += ", limits " + limits_summary(detail::limits_json(*policy.limits));
  return text;
}

/// The policy as `queue show --json` prints it.
nlohmann::json policy_document(const QueueConfig& policy, bool stored) {
  nlohmann::json j = detail::policy_json(policy);
  j["stored"] = stored;
  return j;
}

/// `held`: what the queue's limits hold back now, if read.
void print_policy(std::ostream& out, const std::string& queue, const nlohmann::json& p,
                  const QueueStats* held = nullptr) {
  out << "queue " << cell(queue, 128) << (p["stored"].get<bool>() ? "" : " (no stored policy: the defaults)") << "\n";
  out << "  mode          " << p["mode"].get<std::string>() << "\n";
  if (p.contains("lease")) out << "  lease         " << p["lease"].get<std::string>() << "\n";
  out << "  max_attempts  " << p["max_attempts"].get<int>() << "\n";
  const nlohmann::json& b = p["backoff"];
  if (b.contains("schedule")) {
    std::string list;
    for (const auto& d : b["schedule"]) list += (list.empty() ? "" : ", ") + d.get<std::string>();
    out << "  backoff       schedule " << list << "\n";
  } else {
    out << "  backoff       base " << b["base"].get<std::string>() << ", cap " << b["cap"].get<std::string>()
        << ", jitter " << b["jitter"].get<std::string>() << "\n";
  }
  out << "  job_timeout   " << p["job_timeout"].get<std::string>() << "\n";
  if (p.contains("limits")) out << "  limits        " << limits_summary(p["limits"]) << " (every worker together)\n";
  if (held) out << "  held now      " << held_by_limits_line(*held) << "\n";
}

}  // namespace

void add_queue(Cli& cli) {
  QueueOptions& o = cli.queue;
  CLI::App* cmd = cli.app.add_subcommand("queue", "pause, resume and list queues");
  cmd->require_subcommand(1);
  CLI::App* pause = cmd->add_subcommand(
      "pause", "stop every worker claiming from QUEUE within a second; running jobs finish, enqueue goes on");
  pause->add_option("QUEUE", o.queue, "queue name")->required();
  pause->add_option("--reason", o.reason, "why, shown by queue list, stats and check");
  pause->parse_complete_callback([&o] { o.action = QueueAction::pause; });
  CLI::App* resume = cmd->add_subcommand("resume", "let workers claim from QUEUE again (at once)");
  resume->add_option("QUEUE", o.queue, "queue name")->required();
  resume->parse_complete_callback([&o] { o.action = QueueAction::resume; });
  CLI::App* list = cmd->add_subcommand(
      "list",
      "every queue known from jobs, workers, pauses, policies and --config: paused or not, since, reason, by whom, "
      "its mode and policy");
  list->add_option("--config,-c", o.config_path, "also list the queues of this worker configuration file");
  list->add_flag("--json", o.json, "print JSON");
  list->parse_complete_callback([&o] { o.action = QueueAction::list; });
  CLI::App* set = cmd->add_subcommand(
      "set",
      "change QUEUE's policy, which every worker of it applies (C++ and SQL): KEY=VALUE for mode, lease, "
      "max_attempts, job_timeout, backoff.base, backoff.cap, backoff.jitter, backoff.schedule, limits.concurrency, "
      "limits.key, limits.per_key_concurrency, limits.rate, limits.per_key_rate (none: no such limit)");
  set->add_option("QUEUE", o.queue, "queue name")->required();
  set->add_option("KEY=VALUE", o.assignments, "e.g. mode=lease lease=30s max_attempts=5 backoff.schedule=1s,30s")
      ->required();
  set->parse_complete_callback([&o] { o.action = QueueAction::set; });
  CLI::App* show = cmd->add_subcommand("show", "QUEUE's policy: stored, or the defaults");
  show->add_option("QUEUE", o.queue, "queue name")->required();
  show->add_flag("--json", o.json, "print JSON");
  show->parse_complete_callback([&o] { o.action = QueueAction::show; });
  cli.queue_cmd = cmd;
}

int run_queue(const QueueOptions& o, const Globals& g, Io io) {
  const DatabaseUrl url(g.database_url);
  switch (o.action) {
    case QueueAction::pause: {
      const PauseResult r = pause_queue(url, g.schema, o.queue, o.reason);
      if (r.newly) {
        io.out << "queue " << cell(o.queue, 128) << " paused; workers stop claiming from it within a second\n";
      } else {
        io.out << "queue " << cell(o.queue, 128) << " was already paused since " << since(r.pause) << " by "
               << cell(r.pause.paused_by, 80) << (r.pause.reason ? ": " + cell(*r.pause.reason, 200) : "") << "\n";
      }
      return kExitOk;
    }
    case QueueAction::resume: {
      const auto ended = resume_queue(url, g.schema, o.queue);
      if (ended) {
        io.out << "queue " << cell(o.queue, 128) << " resumed (it was paused since " << since(*ended) << ")\n";
      } else {
        io.out << "queue " << cell(o.queue, 128) << " was not paused\n";
      }
      return kExitOk;
    }
    case QueueAction::list: {
      std::vector<std::string> configured;
      if (!o.config_path.empty()) {
        for (const auto& [name, queue] : Config::load(o.config_path).queues) configured.push_back(name);
      }
      const std::vector<QueueInfo> queues = list_queues(url, g.schema, configured);
      if (o.json) {
        Json array = Json::array();
        for (const QueueInfo& q : queues) {
          array.push_back({{"queue", q.queue},
                           {"paused", q.pause.has_value()},
                           {"pause", pause_json(q.pause)},
                           {"has_jobs", q.has_jobs},
                           {"configured", q.configured},
                           {"served", q.served},
                           {"policy", policy_document(q.policy, q.policy_stored)},
                           {"policy_stored", q.policy_stored}});
        }
        io.out << array.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
        return kExitOk;
      }
      if (queues.empty()) {
        io.out << "no queues: no jobs, no workers, no pauses, no policies"
               << (o.config_path.empty() ? "" : ", none configured") << "\n";
        return kExitOk;
      }
      std::vector<std::vector<std::string>> rows;
      for (const QueueInfo& q : queues) {
        std::string known;
        const auto add = [&](bool yes, const char* what) {
          if (yes) known += (known.empty() ? "" : ",") + std::string(what);
        };
        add(q.has_jobs, "jobs");
        add(q.served, "workers");
        add(q.configured, "config");
        add(q.policy_stored, "policy");
        rows.push_back({cell(q.queue, 48), q.pause ? "paused" : "active",
                        q.policy.mode == QueueConfig::Mode::lease ? "lease" : "transaction",
                        q.pause ? since(*q.pause) : "-", q.pause ? cell(q.pause->paused_by, 40) : "-",
                        known.empty() ? "-" : known, cell(policy_summary(q.policy, q.policy_stored), 80),
                        q.pause && q.pause->reason ? cell(*q.pause->reason, 80) : "-"});
      }
      print_table(io.out, {"QUEUE", "STATE", "MODE", "SINCE (UTC)", "BY", "KNOWN FROM", "POLICY", "REASON"}, rows);
      return kExitOk;
    }
    case QueueAction::set: {
      std::vector<std::pair<std::string, std::string>> changes;
      for (const std::string& a : o.assignments) {
        const std::size_t eq = a.find('=');
        if (eq == std::string::npos || eq == 0) {
          io.err << "oncely: error: " << cell(a, 80) << ": expected KEY=VALUE\n";
          return kExitUsage;
        }
        changes.emplace_back(a.substr(0, eq), a.substr(eq + 1));
      }
      print_policy(io.out, o.queue, policy_document(set_queue_policy(url, g.schema, o.queue, changes), true));
      return kExitOk;
    }
    case QueueAction::show: {
      const QueuePolicy p = queue_policy(url, g.schema, o.queue);
      nlohmann::json j = policy_document(p.policy, p.stored);
      // With limits, what they hold back now, as `oncely stats` reads it.
      std::optional<QueueStats> held;
      if (p.policy.limits) {
        const Stats stats = collect_stats(url, g.schema, o.queue);
        held = stats.queues.empty() ? QueueStats{} : stats.queues.front();  // (no jobs: none listed)
        held->running_under_limits = held->running_under_limits.value_or(0);
        held->held_by_limit = held->held_by_limit.value_or(0);
        held->keys_at_limit = held->keys_at_limit.value_or(0);
        j["held"] = {{"running_under_limits", *held->running_under_limits},
                     {"held_by_limit", *held->held_by_limit},
                     {"keys_at_limit", *held->keys_at_limit}};
      }
      if (o.json) {
        io.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else {
        print_policy(io.out, o.queue, j, held ? &*held : nullptr);
      }
      return kExitOk;
    }
    case QueueAction::none: break;
  }
  io.err << "oncely: error: queue needs a subcommand: pause, resume, list, set or show\n";
  return kExitUsage;
}

}  // namespace oncely::cli
