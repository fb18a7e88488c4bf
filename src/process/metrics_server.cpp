// MetricsServer: /metrics, /healthz and /readyz on one thread that no client can hold:
// the BoundedHttpServer (support/bounded_http_server.hpp) answering on its I/O thread
// itself, as these handlers only read memory.

#include <httplib.h>

#include "oncely/errors.hpp"
#include "process/metrics.hpp"
#include "support/bounded_http_server.hpp"
#include "support/steady_clock.hpp"

namespace oncely::detail {
namespace {

using namespace std::chrono_literals;

constexpr auto kReadyWithin = 15s;

}  // namespace

MetricsServer::MetricsServer(const std::string& address, Metrics& metrics,
                             const std::atomic<std::int64_t>& last_db_contact_ms) {
  const std::size_t colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    try {
      std::size_t used = 0;
      port = std::stoi(address.substr(colon + 1), &used);
      if (used != address.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535) throw ConfigError("--metrics-addr", "expected HOST:PORT, got '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  BoundedHttpOptions options;
  options.purpose = "metrics";
  options.on_dropped = [&metrics](const std::string& reason) { metrics.count_dropped_connection(reason); };
  server_ = std::make_unique<BoundedHttpServer>(host, port, std::move(options));
  httplib::Server& routes = server_->routes();
  routes.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  // Liveness, from this process's own state only: this thread answers (it shares nothing
  // with the jobs and their connections); how long ago the heartbeat last reached the
  // database is information, not a condition (that is /readyz).
  routes.Get("/healthz", [&last_db_contact_ms](const httplib::Request&, httplib::Response& res) {
    const std::int64_t last = last_db_contact_ms.load();
    const std::string contact = last == 0 ? "never" : std::to_string((steady_ms() - last) / 1000) + " s ago";
    res.set_content("ok\nlast database contact: " + contact + "\n", "text/plain");
  });
  routes.Get("/readyz", [&last_db_contact_ms](const httplib::Request&, httplib::Response& res) {
    const bool ready = steady_ms() - last_db_contact_ms.load() <
                       std::chrono::duration_cast<std::chrono::milliseconds>(kReadyWithin).count();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "database not reached in the last 15 s\n", "text/plain");
  });

  thread_ = std::thread([this] { server_->run(); });
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

int MetricsServer::port() const noexcept { return server_->port(); }
std::int64_t MetricsServer::open_file_limit() const noexcept { return server_->open_file_limit(); }
std::size_t MetricsServer::max_connections() const noexcept { return server_->max_connections(); }

}  // namespace oncely::detail
