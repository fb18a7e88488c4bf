#pragma once
// For tests of the built-in handler types (sql, exec, http): a Runtime whose handlers come
// from build_builtin_handlers, as a worker builds them from its configuration file, and
// what such tests read back.

#include <chrono>
#include <memory>
#include <string>

#include <doctest/doctest.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "handlers/builtin_handlers.hpp"
#include "oncely/runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

namespace oncely::test {

inline std::shared_ptr<spdlog::logger> quiet_logger() {
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_level(spdlog::level::off);
  return log;
}

/// A queue that retries at once (10 ms) so retry tests take no time.
inline QueueConfig fast_retries(int max_attempts) {
  QueueConfig queue{.max_attempts = max_attempts};
  queue.backoff.schedule = {std::chrono::milliseconds(10)};
  return queue;
}

/// A Runtime with the given handler declarations, reporting to `events`, on `url` (empty:
/// the fixture's). `prepared_statements` false: as behind a transaction-mode pooler. `log`:
/// where the runtime and its handlers log (null: nowhere).
inline std::unique_ptr<Runtime> runtime_with(const PgFixture& db, const QueueConfig& queue,
                                             const nlohmann::json& declarations, EventRecorder& events,
                                             bool prepared_statements = true, const std::string& url = "",
                                             std::shared_ptr<spdlog::logger> log = nullptr) {
  if (!log) log = quiet_logger();
  RuntimeOptions options;
  options.logger = log;
  options.on_event = events.callback();
  options.handle_signals = false;
  Config config = config_for(db, queue);
  if (!url.empty()) config.database_url = url;
  config.prepared_statements = prepared_statements;
  auto runtime = std::make_unique<Runtime>(config, std::move(options));
  for (auto& [kind, handler] : detail::build_builtin_handlers(declarations, prepared_statements, log)) {
    runtime->handle(kind, std::move(handler.run), handler.options);
  }
  return runtime;
}

/// Enqueues through the schema's enqueue() function; `key` empty: none.
inline long enqueue(PgFixture& db, const std::string& kind, const nlohmann::json& payload = nlohmann::json::object(),
                    const std::string& key = "") {
  pqxx::work tx{*db.conn};
  const long id = tx.exec_params1("SELECT " + db.table("enqueue") + "($1, $2::jsonb, 'default', $3)", kind,
                                  payload.dump(), key.empty() ? nullptr : key.c_str())[0]
                      .as<long>();
  tx.commit();
  return id;
}

struct DeadLetterRow {
  std::string error_class;
  int attempts = 0;
  std::string last_error;
  nlohmann::json detail;
  nlohmann::json errors;
};

/// The dead letter of job `job_id` (the test fails if there is none).
inline DeadLetterRow dead_letter(PgFixture& db, long job_id) {
  const pqxx::result r = db.exec("SELECT error_class, attempts, last_error, error_detail::text, errors::text FROM " +
                                 db.table("dead_letters") + " WHERE job_id = " + std::to_string(job_id));
  REQUIRE_MESSAGE(r.size() == 1, "job " << job_id << " is not in dead_letters");
  return {r[0][0].as<std::string>(), r[0][1].as<int>(), r[0][2].as<std::string>(),
          nlohmann::json::parse(r[0][3].as<std::string>()), nlohmann::json::parse(r[0][4].as<std::string>())};
}

inline int count(PgFixture& db, const std::string& table, const std::string& where = "true") {
  return db.scalar<int>("SELECT count(*) FROM " + db.table(table) + " WHERE " + where);
}

}  // namespace oncely::test
