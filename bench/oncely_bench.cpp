// oncely_bench: throughput and latency of the worker runtime, measured the way
// bench/peers/measure.mjs measures graphile-worker and pg-boss: pre-insert the jobs with SQL,
// then time from the first handler start until every job's completion has committed.
//
//   oncely_bench process --jobs 20000 [--concurrency 4 --batch 100] --handler noop|increment
//   oncely_bench process --fail-percent 1 --stack-traces off          (noop: 1 % dead-lettered)
//   oncely_bench process --mode lease [--lease-ms 30000] --concurrency 50 --batch 500   (noop)
//   oncely_bench latency --samples 200
//   oncely_bench enqueue-single --jobs 20000          Client::enqueue, one call per job
//   oncely_bench enqueue-batch --jobs 200000 --batch 1000   Client::enqueue_batch (COPY)
//   oncely_bench soak --jobs 1000000 [--interval-ms 1000]   burn-down sampled over time
//   oncely_bench steady --rate 800 --seconds 60 --pin none|readers|xid   offered load, xmin held back
//   oncely_bench process ... --as-worker-role   the runtime as a role granted only <schema>_worker
//   oncely_bench process --handler-ms 10 | --queues 50 | --scheduled 900000   adverse cells
//   oncely_bench fanout --jobs 10000 [--mode lease]   a parent, its children in a batch, the callback
//   oncely_bench history-soak --rate 8000 --minutes 60 --dedup-window-s 600 --out FILE   completed-job records at
//   volume
//
// Without --concurrency/--batch, process and soak run the queue with oncely's defaults
// (oncely::QueueConfig). DATABASE_URL names the database; each run uses a fresh schema
// (dropped afterwards). Prints one JSON object per run on stderr and the median run on
// stdout; soak prints a Markdown table of its samples and a summary instead.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

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

  // --as-worker-role: the runtime connects as a login role granted only <schema>_worker
  // (oncely migrate --roles) and the balances table, instead of as DATABASE_URL's role;
  // the jobs are still inserted and counted as DATABASE_URL's.
  bool as_worker_role = false;
  std::string worker_url{};  // the runtime's URL (DATABASE_URL unless as_worker_role)

  [[nodiscard]] std::string login_role() const { return schema + "_login"; }

  /// `url` with another user (a URL's user info replaced, or user= appended to key=value).
  [[nodiscard]] std::string url_as(const std::string& user, const std::string& password) const {
    const std::size_t scheme = url.find("://");
    if (scheme == std::string::npos) return url + " user=" + user + " password=" + password;
    const std::size_t host = scheme + 3;
    const std::size_t path = url.find_first_of("/?", host);
    const std::size_t at = url.rfind('@', path == std::string::npos ? std::string::npos : path);
    const std::size_t rest = (at != std::string::npos && at >= host) ? at + 1 : host;
    return url.substr(0, host) + user + ":" + password + "@" + url.substr(rest);
  }

  void fresh_schema() {
    drop_schema();
    pqxx::connection c{url};
    pqxx::nontransaction tx{c};
    tx.exec("SET client_min_messages = warning");
    oncely::migrate(oncely::DatabaseUrl(url), schema);
    tx.exec("CREATE TABLE " + tx.quote_name(schema) + ".balances (account int PRIMARY KEY, cents bigint NOT NULL)");
    // ONCELY_BENCH_SCHEMA_SQL: statements run on the fresh schema (search_path set to it), to
    // measure a schema change before writing its migration.
    if (const char* change = std::getenv("ONCELY_BENCH_SCHEMA_SQL"); change != nullptr && *change != '\0') {
      tx.exec("SET search_path = " + tx.quote_name(schema));
      tx.exec(change);
      tx.exec("RESET search_path");
    }
    if (without_slot_triggers) {
      for (const char* trigger : {"jobs_limited_slot_freed_by_delete", "jobs_limited_slot_freed_by_update"}) {
        tx.exec("DROP TRIGGER " + std::string(trigger) + " ON " + tx.quote_name(schema) + ".jobs");
      }
    }
    worker_url = url;
    if (as_worker_role) {
      oncely::migrate_roles(oncely::DatabaseUrl(url), schema);
      tx.exec("CREATE ROLE " + tx.quote_name(login_role()) + " LOGIN PASSWORD 'bench'");
      tx.exec("GRANT " + tx.quote_name(oncely::schema_roles(schema).worker) + " TO " + tx.quote_name(login_role()));
      tx.exec("GRANT SELECT, INSERT, UPDATE ON " + tx.quote_name(schema) + ".balances TO " +
              tx.quote_name(login_role()));
      worker_url = url_as(login_role(), "bench");
    }
  }

  void drop_schema() {
    pqxx::connection c{url};
    pqxx::nontransaction tx{c};
    tx.exec("SET client_min_messages = warning");
    tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
    const oncely::SchemaRoles roles = oncely::schema_roles(schema);
    for (const std::string& role : {login_role(), roles.producer, roles.worker, roles.operator_, roles.viewer}) {
      if (tx.exec("SELECT FROM pg_roles WHERE rolname = " + tx.quote(role)).empty()) continue;
      tx.exec("DROP OWNED BY " + tx.quote_name(role));
      tx.exec("DROP ROLE " + tx.quote_name(role));
    }
  }

  // --mode lease: the queue runs in lease mode (no transaction held while handlers run), its
  // lease --lease-ms long, its claims and completions on --connections connections.
  bool lease_mode = false;
  std::chrono::milliseconds lease{std::chrono::seconds(30)};
  int lease_connections = 1;
  // --fail-percent P: the noop handler throws a PermanentError for P % of the jobs (they are
  // dead-lettered at once); --stack-traces: the process's setting (the throw hook's cost).
  int fail_percent = 0;
  oncely::StackTraces stack_traces = oncely::StackTraces::dead_letters;
  // The adverse cells of `process`: --handler-ms: the noop handler sleeps this long (a
  // handler waiting on I/O); --queues Q: the jobs spread round robin over Q queues
  // (queue-1 .. queue-Q), each with --concurrency threads; --scheduled N: N more jobs,
  // due in an hour, sit in the same queue(s) and are not waited for.
  int handler_ms = 0;
  int queues = 1;
  long scheduled = 0;
  // --limits JSON: the queue's limits across workers, as the configuration file writes them
  // (the jobs' payloads have 1,000 accounts: {"key": "/account"} gives 1,000 keys);
  // --without-slot-triggers: the schema without the triggers that wake a limited queue's
  // workers when a slot frees (version 23), to measure what they cost the queues without limits.
  std::optional<oncely::QueueLimits> limits{};
  std::string limits_text{};
  bool without_slot_triggers = false;
  // --metrics (on with --limits): the process serves its metrics, as a worker run with
  // --metrics-addr does, and the run reports its claims' times from them. A run to compare
  // with a limited one turns it on too: the metrics cost the worker CPU of their own.
  bool metrics = false;

  [[nodiscard]] std::string queue_name(long i) const {
    return queues == 1 ? "default" : "queue-" + std::to_string(i % queues + 1);
  }

  oncely::Config config(int concurrency, int batch) const {
    oncely::Config c;
    c.stack_traces = stack_traces;
    c.database_url = worker_url.empty() ? url : worker_url;
    c.schema = schema;
    oncely::QueueConfig q;
    q.concurrency = concurrency;
    q.batch_size = batch;
    if (lease_mode) {
      q.mode = oncely::QueueConfig::Mode::lease;
      q.lease = lease;
      q.connections = lease_connections;
    }
    q.limits = limits;
    c.queues.clear();
    for (int i = 0; i < queues; ++i) c.queues.emplace(queue_name(i), q);
    return c;
  }

  static std::shared_ptr<spdlog::logger> quiet_logger() {
    auto log = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    log->set_level(spdlog::level::err);
    return log;
  }
};

// The claim statements' count, mean and 99th percentile (the upper bound of the histogram's
// bucket that holds it: 0.1, 0.5, 1, 5, 10, 50 ms, ...) from the runtime's /metrics.
nlohmann::json claim_times(int port) {
  httplib::Client client("127.0.0.1", port);
  const auto response = client.Get("/metrics");
  if (!response || response->status != 200) return nullptr;
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
  double count = 0;
  double sum = 0;
  std::istringstream lines(response->body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("oncely_claim_seconds")) continue;
    const double value = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.starts_with("oncely_claim_seconds_bucket")) {
      const auto le = line.find("le=\"") + 4;
      const std::string bound = line.substr(le, line.find('"', le) - le);
      buckets.emplace_back(bound == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(bound), value);
    } else if (line.starts_with("oncely_claim_seconds_count")) {
      count = value;
    } else if (line.starts_with("oncely_claim_seconds_sum")) {
      sum = value;
    }
  }
  std::optional<double> p99_ms;
  for (const auto& [le, cumulative] : buckets) {
    if (count > 0 && cumulative >= 0.99 * count) {
      p99_ms = le * 1000;
      break;
    }
  }
  return {{"count", count},
          {"mean_ms", count > 0 ? sum / count * 1000 : 0},
          {"p99_at_most_ms", p99_ms ? nlohmann::json(*p99_ms) : nlohmann::json()}};
}

nlohmann::json run_process(Bench& bench, int jobs, int concurrency, int batch, const std::string& handler) {
  bench.fresh_schema();
  {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    const std::string s = tx.quote_name(bench.schema);
    // Pre-insert like the peers do (their bulk API), keyed jobs so the dedup marker is real.
    const std::string queue =
        bench.queues == 1 ? "'default'" : "'queue-' || (i % " + std::to_string(bench.queues) + " + 1)";
    tx.exec("INSERT INTO " + s + ".jobs (queue, kind, idempotency_key, payload) SELECT " + queue + ", '" + handler +
            "', 'key-' || i, jsonb_build_object('account', i % 1000, 'cents', 1) FROM generate_series(1, " +
            std::to_string(jobs) + ") AS i");
    if (bench.scheduled > 0) {
      tx.exec("INSERT INTO " + s + ".jobs (queue, kind, idempotency_key, payload, run_at) SELECT " + queue + ", '" +
              handler +
              "', 'later-' || i, jsonb_build_object('account', i % 1000, 'cents', 1), now() + interval '1 hour' "
              "FROM generate_series(1, " +
              std::to_string(bench.scheduled) + ") AS i");
    }
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
  // The claim statements' times (oncely_claim_seconds), read from the process's own endpoint.
  if (bench.metrics) options.metrics_address = "127.0.0.1:0";
  options.on_event = [&](const oncely::JobEvent& e) {
    // A job is done when it completed or (--fail-percent) was dead-lettered.
    if (e.outcome != oncely::JobEvent::Outcome::completed && e.outcome != oncely::JobEvent::Outcome::dead_lettered) {
      return;
    }
    if (completed.fetch_add(1) + 1 == jobs) {
      last_done = Clock::now().time_since_epoch().count();
      std::lock_guard lock(mutex);
      done_cv.notify_all();
    }
  };
  oncely::Runtime runtime(bench.config(concurrency, batch), options);
  const std::string upsert =
      "INSERT INTO \"" + bench.schema +
      "\".balances (account, cents) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET cents = \"" + bench.schema +
      "\".balances.cents + EXCLUDED.cents";
  const auto mark_start = [&] {
    bool expected = false;
    if (!started.load(std::memory_order_relaxed) && started.compare_exchange_strong(expected, true)) {
      first_start = Clock::now();
    }
  };
  runtime.handle("noop", [&](oncely::JobContext& job) {
    mark_start();
    if (bench.handler_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(bench.handler_ms));
    if (job.id() % 100 < bench.fail_percent) throw oncely::PermanentError("bench: this job fails");
  });
  // Written as docs/cpp-api.md advises for a handler whose only effect is its write: declared
  // transaction-only, its statement prepared once per connection.
  runtime.handle("increment",
                 [&](oncely::JobContext& job) {
                   mark_start();
                   pqxx::work& tx = job.tx();
                   tx.conn().prepare("bench_increment", upsert);
                   tx.exec_prepared("bench_increment", job.payload()["account"].get<int>(),
                                    job.payload()["cents"].get<int>());
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
  const nlohmann::json claims = bench.metrics ? claim_times(runtime.metrics_port()) : nlohmann::json();
  runtime.request_stop();
  runner.join();
  const auto end = Clock::time_point(Clock::duration(last_done.load()));
  const double seconds = std::chrono::duration<double>(end - first_start).count();
  long remaining = 0;
  {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    remaining = tx.exec("SELECT count(*) FROM " + tx.quote_name(bench.schema) +
                        ".jobs WHERE idempotency_key NOT LIKE 'later-%'")[0][0]
                    .as<long>();
    if (handler == "increment") {
      const long sum =
          tx.exec("SELECT coalesce(sum(cents), 0) FROM " + tx.quote_name(bench.schema) + ".balances")[0][0].as<long>();
      if (sum != jobs) throw std::runtime_error("increment sum " + std::to_string(sum) + " != " + std::to_string(jobs));
    }
  }
  bench.drop_schema();
  // With span export on (OTEL_EXPORTER_OTLP_ENDPOINT, bench/otel_cost.sh): what reached the
  // receiver, once what the run queued is sent (after the measured window).
  oncely::flush_telemetry(std::chrono::seconds(30));
  const oncely::SpanExportCounts spans = oncely::span_export_counts();
  return {{"test", "process"},
          {"otel_spans_exported", spans.exported},
          {"otel_spans_dropped", spans.dropped_queue_full + spans.dropped_export_failed},
          {"mode", bench.lease_mode ? "lease" : "transaction"},
          {"handler", handler},
          {"fail_percent", bench.fail_percent},
          {"handler_ms", bench.handler_ms},
          {"queues", bench.queues},
          {"scheduled", bench.scheduled},
          {"jobs", jobs},
          {"concurrency", concurrency},
          {"batch", batch},
          {"jobs_per_s", jobs / seconds},
          {"seconds", seconds},
          {"startup_ms", std::chrono::duration<double, std::milli>(first_start - launched).count()},
          {"worker_cpu_us_per_job", cpu_used * 1e6 / jobs},
          {"max_rss_kib", max_rss_kib()},
          {"remaining", remaining},
          {"limits", bench.limits_text.empty() ? nlohmann::json() : nlohmann::json::parse(bench.limits_text)},
          {"without_slot_triggers", bench.without_slot_triggers},
          {"metrics", bench.metrics},
          {"claims", claims}};
}

// Measured as bench/peers/measure.mjs measures the peers (latency): 20 warm-up jobs, half a
// second of rest, then `samples` jobs, each enqueued (one autocommit INSERT) after a think
// time drawn uniformly from [0, 10) ms once the previous one has started; enqueue issued ->
// handler start. oncely's default concurrency and batch size.
nlohmann::json run_latency(Bench& bench, int samples) {
  bench.fresh_schema();
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<Clock::time_point> handler_start;
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  const oncely::QueueConfig defaults;
  oncely::Runtime runtime(bench.config(defaults.concurrency, defaults.batch_size), options);
  runtime.handle("ping", [&](oncely::JobContext&) {
    std::lock_guard lock(mutex);
    handler_start = Clock::now();
    cv.notify_all();
  });
  std::thread runner([&] { runtime.run(); });
  pqxx::connection producer{bench.url};
  const std::string insert = "INSERT INTO \"" + bench.schema + "\".jobs (kind) VALUES ('ping')";
  producer.prepare("enqueue", insert);
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> think_ms(0.0, 10.0);
  constexpr int kWarmUp = 20;
  std::vector<double> ms;
  for (int i = 0; i < samples + kWarmUp; ++i) {
    if (i == kWarmUp) std::this_thread::sleep_for(std::chrono::milliseconds(500));
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
    if (i >= kWarmUp) ms.push_back(std::chrono::duration<double, std::milli>(*handler_start - issued).count());
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(think_ms(rng)));
  }
  runtime.request_stop();
  runner.join();
  bench.drop_schema();
  std::sort(ms.begin(), ms.end());
  const auto pct = [&](double p) { return ms[static_cast<std::size_t>(p * static_cast<double>(ms.size() - 1))]; };
  return {
      {"test", "latency"}, {"samples", samples}, {"p50_ms", pct(0.5)}, {"p99_ms", pct(0.99)}, {"max_ms", ms.back()}};
}

/// The worker process's resident memory (VmRSS), in KiB.
long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmRSS:")) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

/// `jobs` keyed no-op jobs inserted in one statement, then ANALYZE and CHECKPOINT, as
/// run_process does.
void preload(const Bench& bench, long jobs) {
  pqxx::connection c{bench.url};
  pqxx::nontransaction tx{c};
  const std::string s = tx.quote_name(bench.schema);
  tx.exec("INSERT INTO " + s + ".jobs (kind, idempotency_key, payload) SELECT 'noop', 'key-' || i, " +
          "jsonb_build_object('id', i) FROM generate_series(1, " + std::to_string(jobs) + ") AS i");
  tx.exec("ANALYZE " + s + ".jobs");
  tx.exec("CHECKPOINT");
}

long count_jobs(const Bench& bench) {
  pqxx::connection c{bench.url};
  pqxx::nontransaction tx{c};
  return tx.exec1("SELECT count(*) FROM " + tx.quote_name(bench.schema) + ".jobs")[0].as<long>();
}

/// One producer thread, one Client::enqueue (its own transaction) per job, like the peers'
/// enqueue-single (200 warm-up jobs first, payload {"id": i}).
nlohmann::json run_enqueue_single(Bench& bench, int jobs) {
  bench.fresh_schema();
  oncely::Client client(oncely::DatabaseUrl(bench.url), bench.schema);
  for (int i = 0; i < 200; ++i) client.enqueue({.kind = "noop", .payload = {{"id", -1 - i}}});
  const double cpu_before = cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < jobs; ++i) client.enqueue({.kind = "noop", .payload = {{"id", i}}});
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_used = cpu_seconds() - cpu_before;
  const long stored = count_jobs(bench);
  bench.drop_schema();
  if (stored != jobs + 200) throw std::runtime_error("enqueue-single stored " + std::to_string(stored) + " jobs");
  return {{"test", "enqueue-single"},
          {"jobs", jobs},
          {"jobs_per_s", jobs / seconds},
          {"seconds", seconds},
          {"client_cpu_us_per_job", cpu_used * 1e6 / jobs}};
}

/// Client::enqueue_batch (one COPY per call, ids returned) with `batch` jobs per call, like
/// the peers' enqueue-bulk (one warm-up job first).
nlohmann::json run_enqueue_batch(Bench& bench, int jobs, int batch) {
  bench.fresh_schema();
  oncely::Client client(oncely::DatabaseUrl(bench.url), bench.schema);
  (void)client.enqueue_batch({oncely::NewJob{.kind = "noop", .payload = {{"id", -1}}}});
  const double cpu_before = cpu_seconds();
  const auto start = Clock::now();
  std::vector<oncely::NewJob> chunk;
  for (int i = 0; i < jobs; i += batch) {
    chunk.clear();
    for (int j = i; j < std::min(jobs, i + batch); ++j) chunk.push_back({.kind = "noop", .payload = {{"id", j}}});
    (void)client.enqueue_batch(chunk);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_used = cpu_seconds() - cpu_before;
  const long stored = count_jobs(bench);
  bench.drop_schema();
  if (stored != jobs + 1) throw std::runtime_error("enqueue-batch stored " + std::to_string(stored) + " jobs");
  return {{"test", "enqueue-batch"},      {"jobs", jobs},       {"batch", batch},
          {"jobs_per_s", jobs / seconds}, {"seconds", seconds}, {"client_cpu_us_per_job", cpu_used * 1e6 / jobs}};
}

/// A long no-op burn-down sampled every `interval`: jobs done, throughput over the last
/// interval, the worker's RSS and the jobs table's dead tuples (and autovacuum runs), so
/// that flat memory and a steady rate as dead tuples pile up can be seen. Prints a
/// Markdown table as it goes and a summary at the end, on stdout.
void run_soak(Bench& bench, long jobs, int concurrency, int batch, std::chrono::milliseconds interval) {
  bench.fresh_schema();
  std::cout << "preloading " << jobs << " jobs..." << std::endl;
  preload(bench, jobs);
  std::atomic<long> completed{0};
  std::atomic<bool> started{false};
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  options.on_event = [&](const oncely::JobEvent& e) {
    if (e.outcome == oncely::JobEvent::Outcome::completed) completed.fetch_add(1, std::memory_order_relaxed);
  };
  oncely::Runtime runtime(bench.config(concurrency, batch), options);
  runtime.handle("noop", [&](oncely::JobContext&) { started.store(true, std::memory_order_relaxed); });

  pqxx::connection monitor{bench.url};
  const std::string stats_sql =
      "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE schemaname = " + monitor.quote(bench.schema) +
      " AND relname = 'jobs'";
  struct Sample {
    double t;
    long done;
    double rate;
    long rss;
    long dead;
    long vacuums;
  };
  std::vector<Sample> samples;
  const auto sample = [&](double t, long done) {
    pqxx::nontransaction tx{monitor};  // each statement its own transaction: fresh statistics
    const pqxx::row row = tx.exec1(stats_sql);
    const double previous_t = samples.empty() ? 0 : samples.back().t;
    const long previous_done = samples.empty() ? 0 : samples.back().done;
    const double rate = samples.empty() ? 0 : static_cast<double>(done - previous_done) / (t - previous_t);
    samples.push_back({t, done, rate, rss_kib(), row[0].as<long>(), row[1].as<long>()});
    const Sample& s = samples.back();
    std::printf("| %.1f | %ld | %.0f | %.1f | %ld | %ld |\n", s.t, s.done, s.rate, static_cast<double>(s.rss) / 1024,
                s.dead, s.vacuums);
    std::fflush(stdout);
  };

  std::cout
      << "\n| t (s) | jobs done | jobs/s (last interval) | worker RSS (MiB) | jobs n_dead_tup | autovacuums of jobs |\n"
      << "|---|---|---|---|---|---|" << std::endl;
  const double cpu_before = cpu_seconds();
  std::thread runner([&] { runtime.run(); });
  const auto launched = Clock::now();
  while (!started.load(std::memory_order_relaxed)) {
    if (Clock::now() - launched > std::chrono::minutes(1)) throw std::runtime_error("no job started within 1 minute");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto t0 = Clock::now();
  sample(0, completed.load());
  auto next = t0 + interval;
  while (true) {
    // Wake at the next tick, or early once every job is done (checked every 5 ms).
    while (Clock::now() < next && completed.load() < jobs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const long done = completed.load();
    sample(std::chrono::duration<double>(Clock::now() - t0).count(), done);
    if (done >= jobs) break;
    if (Clock::now() - t0 > std::chrono::hours(1)) throw std::runtime_error("the soak did not finish within an hour");
    next += interval;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_used = cpu_seconds() - cpu_before;
  runtime.request_stop();
  runner.join();
  const long remaining = count_jobs(bench);
  bench.drop_schema();

  // The first sample is the start, the last one ends early (when the queue ran empty).
  std::vector<double> rates;
  for (std::size_t i = 1; i + 1 < samples.size(); ++i) rates.push_back(samples[i].rate);
  if (rates.empty()) rates.push_back(samples.back().rate);
  std::sort(rates.begin(), rates.end());
  long max_rss = 0, max_dead = 0;
  for (const Sample& s : samples) {
    max_rss = std::max(max_rss, s.rss);
    max_dead = std::max(max_dead, s.dead);
  }
  const oncely::QueueConfig& queue = bench.config(concurrency, batch).queues.at("default");
  std::printf(
      "\nsummary: %ld no-op jobs, concurrency %d, batch %d: %.1f s, %.0f jobs/s overall; %ld left in the queue\n"
      "worker RSS first / max / last: %.1f / %.1f / %.1f MiB\n"
      "worker CPU per job: %.2f us (%.1f s CPU)\n"
      "throughput per full %lld ms interval min / median / max: %.0f / %.0f / %.0f jobs/s (%zu intervals)\n"
      "jobs n_dead_tup max: %ld; autovacuums of jobs during the run: %ld\n",
      jobs, queue.concurrency, queue.batch_size, seconds, static_cast<double>(jobs) / seconds, remaining,
      static_cast<double>(samples.front().rss) / 1024, static_cast<double>(max_rss) / 1024,
      static_cast<double>(samples.back().rss) / 1024, cpu_used * 1e6 / static_cast<double>(jobs), cpu_used,
      static_cast<long long>(interval.count()), rates.front(), rates[rates.size() / 2], rates.back(), rates.size(),
      max_dead, samples.back().vacuums - samples.front().vacuums);
  if (remaining != 0) throw std::runtime_error(std::to_string(remaining) + " jobs left in the queue");
}

/// The worker's claims, as its oncely_claim_seconds histogram counted them (the whole run,
/// warm-up included): how many, how many took at most 50 ms, and the upper bound of the
/// bucket that holds the 99th percentile (Prometheus buckets: 0.1, 0.5, 1, 5, 10, 50, 100 ms, ...).
struct ClaimTimes {
  long count = 0;
  long within_50ms = 0;
  double p99_bound_ms = 0;
};

ClaimTimes read_claim_times(int metrics_port) {
  ClaimTimes times;
  httplib::Client http("127.0.0.1", metrics_port);
  const auto res = http.Get("/metrics");
  if (!res || res->status != 200) throw std::runtime_error("steady: the worker's /metrics did not answer");
  std::vector<std::pair<double, long>> buckets;  // (le in ms, cumulative count)
  std::istringstream lines(res->body);
  const std::string prefix = "oncely_claim_seconds_bucket{";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto le = line.find("le=\"");
    const auto close = line.find('"', le + 4);
    const std::string bound = line.substr(le + 4, close - le - 4);
    const long n = std::stol(line.substr(line.rfind(' ') + 1));
    buckets.emplace_back(bound == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(bound) * 1000, n);
  }
  if (buckets.empty()) return times;
  times.count = buckets.back().second;
  for (const auto& [le_ms, n] : buckets) {
    if (le_ms <= 50.0 + 1e-9) times.within_50ms = n;
    if (times.p99_bound_ms == 0 && static_cast<double>(n) >= 0.99 * static_cast<double>(times.count))
      times.p99_bound_ms = le_ms;
  }
  return times;
}

/// Offered load under an adverse database: four producers enqueue `rate` jobs a second in
/// all (one autocommit INSERT each, evenly spaced) for `seconds`, while the worker runs them and,
/// with `pin`, something else holds back the xmin horizon the whole time, so that no dead
/// tuple or index entry of `jobs` can be removed:
///   readers: four REPEATABLE READ transactions, each re-counting `jobs` every 100 ms in
///            one snapshot (a reporting query, pg_dump, a long analytics read);
///   xid:     one transaction that took an xid (txid_current()) and sits idle.
/// Reports the throughput of the last `seconds - warm-up` (against the offered rate), the
/// wait from enqueue issued to handler start (p50/p99/max), the jobs left behind, and,
/// when pg_stat_statements is there, the claim statement's mean and max time.
nlohmann::json run_steady(Bench& bench, int rate, int seconds, int concurrency, int batch, const std::string& pin) {
  bench.fresh_schema();
  const std::string s = "\"" + bench.schema + "\"";
  bool have_statements = false;
  try {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    tx.exec("SELECT pg_stat_statements_reset()");
    have_statements = true;
  } catch (const std::exception&) {
    // Not preloaded on this server: the claim times are left out.
  }
  const auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  constexpr int kWarmUpS = 5;
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<long> done_in_window{0};
  std::mutex mutex;
  std::vector<double> waits_ms;
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  options.metrics_address = "127.0.0.1:0";  // for oncely_claim_seconds, the claims as the worker timed them
  oncely::Runtime runtime(bench.config(concurrency, batch), options);
  runtime.handle("noop", [&](oncely::JobContext& job) {
    if (!measuring.load(std::memory_order_relaxed)) return;
    const double waited = static_cast<double>(now_us() - job.payload()["t"].get<std::int64_t>()) / 1000.0;
    done_in_window.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex);
    waits_ms.push_back(waited);
  });

  // The pin is in place before the first job and held to the end.
  std::vector<std::thread> pins;
  std::atomic<int> pins_ready{0};
  const int pin_threads = pin == "readers" ? 4 : pin == "xid" ? 1 : 0;
  for (int i = 0; i < pin_threads; ++i) {
    pins.emplace_back([&, i] {
      pqxx::connection c{bench.url};
      if (pin == "readers") {
        pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx{c};
        tx.exec("SELECT count(*) FROM " + s + ".jobs");
        pins_ready.fetch_add(1);
        while (!stop.load()) {
          tx.exec("SELECT count(*) FROM " + s + ".jobs");
          std::this_thread::sleep_for(std::chrono::milliseconds(100 + 25 * i));
        }
      } else {
        pqxx::work tx{c};
        tx.exec("SELECT txid_current()");
        pins_ready.fetch_add(1);
        while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  while (pins_ready.load() < pin_threads) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  std::thread runner([&] { runtime.run(); });
  // Four producers (application servers), each on its own connection, each a quarter of
  // the rate on a fixed schedule: a slow INSERT delays its producer's next ones, not all.
  constexpr int kProducers = 4;
  const auto t0 = Clock::now();
  const auto window_start = t0 + std::chrono::seconds(kWarmUpS);
  const auto end = t0 + std::chrono::seconds(seconds);
  const auto spacing = std::chrono::duration<double>(static_cast<double>(kProducers) / rate);
  std::atomic<long> offered_in_window{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      pqxx::connection producer{bench.url};
      producer.prepare(
          "enqueue",
          "INSERT INTO " + s +
              ".jobs (kind, idempotency_key, payload) VALUES ('noop', $1, jsonb_build_object('t', $2::bigint))");
      const auto first =
          t0 + std::chrono::duration_cast<Clock::duration>(spacing * (static_cast<double>(p) / kProducers));
      for (long i = 0;; ++i) {
        const auto due = first + std::chrono::duration_cast<Clock::duration>(spacing * static_cast<double>(i));
        if (due >= end) break;
        if (due >= window_start) measuring = true;
        std::this_thread::sleep_until(due);
        pqxx::nontransaction tx{producer};
        tx.exec_prepared("enqueue", "k-" + std::to_string(p) + "-" + std::to_string(i), now_us());
        if (due >= window_start) offered_in_window.fetch_add(1);
      }
    });
  }
  for (std::thread& t : producers) t.join();
  const double window_s = std::chrono::duration<double>(Clock::now() - window_start).count();
  const long done = done_in_window.load();
  const long backlog = count_jobs(bench);
  long dead_tuples = 0;
  nlohmann::json claim = nullptr;
  {
    pqxx::connection c{bench.url};
    pqxx::nontransaction tx{c};
    dead_tuples = tx.exec1("SELECT coalesce(max(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = " +
                           tx.quote(bench.schema) + " AND relname = 'jobs'")[0]
                      .as<long>();
    if (have_statements) {
      const pqxx::result r = tx.exec(
          "SELECT sum(calls), sum(total_exec_time) / nullif(sum(calls), 0), max(max_exec_time) FROM pg_stat_statements "
          "WHERE query LIKE '%FOR UPDATE SKIP LOCKED%' AND query LIKE '%" +
          bench.schema + "%'");
      if (!r.empty() && !r[0][0].is_null()) {
        claim = {{"calls", r[0][0].as<long>()}, {"mean_ms", r[0][1].as<double>()}, {"max_ms", r[0][2].as<double>()}};
      }
    }
  }
  const ClaimTimes claims = read_claim_times(runtime.metrics_port());
  stop = true;
  for (std::thread& t : pins) t.join();
  runtime.request_stop();
  runner.join();
  bench.drop_schema();
  std::sort(waits_ms.begin(), waits_ms.end());
  const auto pct = [&](double p) {
    return waits_ms.empty() ? 0.0 : waits_ms[static_cast<std::size_t>(p * static_cast<double>(waits_ms.size() - 1))];
  };
  return {{"test", "steady"},
          {"pin", pin},
          {"rate", rate},
          {"seconds", seconds},
          {"concurrency", concurrency},
          {"batch", batch},
          {"jobs_per_s", static_cast<double>(done) / window_s},
          {"offered_per_s", static_cast<double>(offered_in_window.load()) / window_s},
          {"wait_p50_ms", pct(0.5)},
          {"wait_p99_ms", pct(0.99)},
          {"wait_max_ms", waits_ms.empty() ? 0.0 : waits_ms.back()},
          {"backlog", backlog},
          {"jobs_dead_tuples", dead_tuples},
          {"claim", claim},
          {"claims", claims.count},
          {"claims_over_50ms", claims.count - claims.within_50ms},
          {"claim_p99_at_most_ms", claims.p99_bound_ms}};
}

/// The buckets of a Prometheus histogram family (every series summed) from /metrics: (le in
/// ms, cumulative count), by le.
std::vector<std::pair<double, double>> histogram_buckets(int metrics_port, const std::string& family) {
  httplib::Client http("127.0.0.1", metrics_port);
  const auto res = http.Get("/metrics");
  if (!res || res->status != 200) throw std::runtime_error("the runtime's /metrics did not answer");
  std::map<double, double> by_le;
  std::istringstream lines(res->body);
  const std::string prefix = family + "_bucket{";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto le = line.find("le=\"");
    const auto close = line.find('"', le + 4);
    const std::string bound = line.substr(le + 4, close - le - 4);
    by_le[bound == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(bound) * 1000] +=
        std::stod(line.substr(line.rfind(' ') + 1));
  }
  return {by_le.begin(), by_le.end()};
}

/// The `q` quantile of what a histogram counted between two readings, interpolated linearly
/// within its bucket as Prometheus' histogram_quantile() does (0: nothing counted).
double quantile_between(const std::vector<std::pair<double, double>>& before,
                        const std::vector<std::pair<double, double>>& after, double q) {
  std::vector<std::pair<double, double>> delta = after;
  for (std::size_t i = 0; i < delta.size() && i < before.size(); ++i) delta[i].second -= before[i].second;
  if (delta.empty() || delta.back().second <= 0) return 0;
  const double rank = q * delta.back().second;
  double lower = 0, below = 0;
  for (const auto& [le, count] : delta) {
    if (count >= rank) {
      if (std::isinf(le)) return lower;  // beyond the last finite bucket: its bound
      return lower + (le - lower) * (rank - below) / std::max(count - below, 1e-9);
    }
    lower = le;
    below = count;
  }
  return lower;
}

/// The history soak (docs/benchmarks.md, "Completed-job history"): `rate` keyed no-op jobs a
/// second offered for `minutes`, with a dedup window of `window`, so that the completed-job
/// records (processed_jobs) reach rate × window and pruning must keep up. Sampled every
/// minute: jobs served a second, the claim's p99 (the runtime's oncely_claim_seconds over
/// the minute), enqueue → start p99 (exact: the INSERT's time is in the payload), the records
/// kept, the sizes of jobs and processed_jobs, their dead tuples, the process's RSS. One
/// producer inserts the jobs in a statement every 20 ms. Prints a Markdown table, writes one
/// JSON object per sample to `out`, and judges the last 30 minutes: each figure within ±10 %
/// of its first steady value (the mean of the window's first three samples).
int run_history_soak(Bench& bench, int rate, int minutes, std::chrono::milliseconds window, int concurrency, int batch,
                     const std::string& out) {
  bench.fresh_schema();
  const std::string s = "\"" + bench.schema + "\"";
  const auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::atomic<long> served{0};
  std::mutex mutex;
  std::vector<double> waits_ms;  // this minute's
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  options.metrics_address = "127.0.0.1:0";
  oncely::Config config = bench.config(concurrency, batch);
  config.dedup_window = window;
  oncely::Runtime runtime(config, options);
  runtime.handle("noop", [&](oncely::JobContext& job) {
    const double waited = static_cast<double>(now_us() - job.payload()["t"].get<std::int64_t>()) / 1000.0;
    served.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex);
    waits_ms.push_back(waited);
  });
  std::thread runner([&] { runtime.run(); });
  std::atomic<bool> stop{false};
  std::atomic<long> offered{0};
  std::thread producer;
  // Whatever ends the run (an error included), the producer and the runtime stop first.
  struct Stopper {
    std::atomic<bool>& stop;
    std::thread& producer;
    oncely::Runtime& runtime;
    std::thread& runner;
    void finish() {
      stop = true;
      if (producer.joinable()) producer.join();
      runtime.request_stop();
      if (runner.joinable()) runner.join();
    }
    ~Stopper() { finish(); }
  } stopper{stop, producer, runtime, runner};
  std::vector<std::pair<double, double>> claims_before;
  for (const auto started = Clock::now();;) {  // the metrics server answers once the runtime runs
    try {
      claims_before = histogram_buckets(runtime.metrics_port(), "oncely_claim_seconds");
      break;
    } catch (const std::exception&) {
      if (Clock::now() - started > std::chrono::seconds(30)) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  producer = std::thread([&] {
    pqxx::connection c{bench.url};
    c.prepare("enqueue", "INSERT INTO " + s +
                             ".jobs (kind, idempotency_key, payload) SELECT 'noop', 'k-' || ($1::bigint + g), "
                             "jsonb_build_object('t', $2::bigint) FROM generate_series(1, $3::int) AS g");
    constexpr auto kTick = std::chrono::milliseconds(20);
    const auto t0 = Clock::now();
    long sent = 0;
    for (long tick = 1; !stop.load(); ++tick) {
      std::this_thread::sleep_until(t0 + kTick * tick);
      const long due =
          static_cast<long>(static_cast<double>(rate) * std::chrono::duration<double>(kTick * tick).count());
      const int n = static_cast<int>(due - sent);
      if (n <= 0) continue;
      pqxx::nontransaction tx{c};
      tx.exec_prepared("enqueue", sent, now_us(), n);
      sent += n;
      offered.store(sent);
    }
  });

  pqxx::connection monitor{bench.url};
  struct Sample {
    int minute;
    double offered_per_s, served_per_s, claim_p99_ms, wait_p99_ms;
    long records, backlog;
    double jobs_mib, records_table_mib, records_index_mib;
    long jobs_dead, records_dead;
    double rss_mib;
  };
  std::vector<Sample> samples;
  std::ofstream json(out);
  std::cout << "\n| minute | offered/s | served/s | claim p99 (ms) | enqueue→start p99 (ms) | records kept | backlog | "
               "jobs (MiB) | processed_jobs table (MiB) | its indexes (MiB) | jobs dead tuples | processed_jobs dead "
               "tuples | RSS (MiB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
            << std::endl;
  long served_before = served.load(), offered_before = offered.load();
  const auto t0 = Clock::now();
  for (int minute = 1; minute <= minutes; ++minute) {
    std::this_thread::sleep_until(t0 + std::chrono::minutes(minute));
    const long served_now = served.load(), offered_now = offered.load();
    auto claims_now = histogram_buckets(runtime.metrics_port(), "oncely_claim_seconds");
    std::vector<double> waits;
    {
      std::lock_guard lock(mutex);
      waits.swap(waits_ms);
    }
    std::sort(waits.begin(), waits.end());
    pqxx::nontransaction tx{monitor};
    const pqxx::row r =
        tx.exec1("SELECT (SELECT count(*) FROM " + s + ".processed_jobs), (SELECT count(*) FROM " + s +
                 ".jobs), "
                 "pg_total_relation_size('" +
                 s + ".jobs'), pg_table_size('" + s +
                 ".processed_jobs'), "
                 "pg_indexes_size('" +
                 s +
                 ".processed_jobs'), "
                 "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = " +
                 tx.quote(bench.schema) +
                 " AND relname = 'jobs'), (SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = " +
                 tx.quote(bench.schema) + " AND relname = 'processed_jobs')");
    constexpr double kMiB = 1024.0 * 1024.0;
    const Sample sample{
        minute,
        static_cast<double>(offered_now - offered_before) / 60.0,
        static_cast<double>(served_now - served_before) / 60.0,
        quantile_between(claims_before, claims_now, 0.99),
        waits.empty() ? 0.0 : waits[static_cast<std::size_t>(0.99 * static_cast<double>(waits.size() - 1))],
        r[0].as<long>(),
        r[1].as<long>(),
        r[2].as<double>() / kMiB,
        r[3].as<double>() / kMiB,
        r[4].as<double>() / kMiB,
        r[5].is_null() ? 0 : r[5].as<long>(),
        r[6].is_null() ? 0 : r[6].as<long>(),
        static_cast<double>(rss_kib()) / 1024.0};
    samples.push_back(sample);
    std::printf("| %d | %.0f | %.0f | %.2f | %.1f | %ld | %ld | %.1f | %.1f | %.1f | %ld | %ld | %.1f |\n",
                sample.minute, sample.offered_per_s, sample.served_per_s, sample.claim_p99_ms, sample.wait_p99_ms,
                sample.records, sample.backlog, sample.jobs_mib, sample.records_table_mib, sample.records_index_mib,
                sample.jobs_dead, sample.records_dead, sample.rss_mib);
    std::fflush(stdout);
    json << nlohmann::json{{"minute", sample.minute},
                           {"offered_per_s", sample.offered_per_s},
                           {"served_per_s", sample.served_per_s},
                           {"claim_p99_ms", sample.claim_p99_ms},
                           {"wait_p99_ms", sample.wait_p99_ms},
                           {"records", sample.records},
                           {"backlog", sample.backlog},
                           {"jobs_mib", sample.jobs_mib},
                           {"records_table_mib", sample.records_table_mib},
                           {"records_index_mib", sample.records_index_mib},
                           {"jobs_dead", sample.jobs_dead},
                           {"records_dead", sample.records_dead},
                           {"rss_mib", sample.rss_mib}}
                .dump()
         << std::endl;
    claims_before = std::move(claims_now);
    served_before = served_now;
    offered_before = offered_now;
  }
  stopper.finish();  // before the schema goes
  bench.drop_schema();

  // The verdict: the last 30 minutes against their first three samples.
  if (samples.size() < 33) {
    std::printf("\nverdict: not judged (%zu samples; the last 30 minutes need a run of at least 33)\n", samples.size());
    return 0;
  }
  const std::size_t from = samples.size() - 30;
  struct Figure {
    const char* name;
    double Sample::*field;
  };
  const Figure figures[] = {{"served/s", &Sample::served_per_s},
                            {"claim p99", &Sample::claim_p99_ms},
                            {"enqueue→start p99", &Sample::wait_p99_ms},
                            {"jobs size", &Sample::jobs_mib},
                            {"processed_jobs table", &Sample::records_table_mib},
                            {"processed_jobs indexes", &Sample::records_index_mib}};
  bool flat = true;
  std::printf("\nlast 30 minutes (from minute %d), against the mean of their first three samples:\n",
              samples[from].minute);
  const auto judge = [&](const char* name, const std::function<double(const Sample&)>& value) {
    const double reference = (value(samples[from]) + value(samples[from + 1]) + value(samples[from + 2])) / 3.0;
    double worst = 0;
    for (std::size_t i = from; i < samples.size(); ++i) {
      worst = std::max(worst, std::abs(value(samples[i]) - reference) / std::max(std::abs(reference), 1e-9));
    }
    const bool ok = worst <= 0.10;
    flat = flat && ok;
    std::printf("  %-24s reference %.2f, worst deviation %+.1f %% %s\n", name, reference, worst * 100,
                ok ? "ok" : "NOT FLAT");
  };
  for (const Figure& f : figures) judge(f.name, [&](const Sample& x) { return x.*(f.field); });
  judge("records kept", [](const Sample& x) { return static_cast<double>(x.records); });
  std::printf("verdict: %s\n", flat ? "flat" : "not flat");
  return flat ? 0 : 1;
}

// fanout: one parent job, `jobs` children that depend on it and are the members of one
// closed batch, and the batch's on_finish callback. The parent's completion releases every
// child in its own transaction (the fan-out); the last child's completion enqueues the
// callback in its own (the fan-in). Measured: the parent's run to its commit (the release
// included), its commit to the first child's start, the children's burn-down, and the last
// child's commit to the callback's start.
nlohmann::json run_fanout(Bench& bench, int children, int concurrency, int batch) {
  bench.fresh_schema();
  {
    pqxx::connection c{bench.url};
    pqxx::work tx{c};
    const std::string s = tx.quote_name(bench.schema);
    const auto parent =
        tx.exec1("INSERT INTO " + s + ".jobs (kind, idempotency_key) VALUES ('parent', 'parent') RETURNING id")[0]
            .as<long>();
    const auto batch_id = tx.exec1("SELECT " + s + R"(.open_batch(on_finish => '{"kind": "callback"}'))")[0].as<long>();
    tx.exec("INSERT INTO " + s +
            ".jobs (kind, idempotency_key, depends_on, batch_id) SELECT 'child', 'child-' || i, "
            "ARRAY[" +
            std::to_string(parent) + "]::bigint[], " + std::to_string(batch_id) + " FROM generate_series(1, " +
            std::to_string(children) + ") AS i");
    tx.exec("SELECT " + s + ".close_batch(" + std::to_string(batch_id) + ")");
    tx.commit();
    pqxx::nontransaction maintenance{c};
    maintenance.exec("ANALYZE " + s + ".jobs");
    maintenance.exec("CHECKPOINT");
  }
  using Rep = Clock::time_point::rep;
  const auto now = [] { return Clock::now().time_since_epoch().count(); };
  std::atomic<Rep> parent_start{0}, parent_done{0}, first_child_start{0}, last_child_done{0}, callback_start{0};
  std::atomic<long> children_done{0};
  std::mutex mutex;
  std::condition_variable done_cv;
  oncely::RuntimeOptions options;
  options.logger = Bench::quiet_logger();
  options.handle_signals = false;
  options.on_event = [&](const oncely::JobEvent& e) {
    if (e.outcome != oncely::JobEvent::Outcome::completed) return;
    if (e.kind == "parent") parent_done = now();
    if (e.kind == "child" && children_done.fetch_add(1) + 1 == children) last_child_done = now();
  };
  oncely::Runtime runtime(bench.config(concurrency, batch), options);
  runtime.handle("parent", [&](oncely::JobContext&) { parent_start = now(); });
  runtime.handle("child", [&](oncely::JobContext&) {
    Rep expected = 0;
    first_child_start.compare_exchange_strong(expected, now());
  });
  runtime.handle("callback", [&](oncely::JobContext&) {
    callback_start = now();
    std::lock_guard lock(mutex);
    done_cv.notify_all();
  });
  std::thread runner([&] { runtime.run(); });
  {
    std::unique_lock lock(mutex);
    if (!done_cv.wait_for(lock, std::chrono::minutes(10), [&] { return callback_start.load() != 0; })) {
      runtime.request_stop();
      runner.join();
      throw std::runtime_error("fanout: the callback did not start within 10 minutes");
    }
  }
  runtime.request_stop();
  runner.join();
  bench.drop_schema();
  const auto ms = [](Rep from, Rep to) {
    return std::chrono::duration<double, std::milli>(Clock::duration(to - from)).count();
  };
  return {{"test", "fanout"},
          {"mode", bench.lease_mode ? "lease" : "transaction"},
          {"children", children},
          {"concurrency", concurrency},
          {"batch", batch},
          {"parent_run_to_commit_ms", ms(parent_start, parent_done)},
          {"release_to_first_child_ms", ms(parent_done, first_child_start)},
          {"children_per_s", children / (ms(first_child_start, last_child_done) / 1000)},
          {"fan_in_ms", ms(last_child_done, callback_start)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oncely_bench: worker runtime throughput and latency, enqueue throughput"};
  std::string test;
  int jobs = 20000, concurrency = 0, batch = 0, samples = 200, runs = 1, interval_ms = 1000;
  std::string handler = "noop", mode = "transaction";
  int lease_ms = 30000, lease_connections = 1;
  app.add_option("test", test,
                 "process | latency | enqueue-single | enqueue-batch | soak | steady | fanout | history-soak")
      ->required()
      ->check(CLI::IsMember(
          {"process", "latency", "enqueue-single", "enqueue-batch", "soak", "steady", "fanout", "history-soak"}));
  app.add_option("--jobs", jobs)->check(CLI::PositiveNumber);
  app.add_option("--concurrency", concurrency, "worker threads (default: oncely's default)")
      ->check(CLI::Range(1, 2000));
  app.add_option("--mode", mode, "process: the queue's mode")->check(CLI::IsMember({"transaction", "lease"}));
  app.add_option("--lease-ms", lease_ms, "process --mode lease: the lease")->check(CLI::Range(3000, 3600000));
  app.add_option("--connections", lease_connections, "process --mode lease: the queue's connections")
      ->check(CLI::Range(1, 16));
  app.add_option("--batch", batch, "jobs per claim (default: oncely's default), or per enqueue_batch call (1000)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--handler", handler)->check(CLI::IsMember({"noop", "increment"}));
  int fail_percent = 0;
  std::string stack_traces = "dead_letters";
  app.add_option("--fail-percent", fail_percent, "process, noop: the share of jobs that throw a PermanentError")
      ->check(CLI::Range(0, 100));
  app.add_option("--stack-traces", stack_traces, "the process's stack_traces setting")
      ->check(CLI::IsMember({"dead_letters", "all_failures", "off"}));
  app.add_option("--samples", samples)->check(CLI::PositiveNumber);
  app.add_option("--runs", runs)->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", interval_ms, "soak: sampling interval")->check(CLI::Range(100, 60000));
  int rate = 800, seconds = 60;
  std::string pin = "none";
  app.add_option("--rate", rate, "steady, history-soak: jobs offered per second")->check(CLI::Range(1, 50000));
  int minutes = 60, dedup_window_s = 600;
  std::string out = "history-soak.jsonl";
  app.add_option("--minutes", minutes, "history-soak: how long, sampled every minute")->check(CLI::Range(1, 600));
  app.add_option("--dedup-window-s", dedup_window_s, "history-soak: the dedup window, in seconds")
      ->check(CLI::Range(60, 86400));
  app.add_option("--out", out, "history-soak: where its samples go, one JSON object per line");
  app.add_option("--seconds", seconds, "steady: how long (the first 5 s are a warm-up)")->check(CLI::Range(10, 3600));
  app.add_option("--pin", pin, "steady: what holds back the xmin horizon")
      ->check(CLI::IsMember({"none", "readers", "xid"}));
  int handler_ms = 0, queues = 1;
  long scheduled = 0;
  app.add_option("--handler-ms", handler_ms, "process, noop: the handler sleeps this long")
      ->check(CLI::Range(0, 60000));
  std::string limits;
  bool without_slot_triggers = false;
  app.add_option("--limits", limits, "process: the queue's limits across workers, as JSON ({\"concurrency\": 24})");
  app.add_flag("--without-slot-triggers", without_slot_triggers,
               "process: drop the triggers that wake a limited queue's workers (their cost to other queues)");
  bool metrics = false;
  app.add_flag("--metrics", metrics,
               "process: serve the process's metrics and report the claims' times (on with --limits)");
  app.add_option("--queues", queues, "process: jobs spread over this many queues, each with --concurrency threads")
      ->check(CLI::Range(1, 200));
  app.add_option("--scheduled", scheduled, "process: this many more jobs, due in an hour (not waited for)")
      ->check(CLI::Range(0L, 10000000L));
  bool as_worker_role = false;
  app.add_flag("--as-worker-role", as_worker_role,
               "process, soak: the runtime connects as a login role granted only <schema>_worker");
  CLI11_PARSE(app, argc, argv);
  const char* url = std::getenv("DATABASE_URL");
  if (url == nullptr) {
    std::cerr << "oncely_bench: set DATABASE_URL\n";
    return 2;
  }
  // Flags not given: the queue runs with oncely's own defaults.
  const oncely::QueueConfig defaults;
  if (concurrency == 0) concurrency = defaults.concurrency;
  if (batch == 0) batch = test == "enqueue-batch" ? 1000 : defaults.batch_size;
  try {
    Bench bench{url};
    bench.lease_mode = mode == "lease";
    bench.as_worker_role = as_worker_role;
    bench.lease = std::chrono::milliseconds(lease_ms);
    bench.lease_connections = lease_connections;
    bench.fail_percent = fail_percent;
    bench.handler_ms = handler_ms;
    bench.queues = queues;
    bench.scheduled = scheduled;
    bench.without_slot_triggers = without_slot_triggers;
    bench.metrics = metrics || !limits.empty();
    if (!limits.empty()) {
      // Checked as a configuration file's limits are.
      const oncely::Config parsed = oncely::Config::parse(
          nlohmann::json{{"queues", {{"q", {{"mode", mode}, {"limits", nlohmann::json::parse(limits)}}}}}});
      bench.limits = parsed.queues.at("q").limits;
      bench.limits_text = limits;
    }
    bench.stack_traces = stack_traces == "off"            ? oncely::StackTraces::off
                         : stack_traces == "all_failures" ? oncely::StackTraces::all_failures
                                                          : oncely::StackTraces::dead_letters;
    if (test == "soak") {
      run_soak(bench, jobs, concurrency, batch, std::chrono::milliseconds(interval_ms));
      return 0;
    }
    if (test == "history-soak") {
      return run_history_soak(bench, rate, minutes, std::chrono::seconds(dedup_window_s), concurrency, batch, out);
    }
    std::vector<nlohmann::json> results;
    for (int run = 1; run <= runs; ++run) {
      nlohmann::json result = test == "process"          ? run_process(bench, jobs, concurrency, batch, handler)
                              : test == "steady"         ? run_steady(bench, rate, seconds, concurrency, batch, pin)
                              : test == "latency"        ? run_latency(bench, samples)
                              : test == "fanout"         ? run_fanout(bench, jobs, concurrency, batch)
                              : test == "enqueue-single" ? run_enqueue_single(bench, jobs)
                                                         : run_enqueue_batch(bench, jobs, batch);
      result["run"] = run;
      std::cerr << result.dump() << std::endl;
      results.push_back(std::move(result));
    }
    // The median run of the headline figure, on stdout (one JSON object).
    const std::string key = test == "latency" ? "p50_ms" : test == "fanout" ? "fan_in_ms" : "jobs_per_s";
    std::sort(results.begin(), results.end(), [&](const auto& a, const auto& b) {
      return a[key].template get<double>() < b[key].template get<double>();
    });
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
