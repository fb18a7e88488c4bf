#pragma once
// What Runtime::run() checks against the database before it claims anything: each
// handler's own start-up check (an sql handler's statement must be one the server
// accepts). A worker that can never work refuses to start with one line, instead of
// failing every job.

#include <pqxx/connection_base>

#include "registered_handler.hpp"

namespace oncely::detail {

/// Runs every handler's HandlerOptions::startup_check on `conn` (no transaction open).
/// A ConfigError and a lost connection pass unchanged; any other failure becomes
/// ConfigError("handler <kind>", "start-up check failed: ...").
void run_startup_checks(pqxx::connection_base& conn, const HandlerRegistry& handlers);

}  // namespace oncely::detail
