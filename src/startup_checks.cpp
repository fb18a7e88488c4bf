#include "startup_checks.hpp"

#include <pqxx/except>

#include "oncely/errors.hpp"
#include "text.hpp"

namespace oncely::detail {

void run_startup_checks(pqxx::connection_base& conn, const HandlerRegistry& handlers) {
  for (const auto& [kind, handler] : handlers) {
    if (!handler.options.startup_check) continue;
    try {
      handler.options.startup_check(conn);
    } catch (const ConfigError&) {
      throw;
    } catch (const pqxx::broken_connection&) {
      throw;
    } catch (const std::exception& e) {
      throw ConfigError("handler " + printable(kind), "start-up check failed: " + summary_line(e.what(), 1000));
    }
  }
}

}  // namespace oncely::detail
