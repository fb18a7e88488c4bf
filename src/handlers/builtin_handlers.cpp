// build_builtin_handlers: picks the factory for each declared type. The types themselves
// live in sql_handler.cpp, exec_handler.cpp and http_handler.cpp.
#include "handlers/builtin_handlers.hpp"

#include <spdlog/spdlog.h>

#include "handlers/declaration.hpp"
#include "oncely/builtin_handlers.hpp"
#include "oncely/errors.hpp"

namespace oncely::detail {

HandlerRegistry build_builtin_handlers(const nlohmann::json& declarations, bool prepared_statements,
                                       std::shared_ptr<spdlog::logger> log) {
  const std::string root = "/handlers";
  HandlerRegistry handlers;
  if (declarations.is_null()) return handlers;
  if (!declarations.is_object()) throw ConfigError(root, "must be an object");
  for (const auto& [kind, declaration] : declarations.items()) {
    const std::string path = child_path(root, kind);
    if (kind.empty()) throw ConfigError(path, "a handler's kind must not be empty");
    if (!declaration.is_object()) throw ConfigError(path, "must be an object");
    const std::string& type = string_at(required(declaration, path, "type", "sql, exec or http"), path + "/type");
    if (type == "sql") {
      // One statement through the job's transaction is usually all it does; a statement with
      // effects outside the database (dblink, an FDW write) says "transaction_only": false.
      bool transaction_only = true;
      if (const auto it = declaration.find("transaction_only"); it != declaration.end()) {
        if (!it->is_boolean()) throw ConfigError(path + "/transaction_only", "must be true or false");
        transaction_only = it->get<bool>();
      }
      RegisteredHandler handler = make_sql_handler(declaration, path, prepared_statements);
      handler.options.transaction_only = transaction_only;
      handlers.emplace(kind, std::move(handler));
    } else if (type == "exec") {
      handlers.emplace(kind, RegisteredHandler{make_exec_handler(declaration, path), {}});
    } else if (type == "http") {
      handlers.emplace(kind, RegisteredHandler{make_http_handler(declaration, path), {}});
    } else {
      throw ConfigError(path + "/type", "unknown handler type '" + printable(type) + "' (expected sql, exec or http)");
    }
    if (log) log->debug("built-in handler kind={} type={}", kind, type);
  }
  return handlers;
}

}  // namespace oncely::detail

namespace oncely {

std::vector<std::string> add_builtin_handlers(Runtime& runtime, const Config& config,
                                              std::shared_ptr<spdlog::logger> log) {
  std::vector<std::string> kinds;
  for (auto& [kind, handler] :
       detail::build_builtin_handlers(config.handlers, config.prepared_statements, std::move(log))) {
    runtime.handle(kind, std::move(handler.run), handler.options);
    kinds.push_back(kind);
  }
  return kinds;
}

}  // namespace oncely
