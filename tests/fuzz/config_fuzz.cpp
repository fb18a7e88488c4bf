// The worker's configuration file (Config::load's parse of the JSON text, then
// Config::parse): queues, backoff, alarms, cron entries, handler declarations. A file is
// refused with a ConfigError (never another exception) or gives a Config whose every value
// is inside its documented range, that validate() accepts again, whose cron entries compile
// (schedule and time zone) and plan, and whose sql handlers' statements can be scanned.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "handlers/sql_statement.hpp"
#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "scheduling/cron_plan.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

bool within(milliseconds d, milliseconds lo, milliseconds hi) { return d >= lo && d <= hi; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = oncely::fuzz::as_text(data, size);
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;  // Config::load reports it as "invalid JSON"
  }
  oncely::Config config;
  try {
    config = oncely::Config::parse(document);
  } catch (const oncely::ConfigError&) {
    return 0;
  }
  try {
    config.validate();
  } catch (const oncely::ConfigError& e) {
    FUZZ_CHECK(!"a parsed Config validates", text, e.what());
  }
  FUZZ_CHECK(within(config.shutdown_grace, 1s, 24h), text, std::to_string(config.shutdown_grace.count()));
  FUZZ_CHECK(within(config.dedup_window, 1h, std::chrono::hours(24 * 3650)), text,
             std::to_string(config.dedup_window.count()));
  FUZZ_CHECK(!config.queues.empty() && config.connections_needed() <= oncely::Config::kMaxConnections, text,
             std::to_string(config.connections_needed()));
  for (const auto& [name, q] : config.queues) {
    const bool lease = q.mode == oncely::QueueConfig::Mode::lease;
    FUZZ_CHECK(!name.empty() && name.size() <= 128, text, name);
    FUZZ_CHECK(q.concurrency >= 1 && q.concurrency <= (lease ? 2000 : 256), text, std::to_string(q.concurrency));
    FUZZ_CHECK(q.batch_size >= 1 && q.batch_size <= 1000, text, std::to_string(q.batch_size));
    FUZZ_CHECK(q.max_attempts >= 1 && q.max_attempts <= 1000, text, std::to_string(q.max_attempts));
    FUZZ_CHECK(q.rate_limit_per_sec == 0 || (q.rate_limit_per_sec >= 0.001 && q.rate_limit_per_sec <= 1e6), text,
               std::to_string(q.rate_limit_per_sec));
    FUZZ_CHECK(within(q.job_timeout, 1s, lease ? std::chrono::hours(24 * 7) : 24h), text,
               std::to_string(q.job_timeout.count()));
    FUZZ_CHECK(!lease || within(q.lease, 3s, 1h), text, std::to_string(q.lease.count()));
    FUZZ_CHECK(within(q.poll_interval, 10ms, 1h), text, std::to_string(q.poll_interval.count()));
    for (const milliseconds d : q.backoff.schedule) {
      FUZZ_CHECK(within(d, 0ms, std::chrono::hours(24 * 30)), text, std::to_string(d.count()));
    }
    if (q.backoff.schedule.empty()) {
      FUZZ_CHECK(within(q.backoff.base, 0ms, std::chrono::hours(24 * 30)) &&
                     within(q.backoff.cap, 0ms, std::chrono::hours(24 * 30)),
                 text, std::to_string(q.backoff.base.count()));
    }
    const auto& a = q.alarms;
    if (a.dead_letters_warning && a.dead_letters_critical) {
      FUZZ_CHECK(*a.dead_letters_warning <= *a.dead_letters_critical, text, "dead_letters");
    }
    if (a.max_age_warning) FUZZ_CHECK(within(*a.max_age_warning, 1s, std::chrono::hours(24 * 30)), text, "max_age");
    if (a.max_age_critical) FUZZ_CHECK(within(*a.max_age_critical, 1s, std::chrono::hours(24 * 30)), text, "max_age");
  }
  const auto now = oncely::detail::cron::Instant{milliseconds(1'790'000'000'000)};
  for (const auto& [name, entry] : config.cron) {
    FUZZ_CHECK(!entry.kind.empty() && entry.priority >= -32768 && entry.priority <= 32767, text, name);
    FUZZ_CHECK(!entry.max_attempts || (*entry.max_attempts >= 1 && *entry.max_attempts <= 1000), text, name);
    oncely::detail::cron::CompiledEntry compiled;
    try {
      compiled = oncely::detail::cron::compile(name, entry);
    } catch (const oncely::ConfigError& e) {
      FUZZ_CHECK(!"a validated cron entry compiles", text, e.what());
    }
    // A new entry, then the same entry an hour and three days later.
    const auto first = oncely::detail::cron::plan(compiled, {}, now);
    FUZZ_CHECK(first.write && first.enqueue.empty(), text, name);
    for (const auto later : {now + std::chrono::hours(1), now + std::chrono::hours(72)}) {
      const auto p = oncely::detail::cron::plan(compiled, {now, compiled.fingerprint}, later);
      FUZZ_CHECK(p.enqueue.size() <= static_cast<std::size_t>(oncely::CronEntry::kCatchUpMaxSlots), text, name);
      for (const auto slot : p.enqueue) FUZZ_CHECK(slot > now && slot <= later, text, name);
      FUZZ_CHECK(!p.next_slot || *p.next_slot > later, text, name);
    }
  }
  for (const auto& [kind, declaration] : config.handlers.items()) {
    FUZZ_CHECK(declaration.is_object(), text, kind);
    const auto statement = declaration.find("statement");
    if (statement != declaration.end() && statement->is_string()) {
      const auto shape = oncely::detail::scan_statement(statement->get<std::string>());
      static_cast<void>(oncely::detail::transaction_control(shape));
      FUZZ_CHECK(shape.highest_placeholder >= 0, text, kind);
    }
  }
  return 0;
}
