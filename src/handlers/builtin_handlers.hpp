#pragma once
// The built-in handler types (sql, exec, http; see docs/handlers.md),
// built from the configuration's "handlers" object so that teams get effectively-once jobs without writing C++.

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "execution/registered_handler.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// Builds one handler per declared kind (sql handlers are transaction-only). `declarations` is Config::handlers:
///   {"<kind>": {"type": "sql"|"exec"|"http", ...type-specific keys...}, ...}
/// Validates strictly, before any job is touched: an unknown type, an unknown or missing
/// key, a wrong type or a bad duration throws ConfigError naming the JSON path
/// ("/handlers/notify_crm/timeout: bad duration '5 sex' ..."). "${NAME}" in http header
/// values is replaced by the environment variable NAME here (unset: ConfigError), so
/// secrets need not live in the file. Handlers are called concurrently from worker threads.
/// `prepared_statements` as in Config: false for a transaction-mode pooler.
HandlerRegistry build_builtin_handlers(const nlohmann::json& declarations, bool prepared_statements,
                                       std::shared_ptr<spdlog::logger> log);

}  // namespace oncely::detail
