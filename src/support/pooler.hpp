#pragma once
// Running behind a connection pooler (PgBouncer in transaction mode): the switch that
// turns named prepared statements off for a whole process, the hint for the errors a
// pooler produces when they are on, the detection of a pooler between us and the server,
// and the watch that says when a side statement waits for the pool's server connections.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <pqxx/connection>
#include <pqxx/transaction_base>

#include "oncely/database_url.hpp"

namespace spdlog {
class logger;
}

namespace oncely::detail {

/// The variable that turns prepared statements off for every command, Client and Runtime
/// of the process ("0"), whatever their own setting says.
inline constexpr std::string_view kPreparedStatementsVariable = "ONCELY_PREPARED_STATEMENTS";

/// `configured`, unless ONCELY_PREPARED_STATEMENTS turns them off (0, false, off, no);
/// 1, true, on, yes and unset/empty leave `configured` as it is. Throws ConfigError for
/// any other value.
bool prepared_statements_allowed(bool configured);

/// What to do about a prepared statement that already exists (42P05) or does not exist
/// (26000) on a connection: what a transaction-mode pooler does to named statements.
inline constexpr std::string_view kPreparedStatementHint =
    "hint: behind a transaction-mode pooler set prepared_statements: false (oncely --no-prepared-statements, "
    "ONCELY_PREPARED_STATEMENTS=0, ClientOptions::prepared_statements)";

/// Whether `sqlstate` is one a pooler's server connections give named prepared statements.
bool is_prepared_statement_clash(std::string_view sqlstate) noexcept;

/// `message` with kPreparedStatementHint appended when it is the server's message for a
/// prepared statement that already exists or does not exist (every log line and CLI
/// error goes through one_line(), which calls this).
std::string with_pooler_hint(std::string message);

/// Whether `conn` goes through a pooler: the backend pid the connection was given at
/// start-up (BackendKeyData) is not the server's own pg_backend_pid(). PgBouncer makes up
/// its own key for every client; a plain TCP proxy passes the server's through. One
/// autocommit statement; throws on database errors.
bool behind_pooler(pqxx::connection& conn);

/// The server's pid of the backend running `tx` (through a pooler, the server connection
/// the transaction was given).
int server_backend_pid(pqxx::transaction_base& tx);

/// The pool `url` connects to as a pooler names it: "user@host:port/dbname" (no password).
std::string pool_name(const DatabaseUrl& url);

/// Says (a warning naming the pool) when a statement on a side connection has waited
/// longer than `threshold`, again every `threshold` while it still waits: behind a
/// transaction-mode pooler a statement waits there for one of the pool's server
/// connections. begin()/end() around each statement are two atomic stores; its own
/// thread looks every 250 ms.
class PoolWaitWatch {
 public:
  PoolWaitWatch(std::string what, std::string pool, std::shared_ptr<spdlog::logger> log,
                std::chrono::milliseconds threshold);
  ~PoolWaitWatch();
  PoolWaitWatch(const PoolWaitWatch&) = delete;
  PoolWaitWatch& operator=(const PoolWaitWatch&) = delete;

  void begin() noexcept;
  void end() noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::jthread thread_;  // last: stopped and joined first
};

}  // namespace oncely::detail
