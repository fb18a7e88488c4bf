#pragma once
// What in-process runtime tests share: a configuration for a fixture's schema, and the
// balances table with its upsert-increment handler.

#include <chrono>
#include <string>

#include <memory>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/config.hpp"
#include "oncely/job_context.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"

namespace oncely::test {

/// One queue, "default", on `db`'s schema; a drain of at most 10 s.
inline Config config_for(const PgFixture& db, const QueueConfig& queue) {
  Config config;
  config.database_url = db.url;
  config.schema = db.schema;
  config.queues = {{"default", queue}};
  config.shutdown_grace = std::chrono::seconds(10);
  return config;
}

/// Runtime options that log nowhere and record every event in `events`; no signal handling.
inline RuntimeOptions quiet_options(EventRecorder& events) {
  return RuntimeOptions{
      .logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()),
      .on_event = events.callback(),
      .handle_signals = false};
}

/// The same, with the runtime's errors on stderr (for tests whose failures they explain).
inline RuntimeOptions errors_only_options(EventRecorder& events) {
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_level(spdlog::level::err);
  return RuntimeOptions{.logger = std::move(log), .on_event = events.callback(), .handle_signals = false};
}

inline void create_balances(PgFixture& db) {
  db.exec("CREATE TABLE " + db.table("balances") + " (account int PRIMARY KEY, cents bigint NOT NULL)");
}

/// Adds payload.cents to balances[payload.account] through the job's transaction.
inline Handler increment_handler(const PgFixture& db) {
  const std::string balances = db.table("balances");
  const std::string upsert =
      "INSERT INTO " + balances +
      " (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = " + balances +
      ".cents + EXCLUDED.cents";
  return [upsert](JobContext& job) {
    job.tx().exec_params(upsert, job.payload().at("account").get<long>(), job.payload().at("cents").get<long>());
  };
}

}  // namespace oncely::test
