// oncely_bench: throughput and latency of the worker runtime, measured like the peer
// harness in ../shared/peers: pre-insert the jobs with SQL, then time from the first
// handler start until every job's completion has committed.
//
//   oncely_bench process --jobs 20000 --concurrency 4 --batch 100 --handler noop|increment
//   oncely_bench latency --samples 200
//
// DATABASE_URL names the database; each run uses a fresh schema (dropped afterwards).
// Prints one JSON object per run on stdout.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/oncely.hpp"
#include "oncely/runtime.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Bench {
  std::string url;
  // Per process, so that two benchmarks on one database leave each other alone.
  std::string schema = "oncely_bench_" + std::to_string(::getpid());

  void fresh_schema() {
    pqxx::connection c{url};
    pqxx::nontransaction tx{c};
    tx.exec("SET client_min_messages = warning");
    tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
    oncely::migrate(oncely::DatabaseUrl(url), schema);
    tx.exec("CREATE TABLE " + tx.quote_name(schema) + ".balances (account int PRIMARY KEY, cents bigint NOT NULL)");
  }

  void drop_schema() {
    pqxx::connection c{url};
    pqxx::nontransaction tx{c};
    tx.exec("SET client_min_messages = warning");
    tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
  }

  oncely::Config config(int concurrency, int batch) const {
    oncely::Config c;
    c.database_url = url;
    c.schema = schema;
    oncely::QueueConfig q;
    q.concurrency = concurrency;
    q.batch_size = batch;
    c.queues = {{"default", q}};
    return c;
  }

  static std::shared_ptr<spdlog::logger> quiet_logger() {
    auto log = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    log->set_level(spdlog::level::err);
    return log;
  }
};

nlohmann::json run_process(Bench& bench, int jobs, int concurrency, int batch, const std::string& handler) {
  bench.fresh_schema();
  {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    const std::string s = tx.quote_name(bench.schema);
    // Pre-insert like the peers do (their bulk API), keyed jobs so the dedup marker is real.
    tx.exec("INSERT INTO " + s + ".jobs (kind, idempotency_key, payload) SELECT '" + handler +
            "', 'key-' || i, jsonb_build_object('account', i % 1000, 'cents', 1) FROM generate_series(1, " +
            std::to_string(jobs) + ") AS i");
    tx.exec("ANALYZE " + s + ".jobs");
    tx.exec("CHECKPOINT");
  }
  std::mutex mutex;
  std::condition_variable done_cv;
  std::atomic<long> completed{0};
  std::atomic<bool> started{false};
  Clock::time_point first_start;
  std::atomic<Clock::time_point::rep> last_done{0};
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  options.on_event = [&](const oncely::JobEvent& e) {
    if (e.outcome != oncely::JobEvent::Outcome::completed) return;
    if (completed.fetch_add(1) + 1 == jobs) {
      last_done = Clock::now().time_since_epoch().count();
      std::lock_guard lock(mutex);
      done_cv.notify_all();
    }
  };
  oncely::Runtime runtime(bench.config(concurrency, batch), options);
  const std::string upsert = "INSERT INTO \"" + bench.schema +
                             "\".balances (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = \"" +
                             bench.schema + "\".balances.cents + EXCLUDED.cents";
  const auto mark_start = [&] {
    bool expected = false;
    if (!started.load(std::memory_order_relaxed) && started.compare_exchange_strong(expected, true)) {
      first_start = Clock::now();
    }
  };
  runtime.handle("noop", [&](oncely::JobContext&) { mark_start(); });
  // Written as the README advises for a handler whose only effect is its write: declared
  // transaction-only, its statement prepared once per connection.
  runtime.handle(
      "increment",
      [&](oncely::JobContext& job) {
        mark_start();
        pqxx::work& tx = job.tx();
        tx.conn().prepare("bench_increment", upsert);
        tx.exec_prepared("bench_increment", job.payload()["account"].get<int>(), job.payload()["cents"].get<int>());
      },
      {.transaction_only = true});
  const double cpu_before = cpu_seconds();
  const auto launched = Clock::now();
  std::thread runner([&] { runtime.run(); });
  {
    std::unique_lock lock(mutex);
    done_cv.wait_for(lock, std::chrono::minutes(10), [&] { return completed.load() >= jobs; });
  }
  const double cpu_used = cpu_seconds() - cpu_before;
  runtime.request_stop();
  runner.join();
  const auto end = Clock::time_point(Clock::duration(last_done.load()));
  const double seconds = std::chrono::duration<double>(end - first_start).count();
  long remaining = 0;
  {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    remaining = tx.exec("SELECT count(*) FROM " + tx.quote_name(bench.schema) + ".jobs")[0][0].as<long>();
    if (handler == "increment") {
      const long sum = tx.exec("SELECT coalesce(sum(cents), 0) FROM " + tx.quote_name(bench.schema) + ".balances")[0][0].as<long>();
      if (sum != jobs) throw std::runtime_error("increment sum " + std::to_string(sum) + " != " + std::to_string(jobs));
    }
  }
  bench.drop_schema();
  return {{"test", "process"},
          {"handler", handler},
          {"jobs", jobs},
          {"concurrency", concurrency},
          {"batch", batch},
          {"jobs_per_s", jobs / seconds},
          {"seconds", seconds},
          {"startup_ms", std::chrono::duration<double, std::milli>(first_start - launched).count()},
          {"worker_cpu_us_per_job", cpu_used * 1e6 / jobs},
          {"max_rss_kib", max_rss_kib()},
          {"remaining", remaining}};
}

nlohmann::json run_latency(Bench& bench, int samples) {
  bench.fresh_schema();
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<Clock::time_point> handler_start;
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  oncely::Config config = bench.config(1, 100);
  oncely::Runtime runtime(config, options);
  std::atomic<long> done{0};
  runtime.handle("ping", [&](oncely::JobContext&) {
    std::lock_guard lock(mutex);
    handler_start = Clock::now();
    cv.notify_all();
  });
  options.on_event = nullptr;
  std::thread runner([&] { runtime.run(); });
  pqxx::connection producer{bench.url};
  const std::string insert = "INSERT INTO \"" + bench.schema + "\".jobs (kind) VALUES ('ping')";
  producer.prepare("enqueue", insert);
  std::vector<double> ms;
  for (int i = 0; i < samples + 5; ++i) {  // the first 5 warm up
    {
      std::lock_guard lock(mutex);
      handler_start.reset();
    }
    const auto issued = Clock::now();
    {
      pqxx::nontransaction tx{producer};
      tx.exec_prepared("enqueue");
    }
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return handler_start.has_value(); })) {
      throw std::runtime_error("a job did not start within 10 s");
    }
    if (i >= 5) ms.push_back(std::chrono::duration<double, std::milli>(*handler_start - issued).count());
    lock.unlock();
    // Let the worker commit and go idle again (think time, as the peer harness does).
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  runtime.request_stop();
  runner.join();
  bench.drop_schema();
  std::sort(ms.begin(), ms.end());
  const auto pct = [&](double p) { return ms[static_cast<std::size_t>(p * static_cast<double>(ms.size() - 1))]; };
  return {{"test", "latency"}, {"samples", samples}, {"p50_ms", pct(0.5)}, {"p99_ms", pct(0.99)}, {"max_ms", ms.back()}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oncely_bench: worker runtime throughput and latency"};
  std::string test;
  int jobs = 20000, concurrency = 4, batch = 100, samples = 200, runs = 1;
  std::string handler = "noop";
  app.add_option("test", test, "process | latency")->required()->check(CLI::IsMember({"process", "latency"}));
  app.add_option("--jobs", jobs)->check(CLI::PositiveNumber);
  app.add_option("--concurrency", concurrency)->check(CLI::Range(1, 256));
  app.add_option("--batch", batch)->check(CLI::Range(1, 1000));
  app.add_option("--handler", handler)->check(CLI::IsMember({"noop", "increment"}));
  app.add_option("--samples", samples)->check(CLI::PositiveNumber);
  app.add_option("--runs", runs)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const char* url = std::getenv("DATABASE_URL");
  if (url == nullptr) {
    std::cerr << "oncely_bench: set DATABASE_URL\n";
    return 2;
  }
  try {
    Bench bench{url};
    std::vector<nlohmann::json> results;
    for (int run = 1; run <= runs; ++run) {
      nlohmann::json result = test == "process" ? run_process(bench, jobs, concurrency, batch, handler)
                                                : run_latency(bench, samples);
      result["run"] = run;
      std::cerr << result.dump() << std::endl;
      results.push_back(std::move(result));
    }
    // The median run of the headline figure, on stdout (one JSON object).
    const std::string key = test == "process" ? "jobs_per_s" : "p50_ms";
    std::sort(results.begin(), results.end(),
              [&](const auto& a, const auto& b) { return a[key].template get<double>() < b[key].template get<double>(); });
    nlohmann::json median = results[results.size() / 2];
    median["runs"] = runs;
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : results) all.push_back(r[key]);
    median["all_" + key] = all;
    std::cout << median.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "oncely_bench: " << oncely::DatabaseUrl(url).scrub(e.what()) << "\n";
    return 1;
  }
}
