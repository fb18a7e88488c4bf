// Runtime::Impl: checks the database, registers the process, starts the listener and one
// pool per queue, keeps the registration alive, and drains on stop.

#include "oncely/runtime.hpp"

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <mutex>

#include <pqxx/pqxx>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "db.hpp"
#include "duration.hpp"
#include "listener.hpp"
#include "maintenance.hpp"
#include "metrics.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "oncely/stats.hpp"
#include "queue_pool.hpp"
#include "schema.hpp"
#include "startup_checks.hpp"
#include "store.hpp"

namespace oncely {
namespace {

// How often the process refreshes its registration, and when others consider it gone.
constexpr auto kHeartbeatInterval = std::chrono::seconds(5);
constexpr auto kStaleAfter = std::chrono::seconds(60);
// Every this many heartbeats, a maintenance pass (if this process wins the election).
constexpr int kHeartbeatsPerMaintenance = 12;

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
  std::atomic<std::int64_t> last_db_contact_ms{0};  // for /readyz

  void request_stop() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    stop_cv.notify_all();
  }

  // Waits up to `d` for a stop request; returns whether one came.
  bool wait_stop(std::chrono::milliseconds d) {
    std::unique_lock lock(mutex);
    return stop_cv.wait_for(lock, d, [&] { return stop; });
  }

  int run();
  void export_metrics(detail::Metrics& metrics, const std::map<std::string, std::unique_ptr<detail::QueuePool>>& pools,
                      const detail::Store& store, pqxx::connection& conn, const DatabaseUrl& url);
};

void Runtime::Impl::export_metrics(detail::Metrics& metrics,
                                   const std::map<std::string, std::unique_ptr<detail::QueuePool>>& pools,
                                   const detail::Store& store, pqxx::connection& conn, const DatabaseUrl& url) {
  for (const auto& [name, pool] : pools) metrics.set_in_flight(name, pool->jobs_in_flight());
  // The database's view of the queues comes from one process at a time: the holder of a
  // session-level lock on the heartbeat connection (released if that connection drops).
  pqxx::nontransaction tx(conn);
  if (store.try_metrics_leadership(tx)) metrics.set_queue_stats(collect_stats(url, config.schema));
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
    log->info("metrics listening address={} port={}", options.metrics_address, metrics_server->port());
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

  // Signals: blocked here (so every thread started below inherits the mask) and taken by
  // one thread with sigtimedwait; no work happens in a signal handler.
  sigset_t stop_signals, previous_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  std::jthread signal_thread;
  if (options.handle_signals) {
    pthread_sigmask(SIG_BLOCK, &stop_signals, &previous_mask);
    signal_thread = std::jthread([this, stop_signals](std::stop_token st) {
      const timespec tick{0, 200'000'000};
      while (!st.stop_requested()) {
        const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
        if (sig > 0) {
          log->info("received {}, draining (grace {})", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                    detail::format_duration(config.shutdown_grace));
          request_stop();
        }
      }
    });
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
    pools.emplace(name, std::make_unique<detail::QueuePool>(std::move(context)));
  }
  auto listener = std::make_unique<detail::Listener>(
      config.listen_database_url.empty() ? url : DatabaseUrl(config.listen_database_url),
      detail::jobs_channel(config.schema), log,
      [&pools](const std::string& queue) {
        if (queue == "*") {
          for (auto& [name, pool] : pools) pool->wake_one();
        } else if (const auto it = pools.find(queue); it != pools.end()) {
          it->second->wake_one();
        }
      },
      [&pools] {
        for (auto& [name, pool] : pools) pool->wake_all();
      });
  for (auto& [name, pool] : pools) {
    pool->start();
    log->info("queue started queue={} concurrency={} batch_size={} max_attempts={} job_timeout={}", name,
              config.queues.at(name).concurrency, config.queues.at(name).batch_size,
              config.queues.at(name).max_attempts, detail::format_duration(config.queues.at(name).job_timeout));
  }
  log->info("worker running worker_id={} schema={} queues={}", worker_id, config.schema, queue_names.size());

  // Heartbeat and maintenance until stopped.
  const detail::Maintenance maintenance(store, config.dedup_window, log);
  for (int beat = 0; !wait_stop(kHeartbeatInterval); ++beat) {
    try {
      if (!conn || !conn->is_open()) {
        conn = detail::connect(url);
        store.prepare(*conn);
      }
      int in_flight = 0;
      for (auto& [name, pool] : pools) in_flight += pool->jobs_in_flight();
      {
        pqxx::work tx(*conn);
        store.heartbeat(tx, worker_id, in_flight, host_name(), static_cast<int>(getpid()), queue_names);
        tx.commit();
      }
      last_db_contact_ms = detail::steady_ms();
      if (beat % kHeartbeatsPerMaintenance == 0) maintenance.run_once(*conn);
      if (metrics) export_metrics(*metrics, pools, store, *conn, url);
    } catch (const std::exception& e) {
      log->warn("heartbeat failed: {}", detail::one_line(url, e.what()));
      conn.reset();
    }
  }

  // Drain: nothing new is claimed; running batches stop starting handlers and commit.
  for (auto& [name, pool] : pools) pool->request_stop();
  const auto deadline = std::chrono::steady_clock::now() + config.shutdown_grace;
  bool drained = true;
  for (auto& [name, pool] : pools) {
    if (!pool->wait_stopped(deadline)) {
      drained = false;
      log->error("queue {} still has {} job(s) running after the shutdown grace of {}; leaving them to roll back "
                 "(they will be redelivered)",
                 name, pool->jobs_in_flight(), detail::format_duration(config.shutdown_grace));
      pool->detach_running();
    }
  }
  listener.reset();
  metrics_server.reset();
  if (drained) pools.clear();
  try {
    auto last = detail::connect(url);
    store.prepare(*last);
    pqxx::work tx(*last);
    store.unregister_worker(tx, worker_id);
    tx.commit();
  } catch (const std::exception& e) {
    log->warn("could not unregister worker {}: {}", worker_id, detail::one_line(url, e.what()));
  }
  if (options.handle_signals) {
    signal_thread.request_stop();
    signal_thread.join();
    pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);
  }
  log->info("worker stopped{}", drained ? "" : " (some jobs abandoned to roll back)");
  if (!drained) {
    // Pools with detached threads must outlive them: the process is about to exit.
    for (auto& [name, pool] : pools) static_cast<void>(pool.release());
    static_cast<void>(store_owner.release());
    static_cast<void>(metrics.release());
  }
  return 0;
}

}  // namespace oncely
