// Runtime: one worker process's life, top-down in Runtime::Impl::run():
//   signals -> metrics -> preflight (schema version, connection budget, handler checks,
//   registration) -> one pool per queue and the listener -> heartbeat -> wait for stop
//   -> drain -> stop the services -> unregister.
// Each step is a function or a service below; whatever a thread left behind at exit still
// uses lives in Process, which is then leaked rather than destroyed under it.

#include "oncely/runtime.hpp"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "execution/attempt_spans.hpp"
#include "execution/lease_keeper.hpp"
#include "execution/lease_lanes.hpp"
#include "execution/queue_pool.hpp"
#include "handlers/subprocess.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "process/cron_scheduler.hpp"
#include "process/heartbeat.hpp"
#include "process/listener.hpp"
#include "process/metrics.hpp"
#include "process/pause_watcher.hpp"
#include "process/startup_checks.hpp"
#include "process/stop_signals.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"
#include "support/pooler.hpp"
#include "support/queue_policy.hpp"
#include "support/schema.hpp"
#include "support/service_thread.hpp"
#include "support/stack_trace.hpp"
#include "support/steady_clock.hpp"
#include "support/telemetry.hpp"
#include "support/text.hpp"

namespace oncely {
namespace {

// Past the shutdown grace: how long the processes of the exec jobs left running get to be
// gone once asked to (SIGTERM, SIGKILL after kTerminateGrace); how long the listener
// and the heartbeat get to stop; how long unregistering may take (connect_timeout and the
// TCP timeouts bound a connection that fails, not one whose peer stopped answering).
constexpr auto kAbandonBound = detail::kTerminateGrace + detail::kEndBound + std::chrono::milliseconds(500);
constexpr auto kServiceStopBound = std::chrono::milliseconds(1000);
constexpr auto kUnregisterBound = std::chrono::milliseconds(3000);

// A logger of this Runtime's own when none is given: not one from spdlog's registry, which
// is process-wide (two Runtimes would share it, and a name registered twice throws).
std::shared_ptr<spdlog::logger> default_logger() {
  return std::make_shared<spdlog::logger>("oncely", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
}

// What the threads of one run share. Heap-allocated and leaked if a thread is left behind
// at exit (a drain that timed out, a service stuck behind a partition): they still use it.
struct Process {
  explicit Process(const Config& config) : store(config.schema, config.prepared_statements) {}
  const detail::Store store;
  // Shared by every pool: a crash is attributable only to a job that ran with nothing else
  // in flight (attribution_gate.hpp).
  detail::AttributionGate gate;
  std::atomic<std::int64_t> last_db_contact_ms{0};  // for /readyz
  std::unique_ptr<detail::Metrics> metrics;         // null: off
  std::unique_ptr<detail::PauseWatcher> pauses;     // before the pools: their flags live here
  std::unique_ptr<detail::LeaseKeeper> leases;      // null: no lease queue
  std::map<std::string, std::unique_ptr<detail::QueueRunner>> pools;
  std::unique_ptr<detail::Listener> listener;
  // With a direct URL beside a pooled database_url: the attempt records of every thread.
  std::shared_ptr<detail::RecordConnection> records;
};

// Every queue x kind at 0 before the first scrape (Metrics::declare).
void declare_series(detail::Metrics& metrics, const Config& config, const detail::HandlerRegistry& handlers) {
  std::vector<std::string> queues;
  std::vector<std::string> kinds;
  for (const auto& [name, queue] : config.queues) queues.push_back(name);
  for (const auto& [kind, handler] : handlers) kinds.push_back(kind);
  metrics.declare(queues, kinds);
}

// With RuntimeOptions::metrics_address: the process's metrics, fed by every job outcome
// (wrapped around `on_event`), and the server for them. Null when off.
std::unique_ptr<detail::MetricsServer> serve_metrics(Process& process, const RuntimeOptions& options,
                                                     std::function<void(const JobEvent&)>& on_event,
                                                     spdlog::logger& log, const Config& config,
                                                     const detail::HandlerRegistry& handlers) {
  if (options.metrics_address.empty()) return nullptr;
  process.metrics = std::make_unique<detail::Metrics>();
  declare_series(*process.metrics, config, handlers);  // before the first request can arrive
  auto server =
      std::make_unique<detail::MetricsServer>(options.metrics_address, *process.metrics, process.last_db_contact_ms);
  on_event = [m = process.metrics.get(), user = options.on_event](const JobEvent& e) {
    m->observe(e);
    if (user) user(e);
  };
  log.info("metrics listening address={} port={} max_connections={} fd_limit={}", options.metrics_address,
           server->port(), server->max_connections(), server->open_file_limit());
  return server;
}

// The queues' policies go into the database, where the SQL workers of the same queues read
// them: the file wins (the last deploy is the truth), and a stored row it replaces that said
// otherwise is logged once, naming the keys.
void write_queue_policies(pqxx::transaction_base& tx, const detail::Store& store, const Config& config,
                          const std::shared_ptr<spdlog::logger>& log) {
  for (const auto& [name, queue] : config.queues) {
    const std::optional<QueueConfig> stored = store.queue_policies.read(tx, name);
    if (stored) {
      const std::vector<std::string> keys = detail::policy_differences(*stored, queue);
      if (keys.empty()) continue;
      std::string named;
      for (const auto& key : keys) named += (named.empty() ? "" : ", ") + key;
      log->warn("queue {}: the stored policy differs in {}: this worker's configuration replaces it",
                detail::printable(name), named);
    }
    store.queue_policies.write(tx, name, queue);
  }
}

// Checks the schema's version and the connection budget, writes the queues' policies, runs
// the handlers' start-up checks, and registers the process; returns its worker id. Nothing
// is left behind when it refuses.
std::int64_t preflight(pqxx::connection& conn, const detail::Store& store, const Config& config,
                       const detail::HandlerRegistry& handlers, const DatabaseUrl& url,
                       const std::vector<std::string>& queue_names, const std::shared_ptr<spdlog::logger>& log) {
  try {
    {
      pqxx::work tx(conn);
      store.schema_migrations.require(tx, latest_schema_version(), "this worker");
      // Behind a transaction-mode pooler (no prepared statements) client connections are
      // not server connections, and the server's limit says nothing about ours.
      if (config.prepared_statements) detail::check_connection_budget(tx, config);
      try {
        pqxx::subtransaction policies(tx, "queue_policies");
        write_queue_policies(policies, store, config, log);
        policies.commit();
      } catch (const pqxx::insufficient_privilege& e) {
        // A role granted the tables by hand before schema 18: the worker runs as before,
        // and SQL workers of its queues apply the stored policy or the defaults.
        log->warn(
            "cannot write the queues' policies ({}): grant INSERT, UPDATE on {}.queue_policies, or run "
            "`oncely migrate --roles`",
            detail::one_line(url, e.what()), config.schema);
      }
      tx.commit();
    }
    // Outside any transaction, as the checks expect.
    detail::run_startup_checks(conn, handlers);
    pqxx::work tx(conn);
    store.workers.remove_stale(tx, detail::kStaleAfter);
    const std::int64_t worker_id =
        store.workers.register_worker(tx, detail::host_name(), static_cast<int>(getpid()), queue_names);
    tx.commit();
    return worker_id;
  } catch (const pqxx::failure& e) {
    throw DatabaseError("worker start-up failed: " + detail::one_line(url, e.what()));
  }
}

bool pool_paused(const Process& process, const std::string& queue) {
  const std::atomic<bool>* flag = process.pauses->flag(queue);
  return flag != nullptr && flag->load();
}

// One pool per queue, and the listener that wakes them. The listener's wake-ups go to the
// pools by pointer: a listener left behind at exit may still call them. The pauses are
// read on `conn` before any pool starts: a queue paused now claims nothing from the start.
void start_queues(Process& process, pqxx::connection& conn, const Config& config,
                  const detail::HandlerRegistry& handlers, const DatabaseUrl& url, std::int64_t worker_id,
                  const std::function<void(const JobEvent&)>& on_event, const std::shared_ptr<spdlog::logger>& log) {
  std::vector<std::string> queue_names;
  for (const auto& [name, queue] : config.queues) queue_names.push_back(name);
  // The LISTEN URL is a direct, session-mode connection: the attempt records go there too,
  // on one connection of the process, so that no thread whose batch holds a pooled server
  // connection ever waits for a second one (docs/operations.md, Behind PgBouncer).
  if (!config.listen_database_url.empty() && config.listen_database_url != config.database_url) {
    process.records = std::make_shared<detail::RecordConnection>(process.store, DatabaseUrl(config.listen_database_url),
                                                                 log, /*shared=*/true);
  }
  process.pauses =
      std::make_unique<detail::PauseWatcher>(process.store, queue_names, [&process, log](const std::string& q) {
        log->info("queue resumed queue={}", q);
        if (const auto it = process.pools.find(q); it != process.pools.end()) it->second->wake_all();
      });
  try {
    process.pauses->refresh(conn);
  } catch (const pqxx::failure& e) {
    throw DatabaseError("worker start-up failed: reading the queue pauses: " + detail::one_line(url, e.what()));
  }
  for (const auto& [name, queue] : config.queues) {
    detail::QueueContext context;
    context.name = name;
    context.config = queue;
    context.store = &process.store;
    context.handlers = &handlers;
    context.log = log;
    context.on_event = on_event;
    context.url = url;
    context.worker_id = worker_id;
    context.worker_name = detail::host_name() + ":" + std::to_string(getpid());
    context.gate = &process.gate;
    context.paused = process.pauses->flag(name);
    context.records = process.records;
    if (process.metrics) {
      context.observe_claim = [metrics = process.metrics.get(), name](std::chrono::steady_clock::duration took) {
        metrics->observe_claim(name, took);
      };
    }
    if (queue.mode == QueueConfig::Mode::lease) {
      if (!process.leases) process.leases = std::make_unique<detail::LeaseKeeper>(process.store, url, log, config);
      process.pools.emplace(name, detail::make_lease_runner(std::move(context), *process.leases));
    } else {
      process.pools.emplace(name, std::make_unique<detail::QueuePool>(std::move(context)));
    }
  }
  if (process.leases) process.leases->start();
  std::map<std::string, detail::QueueRunner*> by_name;
  for (auto& [name, pool] : process.pools) by_name.emplace(name, pool.get());
  // What a notification naming `queue` ("*": every queue) asks of its runner.
  const auto each_named = [by_name](void (detail::QueueRunner::*ask)()) {
    return [by_name, ask](const std::string& queue) {
      if (queue == "*") {
        for (const auto& [name, pool] : by_name) (pool->*ask)();
      } else if (const auto it = by_name.find(queue); it != by_name.end()) {
        (it->second->*ask)();
      }
    };
  };
  process.listener = std::make_unique<detail::Listener>(
      config.listen_database_url.empty() ? url : DatabaseUrl(config.listen_database_url), config.schema, queue_names,
      log, each_named(&detail::QueueRunner::wake_one), each_named(&detail::QueueRunner::look_back),
      [by_name] {
        for (const auto& [name, pool] : by_name) pool->wake_all();
      },
      process.pauses.get());
  for (auto& [name, pool] : process.pools) {
    pool->start();
    const QueueConfig& q = config.queues.at(name);
    const char* paused = pool_paused(process, name) ? " paused=true" : "";
    if (q.mode == QueueConfig::Mode::lease) {
      log->info(
          "queue started queue={} mode=lease lease={} concurrency={} batch_size={} max_attempts={} job_timeout={}{}",
          name, detail::format_duration(q.lease), q.concurrency, q.batch_size, q.max_attempts,
          detail::format_duration(q.job_timeout), paused);
    } else {
      log->info("queue started queue={} concurrency={} batch_size={} max_attempts={} job_timeout={}{}", name,
                q.concurrency, q.batch_size, q.max_attempts, detail::format_duration(q.job_timeout), paused);
    }
  }
}

// Nothing new is claimed; running batches stop starting handlers and commit, running lease
// jobs finish and settle. Past the grace, the processes of the exec jobs left behind are
// ended before this process exits (so that they cannot run on while another worker runs
// the same job), threads stuck in a call are detached (the server rolls their
// transactions back when the connections close), and lease queues release the leases of
// what still ran (ready again at once, the attempt not charged). Returns whether every
// pool stopped within the grace.
bool drain(Process& process, const Config& config, spdlog::logger& log) {
  const std::chrono::milliseconds grace = config.shutdown_grace;
  for (auto& [name, pool] : process.pools) pool->request_stop();
  process.listener->request_stop();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  bool drained = true;
  for (auto& [name, pool] : process.pools) {
    if (!pool->wait_stopped(deadline)) {
      drained = false;
      const bool lease = config.queues.at(name).mode == QueueConfig::Mode::lease;
      log.error("queue {} still has {} job(s) running after the shutdown grace of {}; {}", name, pool->jobs_in_flight(),
                detail::format_duration(grace),
                lease ? "stopping them and releasing their leases (ready again at once, the attempt not charged)"
                      : "leaving them to roll back (they will be redelivered)");
    }
  }
  if (drained) return true;
  const auto abandon_by = std::chrono::steady_clock::now() + kAbandonBound;
  for (auto& [name, pool] : process.pools) {
    if (!pool->abandon(abandon_by)) log.warn("queue {}: threads left behind at exit", name);
  }
  while (detail::running_jobs() > 0 && std::chrono::steady_clock::now() < abandon_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // once, at exit: a short poll will do
  }
  if (detail::running_jobs() > 0) {
    log.error("{} exec job(s) still have processes after {}; exiting (they get SIGTERM, then SIGKILL)",
              detail::running_jobs(), detail::format_duration(kAbandonBound));
  }
  return false;
}

// The last word to the database, on a thread of its own so that it is bounded too.
// Returns false if it was left behind.
bool unregister(const detail::Store& store, const DatabaseUrl& url, std::int64_t worker_id,
                const std::shared_ptr<spdlog::logger>& log) {
  detail::ServiceThread last_word([log, store = &store, url, worker_id](const std::stop_token&) {
    try {
      auto conn = detail::connect(url);
      store->prepare(*conn);
      pqxx::work tx(*conn);
      store->workers.unregister(tx, worker_id);
      // Gone cleanly: the next exporter of the database gauges need not wait for the lease.
      store->leaders.release(tx, detail::kMetricsRole, worker_id);
      tx.commit();
    } catch (const std::exception& e) {
      log->warn("could not unregister worker {}: {}", worker_id, detail::one_line(url, e.what()));
    }
  });
  if (last_word.stop_until(std::chrono::steady_clock::now() + kUnregisterBound)) return true;
  log->warn("could not unregister worker {} within {}; its row expires after {}", worker_id,
            detail::format_duration(kUnregisterBound), detail::format_duration(detail::kStaleAfter));
  return false;
}

}  // namespace

struct Runtime::Impl {
  Config config;
  RuntimeOptions options;
  std::shared_ptr<spdlog::logger> log;
  detail::HandlerRegistry handlers;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  bool ran = false;
  std::atomic<int> metrics_port{0};

  void request_stop() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    stop_cv.notify_all();
  }

  void wait_for_stop() {
    std::unique_lock lock(mutex);
    stop_cv.wait(lock, [&] { return stop; });
  }

  int run();
};

int Runtime::Impl::run() {
  // What the environment says of pooling, for a Config built in code as for one loaded:
  // the direct URL when the Config has none, and prepared statements off.
  if (config.listen_database_url.empty()) {
    if (const char* direct = std::getenv("ONCELY_LISTEN_DATABASE_URL"); direct != nullptr) {
      config.listen_database_url = direct;
    }
  }
  config.prepared_statements = detail::prepared_statements_allowed(config.prepared_statements);
  validate_schema_name(config.schema);
  config.validate();  // a Config built in code has not been through parse()
  detail::enable_stack_traces(config.stack_traces);
  if (config.database_url.empty()) throw ConfigError("database_url", "no database given: set DATABASE_URL");
  const DatabaseUrl url(config.database_url);
  auto process = std::make_unique<Process>(config);

  // Signals first, before any thread starts here (the metrics server's, the pools'): each
  // inherits the mask, so a SIGTERM can only be taken by the signal thread (stop_signals.hpp).
  std::optional<detail::StopSignalWatcher> signals;
  if (options.handle_signals) {
    signals.emplace([this](int sig) {
      log->info("received {}, draining (grace {})", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                detail::format_duration(config.shutdown_grace));
      request_stop();
    });
  }

  // Metrics, when asked for: every job outcome also feeds the Prometheus families.
  std::function<void(const JobEvent&)> on_event = options.on_event;
  std::unique_ptr<detail::MetricsServer> metrics_server =
      serve_metrics(*process, options, on_event, *log, config, handlers);
  if (metrics_server) metrics_port = metrics_server->port();
  // Spans, when an OTLP endpoint is set (docs/opentelemetry.md): every outcome's process and
  // settle spans go to the exporter's queue before anything else sees the event.
  detail::Tracer* const tracer = detail::process_tracer();
  detail::Meter* const meter = detail::process_meter();
  if (tracer != nullptr) {
    tracer->set_log(log);
    const detail::OtelSettings& otel = tracer->settings();
    log->info("otel span export on url={} service={} max_queue_size={}", detail::display_url(otel.traces.url),
              otel.resource.front().second, otel.max_queue_size);
  }
  if (meter != nullptr) meter->set_log(log);
  if (tracer != nullptr || meter != nullptr) on_event = detail::observed(tracer, meter, std::move(on_event));

  // Preflight on the process's own connection, kept for the heartbeat.
  std::vector<std::string> queue_names;
  for (const auto& [name, queue] : config.queues) queue_names.push_back(name);
  auto conn = detail::connect(url);
  process->store.prepare(*conn);
  const std::int64_t worker_id = preflight(*conn, process->store, config, handlers, url, queue_names, log);
  process->last_db_contact_ms = detail::steady_ms();

  start_queues(*process, *conn, config, handlers, url, worker_id, on_event, log);
  log->info("worker running worker_id={} schema={} queues={}", worker_id, config.schema, queue_names.size());
  // Registration, maintenance and metrics on a thread of their own: this thread only
  // waits for the stop and then runs the shutdown, which no call stuck behind a partition
  // may hold up.
  detail::Heartbeat::Settings beat{.store = &process->store,
                                   .url = url,
                                   .worker_id = worker_id,
                                   .queue_names = queue_names,
                                   .pools = {},
                                   .dedup_window = config.dedup_window,
                                   .metrics = process->metrics.get(),
                                   .log = log,
                                   .last_db_contact_ms = &process->last_db_contact_ms};
  for (const auto& [name, pool] : process->pools) beat.pools.push_back(pool.get());
  detail::Heartbeat heartbeat(std::move(beat), std::move(conn));
  auto cron = detail::start_cron_scheduler(config, process->store, url, log);  // null without "cron"
  wait_for_stop();
  const auto grace_ends = std::chrono::steady_clock::now() + config.shutdown_grace;

  const bool drained = drain(*process, config, *log);
  // The spans and metrics of what the drain settled, sent within the grace (a second at
  // least, 5 s at most: a slow collector must not take the time the services' stop needs).
  const auto now = std::chrono::steady_clock::now();
  if (!detail::flush_telemetry(std::clamp(grace_ends, now + std::chrono::seconds(1), now + std::chrono::seconds(5)))) {
    log->warn("otel: spans or metrics still unsent at the end of the shutdown grace");
  }
  bool left_behind = !drained;
  if (process->leases && !process->leases->stop_until(std::chrono::steady_clock::now() + kServiceStopBound)) {
    left_behind = true;
    log->warn("the lease keeper did not stop within {}; leaving it behind", detail::format_duration(kServiceStopBound));
  }
  const auto services_by = std::chrono::steady_clock::now() + kServiceStopBound;
  if (!process->listener->stop_until(services_by)) {
    left_behind = true;
    log->warn("the listener did not stop within {}; leaving it behind", detail::format_duration(kServiceStopBound));
  }
  if (!heartbeat.stop_until(services_by)) {
    left_behind = true;
    log->warn("the heartbeat did not stop within {}; leaving it behind", detail::format_duration(kServiceStopBound));
  }
  if (cron && !cron->stop_until(services_by)) {
    left_behind = true;
    log->warn("the cron scheduler did not stop within {}; leaving it behind",
              detail::format_duration(kServiceStopBound));
  }
  metrics_server.reset();
  if (!unregister(process->store, url, worker_id, log)) left_behind = true;
  signals.reset();
  log->info("worker stopped{}", drained ? "" : " (some jobs were still running: rolled back or released)");
  if (left_behind) static_cast<void>(process.release());  // threads left running use it; the process is exiting
  return 0;
}

Runtime::Runtime(Config config, RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->log = options.logger ? options.logger : default_logger();
  impl_->options = std::move(options);
}

Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

Runtime::~Runtime() { request_stop(); }

void Runtime::handle(std::string kind, Handler handler, HandlerOptions options) {
  if (!impl_) throw Error("Runtime::handle() on a moved-from Runtime");
  if (kind.empty()) throw ConfigError("handle", "kind must not be empty");
  impl_->handlers[std::move(kind)] = detail::RegisteredHandler{std::move(handler), options};
}

int Runtime::metrics_port() const noexcept { return impl_ ? impl_->metrics_port.load() : 0; }

void Runtime::request_stop() noexcept {
  if (!impl_) return;  // moved from
  try {
    impl_->request_stop();
  } catch (...) {
  }
}

int Runtime::run() {
  if (!impl_) throw Error("Runtime::run() on a moved-from Runtime");
  if (impl_->ran) throw Error("Runtime::run() may be called once");
  impl_->ran = true;
  return impl_->run();
}

}  // namespace oncely
