#include "process/cron_scheduler.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "oncely/cron.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"

namespace oncely::detail {
namespace {

// After a failure: 1 s, doubling to 30 s, so that an outage is not hammered.
constexpr std::chrono::milliseconds kFirstRetry{1000};
constexpr std::chrono::milliseconds kLongestRetry{30000};

CronAdvance advance_for(const cron::CompiledEntry& e, const cron::Plan& plan, bool first) {
  CronAdvance a;
  a.first = first;
  a.name = e.name;
  a.fingerprint = e.fingerprint;
  a.covered_until = plan.covered_until;
  a.slots = plan.enqueue;
  for (const auto slot : plan.enqueue) a.keys.push_back(cron::job_key(e.name, slot));
  a.queue = e.config.queue;
  a.kind = e.config.kind;
  a.payload = e.config.payload.dump();
  a.priority = e.config.priority;
  a.max_attempts = e.config.max_attempts;
  return a;
}

}  // namespace

CronScheduler::Turn CronScheduler::run_once(pqxx::connection& conn, const Store& store,
                                            const std::vector<cron::CompiledEntry>& entries, spdlog::logger& log) {
  Turn turn;
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  // Autocommit: each statement is its own transaction, one round trip, no BEGIN/COMMIT.
  pqxx::nontransaction tx(conn);
  const CronSlotsRead read = store.cron_slots.read(tx, names);
  ++turn.statements;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& row = read.rows.at(i);
    const cron::Plan plan = cron::plan(e, cron::SlotRow{row.covered_until, row.fingerprint}, read.now);
    if (plan.next_slot)
      turn.sleep =
          std::min(turn.sleep, std::chrono::duration_cast<std::chrono::milliseconds>(*plan.next_slot - read.now));
    if (!plan.write) continue;
    const std::optional<long> enqueued = store.cron_slots.advance(tx, advance_for(e, plan, !row.covered_until));
    ++turn.statements;
    if (!enqueued) continue;  // another process moved the row first
    turn.enqueued += *enqueued;
    // An @every schedule may enqueue several times a second: its slots go to debug.
    const auto level = e.schedule.every.count() > 0 ? spdlog::level::debug : spdlog::level::info;
    if (!row.covered_until) {
      log.log(level, "cron {} starts: first slot {}", e.name,
              plan.next_slot ? cron::format_utc(*plan.next_slot) : "none");
    } else if (*enqueued > 0) {
      log.log(level, "cron {} enqueued {} job(s), newest slot {}", e.name, *enqueued,
              cron::format_utc(plan.enqueue.back()));
    }
    if (row.covered_until && row.fingerprint != e.fingerprint) {
      log.info("cron {}: schedule changed (was \"{}\"), slots missed before the change are not caught up", e.name,
               row.fingerprint);
    } else if (plan.skipped) {
      log.log(level, "cron {}: missed slot(s) before {} skipped (catch_up {})", e.name, cron::format_utc(read.now),
              to_string(e.config.catch_up));
    }
  }
  turn.sleep = std::max(turn.sleep, std::chrono::milliseconds(0));
  return turn;
}

CronScheduler::CronScheduler(const Store& store, DatabaseUrl url, const std::map<std::string, CronEntry>& entries,
                             std::shared_ptr<spdlog::logger> log) {
  auto state = std::make_unique<State>();
  state->store = &store;
  state->url = std::move(url);
  for (const auto& [name, entry] : entries) state->entries.push_back(cron::compile(name, entry));
  state->log = std::move(log);
  thread_ = ServiceThread::owning(std::move(state), &loop);
}

bool CronScheduler::stop_until(std::chrono::steady_clock::time_point deadline) { return thread_.stop_until(deadline); }

void CronScheduler::loop(const std::stop_token& stopping, State& state) {
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<pqxx::connection> conn;
  auto retry = kFirstRetry;
  state.log->info("cron scheduler started entries={}", state.entries.size());
  std::chrono::milliseconds next{0};
  while (pause_for(stopping, next)) {
    try {
      if (!conn || !conn->is_open()) {
        conn = connect(state.url);
        state.store->prepare(*conn);
      }
      const Turn turn = run_once(*conn, *state.store, state.entries, *state.log);
      state.statements += turn.statements;
      retry = kFirstRetry;
      next = turn.sleep;
    } catch (const std::exception& e) {
      state.log->warn("cron scheduler: {} (retrying in {})", one_line(state.url, e.what()), format_duration(retry));
      conn.reset();
      next = retry;
      retry = std::min(retry * 2, kLongestRetry);
    }
  }
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  state.log->info("cron scheduler stopped: {} statement(s) in {:.1f} s ({:.1f} per minute)", state.statements.load(),
                  seconds, seconds > 0 ? static_cast<double>(state.statements.load()) * 60.0 / seconds : 0.0);
}

std::unique_ptr<CronScheduler> start_cron_scheduler(const Config& config, const Store& store, const DatabaseUrl& url,
                                                    const std::shared_ptr<spdlog::logger>& log) {
  if (config.cron.empty()) return nullptr;
  return std::make_unique<CronScheduler>(store, url, config.cron, log);
}

}  // namespace oncely::detail
