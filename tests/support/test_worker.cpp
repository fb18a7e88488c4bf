// A worker process for tests that kill, signal or crash workers. Usage:
//   oncely_test_worker CONFIG_JSON      (DATABASE_URL and ONCELY_SCHEMA from the environment)
// Handlers (payload {"account": N, "cents": N, "sleep_ms": N}):
//   increment  upsert-increments <schema>.balances through the job's transaction
//   slow_increment  sleeps sleep_ms, then increments
//   abort      kills the process (std::abort) every time
//   crash_then_bad_sql  aborts on attempt 1, then raises an SQL error through plain exec()
//   lease_increment  (lease queues) sleeps sleep_ms (first_sleep_ms on attempt 1), stopping early when its stop token
//   is
//                    requested (it then fails), then increments through on_complete(); with
//                    "record": true each run is a row of <schema>.lease_runs (own connection)
// The conformance suite's kinds (tests/conformance), which every implementation handles alike:
//   credit  {"account", "cents", "sleep_ms", "record"}: with "record", a row of
//           <schema>.conformance_starts (own connection, with its pid) when it starts; sleeps, stopping
//           early (failing) when its stop token is requested; then one row of
//           <schema>.conformance_effects through on_complete() (both modes)
//   fail    fails every attempt; poison  kills its own process with SIGKILL
// CONFORMANCE_WORKER names the process in those rows.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include <pqxx/pqxx>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"

namespace {

/// The handler thread's own connection for the rows tests read (lease_runs,
/// conformance_starts): opened once per thread, again after it broke (a test that restarts
/// the server). One per job was a backend started per job, which at hundreds of jobs a
/// second on two cores left the handlers waiting for CPU longer than they ran.
pqxx::connection& recorder_connection(const std::string& database_url) {
  thread_local std::unique_ptr<pqxx::connection> recorder;
  if (!recorder || !recorder->is_open()) {
    recorder = std::make_unique<pqxx::connection>(database_url);
    // Named apart from the worker: tests that watch the worker's own connections in
    // pg_stat_activity (by application_name) must not count the handler's.
    pqxx::nontransaction(*recorder).exec(
        "SELECT set_config('application_name', current_setting('application_name') || '_handler', false)");
  }
  return *recorder;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: oncely_test_worker CONFIG_JSON\n";
    return 2;
  }
  try {
    oncely::Config config = oncely::Config::parse(nlohmann::json::parse(argv[1]));
    config.database_url = std::getenv("DATABASE_URL");
    config.schema = std::getenv("ONCELY_SCHEMA");
    const std::string balances = "\"" + config.schema + "\".balances";
    const std::string upsert =
        "INSERT INTO " + balances +
        " (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = " + balances +
        ".cents + EXCLUDED.cents";
    auto log = spdlog::stderr_color_mt("test_worker");
    log->set_level(spdlog::level::warn);
    oncely::Runtime runtime(config, oncely::RuntimeOptions{.logger = log, .on_event = nullptr, .handle_signals = true});
    runtime.handle("increment", [&](oncely::JobContext& job) {
      job.tx().exec_params(upsert, job.payload().at("account").get<long>(), job.payload().at("cents").get<long>());
    });
    runtime.handle("slow_increment", [&](oncely::JobContext& job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(job.payload().value("sleep_ms", 0)));
      job.tx().exec_params(upsert, job.payload().at("account").get<long>(), job.payload().at("cents").get<long>());
    });
    runtime.handle("abort", [](oncely::JobContext&) { std::abort(); });
    // Kills the worker on its first attempt, then fails through a plain exec(), which ends
    // the whole transaction: the failure must be recorded from a fresh one.
    runtime.handle("crash_then_bad_sql", [](oncely::JobContext& job) {
      if (job.attempt() == 1) std::abort();
      job.tx().exec("SELECT * FROM no_such_table");
    });
    const std::string runs = "\"" + config.schema + "\".lease_runs";
    runtime.handle("lease_increment", [&](oncely::JobContext& job) {
      const nlohmann::json& p = job.payload();
      // The start is the handler's, not the recording's (which first opens a connection).
      const double started_at =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::optional<long> run;
      if (p.value("record", false)) {
        pqxx::nontransaction n(recorder_connection(config.database_url));
        run = n.exec_params1("INSERT INTO " + runs +
                                 " (job_id, key, attempt, pid, started_at) VALUES ($1, $2, $3, $4, to_timestamp($5))"
                                 " RETURNING id",
                             job.id(), job.idempotency_key(), job.attempt(), static_cast<int>(getpid()), started_at)[0]
                  .as<long>();
      }
      const int sleep_ms =
          job.attempt() == 1 ? p.value("first_sleep_ms", p.value("sleep_ms", 0)) : p.value("sleep_ms", 0);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(sleep_ms);
      while (std::chrono::steady_clock::now() < until) {
        if (job.stop_token().stop_requested()) throw std::runtime_error("stopped (lease lost or shutdown)");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (run) {
        pqxx::nontransaction n(recorder_connection(config.database_url));
        n.exec_params("UPDATE " + runs + " SET ended_at = clock_timestamp() WHERE id = $1", *run);
      }
      const long account = p.at("account").get<long>();
      const long cents = p.at("cents").get<long>();
      job.on_complete([&upsert, account, cents](pqxx::work& tx) { tx.exec_params(upsert, account, cents); });
    });
    const char* worker_name = std::getenv("CONFORMANCE_WORKER");
    const std::string conformance_worker = worker_name ? worker_name : "oncely_test_worker";
    const std::string starts = "\"" + config.schema + "\".conformance_starts";
    const std::string effects = "\"" + config.schema + "\".conformance_effects";
    runtime.handle("credit", [&](oncely::JobContext& job) {
      const nlohmann::json& p = job.payload();
      if (p.value("record", false)) {
        pqxx::nontransaction n(recorder_connection(config.database_url));
        n.exec_params("INSERT INTO " + starts + " (key, attempt, worker, pid) VALUES ($1, $2, $3, $4)",
                      job.idempotency_key(), job.attempt(), conformance_worker, static_cast<int>(getpid()));
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(p.value("sleep_ms", 0));
      while (std::chrono::steady_clock::now() < until) {
        if (job.stop_token().stop_requested()) throw std::runtime_error("stopped (lease lost or shutdown)");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      job.on_complete([&, key = job.idempotency_key(), attempt = job.attempt(), account = p.at("account").get<long>(),
                       cents = p.at("cents").get<long>()](pqxx::work& tx) {
        tx.exec_params("INSERT INTO " + effects + " (key, account, cents, worker, attempt) VALUES ($1, $2, $3, $4, $5)",
                       key, account, cents, conformance_worker, attempt);
      });
    });
    runtime.handle("fail", [](oncely::JobContext&) { throw std::runtime_error("conformance: this job always fails"); });
    runtime.handle("poison", [](oncely::JobContext&) { ::raise(SIGKILL); });
    const int code = runtime.run();
    std::cout.flush();
    std::cerr.flush();
    std::quick_exit(code);
  } catch (const std::exception& e) {
    std::cerr << "oncely_test_worker: " << e.what() << "\n";
    return 1;
  }
}
