// A worker process for tests that kill, signal or crash workers. Usage:
//   oncely_test_worker CONFIG_JSON      (DATABASE_URL and ONCELY_SCHEMA from the environment)
// Handlers (payload {"account": N, "cents": N, "sleep_ms": N}):
//   increment  upsert-increments <schema>.balances through the job's transaction
//   slow_increment  sleeps sleep_ms, then increments
//   abort      kills the process (std::abort) every time
//   crash_then_bad_sql  aborts on attempt 1, then raises an SQL error through plain exec()
#include <cstdlib>
#include <iostream>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"

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
    const std::string upsert = "INSERT INTO " + balances +
                               " (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = " +
                               balances + ".cents + EXCLUDED.cents";
    auto log = spdlog::stderr_color_mt("test_worker");
    log->set_level(spdlog::level::warn);
    oncely::Runtime runtime(config, oncely::RuntimeOptions{log, nullptr, true});
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
    const int code = runtime.run();
    std::cout.flush();
    std::cerr.flush();
    std::quick_exit(code);
  } catch (const std::exception& e) {
    std::cerr << "oncely_test_worker: " << e.what() << "\n";
    return 1;
  }
}
