#pragma once
// What Runtime::run() checks against the database before it claims anything: that the
// server can hold the connections the configuration asks for, and each handler's own
// start-up check (an sql handler's statement must be one the server accepts). A worker
// that can never work refuses to start with one line, instead of failing every job.

#include <optional>
#include <string>

#include <pqxx/connection_base>
#include <pqxx/transaction_base>

#include "execution/registered_handler.hpp"
#include "oncely/config.hpp"

namespace oncely::detail {

/// Why `needed` connections cannot work on a server that lets this role open `available`
/// (max_connections less the slots reserved for others); empty when they fit. Pure.
std::optional<std::string> connection_budget_problem(int needed, int max_connections, int available);

/// Throws ConfigError("/queues", ...) when config.connections_needed() exceeds what the
/// server behind `tx` allows this role.
void check_connection_budget(pqxx::transaction_base& tx, const Config& config);

/// Runs every handler's HandlerOptions::startup_check on `conn` (no transaction open).
/// A ConfigError and a lost connection pass unchanged; any other failure becomes
/// ConfigError("handler <kind>", "start-up check failed: ...").
void run_startup_checks(pqxx::connection_base& conn, const HandlerRegistry& handlers);

}  // namespace oncely::detail
