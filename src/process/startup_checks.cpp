#include "process/startup_checks.hpp"

#include <string_view>

#include <pqxx/except>
#include <pqxx/result>

#include "oncely/errors.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

// Slots this role can use: superuser_reserved_connections are kept back from everyone but
// superusers. (Other clients' connections are not counted: they come and go.)
constexpr std::string_view kConnectionLimits = R"sql(
  SELECT current_setting('max_connections')::int,
         current_setting('max_connections')::int
           - CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 0
                  ELSE current_setting('superuser_reserved_connections')::int END
)sql";

}  // namespace

std::optional<std::string> connection_budget_problem(int needed, int max_connections, int available) {
  if (needed <= available) return std::nullopt;
  return "the queues need " + std::to_string(needed) + " connections (2 per worker thread, plus 2) but the server " +
         "allows " + std::to_string(available) + " (max_connections " + std::to_string(max_connections) +
         "): lower their concurrency or raise max_connections";
}

void check_connection_budget(pqxx::transaction_base& tx, const Config& config) {
  const pqxx::row limits = tx.exec1(std::string(kConnectionLimits));
  if (auto problem = connection_budget_problem(config.connections_needed(), limits[0].as<int>(), limits[1].as<int>())) {
    throw ConfigError("/queues", *problem);
  }
}

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
