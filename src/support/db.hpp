#pragma once
// Opening connections. Every message that may quote a connection string goes through
// DatabaseUrl::scrub, so passwords never reach a log or a terminal.

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <pqxx/connection>
#include <pqxx/except>

#include "oncely/errors.hpp"

#include "oncely/database_url.hpp"

namespace oncely::detail {

/// A connection parameter oncely sets on every connection unless the user's string sets it
/// (or, where libpq has one, its environment variable).
struct ConnectionDefault {
  std::string_view key;
  std::string_view value;
  std::string_view environment;  // the libpq variable that sets it too; empty: none
};

/// Bounds on what the network can make a connection wait for, so that no call hangs for
/// ever behind a partition: a connection attempt (connect_timeout, per host, in seconds),
/// data sent and not acknowledged (tcp_user_timeout, ms), and an idle connection whose
/// peer is gone (keepalives: first probe after 30 s, then every 10 s, 3 unanswered).
inline constexpr std::array<ConnectionDefault, 6> kConnectionDefaults{{
    {"connect_timeout", "10", "PGCONNECT_TIMEOUT"},
    {"keepalives", "1", ""},
    {"keepalives_idle", "30", ""},
    {"keepalives_interval", "10", ""},
    {"keepalives_count", "3", ""},
    {"tcp_user_timeout", "30000", ""},
}};

/// `conninfo` (a URL or a key=value string) with each of kConnectionDefaults added that it
/// does not set itself and whose environment variable `getenv` does not find. A string
/// libpq cannot parse is returned unchanged (connecting then reports libpq's error).
std::string with_connection_defaults(const std::string& conninfo,
                                     const std::function<const char*(const char*)>& getenv);

/// `url` with `-c name=value` settings added to libpq's `options` (after any the string
/// sets: a later -c wins), e.g. {"statement_timeout", "5000"}: every session opened with it
/// has them from the start. Rebuilt in the key=value form; a string libpq cannot parse is
/// returned unchanged (connect() then reports it).
DatabaseUrl with_session_setting(const DatabaseUrl& url, std::string_view name, std::string_view value);

/// Opens a connection (with the defaults above); throws DatabaseError (password-free, one
/// line) when it cannot.
std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url);

/// A multi-line libpq/server message folded into one line, password removed; a prepared
/// statement that already exists or does not exist gets the pooler hint (pooler.hpp).
std::string one_line(const DatabaseUrl& url, const std::string& message);

/// The error to throw for `e`, met while `what` ran against `schema`: "<what>: <message>",
/// unless the server says a table, column or function is missing (the schema is mistyped
/// or not migrated to this version), in which case it says that and what to do, naming the
/// oncely schemas the database has. Never throws itself.
DatabaseError schema_error(const DatabaseUrl& url, std::string_view schema, std::string_view what,
                           const pqxx::sql_error& e) noexcept;

}  // namespace oncely::detail
