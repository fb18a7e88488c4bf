#pragma once
// `oncely web`: the operator console, served by this binary alone (pages rendered here,
// one stylesheet and one small script embedded at build time). Every read and every
// action is a library call (oncely/*.hpp), the same the CLI makes; this layer holds no SQL.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "oncely/database_url.hpp"
#include "web/auth.hpp"

namespace oncely::web {

struct ConsoleOptions {
  DatabaseUrl url{""};
  std::string schema = "oncely";
  std::string host = "127.0.0.1";
  int port = 9470;               ///< 0: any free port (port() says which)
  bool read_only = false;        ///< everyone is a viewer
  bool viewer_payloads = false;  ///< viewers may see payloads (if their database role may read them)
  /// Each request's database sessions get this statement_timeout: a slow page fails, it
  /// does not pile up.
  std::chrono::milliseconds statement_timeout{5000};
  /// Logins; none: no login (allowed on a loopback address only), everyone gets the
  /// operator role (the viewer role with read_only).
  std::vector<Credential> credentials;
  int refresh_seconds = 5;  ///< live refresh of the pages' numbers; 0: off
  std::shared_ptr<spdlog::logger> log;
};

/// Throws ConfigError when the options cannot be served safely: a non-loopback host
/// without a login.
void validate(const ConsoleOptions& options);

class Console {
 public:
  /// Validates and binds the address; throws ConfigError (see validate) or Error when the
  /// address cannot be bound.
  explicit Console(ConsoleOptions options);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  /// The port bound.
  [[nodiscard]] int port() const noexcept;
  /// Serves until stop(): the sockets on the calling thread, the pages on a pool of
  /// handler threads (support/bounded_http_server.hpp).
  void run();
  /// From any thread, also before run() (which then returns at once).
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oncely::web
