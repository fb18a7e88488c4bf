// pause_queue(), resume_queue(), list_queues(): the operator's queue controls, for the CLI
// and any console alike.

#include "oncely/queues.hpp"

#include <map>

#include "api/operator_transaction.hpp"
#include "store/jobs.hpp"
#include "support/text.hpp"

namespace oncely {
namespace {

void validate_queue_name(const std::string& queue) {
  if (queue.empty()) throw ConfigError("queue", "must not be empty");
  if (detail::has_control_character(queue)) throw ConfigError("queue", "must not contain control characters");
  if (queue.size() > detail::kMaxQueueBytes) throw ConfigError("queue", "must be at most 128 bytes");
}

}  // namespace

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
                                        std::vector<QueueInfo> queues;
                                        for (auto& [name, q] : by_name) queues.push_back(std::move(q));
                                        return queues;
                                      });
}

}  // namespace oncely
