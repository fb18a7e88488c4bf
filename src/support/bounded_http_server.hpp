#pragma once
// BoundedHttpServer: the HTTP server no client can hold, under the worker's metrics
// endpoint (process/metrics_server.cpp) and the operator console (web/console.cpp).
//
// Why not cpp-httplib's own server (0.11 in Debian 12): it gives each connection a pool
// thread from accept to close, reads with select() and a per-read timeout only, and queues
// accepted sockets without bound. 16 connections sending a header byte a second held every
// thread (no probe, no page answered), and idle connections queued by the thousand used up
// the process's descriptors (a worker's exec jobs failed with EMFILE; the console's pages,
// which open database sessions, failed too).
//
// So one thread does all socket I/O with poll(), non-blocking, and no client can make it
// wait. A connection that sends nothing is not accepted: the kernel keeps it until its
// first byte (TCP_DEFER_ACCEPT), for about a minute, so idle ones take no descriptor and
// do not queue ahead of the requests that come with their bytes. Once accepted, a
// connection gets 2 s to send its whole request (header of at most 8 KiB, and a body of at
// most max_body bytes with a Content-Length) and 5 s to take the response; one request
// each (no keep-alive). A request already whole when accepted is answered then. The table
// of connections is bounded and drops its oldest when full, and the descriptors the rest
// of the process needs are never taken (support/connection_limits.hpp). httplib still
// parses and routes each complete request, from memory: on the I/O thread itself (handlers
// that only read memory, like /metrics), or on a pool of handler threads (handlers that
// read a database, like the console's pages), which only ever see requests read in full.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace httplib {
class Server;
}

namespace oncely::detail {

struct BoundedHttpOptions {
  /// In error messages: "cannot listen on ADDRESS for <purpose>".
  std::string purpose = "HTTP";
  /// Who answers a complete request. 0: the I/O thread, at once (the handlers must be
  /// quick and must not block). N: one of N handler threads, while the I/O thread goes on;
  /// requests wait for a free one in a queue as long as the table (max_connections), and
  /// one more is answered 503 at once.
  std::size_t handler_threads = 0;
  /// The longest request body read; a longer one is answered 413 without being read.
  std::size_t max_body = 0;
  /// A connection closed unanswered or answered 503 by the server itself, and why:
  /// "deadline", "evicted", "fd_reserve", "no_descriptor", "header_too_large", "busy".
  /// Called on the I/O thread; may be empty.
  std::function<void(const std::string& reason)> on_dropped;
};

class BoundedHttpServer {
 public:
  /// Listens on `host` (an address or a name, IPv6 without brackets; empty: every
  /// address) and `port` (0: any free one), and reads RLIMIT_NOFILE once, for the budget.
  /// Throws Error when it cannot listen there.
  BoundedHttpServer(const std::string& host, int port, BoundedHttpOptions options);
  /// Only once run() has returned, or was never called.
  ~BoundedHttpServer();
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  /// Where the routes and handlers go (Get, Post, error and exception handlers), before
  /// run(). Its listen/bind/stop are not used.
  [[nodiscard]] httplib::Server& routes() noexcept;

  /// Serves on the calling thread (and the handler threads it starts) until stop();
  /// returns at once if stop() came first. Requests being handled when it stops are
  /// finished, their answers not sent.
  void run();
  /// From any thread, any time.
  void stop() noexcept;

  [[nodiscard]] int port() const noexcept;
  /// The open-file limit the budget was computed for, and the connections it allows.
  [[nodiscard]] std::int64_t open_file_limit() const noexcept;
  [[nodiscard]] std::size_t max_connections() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oncely::detail
