#pragma once
// The built-in handler types (sql, exec, http) for C++ embedders: what `oncely worker`
// registers from its configuration file's "handlers", from a Config of your own.

#include <memory>
#include <string>
#include <vector>

#include "oncely/config.hpp"
#include "oncely/runtime.hpp"

namespace spdlog {
class logger;
}

namespace oncely {

/// Registers on `runtime` one handler per kind declared in `config.handlers` (sql handlers
/// transaction-only unless they say otherwise), exactly as `oncely worker` does; call it
/// before run(). A Runtime does not read Config::handlers itself: without this call (or
/// your own handle() per kind) those kinds are dead-lettered as unknown_kind.
/// Every declaration is checked before any is registered: ConfigError naming the JSON path
/// ("/handlers/notify/timeout: ..."); "${NAME}" in http header values and exec env reads
/// the environment now. Returns the kinds registered, in order. `log`: a debug line per
/// kind (null: none).
std::vector<std::string> add_builtin_handlers(Runtime& runtime, const Config& config,
                                              std::shared_ptr<spdlog::logger> log = nullptr);

}  // namespace oncely
