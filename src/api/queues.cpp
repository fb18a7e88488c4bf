// pause_queue(), resume_queue(), list_queues(), queue_policy(), set_queue_policy(): the
// operator's queue controls, for the CLI and any console alike.

#include "oncely/queues.hpp"

#include <map>

#include <nlohmann/json.hpp>

#include "api/operator_transaction.hpp"
#include "store/jobs.hpp"
#include "support/queue_policy.hpp"
#include "support/text.hpp"

namespace oncely {
namespace {

void validate_queue_name(const std::string& queue) {
  if (queue.empty()) throw ConfigError("queue", "must not be empty");
  if (detail::has_control_character(queue)) throw ConfigError("queue", "must not contain control characters");
  if (queue.size() > detail::kMaxQueueBytes) throw ConfigError("queue", "must be at most 128 bytes");
}

long integer_value(const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const long n = std::stol(value, &used);
    if (used != value.size()) throw std::invalid_argument(value);
    return n;
  } catch (const std::exception&) {
    throw ConfigError(key, "must be an integer (got " + detail::printable(value) + ")");
  }
}

// One `key=value` of queue set applied to the file form of the policy.
void apply_change(nlohmann::json& policy, const std::string& key, const std::string& value) {
  if (key == "mode" || key == "lease" || key == "job_timeout") {
    policy[key] = value;
  } else if (key == "max_attempts") {
    policy[key] = integer_value(key, value);
  } else if (key == "limits.concurrency" || key == "limits.key" || key == "limits.per_key_concurrency" ||
             key == "limits.rate" || key == "limits.per_key_rate") {
    // "none" takes the limit away; the queue's limits go with the last of them.
    const std::string name = key.substr(7);
    const bool text = name == "key" || name.ends_with("rate");
    if (value != "none") {
      policy["limits"][name] = text ? nlohmann::json(value) : nlohmann::json(integer_value(key, value));
    } else if (policy.contains("limits")) {
      policy["limits"].erase(name);
      if (policy["limits"].empty()) policy.erase("limits");
    }
  } else if (key == "backoff.base" || key == "backoff.cap" || key == "backoff.jitter") {
    nlohmann::json& backoff = policy["backoff"];
    backoff.erase("schedule");  // base, cap and jitter replace a schedule
    backoff[key.substr(8)] = value;
  } else if (key == "backoff.schedule") {
    if (value == "none") {
      policy["backoff"] = nlohmann::json::object();
      return;
    }
    nlohmann::json schedule = nlohmann::json::array();
    for (std::size_t from = 0; from <= value.size();) {
      const std::size_t comma = std::min(value.find(',', from), value.size());
      schedule.push_back(value.substr(from, comma - from));
      from = comma + 1;
    }
    policy["backoff"] = {{"schedule", schedule}};
  } else {
    throw ConfigError(key,
                      "unknown key: one of mode, lease, max_attempts, job_timeout, backoff.base, backoff.cap, "
                      "backoff.jitter, backoff.schedule, limits.concurrency, limits.key, limits.per_key_concurrency, "
                      "limits.rate, limits.per_key_rate");
  }
}

}  // namespace

QueuePolicy queue_policy(const DatabaseUrl& url, std::string_view schema, const std::string& queue) {
  validate_queue_name(queue);
  return detail::operator_transaction(url, schema, "reading the policy of queue " + queue, false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        // No row: QueueConfig's defaults, which are queue_policy()'s
                                        // (protocol_pgtest checks it), with the queue's limits; a
                                        // viewer may not call that function.
                                        QueuePolicy policy;
                                        policy.policy = store.queue_policies.read_or_defaults(tx, queue, policy.stored);
                                        return policy;
                                      });
}

QueueConfig set_queue_policy(const DatabaseUrl& url, std::string_view schema, const std::string& queue,
                             const std::vector<std::pair<std::string, std::string>>& changes) {
  validate_queue_name(queue);
  if (changes.empty()) throw ConfigError("queue set", "give at least one key=value");
  return detail::operator_transaction(
      url, schema, "setting the policy of queue " + queue, true,
      [&](pqxx::transaction_base& tx, const detail::Store& store) {
        // A queue without a row keeps the limits it has (set in SQL): `queue set` changes only what it names.
        bool stored = false;
        nlohmann::json policy = detail::policy_json(store.queue_policies.read_or_defaults(tx, queue, stored));
        for (const auto& [key, value] : changes) apply_change(policy, key, value);
        // A lease on a transaction queue is refused by the file's rules; a queue set to
        // transaction mode drops the lease it had.
        if (policy["mode"] == "transaction") policy.erase("lease");
        // Validated as the configuration file is: its errors name the key.
        QueueConfig checked;
        try {
          checked = Config::parse({{"queues", {{queue, policy}}}}).queues.at(queue);
        } catch (const ConfigError& e) {
          std::string key = e.path();
          const std::string prefix = "/queues/" + queue + "/";
          if (key.starts_with(prefix)) key = key.substr(prefix.size());
          for (auto& c : key) {
            if (c == '/') c = '.';
          }
          throw ConfigError(key, e.reason());
        }
        store.queue_policies.write(tx, queue, checked);
        return checked;
      });
}

PauseResult pause_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue,
                        const std::optional<std::string>& reason) {
  validate_queue_name(queue);
  if (reason && detail::has_control_character(*reason)) {
    throw ConfigError("reason", "must not contain control characters");
  }
  return detail::operator_transaction(url, schema, "pausing queue " + queue, true,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        auto [pause, newly] = store.queue_pauses.pause(tx, queue, reason);
                                        return PauseResult{std::move(pause), newly};
                                      });
}

std::optional<QueuePause> resume_queue(const DatabaseUrl& url, std::string_view schema, const std::string& queue) {
  validate_queue_name(queue);
  return detail::operator_transaction(
      url, schema, "resuming queue " + queue, true,
      [&](pqxx::transaction_base& tx, const detail::Store& store) { return store.queue_pauses.resume(tx, queue); });
}

std::vector<QueueInfo> list_queues(const DatabaseUrl& url, std::string_view schema,
                                   const std::vector<std::string>& configured) {
  return detail::operator_transaction(url, schema, "listing queues", false,
                                      [&](pqxx::transaction_base& tx, const detail::Store& store) {
                                        std::map<std::string, QueueInfo> by_name;
                                        const auto entry = [&](const std::string& name) -> QueueInfo& {
                                          QueueInfo& q = by_name[name];
                                          q.queue = name;
                                          return q;
                                        };
                                        for (const auto& name : store.queue_pauses.job_queues(tx))
                                          entry(name).has_jobs = true;
                                        for (const auto& name : configured) entry(name).configured = true;
                                        for (const auto& w : store.workers.list(tx, std::nullopt)) {
                                          for (const auto& name : w.queues) entry(name).served = true;
                                        }
                                        for (auto& p : store.queue_pauses.list(tx)) entry(p.queue).pause = std::move(p);
                                        // A queue without a row keeps QueueConfig's defaults, which are the
                                        // queue_policy() function's (tests/pg/protocol_pgtest.cpp checks it): a
                                        // viewer may read the table but not call that function.
                                        for (auto& [name, policy] : store.queue_policies.list(tx)) {
                                          QueueInfo& q = entry(name);
                                          q.policy = std::move(policy);
                                          q.policy_stored = true;
                                        }
                                        std::vector<QueueInfo> queues;
                                        for (auto& [name, q] : by_name) queues.push_back(std::move(q));
                                        return queues;
                                      });
}

}  // namespace oncely
