// Runtime::Impl: checks the database, registers the process, starts the listener and one
// pool per queue, keeps the registration alive, and drains on stop.

#include "oncely/runtime.hpp"

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <pqxx/pqxx>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "db.hpp"
#include "duration.hpp"
#include "handlers/subprocess.hpp"
#include "listener.hpp"
#include "maintenance.hpp"
#include "metrics.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "oncely/stats.hpp"
#include "queue_pool.hpp"
#include "schema.hpp"
#include "service_thread.hpp"
#include "startup_checks.hpp"
#include "stop_signals.hpp"
#include "store.hpp"

namespace oncely {
namespace {

// How often the process refreshes its registration, and when others consider it gone.
constexpr auto kHeartbeatInterval = std::chrono::seconds(5);
constexpr auto kStaleAfter = std::chrono::seconds(60);
// Every this many heartbeats, a maintenance pass (if this process wins the election).
constexpr int kHeartbeatsPerMaintenance = 12;
// Past the shutdown grace: how long the processes of the exec jobs left running get to be
// gone once asked to (SIGTERM, SIGKILL after kTerminateGrace); how long the listener
// and the heartbeat get to stop; how long unregistering may take (connect_timeout and the
// TCP timeouts bound a connection that fails, not one whose peer stopped answering).
constexpr auto kAbandonBound = detail::kTerminateGrace + detail::kEndBound + std::chrono::milliseconds(500);
constexpr auto kServiceStopBound = std::chrono::milliseconds(1000);
constexpr auto kUnregisterBound = std::chrono::milliseconds(3000);

std::shared_ptr<spdlog::logger> default_logger() {
  auto log = spdlog::get("oncely");
  if (!log) log = spdlog::stderr_color_mt("oncely");
  return log;
}

std::string host_name() {
  char buffer[HOST_NAME_MAX + 1] = {};
  return gethostname(buffer, sizeof buffer) == 0 ? std::string(buffer) : std::string("unknown");
}

}  // namespace

struct Runtime::Impl : std::enable_shared_from_this<Runtime::Impl> {
  Config config;
  RuntimeOptions options;
  std::shared_ptr<spdlog::logger> log;
  detail::HandlerRegistry handlers;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  bool ran = false;
  std::atomic<int> metrics_port{0};
  std::atomic<std::int64_t> last_db_contact_ms{0};  // for /readyz

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
  // What the heartbeat thread needs, by value or pointing at objects that outlive it (they
  // are leaked if it is left behind at exit).
  struct Beat {
    const detail::Store* store = nullptr;
    DatabaseUrl url{""};
    std::int64_t worker_id = 0;
    std::vector<std::string> queue_names;
    std::vector<detail::QueuePool*> pools;
    detail::Metrics* metrics = nullptr;  // null: off
    std::unique_ptr<pqxx::connection> conn;
  };
  void heartbeat_loop(const std::stop_token& stopping, Beat& beat);
  void export_metrics(Beat& beat);
};

void Runtime::Impl::export_metrics(Beat& beat) {
  detail::Metrics& metrics = *beat.metrics;
  for (const detail::QueuePool* pool : beat.pools) metrics.set_in_flight(pool->name(), pool->jobs_in_flight());
  // The database's view of the queues comes from one process at a time: the holder of a
  // session-level lock on the heartbeat connection (released if that connection drops).
  pqxx::nontransaction tx(*beat.conn);
  if (beat.store->try_metrics_leadership(tx)) metrics.set_queue_stats(collect_stats(beat.url, config.schema));
}

void Runtime::Impl::heartbeat_loop(const std::stop_token& stopping, Beat& beat) {
  const detail::Store& store = *beat.store;
  const detail::Maintenance maintenance(store, config.dedup_window, log);
  std::mutex sleep_mutex;
  std::condition_variable_any sleeper;
  const auto sleep = [&] {
    std::unique_lock lock(sleep_mutex);
    return !sleeper.wait_for(lock, stopping, kHeartbeatInterval, [] { return false; }) && !stopping.stop_requested();
  };
  for (int n = 0; sleep(); ++n) {
    try {
      if (!beat.conn || !beat.conn->is_open()) {
        beat.conn = detail::connect(beat.url);
        store.prepare(*beat.conn);
      }
      int in_flight = 0;
      for (const detail::QueuePool* pool : beat.pools) in_flight += pool->jobs_in_flight();
      {
        pqxx::work tx(*beat.conn);
        store.heartbeat(tx, beat.worker_id, in_flight, host_name(), static_cast<int>(getpid()), beat.queue_names);
        tx.commit();
      }
      last_db_contact_ms = detail::steady_ms();
      if (n % kHeartbeatsPerMaintenance == 0) maintenance.run_once(*beat.conn);
      if (beat.metrics != nullptr) export_metrics(beat);
    } catch (const std::exception& e) {
      log->warn("heartbeat failed: {}", detail::one_line(beat.url, e.what()));
      beat.conn.reset();
    }
  }
}

Runtime::Runtime(Config config, RuntimeOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->config = std::move(config);
  impl_->log = options.logger ? options.logger : default_logger();
  impl_->options = std::move(options);
}

Runtime::~Runtime() { request_stop(); }

void Runtime::handle(std::string kind, Handler handler, HandlerOptions options) {
  if (kind.empty()) throw ConfigError("handle", "kind must not be empty");
  impl_->handlers[std::move(kind)] = detail::RegisteredHandler{std::move(handler), options};
}

int Runtime::metrics_port() const noexcept { return impl_->metrics_port.load(); }

void Runtime::request_stop() noexcept {
  try {
    impl_->request_stop();
  } catch (...) {
  }
}

int Runtime::run() {
  if (impl_->ran) throw Error("Runtime::run() may be called once");
  impl_->ran = true;
  return impl_->run();
}

int Runtime::Impl::run() {
  validate_schema_name(config.schema);
  config.validate();  // a Config built in code has not been through parse()
  if (config.database_url.empty()) throw ConfigError("database_url", "no database given: set DATABASE_URL");
  const DatabaseUrl url(config.database_url);
  // Heap-allocated: if a drain times out, detached worker threads still use it.
  auto store_owner = std::make_unique<const detail::Store>(config.schema, config.prepared_statements);
  const detail::Store& store = *store_owner;
  // Shared by every pool of the process: a crash is attributable only to a job that ran
  // with nothing else in flight (attribution_gate.hpp). Leaked like the store if a drain
  // leaves threads behind.
  auto gate_owner = std::make_unique<detail::AttributionGate>();

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
  std::unique_ptr<detail::Metrics> metrics;
  std::unique_ptr<detail::MetricsServer> metrics_server;
  std::function<void(const JobEvent&)> on_event = options.on_event;
  if (!options.metrics_address.empty()) {
    metrics = std::make_unique<detail::Metrics>();
    metrics_server = std::make_unique<detail::MetricsServer>(options.metrics_address, *metrics, last_db_contact_ms);
    metrics_port = metrics_server->port();
    on_event = [m = metrics.get(), user = options.on_event](const JobEvent& e) {
      m->observe(e);
      if (user) user(e);
    };
    log->info("metrics listening address={} port={} max_connections={} fd_limit={}", options.metrics_address,
              metrics_server->port(), metrics_server->max_connections(), metrics_server->open_file_limit());
  }

  // Preflight on the process's own connection (kept for heartbeats).
  auto conn = detail::connect(url);
  store.prepare(*conn);
  std::int64_t worker_id = 0;
  std::vector<std::string> queue_names;
  for (const auto& [name, queue] : config.queues) queue_names.push_back(name);
  try {
    pqxx::work tx(*conn);
    const int version = tx.exec("SELECT to_regclass(" + tx.quote(detail::quote_identifier(config.schema) +
                                                             ".schema_migrations") + ") IS NOT NULL")[0][0]
                                    .as<bool>()
                            ? store.schema_version(tx)
                            : 0;
    if (version < latest_schema_version()) {
      throw DatabaseError("schema \"" + config.schema + "\" is at version " + std::to_string(version) +
                          ", this worker needs " + std::to_string(latest_schema_version()) + ": run `oncely migrate`");
    }
    if (version > latest_schema_version()) {
      throw DatabaseError("schema \"" + config.schema + "\" is at version " + std::to_string(version) +
                          ", newer than this worker knows (" + std::to_string(latest_schema_version()) +
                          "): upgrade oncely");
    }
    // Behind a transaction-mode pooler (no prepared statements) client connections are
    // not server connections, and the server's limit says nothing about ours.
    if (config.prepared_statements) detail::check_connection_budget(tx, config);
    tx.commit();
  } catch (const pqxx::failure& e) {
    throw DatabaseError("worker start-up failed: " + detail::one_line(url, e.what()));
  }
  // Outside any transaction, as the checks expect; before the process registers, so that
  // a refusal leaves nothing behind.
  try {
    detail::run_startup_checks(*conn, handlers);
  } catch (const pqxx::failure& e) {
    throw DatabaseError("worker start-up failed: " + detail::one_line(url, e.what()));
  }
  try {
    pqxx::work tx(*conn);
    store.remove_stale_workers(tx, kStaleAfter);
    worker_id = store.register_worker(tx, host_name(), static_cast<int>(getpid()), queue_names);
    tx.commit();
    last_db_contact_ms = detail::steady_ms();
  } catch (const pqxx::failure& e) {
    throw DatabaseError("worker start-up failed: " + detail::one_line(url, e.what()));
  }

  std::map<std::string, std::unique_ptr<detail::QueuePool>> pools;
  for (const auto& [name, queue] : config.queues) {
    detail::QueueContext context;
    context.name = name;
    context.config = queue;
    context.store = &store;
    context.handlers = &handlers;
    context.log = log;
    context.on_event = on_event;
    context.url = url;
    context.worker_id = worker_id;
    context.gate = gate_owner.get();
    pools.emplace(name, std::make_unique<detail::QueuePool>(std::move(context)));
  }
  // The listener's wake-ups go to the pools by pointer (not through this frame's map): a
  // listener left behind at exit may still call them.
  std::map<std::string, detail::QueuePool*> by_name;
  for (auto& [name, pool] : pools) by_name.emplace(name, pool.get());
  auto listener = std::make_unique<detail::Listener>(
      config.listen_database_url.empty() ? url : DatabaseUrl(config.listen_database_url),
      detail::jobs_channel(config.schema), log,
      [by_name](const std::string& queue) {
        if (queue == "*") {
          for (const auto& [name, pool] : by_name) pool->wake_one();
        } else if (const auto it = by_name.find(queue); it != by_name.end()) {
          it->second->wake_one();
        }
      },
      [by_name] {
        for (const auto& [name, pool] : by_name) pool->wake_all();
      });
  for (auto& [name, pool] : pools) {
    pool->start();
    log->info("queue started queue={} concurrency={} batch_size={} max_attempts={} job_timeout={}", name,
              config.queues.at(name).concurrency, config.queues.at(name).batch_size,
              config.queues.at(name).max_attempts, detail::format_duration(config.queues.at(name).job_timeout));
  }
  log->info("worker running worker_id={} schema={} queues={}", worker_id, config.schema, queue_names.size());

  // Heartbeat and maintenance on a thread of their own: this thread only waits for the stop
  // and then runs the shutdown, which no call stuck behind a partition may hold up.
  auto beat = std::make_unique<Beat>();
  beat->store = &store;
  beat->url = url;
  beat->worker_id = worker_id;
  beat->queue_names = queue_names;
  for (auto& [name, pool] : pools) beat->pools.push_back(pool.get());
  beat->metrics = metrics.get();
  beat->conn = std::move(conn);
  detail::ServiceThread heartbeat(
      [self = shared_from_this(), state = beat.get()](const std::stop_token& stopping) { self->heartbeat_loop(stopping, *state); });
  wait_for_stop();

  // Drain: nothing new is claimed; running batches stop starting handlers and commit.
  for (auto& [name, pool] : pools) pool->request_stop();
  listener->request_stop();
  const auto deadline = std::chrono::steady_clock::now() + config.shutdown_grace;
  bool drained = true;
  for (auto& [name, pool] : pools) {
    if (!pool->wait_stopped(deadline)) {
      drained = false;
      log->error("queue {} still has {} job(s) running after the shutdown grace of {}; leaving them to roll back "
                 "(they will be redelivered)",
                 name, pool->jobs_in_flight(), detail::format_duration(config.shutdown_grace));
    }
  }
  // Past the grace, every step has a bound of its own, whatever the network does: the
  // processes of the jobs left behind are ended before this process exits (so that they
  // cannot run on while another worker runs the same job), threads stuck in a call are
  // left behind (the server rolls their transactions back when the connections close).
  if (!drained) {
    for (auto& [name, pool] : pools) {
      pool->abandon_handlers();
      pool->detach_running();
    }
    const auto abandon_by = std::chrono::steady_clock::now() + kAbandonBound;
    while (detail::running_jobs() > 0 && std::chrono::steady_clock::now() < abandon_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // once, at exit: a short poll will do
    }
    if (detail::running_jobs() > 0) {
      log->error("{} exec job(s) still have processes after {}; exiting (they get SIGTERM, then SIGKILL)",
                 detail::running_jobs(), detail::format_duration(kAbandonBound));
    }
  }
  bool left_behind = !drained;
  const auto services_by = std::chrono::steady_clock::now() + kServiceStopBound;
  if (!listener->stop_until(services_by)) {
    left_behind = true;
    log->warn("the listener did not stop within {}; leaving it behind", detail::format_duration(kServiceStopBound));
  }
  if (!heartbeat.stop_until(services_by)) {
    left_behind = true;
    log->warn("the heartbeat did not stop within {}; leaving it behind", detail::format_duration(kServiceStopBound));
  }
  metrics_server.reset();
  // The last word to the database: on a thread of its own, so that it is bounded too.
  detail::ServiceThread unregister([log = log, store = &store, url, worker_id](const std::stop_token&) {
    try {
      auto last = detail::connect(url);
      store->prepare(*last);
      pqxx::work tx(*last);
      store->unregister_worker(tx, worker_id);
      tx.commit();
    } catch (const std::exception& e) {
      log->warn("could not unregister worker {}: {}", worker_id, detail::one_line(url, e.what()));
    }
  });
  if (!unregister.stop_until(std::chrono::steady_clock::now() + kUnregisterBound)) {
    left_behind = true;
    log->warn("could not unregister worker {} within {}; its row expires after {}", worker_id,
              detail::format_duration(kUnregisterBound), detail::format_duration(kStaleAfter));
  }
  signals.reset();
  log->info("worker stopped{}", drained ? "" : " (some jobs abandoned to roll back)");
  if (left_behind) {
    // Threads left running use these; the process is about to exit.
    for (auto& [name, pool] : pools) static_cast<void>(pool.release());
    static_cast<void>(store_owner.release());
    static_cast<void>(gate_owner.release());
    static_cast<void>(metrics.release());
    static_cast<void>(listener.release());
    static_cast<void>(beat.release());
  }
  return 0;
}

}  // namespace oncely
